"""The verify cycle's cost over busy time and speculation's economics (pure), and the busy Decode windows they
are read from (real SGLang 0.5.23 log lines)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from specwatch.judge import cyclecost
from specwatch.judge.cyclecost import CycleReading, Economics, cycle_cause, ratio_samples, window_cycle_ms
from specwatch.signals import busywindows, logscan

REAL_LOG = Path(__file__).resolve().parents[2] / "fixtures" / "sglang" / "real" / "log"


def _decode(ts: str, gen_tput: float, accept: float | None = None, running: int = 1, ranks: str = "") -> str:
    spec = f"accept len: {accept:.2f}, accept rate: 0.40, " if accept is not None else ""
    return (f"[2026-12-01 10:00:{ts}{ranks}] Decode batch, #running-req: {running}, #token: 90, token usage: 0.01, "
            f"{spec}cuda graph: True, gen throughput (token/s): {gen_tput:.2f}, #queue-req: 0")


def _prefill(ts: str, ranks: str = "") -> str:
    return (f"[2026-12-01 10:00:{ts}{ranks}] Prefill batch, #new-seq: 1, #new-token: 26, #cached-token: 0, token "
            "usage: 0.01, #running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False, input throughput "
            "(token/s): 1000.00")


def test_busy_windows_leave_out_the_first_line_and_every_window_with_a_prefill() -> None:
    lines = [_decode("00", 300.0, 2.0), _decode("01", 310.0, 2.0), _prefill("02"), _decode("03", 4.0, 2.0),
             _decode("04", 305.0, 2.0), _decode("05", 0.0, 2.0)]
    busy = busywindows.busy_windows(logscan.parse_lines(lines))
    assert [r.gen_tput for r in busy.windows] == [310.0, 305.0]
    assert busy.lines == 5
    assert busy.excluded == {busywindows.FIRST_LINE: 1, busywindows.PREFILL_IN_WINDOW: 1, busywindows.NO_RATE: 1}


def test_busy_windows_follow_each_data_parallel_replica_on_its_own() -> None:
    lines = [_decode("00", 300.0, ranks=" DP0"), _decode("00", 200.0, ranks=" DP1"), _prefill("01", " DP1"),
             _decode("02", 301.0, ranks=" DP0"), _decode("02", 9.0, ranks=" DP1"), _decode("03", 201.0, ranks=" DP1")]
    busy = busywindows.busy_windows(logscan.parse_lines(lines))
    assert [(r.ranks, r.gen_tput) for r in busy.windows] == [({"DP": 0}, 301.0), ({"DP": 1}, 201.0)]


def test_busy_windows_split_by_run_by_the_sequences_prefilled_before_them() -> None:
    lines = [_prefill("00"), _decode("01", 9.0), _decode("02", 300.0), _decode("03", 301.0),
             _prefill("04"), _decode("05", 8.0), _decode("06", 150.0)]
    busy = busywindows.busy_windows(logscan.parse_lines(lines))
    assert busy.prefilled == (1, 1, 2) and busy.sequences == 2
    runs = busy.by_request_group(1, 2)
    assert runs is not None and [[r.gen_tput for r in g] for g in runs] == [[300.0, 301.0], [150.0]]
    assert busy.by_request_group(2, 1) is not None and len(busy.by_request_group(2, 1)[0]) == 3  # type: ignore[index]
    assert busy.by_request_group(1, 3) is None  # two prefills for three runs: the log does not split by run


def test_the_real_servers_idle_windows_are_left_out() -> None:
    """A real SGLang 0.5.23 log: the window after a wait read 2.64 tok/s against ~450 while decoding."""
    records = logscan.parse_lines(REAL_LOG.read_text().splitlines())
    every = [r.gen_tput for r in records if isinstance(r, logscan.DecodeRecord)]
    busy = [r.gen_tput for r in busywindows.busy_windows(records).windows]
    assert min(every) < 5 and 2.64 in every
    assert busy and min(busy) > 100 and 2.64 not in busy and 133.84 not in busy


def test_a_windows_cycle_is_its_tokens_per_batch_over_its_rate() -> None:
    assert window_cycle_ms(2.0, 1, 200.0) == pytest.approx(10.0)  # 2 tokens a cycle at 200 tok/s
    assert window_cycle_ms(None, 4, 400.0) == pytest.approx(10.0)  # a plain step of 4 requests
    with pytest.raises(ValueError):
        window_cycle_ms(2.0, 1, 0.0)


def test_a_reading_records_its_busy_windows_else_the_clients_runs_and_says_so() -> None:
    r = CycleReading(True, windows_ms=(10.0, 10.4, 9.8), lines=5, excluded={"x": 2}, client_ms=(10.2, 10.1))
    xs, source = r.samples()
    assert xs == [10.0, 10.4, 9.8] and source == "busy Decode windows (3 of 5 lines)" and r.agree
    few = CycleReading(True, windows_ms=(10.0,), lines=4, excluded={busywindows.PREFILL_IN_WINDOW: 3},
                       client_ms=(10.2, 10.1))
    assert few.samples() == ([10.2, 10.1], "client: each run's decode time per verify cycle")
    assert "too few busy Decode windows (1 of 4 lines" in few.describe()
    off = CycleReading(True, windows_ms=(10.0, 10.0, 10.0), lines=3, client_ms=(15.0,))
    assert off.agree is False and off.chosen() == (10.0, "busy Decode windows, 3 of 3")
    assert off.chosen(prefer_client=True) == (15.0, "client: decode time / spec_verify_ct")
    assert "the client reads +50%: time outside the engine's windows" in off.describe()


def test_the_break_even_is_one_sample_per_run_pair_that_load_on_both_servers_leaves_alone() -> None:
    """Run 1 of both servers ran while the machine was three times slower, and one cycle window of run 0 was
    preempted: each run pair still reads 2.0 (the fastest cycle window over the fastest step window of its
    pair), where each window over the median step spreads from 1.8 to 6.5."""
    cycle = CycleReading(True, windows_ms=(9.0, 25.0, 30.0, 33.0, 10.0, 10.5), lines=9,
                         run_windows_ms=((9.0, 25.0), (30.0, 33.0), (10.0, 10.5)))
    step = CycleReading(False, windows_ms=(4.5, 4.6, 15.0, 15.2, 5.0, 5.1), lines=9,
                        run_windows_ms=((4.5, 4.6), (15.0, 15.2), (5.0, 5.1)))
    assert cyclecost.paired_run_ratios(cycle, step) == pytest.approx([2.0, 2.0, 2.0])
    assert ratio_samples(cycle, step) == (pytest.approx([2.0, 2.0, 2.0]), cyclecost.PAIRED_SOURCE)
    unsplit = replace(step, run_windows_ms=())  # a log that does not split by run: each window over the median
    xs, source = ratio_samples(cycle, unsplit)
    assert source == "busy Decode windows of both servers"
    assert min(xs) == pytest.approx(1.78, abs=0.01) and max(xs) > 6.5
    assert cyclecost.paired_run_ratios(cycle, replace(step, run_windows_ms=((4.5,), (15.0,)))) == []
    no_window = replace(step, run_windows_ms=((4.5,), (), (5.0,)))  # a run without a busy window
    assert cyclecost.paired_run_ratios(cycle, no_window) == []


def test_on_the_cpu_the_break_even_is_each_run_pairs_cpu_time_and_never_on_a_gpu() -> None:
    cycle = CycleReading(True, windows_ms=(9.0, 30.0, 10.0), lines=6, run_windows_ms=((9.0,), (30.0,), (10.0,)),
                         cpu_ms=(8.0, 8.2, 8.0), on_cpu=True)
    step = CycleReading(False, windows_ms=(4.5, 4.6, 5.0), lines=6, run_windows_ms=((4.5,), (4.6,), (5.0,)),
                        cpu_ms=(4.0, 4.1, 4.0), on_cpu=True)
    assert ratio_samples(cycle, step) == (pytest.approx([2.0, 2.0, 2.0]), cyclecost.CPU_SOURCE)
    gpu = replace(step, on_cpu=False)  # a GPU's host CPU time is launching and waiting: the windows decide
    assert ratio_samples(cycle, gpu) == (pytest.approx([2.0, 30.0 / 4.6, 2.0]), cyclecost.PAIRED_SOURCE)
    assert cyclecost.cpu_run_ratios(cycle, replace(step, cpu_ms=(4.0, 4.1))) == []  # not read for every run


def test_the_break_even_is_timed_alike_on_both_servers() -> None:
    cycle = CycleReading(True, windows_ms=(9.0, 10.0, 11.0), lines=3, client_ms=(10.0,))
    step = CycleReading(False, windows_ms=(5.0, 5.0, 5.0), lines=3, client_ms=(5.2,))
    assert ratio_samples(cycle, step) == ([1.8, 2.0, 2.2], "busy Decode windows of both servers")
    no_log = CycleReading(False, client_ms=(4.0,))
    assert ratio_samples(cycle, no_log) == ([2.5], "the client's decode times on both servers")
    econ = Economics(2.4, "meta_info", cycle, step, spec_tok_s=240.0, baseline_tok_s=200.0)
    assert econ.break_even == pytest.approx(2.0) and econ.verdict == "pays" and econ.consistent
    text = "\n".join(econ.lines())
    assert "break-even accept length: 2.00" in text and "speculation pays" in text
    assert "predicts 1.20x decode throughput, this run measured 1.20x" in text


def test_the_seeds_contradiction_cannot_be_printed() -> None:
    """The gate once printed +28.8% throughput beside "speculation LOSES" (9.94 vs 4.23 ms from Decode windows
    that counted idle time). Times that contradict the measured throughput decide nothing."""
    cycle = CycleReading(True, windows_ms=(9.94,) * 3, lines=3)
    step = CycleReading(False, windows_ms=(4.23,) * 3, lines=3)
    econ = Economics(2.1, "Decode lines", cycle, step, spec_tok_s=153.5, baseline_tok_s=119.2)
    assert econ.verdict == "unclear"
    text = "\n".join(econ.lines())
    assert "LOSES" not in text and "this run measured 1.29x" in text and "decides nothing" in text
    near = Economics(1.0, "", CycleReading(True, windows_ms=(10.5,) * 3, lines=3),
                     CycleReading(False, windows_ms=(10.0,) * 3, lines=3), spec_tok_s=101.0, baseline_tok_s=100.0)
    assert near.verdict == "about break-even"


def test_when_the_windows_disagree_with_the_measured_throughput_the_clients_timing_decides() -> None:
    """The engine's busy windows leave out time the client sees (the front end, the stream): when the break-even
    they give predicts a speedup the run did not measure, the verdict is the one timed like the throughput."""
    cycle = CycleReading(True, windows_ms=(6.0,) * 3, lines=3, client_ms=(10.0,))
    step = CycleReading(False, windows_ms=(5.0,) * 3, lines=3, client_ms=(5.0,))
    econ = Economics(2.2, "", cycle, step, spec_tok_s=110.0, baseline_tok_s=100.0)  # measured 1.10x
    assert econ.break_even == pytest.approx(1.2) and econ.consistent is False  # the windows predict 1.83x
    by_client = econ.by_client
    assert by_client is not None and by_client.break_even == pytest.approx(2.0) and by_client.consistent
    assert econ.verdict == "pays"
    text = "\n".join(econ.lines())
    assert "break-even accept length over the busy windows: 1.20; it predicts 1.83x" in text
    assert "timed by the client, as the throughput was:\n  break-even accept length: 2.00" in text
    assert "this run measured 1.10x" in text


def test_a_slower_cycle_points_at_the_speculative_path_unless_the_plain_step_moved_as_much() -> None:
    eager = cycle_cause(0.9, 0.02, 0.0)
    assert "the speculative path itself got slower" in eager and "verify that runs eager" in eager
    assert "(the plain decode step +2.0%, the accept length held (+0.0%))" in eager
    machine = cycle_cause(0.9, 0.8, None)
    assert "the machine or the target model" in machine
    assert cycle_cause(-0.1, 0.0, 0.0) == ""
