"""A run without a measurable decode window is no decode_tok_s sample: it is left out, and that is said.

Real SGLang 0.5.23 on CPU (STANDALONE): a table read `sgl-plain/single-stream/decode_tok_s 266.9 ± 179051.2`.
One run's 64 tokens arrived in one burst (e2e 0.199 s), its decode time near zero, so its sample read 179318 tok/s.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from specwatch.errors import UsageError
from specwatch.judge.levels import FEW_INTERVALS, DecodeWindow, mean_itl, typical_interval, unmeasured_decode
from specwatch.load.client import Generation
from specwatch.load.measure import Measurement, RunSample
from specwatch.load.workload import Workload
from specwatch.report.table import ReportRow, summary_table
from specwatch.run.summary import note_lines, results_of
from specwatch.store.baseline import BaselineStore
from specwatch.store.result import Result, ResultSet

TOKENS, RATE = 64, 266.9  # the real plain server's tokens per request and median decode tok/s


def _steady(ttft: float = 0.02) -> Generation:
    """A request that streamed a token per step at the plain server's rate."""
    gap = 1 / RATE
    return Generation(list(range(TOKENS)), "", {"completion_tokens": TOKENS}, e2e_s=ttft + gap * (TOKENS - 1),
                      ttft_s=ttft, chunk_gaps_s=[gap] * (TOKENS - 1), chunk_tokens=[1] * (TOKENS - 1),
                      first_chunk_tokens=1)


def _burst(chunks: int = 1) -> Generation:
    """The real run: every token read at the end, 0.35 ms after the first (63 / 0.000351 s = 179318 tok/s)."""
    window = (TOKENS - 1) / 179318.0
    sizes = [TOKENS - 1] if chunks == 1 else [1] * (TOKENS - 1)
    return Generation(list(range(TOKENS)), "", {"completion_tokens": TOKENS}, e2e_s=0.199, ttft_s=0.199 - window,
                      chunk_gaps_s=[window / len(sizes)] * len(sizes), chunk_tokens=sizes, first_chunk_tokens=1)


def _measurement(gens: list[Generation], boots: tuple[int, ...] = ()) -> Measurement:
    runs = [RunSample(output_tok_s=g.output_tok_s, decode_tok_s=g.decode_tok_s, ttft_ms=1000 * g.ttft_s,
                      mean_itl_ms=4.0, e2e_s=g.e2e_s, completion_tokens=TOKENS, client_overhead=0.001,
                      generations=[g]) for g in gens]
    return Measurement(profile="sgl-plain", workload=Workload("single-stream", runs=len(runs)), runs=runs,
                       metrics_delta=None, metrics_after=None, server_info_before={}, server_info_after={},
                       log_records=[], wall_s=1.0, boots=boots)


def test_the_rule_reads_each_requests_own_data() -> None:
    typical = 1 / RATE
    assert "arrived in one read" in unmeasured_decode(DecodeWindow(0.000351, 63, 1), typical)
    assert "arrived in the first" in unmeasured_decode(DecodeWindow(0.0, 63, 0), None)  # everything in one chunk
    burst = unmeasured_decode(DecodeWindow(0.000351, 63, 63), typical)  # 63 chunks, read microseconds apart
    assert f"under {FEW_INTERVALS} of the measurement's typical per-token interval (3.75 ms)" in burst
    assert unmeasured_decode(DecodeWindow(63 / RATE, 63, 63), typical) == ""  # a decode of 63 steps
    assert unmeasured_decode(DecodeWindow(0.5 * 63 / RATE, 63, 20), typical) == ""  # twice as fast: still decoding
    assert unmeasured_decode(DecodeWindow(0.001, 1, 1), typical) == ""  # one token after the first: one step
    assert typical_interval([DecodeWindow(63 / RATE, 63, 63), DecodeWindow(0.0003, 63, 1)]) == pytest.approx(typical)


@pytest.mark.parametrize("chunks", [1, TOKENS - 1])
def test_the_burst_run_is_left_out_of_decode_tok_s_and_said(chunks: int) -> None:
    m = _measurement([_steady(), _steady(0.021), _burst(chunks), _steady(0.022), _steady(0.019)])
    assert max(r.decode_tok_s for r in m.runs) > 100_000  # what the real table pooled
    assert list(m.decode_dropped()) == [2]
    xs = m.samples("decode_tok_s")
    assert len(xs) == 4 and max(xs) == pytest.approx(RATE)
    assert len(m.samples("output_tok_s")) == 5  # the run still timed its output: only its decode rate is not one
    note = m.dropped_note("decode_tok_s")
    assert note.startswith("1 of 5 run(s) of sgl-plain single-stream left out of decode_tok_s (run 3): run 3: its "
                           "63 tokens after the first arrived"), note
    every = m.dropped_note()  # the session's note names every key the run is no sample of
    assert every.startswith("1 of 5 run(s) of sgl-plain single-stream left out of decode_tok_s, mean_itl_ms (run 3)")
    rs = results_of({("sgl-plain", "single-stream"): m}, {"machine_class": "x"}, None)
    assert rs.get("sgl-plain/single-stream/decode_tok_s").extra["dropped_runs"] == note
    assert "dropped_runs" not in rs.get("sgl-plain/single-stream/output_tok_s").extra
    assert f"note: {every}" in note_lines([], {("sgl-plain", "single-stream"): m}, [])
    row = ReportRow(key="sgl-plain/single-stream/decode_tok_s", n=len(xs), median=RATE, dropped=note)
    assert f"  sgl-plain/single-stream/decode_tok_s: {note}" in summary_table([row]).splitlines()


def test_runs_are_left_out_within_their_boot() -> None:
    m = _measurement([_steady(), _burst(), _steady(), _steady(), _steady()], boots=(3, 2))
    assert [len(b) for b in m.by_boot("decode_tok_s")] == [2, 2]
    assert [len(b) for b in m.by_boot("output_tok_s")] == [3, 2]
    steady = _measurement([_steady() for _ in range(4)])
    assert not steady.decode_dropped() and steady.dropped_note() == "" and len(steady.samples("decode_tok_s")) == 4


def _burst_run(g: Generation) -> RunSample:
    """A run as :mod:`specwatch.load.measure` makes it from one request, its mean ITL from the request's own gaps."""
    itls = g.itl_s
    return RunSample(output_tok_s=g.output_tok_s, decode_tok_s=g.decode_tok_s, ttft_ms=1000 * g.ttft_s,
                     mean_itl_ms=1000 * mean_itl(itls), e2e_s=g.e2e_s, completion_tokens=TOKENS,
                     client_overhead=0.001, generations=[g])


def test_a_burst_run_is_no_sample_of_any_decode_timed_key_and_the_session_records() -> None:
    """CI red on a fresh clone (issue 38): a run whose 47 tokens after the first arrived in the first chunk had a
    mean ITL of 0.0, which reached the recording and refused the whole baseline with a traceback at session
    finish. One rule now: such a run is left out of every key that times the decode window."""
    whole = Generation(list(range(TOKENS)), "", {"completion_tokens": TOKENS}, e2e_s=0.2, ttft_s=0.2 - 8.66e-5,
                       chunk_gaps_s=[], chunk_tokens=[], first_chunk_tokens=TOKENS)  # all in the first chunk
    assert whole.itl_s == [] or max(whole.itl_s) == 0.0
    runs = [_burst_run(g) for g in (whole, _steady(), _steady(0.021), whole, _steady(0.022))]
    m = Measurement(profile="plain", workload=Workload("single-stream", runs=5), runs=runs, metrics_delta=None,
                    metrics_after=None, server_info_before={}, server_info_after={}, log_records=[], wall_s=1.0)
    assert list(m.decode_dropped()) == [0, 3]
    for key in ("decode_tok_s", "mean_itl_ms"):
        xs = m.samples(key)
        assert len(xs) == 3 and all(x > 0 and math.isfinite(x) for x in xs), (key, xs)
    assert len(m.samples("ttft_ms")) == 5 and len(m.samples("output_tok_s")) == 5  # timed whatever the bursts
    rs = results_of({("plain", "single-stream"): m}, {"machine_class": "c"}, None)
    assert rs.get("plain/single-stream/mean_itl_ms").extra["dropped_runs"].startswith(
        "2 of 5 run(s) of plain single-stream left out of mean_itl_ms (run 1, 4)")
    assert "dropped_runs" not in rs.get("plain/single-stream/ttft_ms").extra


def test_a_level_run_with_a_burst_is_left_out_of_itl_and_tpot_percentiles() -> None:
    gens = [_steady(), _burst(), _steady(0.021)]
    runs = [RunSample(output_tok_s=g.output_tok_s, decode_tok_s=g.decode_tok_s, ttft_ms=1000 * g.ttft_s,
                      mean_itl_ms=4.0, e2e_s=g.e2e_s, completion_tokens=TOKENS, client_overhead=0.001,
                      generations=[g], serving={"p99_tpot_ms": 3.7, "median_itl_ms": 3.7, "output_throughput": 200.0})
            for g in gens]
    m = Measurement(profile="spec", workload=Workload("concurrency-1", runs=3, level=True), runs=runs,
                    metrics_delta=None, metrics_after=None, server_info_before={}, server_info_after={},
                    log_records=[], wall_s=1.0)
    assert len(m.samples("p99_tpot_ms")) == 2 and len(m.samples("median_itl_ms")) == 2
    assert len(m.samples("output_throughput")) == 3
    note = m.dropped_note()
    assert "left out of median_itl_ms, p90_itl_ms, p99_itl_ms, median_tpot_ms, p90_tpot_ms, p99_tpot_ms (run 2)" in note


def test_recording_a_session_with_a_burst_run_records_every_other_key_and_says_which_it_left_out(
        tmp_path: Path) -> None:
    """Nothing lost: a key whose samples no baseline can hold (here a 0.0 mean ITL from a results file written
    before the rule) is left out with one line, its earlier sessions kept, and every other key recorded."""
    store = BaselineStore(tmp_path)
    good = {"decode_tok_s": [260.0, 262.0], "ttft_ms": [20.0, 21.0], "mean_itl_ms": [3.8, 3.9]}
    store.record_all(ResultSet(results=[Result.make("plain", "single-stream", k, unit="u", higher_is_better=True,
                                                    samples=v) for k, v in good.items()],
                               machine={"machine_class": "c"}))
    burst = {"decode_tok_s": [261.0], "ttft_ms": [20.5, 20.7], "mean_itl_ms": [0.0, 3.85]}
    said: list[str] = []
    store.record_all(ResultSet(results=[Result.make("plain", "single-stream", k, unit="u", higher_is_better=True,
                                                    samples=v) for k, v in burst.items()],
                               machine={"machine_class": "c"}), said=said)
    base = store.load("c", "plain")
    assert base is not None
    assert len(base.get("single-stream", "decode_tok_s").sessions) == 2
    assert len(base.get("single-stream", "ttft_ms").sessions) == 2
    assert len(base.get("single-stream", "mean_itl_ms").sessions) == 1  # kept as it was
    (line,) = [s for s in said if "mean_itl_ms" in s]
    assert "plain/single-stream/mean_itl_ms has a sample no baseline can hold (sample 0.0 is not positive" in line
    assert line.endswith("its 1 earlier session(s) kept")
    with pytest.raises(UsageError, match="mean_itl_ms: cannot record as a baseline: has a sample"):
        store.record_all(ResultSet(results=[Result.make("plain", "single-stream", "mean_itl_ms", unit="u",
                                                        higher_is_better=False, samples=[0.0])],
                                   machine={"machine_class": "c"}))
