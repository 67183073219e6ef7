"""The draft-alive judgement on real recorded server output, and the speculation gate that says it first.

Real data:
- ``fixtures/sglang/real/``: a plain SGLang 0.5.23 server (``/server_info`` with ``speculative_algorithm`` None,
  a ``/generate`` reply without ``spec_*`` fields, ``/metrics`` without a verify counter): what a profile that
  asks for EAGLE-3 sees when its speculative settings never reached the server.
- ``docs/validation/data/2026-12-04-sglang-8b-perf-x1``: real SGLang 0.5.16 EAGLE-3 at the 8B shape on an H200,
  347 Decode lines, every one ``accept len: 2.00, accept rate: 0.50`` (the project's draft of quality 1).
- ``docs/validation/data/2026-12-03-sglang-faults-x1/capture/capture``: real SGLang 0.5.16 EAGLE-3 (tiny shape):
  ``/server_info``, ``/metrics`` (392 generated tokens, 196 verify calls, 7 requests since boot), Decode lines.
The dead-draft cases are derived from those: the same lines and counters with no draft token accepted.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from specwatch.checks import accept_length, draft_alive
from specwatch.judge import draftalive, speculative
from specwatch.load.client import Generation
from specwatch.load.measure import Measurement, RunSample
from specwatch.load.workload import Workload
from specwatch.profiles.loading import parse_profiles
from specwatch.run import gatekeeper
from specwatch.signals import promtext
from specwatch.signals.logscan import DecodeRecord, parse_lines

ROOT = Path(__file__).resolve().parents[2]
PLAIN = ROOT / "fixtures" / "sglang" / "real"
CAPTURE = ROOT / "docs" / "validation" / "data" / "2026-12-03-sglang-faults-x1" / "capture" / "capture"
LOG_8B = (ROOT / "docs" / "validation" / "data" / "2026-12-04-sglang-8b-perf-x1" / "sgl8b-perf" / "servers" /
          "20261204-120040-4556" / "sgl8b-eagle3-1" / "server.log")
EAGLE3 = {"speculative_algorithm": "EAGLE3", "speculative_draft_model_path": "/tmp/sgl/models/eagle3",
          "speculative_num_steps": 2, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 3}


def _plain() -> tuple[dict[str, Any], dict[str, Any], promtext.Exposition]:
    info = json.loads((PLAIN / "server_info.json").read_text())
    meta = json.loads((PLAIN / "generate.json").read_text())["meta_info"]
    return info, meta, promtext.parse_text((PLAIN / "metrics.txt").read_text())


def _windows(path: Path, accept: str | None = None) -> list[DecodeRecord]:
    """The Decode lines of a real log; ``accept``: each line's accept len rewritten (rate to match, steps 2)."""
    lines = path.read_text().splitlines()
    if accept is not None:
        rate = f"{(float(accept) - 1) / 2:.2f}"
        lines = [re.sub(r"accept len: [\d.]+, accept rate: [\d.]+", f"accept len: {accept}, accept rate: {rate}", ln)
                 for ln in lines]
    return [r for r in parse_lines(lines) if isinstance(r, DecodeRecord) and r.accept_len is not None]


def _dead_metas(completion: list[int], ndt: int = 3) -> list[dict[str, Any]]:
    """meta_info of requests whose draft accepted nothing: one token per verify cycle, after the prefill's
    (SGLang's fields, tokenizer_manager.py _calculate_spec_decoding_metrics)."""
    out = []
    for ct in completion:
        v = ct - 1
        out.append({"completion_tokens": ct, "spec_verify_ct": v, "spec_num_correct_drafts": 0,
                    "spec_num_proposed_drafts": v * (ndt - 1), "spec_accept_length": ct / v, "spec_accept_rate": 0.0,
                    "spec_correct_drafts_histogram": [v, 0, 0]})
    return out


# -- speculation off ------------------------------------------------------------------------------------------


def test_a_real_plain_server_under_an_eagle3_profile_is_speculation_off_naming_what_did_not_reach_it() -> None:
    info, meta, metrics = _plain()
    gen = metrics.value("sglang:generation_tokens_total")
    verify = metrics.value("sglang:spec_verify_calls_total", default=None)
    argv = ["python", "-m", "sglang.launch_server", "--model-path", "/models/tinyllama", "--enable-metrics"]
    v = draftalive.judge("eagle3", EAGLE3, info, [meta], [], verify_calls=verify, generation_tokens=gen, argv=argv)
    assert v.failed, v.message
    assert v.reason.startswith("speculation configured in the profile but not running on the server: "
                               "/server_info says speculative_algorithm None"), v.reason
    assert "speculative_algorithm: the profile asks EAGLE3, /server_info says None" in v.reason
    assert "none of the 1 requests carries meta_info.spec_verify_ct" in v.message
    assert "/metrics has no verify-call counter (120 tokens generated)" in v.message
    for key in EAGLE3:
        assert f"did not reach the server: {key}: the profile asks" in v.message, key
    assert "its command line carries no --speculative-* flag: the settings were dropped" in v.message


def test_flags_on_the_command_line_that_the_server_did_not_apply_are_said_so() -> None:
    info, meta, _ = _plain()
    argv = ["sglang", "serve", "--model-path", "/m", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps=2"]
    v = draftalive.judge("eagle3", EAGLE3, info, [meta], [], argv=argv)
    assert v.failed
    assert "its command line carries --speculative-algorithm EAGLE3 --speculative-num-steps=2, yet the server " \
           "did not apply them" in v.message, v.message


def test_zero_verify_cycles_alone_is_speculation_off_and_metrics_alone_are_not() -> None:
    real = json.loads((CAPTURE / "server_info.json").read_text())  # speculation on (EAGLE3), by /server_info
    metas = [{"completion_tokens": 48, "spec_verify_ct": 0}, {"completion_tokens": 20, "spec_verify_ct": 0}]
    v = draftalive.judge("eagle3", EAGLE3, real, metas, [], verify_calls=0.0, generation_tokens=68.0)
    assert v.failed and "the 2 requests' spec_verify_ct sum to 0 verify cycles" in v.reason, v.message
    assert "/metrics: 0 verify calls over 68 generated tokens" in v.message
    assert draftalive.speculation_off(real, [], verify_calls=0.0, generation_tokens=68.0) == []
    # max_new_tokens=1: no request decoded, so the absence of spec_verify_ct says nothing
    assert draftalive.speculation_off(real, [{"completion_tokens": 1}]) == []


# -- a dead draft, a low one, a healthy one ------------------------------------------------------------------


def test_the_real_8b_eagle3_draft_is_alive() -> None:
    windows = _windows(LOG_8B)
    assert len(windows) == 347
    ests, problems, _ = accept_length.estimates(num_steps=2, decode_records=windows)
    assert problems == []
    v = draftalive.judge("sgl8b-eagle3", EAGLE3, None, [], ests)
    assert v.passed and v.reason.startswith("the draft is alive: accept length 2.00"), v.message


def test_the_same_lines_at_1_00_with_every_source_agreeing_are_a_dead_draft() -> None:
    info = json.loads((CAPTURE / "server_info.json").read_text())  # real 0.5.16: speculative_algorithm EAGLE3
    windows = _windows(CAPTURE / "server.log", accept="1.00")
    metas = _dead_metas([48, 64, 57, 33, 64, 64, 62])  # 392 tokens over 7 requests, as the capture's /metrics
    delta = promtext.parse_text((CAPTURE / "metrics.txt").read_text().replace(
        "spec_verify_calls_total{engine_type=\"unified\",model_name=\"/tmp/sgl/models/target\"} 196.0",
        "spec_verify_calls_total{engine_type=\"unified\",model_name=\"/tmp/sgl/models/target\"} 385.0"))
    ests, problems, _ = accept_length.estimates(num_steps=2, decode_records=windows, metrics_delta=delta, metas=metas)
    assert problems == [] and len(ests) == 3, [e.describe() for e in ests]
    v = draftalive.judge("eagle3", EAGLE3, info, metas, ests, num_draft_tokens=3)
    assert v.failed, v.message
    assert v.reason.startswith("the draft accepted 0 of 770 proposed tokens: accept length 1.00 over the workload, "
                               "every source agreeing"), v.reason
    assert "speculation runs (EAGLE3)" in v.reason and draftalive.CAUSES in v.reason
    assert "wrong algorithm EAGLE vs EAGLE3, wrong draft weights, a broken hidden-state input" in v.reason


def test_a_server_running_eagle_for_an_eagle3_draft_is_named_beside_the_dead_draft() -> None:
    info = {**json.loads((CAPTURE / "server_info.json").read_text()), "speculative_algorithm": "EAGLE"}
    metas = _dead_metas([64, 64])
    ests, _, _ = accept_length.estimates(num_steps=2, metas=metas)
    v = draftalive.judge("kimi", EAGLE3, info, metas, ests)
    assert v.failed and "speculation runs (EAGLE)" in v.reason, v.message
    assert "speculative_algorithm: the profile asks EAGLE3, /server_info says EAGLE" in v.reason


@pytest.mark.parametrize("accept", ["1.30", "1.04", "1.01"])
def test_a_low_but_alive_draft_passes(accept: str) -> None:
    ests, _, _ = accept_length.estimates(num_steps=2, decode_records=_windows(LOG_8B, accept=accept))
    v = draftalive.judge("eagle3", EAGLE3, None, [], ests)
    assert v.passed and f"accept length {accept}" in v.reason, v.message


def test_a_few_accepted_tokens_in_many_cycles_still_read_1_00_and_are_counted() -> None:
    metas = _dead_metas([200, 200, 200])
    metas[0]["spec_num_correct_drafts"] = 1  # one in 597 cycles: 1.0017, printed 1.00
    ests, _, _ = accept_length.estimates(num_steps=2, metas=metas)
    v = draftalive.judge("eagle3", EAGLE3, None, metas, ests)
    assert v.failed and v.reason.startswith("the draft accepted 1 of 1194 proposed tokens (0.08%): accept length "
                                            "1.00"), v.reason


def test_sources_that_disagree_on_whether_anything_was_accepted_skip_with_them_named() -> None:
    lines, _, _ = accept_length.estimates(num_steps=2, decode_records=_windows(LOG_8B, accept="1.00"))
    metas = [{"completion_tokens": 64, "spec_verify_ct": 32, "spec_num_correct_drafts": 31}]
    exact, _, _ = accept_length.estimates(num_steps=2, metas=metas)
    v = draftalive.judge("eagle3", EAGLE3, None, metas, lines + exact)
    assert v.skipped and "the sources disagree on whether the draft accepts anything" in v.reason, v.message
    assert "Decode lines (347 windows, each its own) 1.0000" in v.reason and "1.9688" in v.reason


def test_no_source_skips_never_passes() -> None:
    v = draftalive.judge("eagle3", EAGLE3, None, [], [], notes=("no log file",))
    assert v.skipped and "no accept-length source answered; no log file" in v.reason


# -- a value reported in another convention (the 0.92 case) ---------------------------------------------------


def test_a_reported_value_is_read_in_the_convention_the_accept_length_owner_reads_it() -> None:
    dead = draftalive.judge("eagle3", EAGLE3, None, [], [], reported=0.0)
    assert dead.failed and "reported value 0 read as accepted drafts per cycle 1.0000" in dead.reason, dead.message
    alive = draftalive.judge("eagle3", EAGLE3, None, [], [], reported=0.92)
    assert alive.passed and "accept length 1.92" in alive.reason, alive.message
    assert draftalive.judge("eagle3", EAGLE3, None, [], [], reported=1.3).passed
    assert draftalive.judge("eagle3", EAGLE3, None, [], [], reported=1.0).failed  # canonical 1.00: dead
    est = draftalive.reported_estimate(0.92)
    assert not isinstance(est, str)
    assert est.value == speculative.from_extra_per_cycle(0.92)
    assert est.note == speculative.bounds_problems(0.92)[0]  # the owner's words: "looks like extra tokens"
    bad = draftalive.judge("eagle3", EAGLE3, None, [], [], reported=-1.0)
    assert bad.skipped and "not a token count at all" in bad.reason


# -- the check's live half on a Measurement, and the speculation gate ------------------------------------------


def _measurement(name: str, info: dict[str, Any], metas: list[dict[str, Any]], tok_s: list[list[float]],
                 records: list[Any] = ()) -> Measurement:
    gens = [Generation([1] * int(m.get("completion_tokens", 8)), "", m, e2e_s=0.1, ttft_s=0.01) for m in metas]
    runs = [RunSample(output_tok_s=x, decode_tok_s=x, ttft_ms=5.0, mean_itl_ms=1.0, e2e_s=1.0, completion_tokens=48,
                      client_overhead=0.001, generations=gens) for boot in tok_s for x in boot]
    return Measurement(profile=name, workload=Workload("single-stream", runs=len(runs)), runs=runs,
                       metrics_delta=None, metrics_after=None, server_info_before={}, server_info_after=info,
                       log_records=list(records), wall_s=1.0, boots=tuple(len(b) for b in tok_s))


PROFILES = {"server": [{"name": "base", "engine": "sglang", "model": "/m"},
                       {"name": "spec", "engine": "sglang", "model": "/m",
                        "speculative": {"algorithm": "EAGLE3", "draft_model": "/d", "num_steps": 2}}],
            "fixtures": {"baseline": "base", "spec": "spec"}}


def test_the_live_half_judges_a_measurement_of_the_real_plain_server() -> None:
    info, meta, _ = _plain()
    prof = parse_profiles(PROFILES, "p.toml").servers["spec"]
    v = draft_alive.evaluate_measurement(prof, _measurement("spec", info, [meta], [[60.0]]))
    assert v.failed and v.reason.startswith(draftalive.OFF), v.message
    assert "speculative_draft_model_path: the profile asks /d, /server_info says None" in v.message
    assert "speculative_num_draft_tokens: the profile asks 3" in v.message  # num_steps + 1, the chain's
    plain = parse_profiles(PROFILES, "p.toml").servers["base"]
    assert draft_alive.evaluate_measurement(plain, _measurement("base", info, [meta], [[60.0]])).skipped


def _session(tmp_path: Path, measured: dict[str, Measurement]) -> SimpleNamespace:
    profiles = parse_profiles(PROFILES, "p.toml")
    config = SimpleNamespace(alpha=0.01, baseline_dir=str(tmp_path / "baselines"), path=Path)
    session = SimpleNamespace(profiles=profiles, config=config, verdict_rows=[], machine_class=lambda: "ci-cpu",
                              findings_for=lambda name: [], fingerprint=lambda: {})
    session.measure_pair = lambda a, b, workload: (measured[a], measured[b])
    session.engine_of = lambda server: "sglang"
    return session


def test_the_speculation_gate_fails_saying_speculation_is_off_where_its_rounds_alone_are_unsure(tmp_path: Path) -> None:
    info, meta, _ = _plain()
    base = _measurement("base", info, [meta], [[100.0, 100.0], [101.0, 100.0], [99.0, 100.0]])
    spec = _measurement("spec", info, [meta], [[99.0, 98.0], [100.0, 99.0], [98.0, 99.0]])
    verdict = gatekeeper.speculation_beats_baseline(_session(tmp_path, {"base": base, "spec": spec}))
    assert verdict.failed, verdict.message
    assert verdict.reason.startswith("[draft alive on spec: FAILED] speculation configured in the profile but not "
                                     "running on the server"), verdict.reason
    assert verdict.message.index("not running on the server") < verdict.message.index("throughput: speculative")
    assert "\nunsure: spec/base 0.988" in verdict.message  # what the rounds alone say: plain against plain


def test_the_speculation_gate_says_the_draft_is_dead_first_and_says_nothing_of_a_live_one(tmp_path: Path) -> None:
    info = json.loads((CAPTURE / "server_info.json").read_text())
    info["internal_states"][0]["avg_spec_accept_length"] = 1.0  # the capture's 2.0, as a dead draft reads it
    plain, meta, _ = _plain()
    base = _measurement("base", plain, [meta], [[100.0, 100.0], [101.0, 100.0], [99.0, 100.0]])
    dead = _measurement("spec", info, _dead_metas([48, 64]), [[70.0, 71.0], [72.0, 70.0], [71.0, 71.0]],
                        _windows(CAPTURE / "server.log", accept="1.00"))
    verdict = gatekeeper.speculation_beats_baseline(_session(tmp_path, {"base": base, "spec": dead}))
    # 6 runs of the same two requests (47 + 63 verify cycles, 2 draft tokens each): 6 x 220 proposed, none accepted
    assert verdict.failed and verdict.reason.startswith("[draft alive on spec: FAILED] the draft accepted 0 of 1320 "
                                                        "proposed tokens: accept length 1.00"), verdict.message
    alive = _measurement("spec", info, [], [[70.0, 71.0], [72.0, 70.0], [71.0, 71.0]], _windows(CAPTURE / "server.log"))
    verdict = gatekeeper.speculation_beats_baseline(_session(tmp_path, {"base": base, "spec": alive}))
    assert verdict.failed and "draft alive" not in verdict.message, verdict.message


def test_the_real_8b_dead_draft_capture_is_a_dead_draft() -> None:
    """Real SGLang 0.5.16 at the 8B shape with a --draft-quality 0 draft (one H100, 2026-12-05): its Decode lines
    and /metrics, captured by ``specwatch capture``, that the checks before the draft-alive one passed."""
    cap = ROOT / "docs/validation/data/2026-12-05-sglang-8b-stops-x1/capture-q0/capture"
    info = json.loads((cap / "server_info.json").read_text())
    delta = promtext.parse_text((cap / "metrics.txt").read_text())
    ests, problems, _ = accept_length.estimates(num_steps=2, decode_records=_windows(cap / "server.log"),
                                                metrics_delta=delta, metas=[])
    assert problems == [] and {e.value for e in ests} == {1.0}, [e.describe() for e in ests]
    asked = {**EAGLE3, "speculative_draft_model_path": info["speculative_draft_model_path"]}
    v = draftalive.judge("sgl8b-eagle3", asked, info, [], ests, num_draft_tokens=3)
    assert v.failed, v.message
    assert "accept length 1.00 over the workload, every source agreeing" in v.reason
    assert "/metrics delta 1.0000" in v.reason and "speculation runs (EAGLE3)" in v.reason
