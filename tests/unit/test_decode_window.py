"""A run without a measurable decode window is no decode_tok_s sample: it is left out, and that is said.

Real SGLang 0.5.23 on CPU (STANDALONE): a table read `sgl-plain/single-stream/decode_tok_s 266.9 ± 179051.2`.
One run's 64 tokens arrived in one burst (e2e 0.199 s), its decode time near zero, so its sample read 179318 tok/s.
"""

from __future__ import annotations

import pytest

from specwatch.judge.levels import FEW_INTERVALS, DecodeWindow, typical_interval, unmeasured_decode
from specwatch.load.client import Generation
from specwatch.load.measure import Measurement, RunSample
from specwatch.load.workload import Workload
from specwatch.report.table import ReportRow, summary_table
from specwatch.run.summary import note_lines, results_of

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
    note = m.dropped_note()
    assert note.startswith("1 of 5 run(s) of sgl-plain single-stream left out of decode_tok_s (run 3): run 3: its "
                           "63 tokens after the first arrived"), note
    rs = results_of({("sgl-plain", "single-stream"): m}, {"machine_class": "x"}, None)
    assert rs.get("sgl-plain/single-stream/decode_tok_s").extra["dropped_runs"] == note
    assert "dropped_runs" not in rs.get("sgl-plain/single-stream/output_tok_s").extra
    assert f"note: {note}" in note_lines([], {("sgl-plain", "single-stream"): m}, [])
    row = ReportRow(key="sgl-plain/single-stream/decode_tok_s", n=len(xs), median=RATE, dropped=note)
    assert f"  sgl-plain/single-stream/decode_tok_s: {note}" in summary_table([row]).splitlines()


def test_runs_are_left_out_within_their_boot() -> None:
    m = _measurement([_steady(), _burst(), _steady(), _steady(), _steady()], boots=(3, 2))
    assert [len(b) for b in m.by_boot("decode_tok_s")] == [2, 2]
    assert [len(b) for b in m.by_boot("output_tok_s")] == [3, 2]
    steady = _measurement([_steady() for _ in range(4)])
    assert not steady.decode_dropped() and steady.dropped_note() == "" and len(steady.samples("decode_tok_s")) == 4
