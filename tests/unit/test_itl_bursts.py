"""A stream that delivers tokens in bursts has a bimodal ITL: its median is no per-token latency.

A real SGLang 0.5.23 server behind a busy client read a median ``itl_ms`` of 0.006 ms against 3-12 ms
per token in its own Decode lines (several streamed chunks arrive in one read), and ``compare``
called the -99.8% an improvement (issue 24). The single-stream key is now ``mean_itl_ms``, the mean ITL
(bench_serving's name: decode time over tokens, whatever the grouping), a bimodal distribution is said to be
one, and its percentiles that fall among the burst gaps are left out of the results.
"""

from __future__ import annotations

import asyncio
import math

import pytest

from specwatch.judge.levels import BIMODAL_SHARE, RequestTiming, burst_share, itl_note, mean_itl, serving_metrics
from specwatch.load import measure as measure_mod
from specwatch.load.client import Generation
from specwatch.load.workload import Workload

#: one token per chunk, three of every four read a few microseconds after the one before: 4 steps of 10 ms
BURSTY = [0.040, 0.000006, 0.000005, 0.000007] * 12
SMOOTH = [0.010, 0.011, 0.009, 0.010] * 12


def test_burst_share_and_the_note_tell_a_bursty_stream_from_a_smooth_one() -> None:
    assert burst_share(BURSTY) == pytest.approx(0.75) and burst_share(SMOOTH) == 0.0
    note = itl_note(BURSTY)
    assert note is not None and "bimodal: 75% of the gaps are under 1 ms" in note, note
    assert "(median ITL left out)" in note and "the rest 40-40 ms" in note
    assert itl_note(SMOOTH) is None and itl_note([]) is None
    assert mean_itl(BURSTY) == pytest.approx(0.01, rel=1e-3)  # 10 ms per token, as the server decoded
    assert math.isnan(mean_itl([]))


def test_percentiles_among_the_burst_gaps_are_left_out_the_others_kept() -> None:
    reqs = [RequestTiming(ttft_s=0.05, e2e_s=0.53, output_tokens=49, itl_s=BURSTY)]
    m = serving_metrics(reqs, duration_s=0.6)
    assert burst_share(BURSTY) >= BIMODAL_SHARE
    assert math.isnan(m["median_itl_ms"]), m  # 0.006 ms would have been reported
    assert m["p90_itl_ms"] == pytest.approx(40.0) and m["p99_itl_ms"] == pytest.approx(40.0)
    assert m["median_tpot_ms"] == pytest.approx(10.0)  # TPOT does not depend on the bursts
    smooth = serving_metrics([RequestTiming(0.05, 0.53, 49, SMOOTH)], duration_s=0.6)
    assert smooth["median_itl_ms"] == pytest.approx(10.0)


class _Client:
    def __init__(self, gaps: list[float]) -> None:
        self.gaps = gaps

    async def generate(self, text: str, **_: object) -> Generation:
        n = len(self.gaps) + 1
        return Generation(list(range(n)), "", {"completion_tokens": n}, e2e_s=0.05 + sum(self.gaps), ttft_s=0.05,
                          chunk_gaps_s=list(self.gaps), chunk_tokens=[1] * len(self.gaps))


@pytest.mark.parametrize(("gaps", "bursty"), [(BURSTY, True), (SMOOTH, False)])
def test_a_run_reports_the_mean_itl_and_says_when_the_stream_came_in_bursts(gaps: list[float], bursty: bool) -> None:
    wl = Workload("w", runs=1, warmup=0, max_new_tokens=len(gaps) + 1)
    run = asyncio.run(measure_mod._one_run(_Client(gaps), wl.requests()[: wl.run_size], wl))
    assert run.mean_itl_ms == pytest.approx(1000 * sum(gaps) / len(gaps))  # ~10 ms either way, not 0.006 ms
    assert bool(run.itl_note) is bursty and ("bimodal" in run.itl_note) is bursty
    assert math.isnan(run.serving["median_itl_ms"]) is bursty
