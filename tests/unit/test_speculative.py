"""speculative: canonical accept length, conversions, bounds, histogram identities, reconciliation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specwatch.judge.speculative import (
    CannotDeriveError,
    bounds_problems,
    check_bounds,
    check_histogram,
    from_accept_rate,
    from_completion_ratio,
    from_extra_per_cycle,
    from_histogram,
    from_metrics_delta,
    from_request_meta,
    from_requests,
    from_window,
    from_windows,
    measured_accept_length,
    reconcile,
    to_accept_rate,
    to_extra_per_cycle,
    window_from_cumulative,
)
from specwatch.signals.promtext import parse_text

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "sglang"


def test_case_study_value_092_is_extra_tokens_per_cycle():
    with pytest.raises(ValueError, match=r"^0.92 < 1: looks like extra tokens per cycle; canonical value 1.92"):
        check_bounds(0.92, num_steps=2)
    assert from_extra_per_cycle(0.92) == pytest.approx(1.92)
    msg = bounds_problems(0.92, num_steps=3, num_draft_tokens=4)[0]
    assert "accept rate" in msg
    assert "3.76" in msg


def test_above_chain_maximum_says_what_it_probably_was():
    (msg,) = bounds_problems(5.0, num_steps=3)
    assert "5 > num_steps+1 = 4" in msg
    assert "completion_tokens" in msg
    (msg,) = bounds_problems(40.0, num_steps=3)
    assert "per-batch sum" in msg
    assert bounds_problems(4.0, num_steps=3) == []
    assert bounds_problems(1.0, num_steps=3) == []
    check_bounds(2.7, num_steps=3)


def test_accept_rate_formula_matches_sglang_example():
    # facts 2.5: topk=4, num_draft_tokens=16: accept rate = (3.41-1)/15
    assert from_accept_rate((3.41 - 1) / 15, 16) == pytest.approx(3.41)
    assert to_accept_rate(3.41, 16) == pytest.approx(0.16066, abs=1e-4)


@given(st.floats(min_value=0.0, max_value=64.0, allow_nan=False))
def test_extra_round_trip(x):
    assert to_extra_per_cycle(from_extra_per_cycle(x)) == pytest.approx(x)


@given(st.floats(min_value=0.0, max_value=1.0), st.integers(min_value=2, max_value=64))
def test_rate_round_trip_and_bounds(rate, ndt):
    c = from_accept_rate(rate, ndt)
    assert 1.0 <= c <= ndt + 1e-9
    assert to_accept_rate(c, ndt) == pytest.approx(rate, abs=1e-9)


@given(st.floats(min_value=0.0, max_value=1.0), st.floats(min_value=0.0, max_value=1.0),
       st.integers(min_value=2, max_value=64))
def test_rate_conversion_is_monotonic(a, b, ndt):
    lo, hi = sorted((a, b))
    assert from_accept_rate(lo, ndt) <= from_accept_rate(hi, ndt)


@st.composite
def requests(draw):
    """A simulated request: per-cycle raw accept lens and the max_new_tokens trim."""
    num_steps = draw(st.integers(min_value=1, max_value=7))
    lens = draw(st.lists(st.integers(min_value=1, max_value=num_steps + 1), min_size=1, max_size=60))
    max_new = draw(st.integers(min_value=2, max_value=1 + sum(lens)))
    committed, used = 1, []
    for a in lens:
        if committed >= max_new:
            break
        used.append(a)
        committed += a
    ct = min(committed, max_new)
    return num_steps, used, ct


@given(requests())
def test_completion_ratio_interval_contains_true_canonical(req):
    num_steps, used, ct = req
    v = len(used)
    truth = sum(used) / v  # canonical: raw committed per cycle, bonus included
    est = from_completion_ratio(ct, v, num_steps)
    assert est.low - 1e-9 <= truth <= est.high + 1e-9
    assert 1.0 <= est.low <= est.value <= est.high <= num_steps + 1
    # SGLang's own ct/v is the point value plus exactly 1/v
    assert ct / v == pytest.approx(est.value + 1 / v) or est.value == est.low
    hist = [0] * (num_steps + 1)
    for a in used:
        hist[a - 1] += 1
    assert check_histogram(hist, v, sum(a - 1 for a in used), num_steps) == []
    assert from_histogram(hist).value == pytest.approx(truth)
    meta = {"spec_verify_ct": v, "spec_num_correct_drafts": sum(a - 1 for a in used), "completion_tokens": ct}
    assert from_request_meta(meta, num_steps).value == pytest.approx(truth)


def test_histogram_identity_failures_are_named():
    probs = check_histogram([1, 2, 0, 1], verify_ct=5, num_correct_drafts=9, num_steps=2)
    assert any("sum(histogram)=4 != spec_verify_ct=5" in p for p in probs)
    assert any("sum(k*h[k])=5 != spec_num_correct_drafts=9" in p for p in probs)
    assert any("more than num_steps=2" in p for p in probs)


def test_generate_fixture_identities_and_relations():
    for resp in json.loads((FIX / "generate-spec.json").read_text()):
        m = resp["meta_info"]
        assert check_histogram(m["spec_correct_drafts_histogram"], m["spec_verify_ct"],
                               m["spec_num_correct_drafts"], num_steps=3) == []
        exact = from_request_meta(m, num_steps=3)
        bounded = from_completion_ratio(m["completion_tokens"], m["spec_verify_ct"], num_steps=3)
        assert bounded.low - 1e-9 <= exact.value <= bounded.high + 1e-9
        assert m["spec_accept_length"] == pytest.approx(m["completion_tokens"] / m["spec_verify_ct"])
        assert len(resp["output_ids"]) == m["completion_tokens"]


def test_cumulative_server_info_needs_counts_or_flush():
    with pytest.raises(CannotDeriveError, match="cumulative"):
        window_from_cumulative(2.0, 2.5)
    with pytest.raises(CannotDeriveError, match="absent"):
        window_from_cumulative(None, None)
    # 100 rows at 2.0, then 100 more rows at 3.0 -> lifetime 2.5
    assert window_from_cumulative(2.0, 2.5, 100, 200).value == pytest.approx(3.0)
    assert window_from_cumulative(2.0, 2.5, flushed_before=True).value == 2.5
    with pytest.raises(CannotDeriveError, match="reset"):
        window_from_cumulative(2.0, 2.5, 200, 100)


def test_reconcile_fixture_sources_agree_and_a_profiler_value_does_not():
    info = json.loads((FIX / "server_info-spec.json").read_text())
    expo = parse_text((FIX / "metrics-spec.txt").read_text())
    steps = info["speculative_num_steps"]
    gauge = from_window(expo.value("sglang:spec_accept_length"), rounded=False, source="gauge")
    rate = expo.value("sglang:spec_accept_rate")
    from_rate = from_window(from_accept_rate(rate, info["speculative_num_draft_tokens"]), rounded=False,
                            source="gauge rate")
    counters = from_metrics_delta(expo.value("sglang:generation_tokens_total"),
                                  expo.value("sglang:spec_verify_calls_total"),
                                  expo.value("sglang:num_requests_total"), steps)
    flushed = window_from_cumulative(None, info["internal_states"][0]["avg_spec_accept_length"],
                                     flushed_before=True)
    rec = reconcile([gauge, from_rate, counters, flushed], num_steps=steps)
    assert rec.agree, rec.message()
    bad = reconcile([gauge, from_window(0.92, source="profiler")], num_steps=steps)
    assert not bad.agree
    assert "profiler" in bad.message()
    assert "looks like extra tokens per cycle" in bad.message()
    fixed = reconcile([from_window(2.72, source="log"),
                       from_window(from_extra_per_cycle(1.72), rounded=True, source="profiler")], num_steps=steps)
    assert fixed.agree


def test_no_verify_means_no_accept_length():
    with pytest.raises(CannotDeriveError, match="never reached a verify"):
        from_completion_ratio(1, 0, 3)


# -- the accept length of a measurement: one definition ------------------------------------------


def test_windows_are_weighted_by_batch_size_not_taken_as_a_median():
    """SGLang's Σ(correct + bs) / Σ bs over all windows: a full window outweighs a lone request's."""
    est = from_windows([(3.0, 48), (1.5, 1), (1.6, 1)])
    assert est.value == pytest.approx((3.0 * 48 + 1.5 + 1.6) / 50)  # a median would say 1.6
    assert (est.low, est.high) == pytest.approx((est.value - 0.005, est.value + 0.005))  # printed with 2 decimals
    assert est.source == "Decode lines (3 windows)" and "windows 1.50..3.00" in est.note
    assert from_windows([(2.0, 0)]).value == 2.0  # an idle window still counts once
    assert from_windows([]) is None


def test_requests_summed_are_exact_and_skip_what_cannot_count():
    metas = [{"spec_verify_ct": 10, "spec_num_correct_drafts": 15},
             {"spec_verify_ct": 30, "spec_num_correct_drafts": 5},
             {"spec_verify_ct": 0, "spec_num_correct_drafts": 0}, {"spec_verify_ct": 4}, {"completion_tokens": 9}]
    est = from_requests(metas)
    assert est.value == pytest.approx(1 + 20 / 40)  # not the mean of 2.5 and 1.17 per request
    assert est.low == est.high == est.value and est.source == "meta_info of 5 requests"
    assert from_requests([{"spec_verify_ct": 4}]) is None and from_requests([]) is None


def test_a_measurement_prefers_the_servers_windows_then_the_requests():
    metas = [{"spec_verify_ct": 10, "spec_num_correct_drafts": 10}]
    assert measured_accept_length([(2.5, 2)], metas).value == 2.5
    assert measured_accept_length([], metas).value == 2.0
    assert measured_accept_length() is None
