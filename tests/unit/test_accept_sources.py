"""Each accept-length source read by its own definition (issue 24 item 7), and every verdict names the ones it
used: the Decode line covers its window, the gauge the last log interval, /server_info is cumulative, and
meta_info.spec_accept_length is completion_tokens / spec_verify_ct per request."""

from __future__ import annotations

import pytest

from specwatch.checks import accept_length
from specwatch.judge import speculative
from specwatch.signals import promtext
from specwatch.signals.logscan import DecodeRecord


def _line(accept: float, running: int = 1) -> DecodeRecord:
    return DecodeRecord(ts="2026-12-01 10:00:00", ranks={}, running=running, graph_label="cpu graph", graph=False,
                        gen_tput=200.0, queue=0, accept_len=accept)


def _meta(ct: int, v: int, c: int | None = None, ratio: float | None = None) -> dict:
    meta = {"completion_tokens": ct, "spec_verify_ct": v, "spec_accept_length": ct / v if ratio is None else ratio}
    if c is not None:
        meta["spec_num_correct_drafts"] = c
    return meta


def _gauge(value: float) -> promtext.Exposition:
    return promtext.parse_text(f'sglang:spec_accept_length{{model_name="m"}} {value}\n')


def test_the_meta_ratio_is_read_as_completion_tokens_over_verify_count() -> None:
    # 64 tokens in 63 cycles: no draft accepted, yet SGLang's field reads 1.016
    assert speculative.meta_ratio_problem(_meta(64, 63)) is None
    est = speculative.from_meta_ratio(64 / 63, 63, num_steps=2)
    assert est.low == pytest.approx(1.0) and est.source == "meta_info spec_accept_length"
    wrong = speculative.meta_ratio_problem(_meta(64, 32, ratio=3.0))  # a canonical-looking value in its place
    assert wrong is not None and "completion_tokens/spec_verify_ct = 64/32 = 2.0000" in wrong
    assert speculative.meta_ratio_problem({"spec_verify_ct": 0, "spec_accept_length": 0.0}) is None


def test_the_gauge_is_the_last_windows_value_and_is_checked_against_the_last_decode_line() -> None:
    windows = [_line(2.40), _line(1.80)]
    metas = [_meta(17, 8, 9)]  # exact: 1 + 9/8 = 2.125
    ests, problems, notes = accept_length.estimates(num_steps=2, decode_records=windows, metas=metas,
                                                    metrics_after=_gauge(1.8))
    assert not problems and any("equals the last Decode line's 1.80" in n for n in notes)
    assert [e.source.split(" (")[0] for e in ests] == ["Decode lines", "meta_info of 1 requests"]
    _, problems, _ = accept_length.estimates(num_steps=2, decode_records=windows, metrics_after=_gauge(2.4))
    assert problems and "is not the last Decode line's accept len 1.80" in problems[0]


def test_without_decode_lines_the_gauge_stands_for_the_last_interval_and_zero_is_no_reading() -> None:
    ests, _, _ = accept_length.estimates(num_steps=2, metrics_after=_gauge(2.1))
    assert [e.source for e in ests] == ["sglang:spec_accept_length gauge (the last log interval)"]
    assert ests[0].note == "the last Decode-line window only"
    ests, _, notes = accept_length.estimates(num_steps=2, metrics_after=_gauge(0.0))
    assert not ests and "no Decode-line window yet" in notes[0]


def test_requests_without_correct_draft_counts_are_bounded_from_their_ratios() -> None:
    metas = [_meta(33, 16), _meta(33, 20)]
    ests, problems, _ = accept_length.estimates(num_steps=2, metas=metas)
    (est,) = ests
    assert not problems and est.source == "meta_info completion_tokens/spec_verify_ct of 2 requests (bounded)"
    assert est.low == pytest.approx((66 - 2) / 36) and est.high == pytest.approx((66 - 2 + 4) / 36)
    _, problems, _ = accept_length.estimates(num_steps=2, metas=[_meta(33, 16, 16, ratio=2.0)])
    assert any("is not completion_tokens/spec_verify_ct" in p for p in problems)


def test_the_verdict_names_the_sources_it_used() -> None:
    ests, problems, notes = accept_length.estimates(num_steps=2, decode_records=[_line(2.0)],
                                                    metas=[_meta(21, 10, 10)])
    verdict = accept_length.evaluate("spec", 2, ests, problems, notes)
    assert verdict.passed
    assert verdict.reason == ("2 sources agree on 2.000 pooled over verify cycles (≤ num_steps+1 = 3; Decode lines; "
                              "meta_info of 1 requests)")
