"""``specwatch profile show`` prints the whole environment each boot gets, as the pool composes it.

Before, it printed the env profile's variables only, so a base profile and a slowed one (a
``pythonpath`` with a slowing ``sitecustomize.py``, an ``extra_env`` switch) printed the same text
(issue 24). The lines come from :func:`specwatch.server.launch.server_environment`, the one owner.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specwatch.cli import main
from specwatch.profiles.loading import load_profiles
from specwatch.server.launch import managed_variables, server_environment

PROFILES = """
version = 1
[defaults]
engine = "sglang"
model = "m"
device = "cpu"
[[server]]
name = "base"
env = "tuned"
[[server]]
name = "slowed"
env = "tuned"
pythonpath = ["/opt/slow-sitecustomize"]
extra_env = { SLOW_FACTOR = "3" }
[[server]]
name = "plain"
env = "untuned"
nccl_debug = false
[[server]]
name = "site"
env = "tuned"
env_apply = "sitecustomize"
"""


def _blocks(out: str) -> dict[str, list[str]]:
    blocks: dict[str, list[str]] = {}
    current = None
    for line in out.splitlines():
        if line.startswith("# ") and not line.startswith(("#   ", "# env:", "# engine version:")):
            current = line.split()[1]
            blocks[current] = []
        elif current:
            blocks[current].append(line)
    return blocks


@pytest.fixture
def shown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, dict[str, list[str]]]:
    f = tmp_path / "p.toml"
    f.write_text(PROFILES)
    assert main(["profile", "show", str(f)]) == 0
    return f, _blocks(capsys.readouterr().out)


def test_a_slowed_profile_no_longer_prints_like_its_base(shown: tuple[Path, dict[str, list[str]]]) -> None:
    _, blocks = shown
    env = {name: [ln for ln in lines if ln.startswith("# env: ")] for name, lines in blocks.items()}
    assert env["base"] != env["slowed"]
    assert "# env: SLOW_FACTOR=3 (extra_env)" in env["slowed"]
    (pp,) = [ln for ln in env["slowed"] if ln.startswith("# env: PYTHONPATH=")]
    assert pp.startswith(f"# env: PYTHONPATH=<run>/probe{os.pathsep}/opt/slow-sitecustomize{os.pathsep}$PYTHONPATH")
    assert "<run>/probe: specwatch's probe" in pp and "/opt/slow-sitecustomize: pythonpath" in pp
    for name in ("base", "slowed"):
        assert "# env: NCCL_ALGO=Ring (env profile 'tuned')" in env[name]
        assert any(ln.startswith("# env: NCCL_DEBUG=INFO (specwatch: ") for ln in env[name])
        assert any(ln.startswith("# env: SPECWATCH_PROBE_DIR=<run>/probe-records") for ln in env[name])
        assert blocks[name][-1].startswith("sglang serve --model-path m")  # the command line stays last
        assert blocks[name][-2].startswith("# engine version: ")  # after the version it is written for


def test_what_an_untuned_or_sitecustomize_server_gets(shown: tuple[Path, dict[str, list[str]]]) -> None:
    _, blocks = shown
    plain = "\n".join(blocks["plain"])
    assert "NCCL_DEBUG" not in plain.replace("unset if inherited", "")  # nccl_debug = false
    assert "# env: unset if inherited: NCCL_ALGO, NCCL_BUFFSIZE" in plain  # the set's tuned variables
    site = "\n".join(blocks["site"])
    assert "# env: NCCL_ALGO=" not in site  # set inside each Python process, not in the launch environment
    assert "<run>/env-sitecustomize: sets the env profile's variables in every Python process" in site


def test_every_variable_the_pool_sets_is_shown(shown: tuple[Path, dict[str, list[str]]], tmp_path: Path) -> None:
    f, blocks = shown
    ps = load_profiles(f)
    managed = managed_variables(ps.servers.values())
    for name, prof in ps.servers.items():
        env, _ = server_environment(prof, managed=managed, run_dir=tmp_path / name, base_env={})
        printed = {ln.split("=", 1)[0].removeprefix("# env: ") for ln in blocks[name] if ln.startswith("# env: ")}
        assert set(env) <= printed, (name, set(env) - printed)


def test_the_command_line_is_written_for_the_engine_version_the_server_has(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Each server's interpreter is asked, with the environment a boot gets (its ``pythonpath`` included),
    which SGLang it has: 0.5.12 takes the capture limit as ``--cuda-graph-max-bs`` only, 0.5.16 as
    ``--cuda-graph-max-bs-decode``; an interpreter that cannot tell gets the newest release's flags."""
    from specwatch.engines.sglang import release

    for version in ("0.5.12", "0.5.16"):
        info = tmp_path / version / f"sglang-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    mute = tmp_path / "mute-python"  # an interpreter that answers nothing: it has no sglang to name
    mute.write_text("#!/bin/sh\nexit 0\n")
    mute.chmod(0o755)
    f = tmp_path / "p.toml"
    f.write_text(f"""version = 1
[defaults]
engine = "sglang"
model = "m"
launcher = "python -m sglang.launch_server"
cuda_graph_max_bs = 8
[[server]]
name = "old"
pythonpath = ["{tmp_path / '0.5.12'}"]
[[server]]
name = "new"
pythonpath = ["{tmp_path / '0.5.16'}"]
[[server]]
name = "lost"
python = "{tmp_path / 'no-such-python'}"
[[server]]
name = "bare"
python = "{mute}"
""")
    assert main(["profile", "show", str(f)]) == 0
    blocks = _blocks(capsys.readouterr().out)
    for name, version, flag in (("old", "0.5.12", "--cuda-graph-max-bs 8 "),
                                ("new", "0.5.16", "--cuda-graph-max-bs-decode 8 "),
                                ("lost", None, f"{release().graph_limit_flag} 8 "),
                                ("bare", None, f"{release().graph_limit_flag} 8 ")):
        *_, said, command = blocks[name]
        if version:
            assert said.startswith(f"# engine version: {version} (package 'sglang', as "), said
            assert said.endswith("the command line below is written for it"), said
        elif name == "lost":
            assert said.startswith(f"# engine version: unknown ({tmp_path / 'no-such-python'}: no such "
                                   "interpreter)"), said
        else:
            assert said.startswith(f"# engine version: unknown ({mute} with the environment above has no package "
                                   "'sglang', or did not answer within 10 s)"), said
        if not version:
            assert said.endswith(f"written for {release().version}, the newest specwatch knows"), said
        assert flag in command + " " and command.count("--cuda-graph-max-bs") == 1, command
