"""promtext: Prometheus text parsing, label escapes, histograms and counter deltas."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from specwatch.signals.promtext import ParseError, delta, parse_text, value

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "sglang"


def test_real_sglang_metrics():
    expo = parse_text((FIX / "real" / "metrics.txt").read_text())
    assert expo.types["sglang:cuda_graph_passes_total"] == "counter"
    assert expo.value("sglang:cuda_graph_passes_total", mode="decode_none") == 117.0
    assert expo.value("sglang:cuda_graph_passes_total", mode="prefill_none") == 4.0
    assert expo.value("sglang:realtime_tokens_total", mode="decode") == 117.0
    assert expo.value("sglang:generation_tokens_total") == 120.0
    assert math.isnan(expo.value("sglang:fwd_occupancy"))
    buckets = expo.histogram("sglang:time_to_first_token_seconds")
    assert buckets[-1] == (math.inf, 3.0)
    assert expo.value("sglang:time_to_first_token_seconds_count") == 3.0
    assert expo.family_type("sglang:time_to_first_token_seconds_bucket") == "histogram"


def test_speculative_metrics_fixture():
    expo = parse_text((FIX / "metrics-spec.txt").read_text())
    assert expo.value("sglang:spec_num_steps") == 3.0
    assert expo.value("sglang:cuda_graph_passes_total", mode="decode_cuda_graph") == 37.0
    assert expo.value("sglang:cuda_graph_passes_total", mode={"decode_cuda_graph", "decode_none"}) == 39.0
    assert expo.value("sglang:spec_verify_calls_total") == 39.0


def test_label_escapes_inf_nan_timestamp_and_sum():
    text = (
        "# HELP x_total a counter\n# TYPE x_total counter\n"
        'x_total{path="C:\\\\dir",q="say \\"hi\\"",nl="a\\nb"} 1.5 1700000000000\n'
        'x_total{path="other"} +Inf\n'
        "y NaN\n"
        'z{a="1",} -Inf\n'
    )
    expo = parse_text(text)
    (labels, v), = expo.find("x_total", q='say "hi"')
    assert labels == {"path": "C:\\dir", "q": 'say "hi"', "nl": "a\nb"}
    assert v == 1.5
    assert expo.value("x_total", path="other") == math.inf
    assert math.isnan(value(expo, "y"))
    assert expo.value("z", a="1") == -math.inf
    assert math.isinf(expo.value("x_total"))  # sum over matches


def test_missing_metric_is_an_error_not_zero():
    expo = parse_text("sglang:gen_throughput 1\n")
    with pytest.raises(KeyError, match="close names: sglang:gen_throughput"):
        expo.value("sglang:gen_throughput_x")
    assert expo.value("nope", default=0.0) == 0.0


def test_bad_text_raises_with_line_number():
    with pytest.raises(ParseError, match="line 2"):
        parse_text('ok 1\nbad{a="x} 1\n')


def test_delta_counters_histograms_and_reset():
    before = parse_text(
        "# TYPE c_total counter\nc_total{m=\"a\"} 10\nc_total{m=\"b\"} 5\n"
        "# TYPE g gauge\ng 3\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 4\nh_sum 2.5\nh_count 4\n"
    )
    after = parse_text(
        "# TYPE c_total counter\nc_total{m=\"a\"} 17\nc_total{m=\"b\"} 2\nc_total{m=\"new\"} 4\n"
        "# TYPE g gauge\ng 9\n# TYPE h histogram\nh_bucket{le=\"1\"} 3\nh_bucket{le=\"+Inf\"} 7\nh_sum 4\nh_count 7\n"
    )
    d = delta(before, after)
    assert d.value("c_total", m="a") == 7
    assert d.value("c_total", m="new") == 4
    assert d.value("c_total", m="b") == 2  # went down: restarted from 0
    assert ("c_total", frozenset({("m", "b")})) in d.resets
    assert not d.has("g")
    assert d.histogram("h") == [(1.0, 1.0), (math.inf, 3.0)]
    assert d.value("h_count") == 3
    assert d.value("h_sum") == 1.5
    assert delta(before, after, include_gauges=True).value("g") == 9
