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
        if line.startswith("# ") and not line.startswith(("#   ", "# env:")):
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
