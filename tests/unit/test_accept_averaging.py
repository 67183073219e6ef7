"""Accept length under each averaging (judge/averaging.py) and the accept-length check that names them: every
source says which averaging it uses; when acceptance varies by request the pooled value (SGLang's Decode lines,
/server_info, /metrics, the requests' counts summed) and the mean over requests (of meta_info.spec_accept_length,
SGLang's send_one.py) part, by averaging only, and a claimed number that is one of them is reconciled as such.

Constructed varying data, and real SGLang 0.5.16 EAGLE-3 at the 8B shape on an H200 (harness run
2026-12-05-sglang-8b-spec-costs-x1, sgl8b-draft-alive: the always-right draft, 12 requests of 256 tokens with 128
verify cycles and 128 correct drafts each, Decode lines all 2.00; the dead draft, 3 requests of 48 tokens with 47
cycles and none correct), where nothing varies and every averaging reads the same."""

from __future__ import annotations

from pathlib import Path

import pytest

from specwatch.checks import accept_length
from specwatch.judge import averaging, speculative
from specwatch.signals.logscan import DecodeRecord, LogWindow

RUN = Path(__file__).resolve().parents[2] / "docs" / "validation" / "data" / "2026-12-05-sglang-8b-spec-costs-x1"


def _meta(ct: int, v: int, c: int) -> dict:
    return {"completion_tokens": ct, "spec_verify_ct": v, "spec_num_correct_drafts": c, "spec_accept_length": ct / v}


#: two requests of 48 tokens: one whose every first guess is right (24 cycles: 1 + 2 x 24 = 49, one trimmed), one
#: whose guesses never are (47 cycles)
VARYING = [_meta(48, 24, 24), _meta(48, 47, 0)]


def _line(accept: float, running: int) -> DecodeRecord:
    return DecodeRecord(ts="2026-12-05 10:00:00", ranks={}, running=running, graph_label="cuda graph", graph=True,
                        gen_tput=300.0, queue=0, accept_len=accept)


def _log(server: str) -> list[DecodeRecord]:
    (path,) = sorted(RUN.glob(f"sgl8b-draft-alive/servers/*/{server}/server.log"))
    return LogWindow(path, start=0).decode_records()


def test_every_source_names_its_averaging() -> None:
    assert set(averaging.AVERAGING) == set(speculative.SOURCES)  # one averaging for each source, none unnamed
    pooled, per_request = averaging.Averaging.POOLED, averaging.Averaging.PER_REQUEST
    assert averaging.averaging_of("Decode lines (154 windows, each its own)") is pooled
    assert averaging.averaging_of("sglang:spec_accept_length gauge (the last log interval)") is pooled
    assert averaging.averaging_of("meta_info of 12 requests (exact)") is pooled  # summed: 1 + Σc / Σv
    assert averaging.averaging_of("meta_info spec_accept_length") is per_request
    assert averaging.averaging_of("/metrics delta") is pooled and averaging.averaging_of("a profiler") is None


def test_varying_requests_part_by_averaging_only() -> None:
    """2.00 and 1.00: pooled 1 + 24/71 = 1.338 (Σ completion_tokens / Σ spec_verify_ct 96/71 = 1.352, the prefill
    token counted), the mean over requests 1.500 (of SGLang's per-request ratio 48/24 and 48/47: 1.511)."""
    means = averaging.of_requests(VARYING)
    assert means is not None and means.varies and (means.lowest, means.highest, means.requests) == (1.0, 2.0, 2)
    got = {m.name: m.value for m in means.means}
    assert got == pytest.approx({
        "1 + Σ spec_num_correct_drafts / Σ spec_verify_ct": 1 + 24 / 71,
        "Σ completion_tokens / Σ spec_verify_ct": 96 / 71,
        "mean of 1 + spec_num_correct_drafts / spec_verify_ct": 1.5,
        "mean of meta_info.spec_accept_length (completion_tokens / spec_verify_ct)": (2 + 48 / 47) / 2})
    assert averaging.explain(1.50, means.means).averaging is averaging.Averaging.PER_REQUEST
    assert averaging.explain(1.34, means.means).name == "1 + Σ spec_num_correct_drafts / Σ spec_verify_ct"
    assert averaging.explain(1.42, means.means) is None  # no averaging of these counts: apart by more
    lines = means.lines()
    assert lines[-1].startswith("per request 1.00 to 2.00 over 2 requests: the mean over requests is +0.1620 from "
                                "the pooled value, by averaging only")


def test_decode_lines_are_pooled_when_weighted_by_their_batch_and_a_mean_over_windows_when_not() -> None:
    weighted, unweighted = averaging.of_windows([(2.0, 1), (1.2, 4)])
    assert weighted.averaging is averaging.Averaging.POOLED and weighted.value == pytest.approx(1.36)
    assert unweighted.averaging is averaging.Averaging.PER_WINDOW and unweighted.value == pytest.approx(1.6)
    assert averaging.explain(1.6, [weighted, unweighted]) is unweighted
    assert averaging.of_windows([]) == []


def test_the_check_reconciles_a_claim_that_is_a_mean_over_requests_and_fails_one_that_is_none() -> None:
    """The live sources read 1.33 to 1.34 pooled; a report of 1.50 is the mean over requests (reconciled, named);
    1.70 is no averaging of these counts (apart); 0.92 is out of bounds whatever the averaging."""
    windows = [_line(2.0, 1), _line(1.0, 1), _line(1.0, 1)]  # their verify rows: 1.333, as the requests' cycles
    ests, problems, notes = accept_length.estimates(num_steps=2, decode_records=windows, metas=VARYING)
    means = accept_length.averages(windows, VARYING)
    healthy = accept_length.evaluate("spec", 2, ests, problems, notes, means=means)
    assert healthy.passed, healthy.message
    assert "pooled over verify cycles (≤ num_steps+1 = 3" in healthy.reason
    assert healthy.reason.endswith("; per request 1.00 to 2.00, their mean 1.500: apart from the pooled value by "
                                   "averaging only")
    assert "  averaging: every source above is pooled over verify cycles (Σ committed / Σ verify rows)" in (
        healthy.message)
    assert "  averaging: mean over log windows: Decode lines (3), unweighted 1.3333" in healthy.message
    claim = accept_length.evaluate("spec", 2, ests, problems, notes, claimed=1.5, num_draft_tokens=3, means=means)
    assert claim.passed and ("the claimed value 1.5 is the mean over requests, mean of 1 + spec_num_correct_drafts /"
                             " spec_verify_ct 1.5000: apart from the pooled sources by averaging only") in claim.reason
    apart = accept_length.evaluate("spec", 2, ests, problems, notes, claimed=1.7, means=means)
    assert apart.failed and "claimed value 1.7 vs " in apart.reason
    seeds = accept_length.evaluate("spec", 2, ests, problems, notes, claimed=0.92, num_draft_tokens=3, means=means)
    assert seeds.failed and "looks like extra tokens per cycle; canonical value 1.92" in seeds.reason


def test_the_real_always_right_draft_reads_the_same_under_every_averaging() -> None:
    windows = [(r.accept_len, r.running) for r in _log("sgl8b-eagle3-1") if r.accept_len is not None]
    assert len(windows) > 150 and {a for a, _ in windows} == {2.0}
    metas = [_meta(256, 128, 128)] * 12  # 1536 of 3072 proposed drafts accepted, over 12 requests
    means = averaging.of_requests(metas)
    assert means is not None and not means.varies
    values = {m.name: m.value for m in (*means.means, *averaging.of_windows(windows))}
    assert values.pop("mean of meta_info.spec_accept_length (completion_tokens / spec_verify_ct)") == 2.0
    assert set(values.values()) == {2.0}, values
    dead = averaging.of_requests([_meta(48, 47, 0)] * 3)
    dead_lines = [(r.accept_len, r.running) for r in _log("sgl8b-eagle3-dead-draft-1") if r.accept_len is not None]
    assert dead is not None and not dead.varies and {a for a, _ in dead_lines} == {1.0}
    assert {m.name: round(m.value, 4) for m in dead.means}["Σ completion_tokens / Σ spec_verify_ct"] == 1.0213
    verdict = accept_length.evaluate("sgl8b-eagle3", 2, *accept_length.estimates(
        num_steps=2, decode_records=_log("sgl8b-eagle3-1"), metas=metas), means=accept_length.averages(
        _log("sgl8b-eagle3-1"), metas))
    assert verdict.passed and "per request" not in verdict.reason, verdict.reason
