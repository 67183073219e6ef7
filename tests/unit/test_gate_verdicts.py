"""The gates' side of the shared Verdict, and the accept length their diagnosis prints."""

from __future__ import annotations

import pytest

from specwatch.judge import speculative
from specwatch.judge.verdict import Status, Verdict
from specwatch.load.client import Generation
from specwatch.load.measure import Measurement, RunSample
from specwatch.load.workload import Workload
from specwatch.run import gatekeeper, gates
from specwatch.signals.logscan import DecodeRecord


def _decode(accept: float | None, running: int) -> DecodeRecord:
    return DecodeRecord(ts="2026-10-14 09:12:33", ranks={}, running=running, graph_label="cuda graph", graph=True,
                        gen_tput=100.0, queue=0, accept_len=accept)


def _measurement(windows: list[DecodeRecord], metas: list[dict]) -> Measurement:
    gens = [Generation([1] * 8, "", meta, e2e_s=0.1, ttft_s=0.01, chunk_gaps_s=[0.004, 0.006]) for meta in metas]
    run = RunSample(output_tok_s=80.0, decode_tok_s=70.0, ttft_ms=10.0, mean_itl_ms=5.0, e2e_s=0.1, completion_tokens=8,
                    client_overhead=0.001, generations=gens)
    return Measurement(profile="spec", workload=Workload("single-stream", runs=1), runs=[run], metrics_delta=None,
                       metrics_after=None, server_info_before={}, server_info_after={}, log_records=list(windows),
                       wall_s=1.0)


def test_verdict_status_reason_and_views() -> None:
    v = Verdict("drift", "fail", "a/b/output_tok_s: 12% slower\nbasis: stored sessions")
    assert v.status is Status.FAIL and v.status == "fail" and v.failed and not v.passed and v.ok is False
    assert v.reason == "a/b/output_tok_s: 12% slower"  # the message's first line by default
    assert Verdict.of("floor", True, "ok", profile="a").passed and Verdict.of("x", None, "?").skipped
    skip = Verdict.skip("lossless", "one server only", "spec")
    assert (skip.ok, skip.reason, skip.message) == (None, "one server only",
                                                    "lossless on spec: not checked: one server only")
    with pytest.raises(ValueError):
        Verdict("floor", "maybe", "not a status")


def test_diagnosis_accept_length_is_the_batch_weighted_window_mean() -> None:
    """The gates no longer take a median of the windows: a full batch outweighs a lone request."""
    windows = [_decode(3.0, 8), _decode(1.5, 1), _decode(1.6, 1), _decode(None, 4)]
    m = _measurement(windows, [{"spec_verify_ct": 4, "spec_num_correct_drafts": 4}])
    assert gates.accept_length(m) == pytest.approx((3.0 * 8 + 1.5 + 1.6) / 10)
    assert gates.accept_length(m) == speculative.measured_accept_length(
        [(r.accept_len, r.running) for r in windows if r.accept_len is not None],
        [g.meta_info for g in m.generations]).value
    lines = gates.diagnose(m, None).lines()
    assert f"accept length: {(3.0 * 8 + 1.5 + 1.6) / 10:.2f} committed tokens per verify cycle" in "\n".join(lines)


def test_diagnosis_falls_back_to_the_requests_summed() -> None:
    metas = [{"spec_verify_ct": 10, "spec_num_correct_drafts": 15},
             {"spec_verify_ct": 30, "spec_num_correct_drafts": 5},
             {"completion_tokens": 8}]  # a request without speculative fields no longer breaks the diagnosis
    assert gates.accept_length(_measurement([], metas)) == pytest.approx(1.5)
    assert gates.accept_length(_measurement([], [])) is None


def test_a_gate_that_cannot_judge_skips_with_its_name_and_no_rows() -> None:
    from specwatch.profiles.loading import parse_profiles
    from specwatch.run.options import Config
    from specwatch.run.session import Session

    session = Session(Config(), progress=lambda m: None, _profiles=parse_profiles({"server": [{"name": "a"}]}))
    floor = gatekeeper.floor(session, "a")
    assert (floor.name, floor.status, floor.profile) == (gates.FLOOR, Status.SKIP, "a")
    assert floor.message == "profile a sets no floor_tok_s"
    pair = gatekeeper.speculation_beats_baseline(session)
    assert pair.skipped and pair.name == gates.SPEC_VS_BASELINE and "no spec and baseline" in pair.message
    assert session.verdict_rows == []


@pytest.mark.parametrize(("recorded", "now"), [({}, "builtin"), ({"name": "builtin", "sha256": "x"}, None)])
def test_drift_refuses_a_baseline_of_another_dataset(recorded: dict, now: str | None,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A run on a dataset is not judged against a baseline of synthetic prompts, nor the other way round."""
    from specwatch.profiles.loading import parse_profiles
    from specwatch.run.evidence import Reference
    from specwatch.run.options import Config
    from specwatch.run.session import Session

    session = Session(Config(), progress=lambda m: None, _profiles=parse_profiles({"server": [{"name": "a"}]}))
    m = _measurement([], [{}])
    m.workload = Workload("single-stream", runs=1, dataset=now)
    session.measurements[("a", "single-stream")] = m
    extra = {"max_new_tokens": m.workload.max_new_tokens, "concurrency": 1}
    if recorded:
        extra["dataset"] = recorded
    monkeypatch.setattr(session, "reference_samples", lambda *a: Reference([80.0] * 5, "baseline b.json", [], extra))
    verdict = gatekeeper.drift(session, "a")
    assert verdict.skipped and "recorded with dataset=" in verdict.message and "not comparable" in verdict.message
