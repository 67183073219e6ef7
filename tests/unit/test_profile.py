"""Server profiles: validation that names the field, and command lines for SGLang 0.5.23 and the reference."""

from __future__ import annotations

import sys
from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import pytest

from specwatch.errors import UsageError
from specwatch.profile import TUNED_NCCL, load_profiles, parse_profiles, single_server_profiles

FLAGS_FILE = Path(__file__).resolve().parents[2] / "fixtures" / "sglang" / "flags-0.5.23.txt"
SGLANG_FLAGS = {line.strip() for line in FLAGS_FILE.read_text().splitlines() if line.startswith("--")}


def _flags(argv: list[str]) -> list[str]:
    return [a for a in argv if a.startswith("--")]


def test_builtin_profiles_cover_baseline_and_eagle3_tuned_and_untuned() -> None:
    ps = load_profiles(None)
    assert set(ps.servers) == {"baseline-untuned", "baseline-tuned", "eagle3-untuned", "eagle3-tuned"}
    assert ps.get("eagle3-tuned").env_vars == TUNED_NCCL
    assert ps.get("eagle3-untuned").env_vars == {}
    assert ps.roles == {"baseline": "baseline-tuned", "spec": "eagle3-tuned", "tuned": "eagle3-tuned",
                        "untuned": "eagle3-untuned"}


def test_one_profile_builds_a_valid_sglang_0_5_23_command_line() -> None:
    prof = replace(load_profiles(None).get("eagle3-tuned"), engine="sglang", model="moonshotai/Kimi-K2.5", tp=8,
                   max_running_requests=48, cuda_graph_max_bs=48)
    prof = replace(prof, speculative=replace(prof.speculative, draft_model="lightseekorg/kimi-k2.5-eagle3"))
    argv = prof.command("0.0.0.0", 30000)
    assert argv[:2] == ["sglang", "serve"]
    unknown = [f for f in _flags(argv) if f not in SGLANG_FLAGS]
    assert not unknown, f"flags SGLang 0.5.23 does not accept: {unknown}"
    assert "--cuda-graph-max-bs" not in argv  # removed in 0.5.23 (ambiguous prefix)
    pairs = {a: b for a, b in pairwise(argv) if a.startswith("--") and not b.startswith("--")}
    assert pairs["--tp-size"] == "8" and pairs["--speculative-num-draft-tokens"] == "3"
    assert pairs["--speculative-draft-model-path"] == "lightseekorg/kimi-k2.5-eagle3"
    legacy = replace(prof, launcher="python -m sglang.launch_server").command("h", 1)
    assert legacy[:3] == [sys.executable, "-m", "sglang.launch_server"]


def test_same_profile_builds_the_reference_command_line() -> None:
    argv = load_profiles(None).get("eagle3-tuned").command("127.0.0.1", 30001)
    assert argv[:3] == [sys.executable, "-m", "specwatch.refserver"]
    assert _flags(argv) == [f for f in _flags(argv) if f in SGLANG_FLAGS]  # the same flag names as SGLang
    assert "--speculative-algorithm" in argv and "EAGLE3" in argv


def test_reference_command_line_is_accepted_by_the_reference_parser() -> None:
    from specwatch.refserver.args import parse_args  # test-only: the tester itself never imports it

    argv = load_profiles(None).get("eagle3-tuned").command("127.0.0.1", 30001)
    args = parse_args(argv[3:])
    assert args.speculative_num_steps == 2 and args.speculative_algorithm == "EAGLE3"


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"server": [{"name": "a", "engine": "vllm"}]}, r"server\[0\] \(a\)\.engine"),
        ({"server": [{"name": "a", "env": "fast"}]}, r"\.env: unknown environment profile 'fast'"),
        ({"server": [{"name": "a", "tpp": 2}]}, r"unknown key\(s\) tpp"),
        ({"server": [{"name": "a", "speculative": {"num_steps": 2, "num_draft_tokens": 5}}]},
         r"num_draft_tokens: with eagle_topk = 1 it must be num_steps \+ 1 = 3"),
        ({"server": [{"name": "a"}, {"name": "a"}]}, r"server\[1\]\.name: duplicate"),
        ({"server": [{"name": "a"}], "fixtures": {"spec": "b"}}, r"fixtures\.spec: no server named 'b'"),
        ({"version": 9, "server": [{"name": "a"}]}, r"version = 9"),
        ({}, r"no \[\[server\]\]"),
    ],
)
def test_broken_profiles_name_the_field(doc: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_profiles(doc, "p.toml")


def test_custom_env_profile_and_sitecustomize_apply(tmp_path: Path) -> None:
    f = tmp_path / "p.toml"
    f.write_text('version = 1\n[env_profiles.socket]\nNCCL_P2P_DISABLE = "1"\n'
                 '[[server]]\nname = "x"\nenv = "socket"\nenv_apply = "sitecustomize"\n')
    prof = load_profiles(f).get("x")
    assert prof.env_vars == {"NCCL_P2P_DISABLE": "1"} and prof.env_apply == "sitecustomize"


def test_invalid_toml_and_missing_file_are_usage_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[[server]\n")
    with pytest.raises(UsageError, match="not valid TOML"):
        load_profiles(bad)
    with pytest.raises(UsageError, match="does not exist"):
        load_profiles(tmp_path / "none.toml")


def test_single_server_from_flags() -> None:
    ps = single_server_profiles("sglang", "meta-llama/Llama-3.1-8B", "yuhuili/EAGLE3-LLaMA3.1-8B", 2, "auto")
    assert ps.get("eagle3-tuned").speculative.draft_model == "yuhuili/EAGLE3-LLaMA3.1-8B"
    assert ps.roles["baseline"] == "baseline-tuned" and ps.roles["untuned"] == "eagle3-untuned"
    with pytest.raises(UsageError, match="--specwatch-model"):
        single_server_profiles("sglang", "", None, 1, "auto")


def test_shipped_example_profiles_load_and_use_only_sglang_0_5_23_flags() -> None:
    for path in (FLAGS_FILE.parents[1] / "profiles").glob("*.toml"):
        ps = load_profiles(path)
        for prof in ps.servers.values():
            if prof.engine == "sglang":
                unknown = [f for f in _flags(prof.command("0.0.0.0", 30000)) if f not in SGLANG_FLAGS]
                assert not unknown, f"{path.name}:{prof.name}: {unknown}"


@pytest.mark.parametrize("rounds", [0, -1, "3", True])
def test_alternate_rounds_must_be_a_positive_integer(rounds: object) -> None:
    with pytest.raises(UsageError, match=r"gates\.alternate_rounds"):
        parse_profiles({"server": [{"name": "a"}], "gates": {"alternate_rounds": rounds}}, "p.toml")
    assert parse_profiles({"server": [{"name": "a"}], "gates": {"alternate_rounds": 3}}).gates.alternate_rounds == 3


def _sglang_pair(*extra: list[str], interleave: bool = True) -> dict:
    spec = {"algorithm": "EAGLE3", "draft_model": "d", "num_steps": 2}
    return {"defaults": {"engine": "sglang", "model": "m", "tp": 8},
            "server": [{"name": "base", "env": "tuned", "extra_args": extra[0]},
                       {"name": "spec", "env": "tuned", "speculative": spec, "extra_args": extra[1]}],
            "gates": {"interleave_runs": interleave}}


@pytest.mark.parametrize(("extra", "message"), [
    (([], []), "base, spec leaves --mem-fraction-static at SGLang's default"),
    ((["--mem-fraction-static", "0.42"], []), "spec leaves --mem-fraction-static"),
    ((["--mem-fraction-static", "0.6"], ["--mem-fraction-static=0.5"]), "add up to 1.1, more than 0.9"),
    ((["--mem-fraction-static", "half"], ["--mem-fraction-static", "0.4"]), "must be a number, got 'half'"),
])
def test_interleaved_sglang_pair_must_fit_on_the_gpus_together(extra: tuple, message: str) -> None:
    """Both servers of an interleaved gate are up at once: SGLang's default pool would not leave room."""
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(".", r"\.")) as err:
        parse_profiles(_sglang_pair(*extra), "p.toml")
    assert "p.toml: gates.interleave_runs" in str(err.value)


def test_interleaved_sglang_pair_that_fits_and_unshared_gates_load() -> None:
    fits = parse_profiles(_sglang_pair(["--mem-fraction-static", "0.42"], ["--mem-fraction-static=0.45"]))
    assert fits.gates.interleave_runs and fits.roles["spec"] == "spec"
    assert not parse_profiles(_sglang_pair([], [], interleave=False)).gates.interleave_runs  # one server at a time
    ref = parse_profiles({"server": [{"name": "a"}, {"name": "b", "speculative": {"algorithm": "EAGLE3"}}],
                          "gates": {"interleave_runs": True}})
    assert ref.gates.interleave_runs  # the reference server sizes itself to its model


def test_workload_table_overrides_every_workload_and_rejects_bad_values() -> None:
    ps = parse_profiles({"server": [{"name": "a"}],
                         "workload": {"runs": 20, "max_new_tokens": 256, "warmup_s": 3}}, "p.toml")
    assert ps.workload == {"runs": 20, "max_new_tokens": 256, "warmup_s": 3.0}
    for bad, msg in (({"runs": 2.5}, "workload.runs"), ({"warmup_s": -1}, "workload.warmup_s"),
                     ({"tokens": 3}, "unknown key(s) tokens"), ({"runs": True}, "workload.runs")):
        with pytest.raises(UsageError, match=msg.replace("(", r"\(").replace(")", r"\)")):
            parse_profiles({"server": [{"name": "a"}], "workload": bad}, "p.toml")


def test_session_workload_takes_the_table_then_the_command_line(tmp_path: Path) -> None:
    from specwatch.config import Config
    from specwatch.session import Session

    path = tmp_path / "p.toml"
    path.write_text('version = 1\n[[server]]\nname = "a"\n[workload]\nruns = 20\nmax_new_tokens = 256\nwarmup_s = 2\n')
    wl = Session(Config(profiles=str(path)), progress=lambda m: None).workload("single-stream")
    assert (wl.runs, wl.max_new_tokens, wl.warmup_s, wl.warmup) == (20, 256, 2.0, 3)
    wl = Session(Config(profiles=str(path), runs=5), progress=lambda m: None).workload("single-stream")
    assert (wl.runs, wl.max_new_tokens) == (5, 256)
