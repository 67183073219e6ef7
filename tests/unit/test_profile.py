"""Server profiles: validation that names the field, and command lines for SGLang 0.5.23 and the reference."""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import pytest

from specwatch.errors import UsageError
from specwatch.profiles.loading import load_profiles, parse_profiles, single_server_profiles
from specwatch.profiles.profile import TUNED_NCCL, ServerProfile

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
        ({"version": 9, "server": [{"name": "a"}]}, r"version: expected 1 .*, got 9"),
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
    ((["--mem-fraction-static", "half"], ["--mem-fraction-static", "0.4"]), "must be a number in (0, 1), got 'half'"),
    ((["--mem-fraction-static", "nan"], ["--mem-fraction-static", "0.4"]), "must be a number in (0, 1), got 'nan'"),
])
def test_interleaved_sglang_pair_must_fit_on_the_gpus_together(extra: tuple, message: str) -> None:
    """Both servers of an interleaved gate are up at once: SGLang's default pool would not leave room."""
    with pytest.raises(UsageError, match=re.escape(message)) as err:
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
    from specwatch.run.options import Config
    from specwatch.run.session import Session

    path = tmp_path / "p.toml"
    path.write_text('version = 1\n[[server]]\nname = "a"\n[workload]\nruns = 20\nmax_new_tokens = 256\nwarmup_s = 2\n')
    wl = Session(Config(profiles=str(path)), progress=lambda m: None).workload("single-stream")
    assert (wl.runs, wl.max_new_tokens, wl.warmup_s, wl.warmup) == (20, 256, 2.0, 3)
    wl = Session(Config(profiles=str(path), runs=5), progress=lambda m: None).workload("single-stream")
    assert (wl.runs, wl.max_new_tokens) == (5, 256)


# --- the schema: every bad input is one UsageError line naming the file and the field, before any boot ---

_A = '[[server]]\nname = "a"\n'  # one valid server
_SPEC = '[[server]]\nname = "s"\nspeculative = '


def _server(line: str) -> str:
    return f'[[server]]\nname = "a"\n{line}\n'


#: (test id, file content, the field the message must name, a piece of what was expected)
BROKEN_PROFILES = [
    # measured from outside: tracebacks
    ("non-utf8", b'[[server]]\nname = "caf\xff"\n', "", "not UTF-8"),
    ("defaults-scalar", "defaults = 5\n" + _A, ": defaults:", "expected a table of server fields"),
    ("server-string", 'server = "x"\n', ": server:", "expected an array of tables"),
    ("extra_env-string", _server('extra_env = "X=1"'), "server[0] (a).extra_env:", "VARIABLE = \"value\""),
    ("speculative-true", _server("speculative = true"), "server[0] (a).speculative:", "or false for none"),
    ("fixture-array", _A + '[fixtures]\nbaseline = ["a"]\n', "fixtures.baseline:", "a server name"),
    # measured from outside: silently wrong
    ("extra_args-string", _server('extra_args = "--foo"'), "server[0] (a).extra_args:", 'write ["--foo"]'),
    ("spec_margin-string", _A + '[gates]\nspec_margin = "x"\n', "gates.spec_margin:", "a number > -1"),
    ("tolerance-string", _server('tolerance = "lots"'), "server[0] (a).tolerance:", "a number in (0, 1)"),
    ("runs-zero", _A + "[workload]\nruns = 0\n", "workload.runs:", "an integer ≥ 1"),
    ("max_running_requests-server", _server("max_running_requests = -5"), "server[0] (a).max_running_requests:",
     "an integer ≥ 1"),
    ("max_running_requests-defaults", "[defaults]\nmax_running_requests = -5\n" + _A,
     "defaults.max_running_requests:", "an integer ≥ 1"),
    ("name-path", '[[server]]\nname = "../../etc"\n', "server[0].name:", "folder and file names"),
    ("invalid-toml", "[[server]\n", "", "not valid TOML"),
    ("toml-nested-too-deep", "a = " + "[" * 3000 + "]" * 3000 + "\n", "", "not valid TOML"),
    ("toml-integer-too-long", "a = " + "9" * 5000 + "\n", "", "not valid TOML"),
    # every other shape: server fields
    ("tp-bool", _server("tp = true"), ".tp:", "an integer ≥ 1, got true"),
    ("tp-float", _server("tp = 2.0"), ".tp:", "an integer ≥ 1, got 2.0"),
    ("tp-zero", _server("tp = 0"), ".tp:", "an integer ≥ 1"),
    ("tp-string", _server('tp = "2"'), ".tp:", "an integer ≥ 1"),
    ("cuda_graph_max_bs-zero", _server("cuda_graph_max_bs = 0"), ".cuda_graph_max_bs:", "an integer ≥ 1"),
    ("decode_log_interval-float", _server("decode_log_interval = 1.5"), ".decode_log_interval:", "an integer"),
    ("floor-nan", _server("floor_tok_s = nan"), ".floor_tok_s:", "a number > 0, got nan"),
    ("floor-inf", _server("floor_tok_s = inf"), ".floor_tok_s:", "a number > 0, got inf"),
    ("floor-negative", _server("floor_tok_s = -1"), ".floor_tok_s:", "a number > 0"),
    ("floor-bool", _server("floor_tok_s = true"), ".floor_tok_s:", "a number > 0"),
    ("tolerance-zero", _server("tolerance = 0"), ".tolerance:", "a number in (0, 1)"),
    ("tolerance-above-one", _server("tolerance = 1.5"), ".tolerance:", "a number in (0, 1)"),
    ("nccl_debug-int", _server("nccl_debug = 1"), ".nccl_debug:", "true or false"),
    ("nccl_debug-string", _server('nccl_debug = "yes"'), ".nccl_debug:", "true or false"),
    ("engine-int", _server("engine = 5"), ".engine:", "one of 'reference', 'sglang'"),
    ("engine-unknown", _server('engine = "vllm"'), ".engine:", "one of 'reference', 'sglang'"),
    ("device-unknown", _server('device = "tpu"'), ".device:", "one of 'auto', 'cpu', 'cuda'"),
    ("launcher-unknown", _server('launcher = "sglang"'), ".launcher:", "one of 'sglang serve'"),
    ("env_apply-unknown", _server('env_apply = "shell"'), ".env_apply:", "one of 'launch', 'sitecustomize'"),
    ("env-int", _server("env = 3"), ".env:", "a name"),
    ("env-unknown", _server('env = "fast"'), ".env:", "unknown environment profile 'fast'"),
    ("env-unknown-in-defaults", '[defaults]\nenv = "fast"\n' + _A, "defaults.env:", "unknown environment profile"),
    ("model-empty", _server('model = ""'), ".model:", "a non-empty string"),
    ("model-date", _server("model = 1979-05-27"), ".model:", "a non-empty string"),
    ("model-table", _server("model = { path = \"m\" }"), ".model:", "a non-empty string"),
    ("python-empty", _server('python = ""'), ".python:", "a non-empty string"),
    ("extra_args-ints", _server("extra_args = [1]"), ".extra_args[0]:", "a string, got 1"),
    ("extra_args-nul", _server('extra_args = ["a\\u0000b"]'), ".extra_args[0]:", "a string"),
    ("extra_args-table", _server("extra_args = { a = 1 }"), ".extra_args:", "an array of strings"),
    ("pythonpath-string", _server('pythonpath = "x"'), ".pythonpath:", "an array of non-empty strings"),
    ("pythonpath-empty-entry", _server('pythonpath = [""]'), ".pythonpath[0]:", "a non-empty string"),
    ("extra_env-int-value", _server("extra_env = { X = 1 }"), ".extra_env.X:", 'quote numbers'),
    ("extra_env-bool-value", _server("extra_env = { X = true }"), ".extra_env.X:", 'a string'),
    ("extra_env-bad-name", _server('extra_env = { "1X" = "1" }'), ".extra_env.1X:", "not a valid environment"),
    ("extra_env-name-with-equals", _server('extra_env = { "A=B" = "1" }'), ".extra_env.'A=B':",
     "not a valid environment"),
    ("unknown-server-key", _server("tpp = 2"), "server[0] (a):", "unknown key(s) tpp"),
    ("unknown-key-with-newline", _server('"we\\nird" = 1'), "server[0] (a):", r"unknown key(s) 'we\nird'"),
    # names
    ("name-missing", '[[server]]\nmodel = "m"\n', "server[0].name:", "missing"),
    ("name-int", "[[server]]\nname = 5\n", "server[0].name:", "a name"),
    ("name-empty", '[[server]]\nname = ""\n', "server[0].name:", "a name"),
    ("name-space", '[[server]]\nname = "a b"\n', "server[0].name:", "a name"),
    ("name-dot-first", '[[server]]\nname = ".hidden"\n', "server[0].name:", "a name"),
    ("name-too-long", f'[[server]]\nname = "{"a" * 101}"\n', "server[0].name:", "at most 100 characters"),
    ("name-duplicate", _A + _A, "server[1].name:", "duplicate name 'a'"),
    ("name-duplicate-case", _A + '[[server]]\nname = "A"\n', "server[1].name:", "duplicate name 'A'"),
    ("name-in-defaults", '[defaults]\nname = "x"\n' + _A, "defaults.name:", "belongs to one [[server]]"),
    # speculative
    ("spec-string", _SPEC + '"EAGLE3"\n', "server[0] (s).speculative:", "a table of speculative settings"),
    ("spec-steps-zero", _SPEC + "{ num_steps = 0 }\n", ".speculative.num_steps:", "an integer ≥ 1"),
    ("spec-topk-bool", _SPEC + "{ eagle_topk = true }\n", ".speculative.eagle_topk:", "an integer ≥ 1"),
    ("spec-algorithm-unknown", _SPEC + '{ algorithm = "MEDUSA" }\n', ".speculative.algorithm:", "one of 'EAGLE'"),
    ("spec-algorithm-int", _SPEC + "{ algorithm = 3 }\n", ".speculative.algorithm:", "one of 'EAGLE'"),
    ("spec-draft-empty", _SPEC + '{ draft_model = "" }\n', ".speculative.draft_model:", "a non-empty string"),
    ("spec-draft-tokens-float", _SPEC + "{ num_draft_tokens = 3.0 }\n", ".speculative.num_draft_tokens:",
     "an integer ≥ 2"),
    ("spec-draft-tokens-mismatch", _SPEC + "{ num_steps = 2, num_draft_tokens = 5 }\n",
     ".speculative.num_draft_tokens:", "num_steps + 1 = 3"),
    ("spec-unknown-key", _SPEC + "{ steps = 2 }\n", "server[0] (s).speculative:", "unknown key(s) steps"),
    ("spec-in-defaults", "[defaults]\nspeculative = { num_steps = -1 }\n" + _A, "defaults.speculative.num_steps:",
     "an integer ≥ 1"),
    # env_profiles
    ("env_profiles-scalar", "env_profiles = 5\n" + _A, ": env_profiles:", "tables of environment profiles"),
    ("env_profile-scalar", "[env_profiles]\nsocket = 5\n" + _A, "env_profiles.socket:", "VARIABLE = \"value\""),
    ("env_profile-int-value", "[env_profiles.socket]\nNCCL_P2P_DISABLE = 1\n" + _A,
     "env_profiles.socket.NCCL_P2P_DISABLE:", "quote numbers"),
    ("env_profile-builtin", '[env_profiles.tuned]\nNCCL_PROTO = "Simple"\n' + _A, "env_profiles.tuned:", "built in"),
    ("env_profile-bad-name", '[env_profiles."a b"]\nX = "1"\n' + _A, "env_profiles.'a b':", "a name"),
    # gates
    ("gates-scalar", "gates = 5\n" + _A, ": gates:", "a table of gate settings"),
    ("gates-unknown", _A + "[gates]\nmargin = 0.1\n", ": gates:", "unknown key(s) margin"),
    ("spec_margin-minus-one", _A + "[gates]\nspec_margin = -1\n", "gates.spec_margin:", "a number > -1"),
    ("spec_margin-inf", _A + "[gates]\nspec_margin = inf\n", "gates.spec_margin:", "a number > -1"),
    ("tuned_tolerance-zero", _A + "[gates]\ntuned_tolerance = 0\n", "gates.tuned_tolerance:", "(0, 1)"),
    ("tuned_tolerance-string", _A + '[gates]\ntuned_tolerance = "lots"\n', "gates.tuned_tolerance:", "(0, 1)"),
    ("tuning_min_effect-zero", _A + "[gates]\ntuning_min_effect = 0\n", "gates.tuning_min_effect:", "(0, 1)"),
    ("tuning_min_effect-nan", _A + "[gates]\ntuning_min_effect = nan\n", "gates.tuning_min_effect:", "(0, 1)"),
    ("alternate_rounds-zero", _A + "[gates]\nalternate_rounds = 0\n", "gates.alternate_rounds:", "an integer ≥ 1"),
    ("expect_tuning_effect-string", _A + '[gates]\nexpect_tuning_effect = "no"\n', "gates.expect_tuning_effect:",
     "true or false"),
    ("interleave_runs-int", _A + "[gates]\ninterleave_runs = 1\n", "gates.interleave_runs:", "true or false"),
    # workload
    ("workload-array", "workload = [1]\n" + _A, ": workload:", "a table of workload settings"),
    ("workload-unknown", _A + "[workload]\ntokens = 3\n", ": workload:", "unknown key(s) tokens"),
    ("warmup-negative", _A + "[workload]\nwarmup = -1\n", "workload.warmup:", "an integer ≥ 0"),
    ("warmup_s-too-long", _A + "[workload]\nwarmup_s = 601\n", "workload.warmup_s:", "[0, 600]"),
    ("min_duration_s-nan", _A + "[workload]\nmin_duration_s = nan\n", "workload.min_duration_s:", "[0, 3600]"),
    ("max_new_tokens-float", _A + "[workload]\nmax_new_tokens = 1.0\n", "workload.max_new_tokens:", "an integer"),
    ("runs-bool", _A + "[workload]\nruns = true\n", "workload.runs:", "an integer ≥ 1, got true"),
    # fixtures and the top level
    ("fixtures-scalar", 'fixtures = "a"\n' + _A, ": fixtures:", 'a table of fixture = "server name"'),
    ("fixture-unknown-role", _A + '[fixtures]\nreference = "a"\n', ": fixtures:", "unknown key(s) reference"),
    ("fixture-missing-server", _A + '[fixtures]\nspec = "b"\n', "fixtures.spec:", "no server named 'b'"),
    ("version-string", 'version = "1"\n' + _A, ": version:", "expected 1"),
    ("version-bool", "version = true\n" + _A, ": version:", "expected 1"),
    ("version-two", "version = 2\n" + _A, ": version:", "expected 1"),
    ("unknown-top-level", "servers = 1\n" + _A, "", "unknown key(s) servers"),
    ("server-table", '[server]\nname = "a"\n', ": server:", "expected an array of tables"),
    ("server-array-of-ints", "server = [1, 2]\n", ": server:", "expected an array of tables"),
    ("server-empty", "server = []\n", ": server:", "no [[server]] entries"),
    ("no-server", "version = 1\n", "", "no [[server]] entries"),
    ("empty-file", "", "", "no [[server]] entries"),
]


def _check_one_line(err: UsageError, *parts: str) -> str:
    msg = str(err)
    assert len(msg.splitlines()) == 1 and "\n" not in msg, msg
    for part in parts:
        assert part in msg, f"{part!r} not in {msg!r}"
    return msg


@pytest.mark.parametrize(("content", "field", "expected"), [pytest.param(*case[1:], id=case[0])
                                                             for case in BROKEN_PROFILES])
def test_every_broken_profile_is_one_usage_error_line_naming_file_and_field(
        tmp_path: Path, content: str | bytes, field: str, expected: str) -> None:
    path = tmp_path / "p.toml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(UsageError) as err:
        load_profiles(path)
    _check_one_line(err.value, str(path), field, expected)


@pytest.mark.parametrize(("make", "expected"), [
    (lambda d: d / "none.toml", "does not exist"),
    (lambda d: d, "is a directory"),
])
def test_missing_file_and_directory_are_one_line(tmp_path: Path, make, expected: str) -> None:
    with pytest.raises(UsageError) as err:
        load_profiles(make(tmp_path))
    _check_one_line(err.value, str(make(tmp_path)), expected)


def test_unreadable_file_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "p.toml"
    path.write_text(_A)
    if os.geteuid() != 0:  # root reads anything: simulate the refusal there
        path.chmod(0)
    else:
        def refuse(self: Path) -> bytes:
            raise PermissionError(13, "Permission denied", str(self))
        monkeypatch.setattr(Path, "read_bytes", refuse)
    with pytest.raises(UsageError) as err:
        load_profiles(path)
    _check_one_line(err.value, str(path), "cannot read profile file: Permission denied")


def test_extra_args_must_be_an_array_and_the_message_gives_the_split() -> None:
    with pytest.raises(UsageError) as err:
        parse_profiles({"server": [{"name": "a", "extra_args": "--mem-fraction-static 0.4 --chat-template 'a b'"}]},
                       "p.toml")
    _check_one_line(err.value, 'write ["--mem-fraction-static", "0.4", "--chat-template", "a b"]')
    ps = parse_profiles({"server": [{"name": "a", "extra_args": ["--foo", ""]}]})
    assert ps.get("a").extra_args == ("--foo", "")


def test_accepted_shapes_convert_as_documented() -> None:
    ps = parse_profiles({
        "defaults": {"speculative": {"algorithm": "eagle3", "num_steps": 3}, "floor_tok_s": 50},
        "server": [{"name": "spec.1"}, {"name": "plain_2", "speculative": False, "tolerance": 0.1}],
        "gates": {"spec_margin": -0.5, "tuned_tolerance": 1e-3},
    })
    spec, plain = ps.get("spec.1"), ps.get("plain_2")
    assert spec.speculative.algorithm == "EAGLE3" and spec.speculative.num_steps == 3  # any case, stored upper
    assert plain.speculative is None and plain.role == "baseline"  # false turns off a [defaults] speculative
    assert spec.floor_tok_s == 50.0 and plain.tolerance == 0.1
    assert ps.gates.spec_margin == -0.5
    assert parse_profiles({"server": [{"name": "a", "speculative": {}}]}).get("a").speculative.algorithm == "EAGLE3"


def test_bom_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_bytes(b"\xef\xbb\xbf" + _A.encode())
    assert set(load_profiles(path).servers) == {"a"}


def test_workload_schema_matches_the_overridable_workload_fields() -> None:
    from specwatch.load.workload import PROFILE_OVERRIDABLE
    from specwatch.profiles.tables import WORKLOAD_FIELDS

    assert set(WORKLOAD_FIELDS) == set(PROFILE_OVERRIDABLE)


@pytest.mark.parametrize(("content", "field", "expected"), [
    pytest.param(*case[1:], id=case[0]) for case in BROKEN_PROFILES
    if case[0] in {"non-utf8", "defaults-scalar", "server-string", "extra_env-string", "speculative-true",
                   "fixture-array", "extra_args-string", "name-path", "invalid-toml"}
])
def test_profile_show_prints_one_line_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  content: str | bytes, field: str, expected: str) -> None:
    from specwatch.cli import main
    from specwatch.errors import EXIT_USAGE

    path = tmp_path / "p.toml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    assert main(["profile", "show", str(path)]) == EXIT_USAGE
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith(f"specwatch: {path}") and "Traceback" not in err
    assert field in err and expected in err


@pytest.mark.parametrize("name", ["none.toml", "."])
def test_profile_show_missing_file_or_directory_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        name: str) -> None:
    from specwatch.cli import main
    from specwatch.errors import EXIT_USAGE

    assert main(["profile", "show", str(tmp_path / name)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("specwatch: ") and "Traceback" not in err


@pytest.mark.parametrize(("extra", "gpus"), [
    ((), 2), (("--dp-size", "2"), 4), (("--dp=4", "--pp-size", "2"), 16), (("--pp", "3"), 6),
    (("--data-parallel-size", "2"),  4),
])
def test_gpus_needed_counts_data_and_pipeline_parallelism(extra: tuple[str, ...], gpus: int) -> None:
    """Never two servers on the same GPUs: a dp=2 server at tp=2 takes 4 of them."""
    prof = ServerProfile(name="s", engine="sglang", model="m", tp=2, device="cuda", extra_args=extra)
    assert prof.gpus_needed == gpus
    assert dataclasses.replace(prof, device="cpu").gpus_needed == 0


def test_sglang_only_algorithms_are_accepted_for_sglang_and_refused_for_the_reference_server() -> None:
    for algo in ("NGRAM", "DFLASH", "DSPARK", "UNO"):
        ps = parse_profiles({"version": 1, "server": [{"name": "a", "engine": "sglang", "model": "m",
                                                        "speculative": {"algorithm": algo}}]}, "p.toml")
        assert ps.servers["a"].speculative.algorithm == algo
        with pytest.raises(UsageError, match=r"^p\.toml: server\[0\] \(a\)\.speculative\.algorithm: .* does not"):
            parse_profiles({"version": 1, "server": [{"name": "a", "speculative": {"algorithm": algo}}]}, "p.toml")


# -- SGLang 0.5.23 fidelity: what the command line leaves to the engine, and why specwatch adds a flag ----


def _spec_argv(spec: dict, engine: str = "sglang", **fields: object) -> list[str]:
    ps = parse_profiles({"server": [{"name": "s", "engine": engine, "model": "m", "speculative": spec, **fields}]})
    return ps.get("s").command("h", 1)


def test_unset_speculative_settings_stay_unset_for_the_engine() -> None:
    """0.5.23 picks num_steps/topk/draft tokens per model when none is set (speculative_hook.py)."""
    for engine in ("sglang", "reference"):
        argv = _spec_argv({"algorithm": "EAGLE3", "draft_model": "d"}, engine)
        assert "--speculative-algorithm" in argv
        for flag in ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens"):
            assert flag not in argv, (engine, argv)
    argv = _spec_argv({"num_steps": 3, "eagle_topk": 4, "num_draft_tokens": 8})
    pairs = dict(pairwise(argv))
    assert (pairs["--speculative-num-steps"], pairs["--speculative-eagle-topk"],
            pairs["--speculative-num-draft-tokens"]) == ("3", "4", "8")


def test_num_steps_alone_gets_the_chain_topk_that_0_5_23_needs_with_it() -> None:
    prof = parse_profiles({"server": [{"name": "s", "engine": "sglang", "model": "m",
                                       "speculative": {"num_steps": 2}}]}).get("s")
    argv = prof.command("h", 1)
    assert dict(pairwise(argv))["--speculative-eagle-topk"] == "1"
    assert "--speculative-num-draft-tokens" not in argv  # 0.5.23 sets num_steps + 1 itself when topk is 1
    assert any(flags == "--speculative-eagle-topk 1" and "num_steps is set" in why
               for flags, why in prof.added_flags("h", 1))
    ref = replace(prof, engine="reference")
    assert "--speculative-eagle-topk" not in ref.command("h", 1)  # the reference server sets topk 1 itself


@pytest.mark.parametrize(("spec", "field", "expected"), [
    ({"eagle_topk": 4}, ".speculative.eagle_topk:", "eagle_topk needs num_steps"),
    ({"num_draft_tokens": 4}, ".speculative.num_draft_tokens:", "num_draft_tokens needs num_steps"),
    ({"num_steps": 2, "num_draft_tokens": 5}, ".speculative.num_draft_tokens:", "num_steps + 1 = 3, got 5"),
])
def test_speculative_settings_0_5_23_would_reject_name_the_field(spec: dict, field: str, expected: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_profiles({"server": [{"name": "a", "speculative": spec}]}, "p.toml")
    assert f"p.toml: server[0] (a){field}" in str(info.value) and expected in str(info.value), str(info.value)
    assert "\n" not in str(info.value)


def test_eagle_topk_without_num_steps_outside_the_eagle_family_loads() -> None:
    """NGRAM may set eagle_topk = 1 alone: no num_steps + 1 to hold draft tokens to (this was a TypeError)."""
    prof = parse_profiles({"server": [{"name": "s", "engine": "sglang", "model": "m",
                                       "speculative": {"algorithm": "NGRAM", "eagle_topk": 1}}]}).get("s")
    assert prof.speculative is not None
    assert (prof.speculative.num_steps, prof.speculative.eagle_topk) == (None, 1)


def test_every_0_5_23_algorithm_is_accepted() -> None:
    from specwatch.profiles.profile import ALGORITHMS

    # srt/arg_groups/fields/spec.py: "Builtins: EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM, DFLASH, DSPARK, UNO"
    assert set(ALGORITHMS) == {"EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO"}
    for algo in ALGORITHMS:
        argv = _spec_argv({"algorithm": algo.lower()})
        assert dict(pairwise(argv))["--speculative-algorithm"] == algo
    # outside the EAGLE family the three settings follow the algorithm's own rules (DFLASH: block size)
    assert "--speculative-num-draft-tokens" in _spec_argv({"algorithm": "DFLASH", "num_draft_tokens": 16})


def test_decode_log_interval_only_where_a_check_reads_decode_lines() -> None:
    ps = load_profiles(None)
    base, spec = ps.get("baseline-tuned"), ps.get("eagle3-tuned")
    assert "--decode-log-interval" not in base.command("h", 1)  # 0.5.23's default of 40 stays
    assert dict(pairwise(spec.command("h", 1)))["--decode-log-interval"] == "10"
    why = dict(spec.added_flags("h", 1))
    assert "accept-length and verify-graph checks read the Decode lines" in why["--decode-log-interval 10"]
    assert "--enable-metrics" in why and "--host h --port 1" in why
    set_by_profile = replace(spec, decode_log_interval=25)
    assert dict(pairwise(set_by_profile.command("h", 1)))["--decode-log-interval"] == "25"
    assert not any(f.startswith("--decode-log-interval") for f, _ in set_by_profile.added_flags("h", 1))


def test_profile_show_says_why_each_added_flag_is_there(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from specwatch.cli import main

    f = tmp_path / "p.toml"
    f.write_text('version = 1\n[[server]]\nname = "base"\nengine = "sglang"\nmodel = "m"\n'
                 '[[server]]\nname = "spec"\nengine = "sglang"\nmodel = "m"\ndecode_log_interval = 40\n'
                 'speculative = { num_steps = 3, draft_model = "d" }\n')
    assert main(["profile", "show", str(f)]) == 0
    out = capsys.readouterr().out.splitlines()
    blocks = {name: [] for name in ("base", "spec")}
    current = None
    for line in out:
        if line.startswith("# ") and line.split()[1] in blocks:
            current = line.split()[1]
        elif current:
            blocks[current].append(line)
    base_notes = [ln for ln in blocks["base"] if ln.startswith("#   ")]
    assert [ln.split(":")[0] for ln in base_notes] == ["#   --host 127.0.0.1 --port 30000", "#   --enable-metrics"]
    spec_notes = [ln.split(":")[0] for ln in blocks["spec"] if ln.startswith("#   ")]
    assert spec_notes == ["#   --host 127.0.0.1 --port 30000", "#   --enable-metrics", "#   --speculative-eagle-topk 1"]
    command = blocks["spec"][-1]
    assert command.startswith("sglang serve ") and "--decode-log-interval 40" in command


def test_sglang_serve_runs_in_the_interpreter_of_its_script(tmp_path: Path) -> None:
    """Its version is asked of the server's own Python: the ``sglang`` script's, not specwatch's."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "sglang"
    script.write_text("#!/opt/sglang-env/bin/python3.11\nimport sys\n")
    script.chmod(0o755)
    prof = ServerProfile("s", engine="sglang", extra_env={"PATH": str(bindir)})
    assert prof.interpreter() == "/opt/sglang-env/bin/python3.11"
    assert replace(prof, launcher="python -m sglang.launch_server").interpreter() == prof.python
    assert replace(prof, extra_env={"PATH": str(tmp_path / "none")}).interpreter() == prof.python
    assert ServerProfile("r").interpreter() == sys.executable
