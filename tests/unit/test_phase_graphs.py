"""The phase-graphs check on real recorded server logs: which speculative phases a server captured as CUDA graphs at
startup, and the cause of each missing one read from its command line, environment and GPU.

Data:
* healthy: real SGLang 0.5.16 EAGLE-3 at the 8B shape on one H200, ``--attention-backend triton``
  (docs/validation/data/2026-12-04-sglang-8b-perf-x1, profile docs/validation/sglang/eagle3-8b-base.toml): it
  captured target verify, draft decode and draft extend;
* no draft extend: the same log's startup with its draft-extend lines removed (tests/unit/data/phase-graphs, a
  DERIVED fixture until a real one is recorded);
* graphs off: real 0.5.16 started with ``--disable-cuda-graph`` (docs/validation/data/2026-12-03-sglang-x1, its
  argv as the run printed it in sgl-correctness.txt);
* the reference server: a real GPU log of it (docs/validation/data/2026-12-03-rerecord-x1): verify and draft decode;
* SGLang's default on Hopper: real 0.5.16 at the 8B shape started without ``--attention-backend`` on one H100 (FA3,
  prefill graphs off; docs/validation/data/2026-12-05-sglang-8b-fa3-decode-x1): verify and draft decode only.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specwatch.checks import phase_graphs, phasegraphs
from specwatch.engines.openai import OPENAI
from specwatch.engines.reference import PHASES as REFERENCE_PHASES
from specwatch.engines.reference import REFERENCE
from specwatch.engines.registry import ENGINES
from specwatch.engines.sglang import PHASE_GRAPHS, SGLANG
from specwatch.signals.logscan import LogWindow

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "validation" / "data"
HEALTHY = DATA / "2026-12-04-sglang-8b-perf-x1/sgl8b-perf/servers/20261204-120040-4556/sgl8b-eagle3-1/server.log"
DERIVED = ROOT / "tests/unit/data/phase-graphs/sgl8b-eagle3-no-draft-extend.derived.log"
#: real SGLang 0.5.16 at the 8B shape started with SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH=1 (one H100, 2026-12-05)
SWITCH_OFF = (DATA / "2026-12-05-sglang-8b-stops-x1/sgl8b-phase-graphs/servers/20261205-145610-685"
              / "sgl8b-eagle3-no-draft-extend-graph-1/server.log")
GRAPHS_OFF = (DATA / "2026-12-03-sglang-x1/sgl-correctness/servers/20261203-070602-503/sgl-eagle3-eager-verify-1"
              / "server.log")
REFERENCE_GPU = DATA / "2026-12-03-rerecord-x1/record-small/servers/20261203-101202-456/eagle3-tuned-1/server.log"
#: the flags of the 8B profile (eagle3-8b-base.toml) as specwatch wrote them, and its GPU (gpu.txt)
ARGV_8B = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "2", "--speculative-eagle-topk", "1",
           "--speculative-num-draft-tokens", "3", "--attention-backend", "triton", "--sampling-backend", "pytorch",
           "--mem-fraction-static", "0.8"]
NO_BACKEND = [a for a in ARGV_8B if a not in ("--attention-backend", "triton")]
#: real SGLang 0.5.16 at the 8B shape as SGLang sets it up on Hopper by itself (FA3), prefill graphs off (one H100)
FA3_DEFAULT = next((DATA / "2026-12-05-sglang-8b-fa3-decode-x1/sgl8b-phase-graphs-fa3/servers").glob(
    "*/sgl8b-eagle3-1/server.log"))
H200 = ["NVIDIA H200"]
H100 = ["NVIDIA H100 80GB HBM3"]


def _captures(path: Path):
    return LogWindow(path, start=0).capture_records()


def _judge(path: Path, argv=ARGV_8B, env=None, gpus=H200, **kw) -> phasegraphs.PhaseReport:
    kw.setdefault("num_steps", 2)
    kw.setdefault("topk", 1)
    return phasegraphs.check_phase_graphs(PHASE_GRAPHS, _captures(path), algorithm="EAGLE3", argv=argv, env=env,
                                          gpus=gpus, **kw)


def test_the_derived_log_is_the_real_log_without_its_draft_extend_lines() -> None:
    real = [ln + b"\n" for ln in HEALTHY.read_bytes().split(b"\n")[:56]]  # lines as sed counts them (tqdm's \r kept)
    kept = [ln for i, ln in enumerate(real, 1) if i not in (45, 46, 47)]
    assert b"Capture draft extend CUDA graph begin" in real[44] and b"Capture draft extend CUDA graph end" in real[46]
    assert DERIVED.read_bytes() == b"".join(kept)


def test_the_healthy_8b_server_captured_every_phase() -> None:
    rep = _judge(HEALTHY)
    assert rep.ok is True, rep.message()
    assert rep.expected == ("target verify", "draft decode", "draft extend")
    assert rep.captured["target verify"] == rep.captured["draft extend"] == list(range(1, 9))
    assert "draft prefill" in rep.captured and "target prefill" in rep.captured  # real, not judged
    verdict = phase_graphs.evaluate("sgl8b-eagle3", PHASE_GRAPHS, _captures(HEALTHY), algorithm="EAGLE3",
                                    num_steps=2, topk=1, argv=ARGV_8B, gpus=H200)
    assert verdict.passed and verdict.name == "phase graphs"
    assert "draft extend: captured (bs=[1, 2, 3, 4, 5, 6, 7, 8])" in verdict.message


@pytest.mark.parametrize("log", [SWITCH_OFF, DERIVED], ids=["real", "derived"])
def test_the_switch_set_fails_naming_it(log: Path) -> None:
    rep = _judge(log, env={"SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH": "1"}, gpus=H100)
    assert rep.ok is False
    assert [m.phase for m in rep.missing] == ["draft extend"]
    assert rep.missing[0].cause == ("SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH=1 is set in the server's environment: "
                                    "it turns the draft extend capture off")
    assert rep.reason().startswith("draft extend NOT captured as a graph: it runs eagerly every cycle")


@pytest.mark.parametrize(("value", "named"), [("1", True), ("true", True), ("YES", True), ("y", True), ("0", False),
                                          ("false", False), ("", False), ("2", False)])
def test_the_switch_is_read_as_sglang_reads_it(value: str, named: bool) -> None:
    """EnvBool: true/1/yes/y in any case is on; anything else (an invalid value falls back to False) is off."""
    rep = _judge(DERIVED, env={"SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH": value})
    assert ("SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH" in rep.missing[0].cause) is named, rep.message()


@pytest.mark.parametrize("gpus", [H100, H200, ["NVIDIA GH200 480GB"]])
def test_no_backend_flag_on_hopper_names_the_fa3_default(gpus: list[str]) -> None:
    rep = _judge(DERIVED, argv=NO_BACKEND, gpus=gpus)
    assert rep.ok is False
    cause = rep.missing[0].cause
    assert cause.startswith("the draft extend's attention backend is FA3, SGLang's default on Hopper for topk 1 "
                            f"(no --attention-backend given; GPU {gpus[0]}, topk 1, page size unset)"), cause
    assert "captured only for flashinfer, triton, trtllm_mha" in cause
    assert "--speculative-draft-attention-backend (the draft only) or --attention-backend" in cause


@pytest.mark.parametrize(("argv", "gpus", "topk"), [
    (NO_BACKEND, ["NVIDIA A100-SXM4-80GB"], 1),  # not Hopper: flashinfer or triton by default
    (NO_BACKEND, [], 1),  # GPU not known
    ([*NO_BACKEND, "--page-size", "16"], H100, 1),  # page size > 1: not fa3
    (NO_BACKEND, H100, 4),  # a tree (topk 4): not fa3
])
def test_fa3_default_is_named_only_where_the_facts_say_so(argv, gpus, topk) -> None:
    rep = _judge(DERIVED, argv=argv, gpus=gpus, topk=topk)
    assert rep.ok is False and rep.missing[0].phase == "draft extend"
    assert "FA3" not in rep.missing[0].cause and "cause unknown" in rep.reason(), rep.message()


def test_an_explicit_fa3_backend_is_named_as_passed() -> None:
    argv = [*NO_BACKEND, "--attention-backend", "fa3"]
    rep = _judge(DERIVED, argv=argv, gpus=["NVIDIA A100-SXM4-80GB"])
    assert rep.missing[0].cause.startswith("the draft extend's attention backend is --attention-backend fa3, whose "
                                           "draft extend is not captured")
    # the draft's own backend flag wins over --attention-backend (DraftBackendFactory._create_backend)
    rep = _judge(DERIVED, argv=[*argv, "--speculative-draft-attention-backend", "triton"])
    assert "cause unknown" in rep.reason(), rep.message()


def test_triton_with_extend_lines_missing_fails_with_the_phase_named_and_cause_unknown() -> None:
    rep = _judge(DERIVED)
    assert rep.ok is False
    assert [m.phase for m in rep.missing] == ["draft extend"] and rep.missing[0].cause == ""
    assert rep.reason() == ("draft extend NOT captured as a graph: it runs eagerly every cycle (cause unknown: no "
                            "flag, switch or attention backend the server was started with explains it)")
    verdict = phase_graphs.evaluate("sgl8b-eagle3", PHASE_GRAPHS, _captures(DERIVED), algorithm="EAGLE3",
                                    num_steps=2, topk=1, argv=ARGV_8B, gpus=H200)
    assert verdict.failed and "draft extend: not captured" in verdict.message
    assert "target verify: captured" in verdict.message and "draft decode: captured" in verdict.message


def test_the_resolved_backend_of_server_info_names_a_default_it_resolved() -> None:
    rep = _judge(DERIVED, argv=NO_BACKEND, gpus=[], server_info={"attention_backend": "fa3"})
    assert "fa3 (the server resolved it, no backend flag given: the engine's default)" in rep.missing[0].cause
    rep = _judge(DERIVED, argv=NO_BACKEND, gpus=H100, server_info={"attention_backend": "flashinfer"})
    assert "FA3" not in rep.missing[0].cause, rep.message()  # it resolved another: never claim fa3


def test_graphs_off_names_the_flag_for_every_phase() -> None:
    """Real 0.5.16 started with --disable-cuda-graph: no verify, draft decode or draft extend capture line."""
    argv = [*ARGV_8B, "--disable-cuda-graph"]
    rep = _judge(GRAPHS_OFF, argv=argv)
    assert rep.ok is False
    assert [m.phase for m in rep.missing] == ["target verify", "draft decode", "draft extend"]
    assert all(m.cause == "--disable-cuda-graph is set: no decode-phase graph is captured" for m in rep.missing)
    rep = _judge(GRAPHS_OFF, argv=ARGV_8B, server_info={"cuda_graph_backend_decode": "disabled"})
    assert rep.missing[0].cause.startswith("--cuda-graph-backend-decode disabled is set")


def test_one_draft_step_needs_no_draft_decode_graph() -> None:
    """0.5.16 captures the draft decode graph only for num_steps > 1 (EAGLEWorkerV2._capture_cuda_graphs)."""
    assert PHASE_GRAPHS.expected("EAGLE3", 1) == ("target verify", "draft extend")
    assert PHASE_GRAPHS.expected("NGRAM", 3) == ("target verify",)
    assert PHASE_GRAPHS.expected("EAGLE", None) == ("target verify", "draft extend")


def test_on_cpu_it_cannot_tell() -> None:
    rep = _judge(DERIVED, device="cpu")
    assert rep.ok is None and "no CUDA graphs exist" in rep.why_not
    verdict = phase_graphs.evaluate("p", PHASE_GRAPHS, [], algorithm="EAGLE3", num_steps=2, device="cpu")
    assert verdict.skipped and "CPU" in verdict.reason


def test_the_reference_server_declares_no_draft_extend_and_passes_on_its_real_gpu_log() -> None:
    assert REFERENCE.phase_graphs() is REFERENCE_PHASES and REFERENCE_PHASES.draft_extend is None
    assert REFERENCE_PHASES.expected("EAGLE3", 1) == ("target verify", "draft decode")
    rep = phasegraphs.check_phase_graphs(REFERENCE_PHASES, _captures(REFERENCE_GPU), algorithm="EAGLE3",
                                         num_steps=2, topk=1, env={"SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH": "1"})
    assert rep.ok is True, rep.message()
    assert rep.captured["target verify"] and rep.captured["target verify"][-1] == 48  # 0.5.23 form: bs on the end line


def test_every_engine_answers_the_phase_facts() -> None:
    assert set(ENGINES) >= {SGLANG.name, REFERENCE.name, OPENAI.name}
    assert SGLANG.phase_graphs("0.5.16") is PHASE_GRAPHS and OPENAI.phase_graphs() is None
    assert all(e.phase_graphs() is None or e.phase_graphs().verify == "target verify" for e in ENGINES.values())


def test_arg_value_reads_both_spellings() -> None:
    assert phasegraphs.arg_value(["--attention-backend=fa3"], "--attention-backend") == "fa3"
    assert phasegraphs.arg_value(["--attention-backend", "fa3", "--attention-backend", "triton"],
                                 "--attention-backend") == "triton"
    assert phasegraphs.arg_value(["--disable-cuda-graph", "--x"], "--disable-cuda-graph") == ""
    assert phasegraphs.arg_value(["--x"], "--attention-backend") is None


def test_the_real_fa3_default_leaves_draft_extend_eager_and_says_how_to_cost_it() -> None:
    """The server SGLang 0.5.16 started by itself on an H100 (FA3): the check fails naming FA3's draft extend, and the
    message says how to measure what it costs (there, ab read FA3 8.1% faster than triton: an eager phase is a fact
    to name, its cost a measurement)."""
    log = FA3_DEFAULT.read_text(errors="replace")
    assert "Use fa3 backend by default." in log
    rep = _judge(FA3_DEFAULT, argv=[*NO_BACKEND, "--cuda-graph-backend-prefill", "disabled"], gpus=H100)
    assert rep.ok is False and [m.phase for m in rep.missing] == ["draft extend"]
    assert rep.missing[0].cause.startswith("the draft extend's attention backend is FA3")
    assert {"target verify", "draft decode"} <= set(rep.captured)
    assert "`specwatch ab` of this server against one that graphs the phase" in rep.message()
    assert "specwatch ab" not in _judge(HEALTHY).message()  # nothing missing: nothing to cost
