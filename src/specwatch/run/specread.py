"""What a measurement says about speculation health: per-prompt verify counts, accept-length samples, cycle cost.

The readers behind the speculation-health gates (:mod:`specwatch.run.specgates`), the perf gates'
diagnosis (:func:`specwatch.run.gates.diagnose`) and the results file (:func:`results`, called by
``run.summary.results_of``), so that each results key is read one way:

- ``<profile>/<workload>/accept_length`` (tok/cycle, higher is better): each run's exact accept
  length from the requests' ``meta_info`` (``1 + Σ spec_num_correct_drafts / Σ spec_verify_ct``),
  else one sample per Decode-line window; ``extra.per_prompt`` holds each greedy prompt's verify
  counts, committed tokens, output digest and cycle ends (:class:`~specwatch.judge.spechealth.PromptCount`);
  a sweep level records it already (``judge.levels``);
- ``<profile>/<workload>/cycle_ms`` (a speculative server's draft+verify cycle) and
  ``decode_step_ms`` (a plain server's step), ms, lower is better: one sample per busy Decode window
  (``signals.busywindows``), else each run's client reading, decode time over ``spec_verify_ct`` (over
  the tokens after the first on a plain server); ``extra`` says which, with the other reading;
- ``<spec>/<workload>/cycle_ratio``, the break-even accept length (cycle / the plain server's step), is
  the cycle gate's (it needs both servers): one sample per run pair when both logs split by run
  (:attr:`CycleReading.run_windows_ms`, :func:`specwatch.judge.cyclecost.paired_run_ratios`); on a server
  that decodes on the CPU, each run's CPU time per cycle over the plain server's per step
  (:attr:`CycleReading.cpu_ms`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from specwatch.judge import speculative
from specwatch.judge.cyclecost import CycleReading, Economics, window_cycle_ms
from specwatch.judge.levels import LEVEL_METRICS
from specwatch.judge.spechealth import PromptCount, prompt_counts
from specwatch.load.workload import Workload
from specwatch.signals.busywindows import busy_windows
from specwatch.signals.logscan import DecodeRecord
from specwatch.store.result import Result

if TYPE_CHECKING:
    from specwatch.load.measure import Measurement

__all__ = ["ACCEPT", "CYCLE", "PROBE", "RATIO", "STEP", "UNITS", "accept_estimate", "accept_samples", "counts",
           "cycle_reading", "economics", "is_speculative", "results"]

ACCEPT, CYCLE, STEP, RATIO = "accept_length", "cycle_ms", "decode_step_ms", "cycle_ratio"
#: metric -> (unit, higher_is_better)
UNITS: dict[str, tuple[str, bool]] = {ACCEPT: LEVEL_METRICS[ACCEPT], CYCLE: ("ms", False), STEP: ("ms", False),
                                      RATIO: ("x", False)}
#: The greedy probe of the accept-length gate: six fixed prompts, one at a time, each twice (the repeat
#: shows whether this server is deterministic for it); its counts are recorded per prompt.
PROBE = Workload("speculation-probe", runs=2, warmup=0, run_requests=6, max_new_tokens=64, prompt_words=16, seed=25)


def is_speculative(m: Measurement) -> bool:
    """Whether the server speculates, by what it shows: verify counts per request or accept lengths in its log."""
    return (any(g.verify_ct is not None for g in m.generations)
            or any(r.accept_len is not None for r in m.decode_records))


def counts(m: Measurement) -> list[PromptCount]:
    """Each prompt's verify counts over its repetitions in the measurement (requests with a verify count)."""
    return prompt_counts([(g.prompt, g.max_new_tokens, g.verify_ct, g.completion_tokens, g.output_ids, g.chunk_ends)
                          for g in m.generations if g.prompt])


def accept_samples(m: Measurement) -> tuple[list[float], str]:
    """(samples, source) of the aggregate accept length: each run's exact meta_info sums (measure's
    ``serving["accept_length"]``), else one sample per Decode-line window; ([], "") without either."""
    runs = m.samples(ACCEPT)
    if runs and not any(math.isnan(x) for x in runs):
        return runs, "meta_info of each run, exact"
    windows = [r.accept_len for r in m.decode_records if r.accept_len]  # 0.00: a window without a verify
    if windows:
        return windows, f"Decode lines, one sample per window ({len(windows)})"
    return [], ""


def accept_estimate(m: Measurement) -> speculative.Estimate | None:
    """The accept length of a measurement (:func:`speculative.measured_accept_length`), naming its source."""
    return speculative.measured_accept_length([(r.accept_len, r.running) for r in m.decode_records
                                               if r.accept_len is not None], [g.meta_info for g in m.generations])


def cycle_reading(m: Measurement) -> CycleReading:
    """The time per decode batch over busy time: per busy Decode window of the server, and per run by the
    client (decode time over the verify cycles, or over the tokens after the first on a plain server; the runs
    that :meth:`~specwatch.load.measure.Measurement.decode_dropped` leaves out, left out)."""
    spec = is_speculative(m)
    busy = busy_windows(m.log_records)

    def times(recs: tuple[DecodeRecord, ...]) -> tuple[float, ...]:
        return tuple(window_cycle_ms(r.accept_len, r.running, r.gen_tput) for r in recs
                     if (r.accept_len is not None) == spec)

    windows = times(busy.windows)
    # the log records are the first boot's (load.measure.merge); its runs ran one after another
    groups = busy.by_request_group(m.workload.run_size, m.boots[0] if m.boots else len(m.runs))
    per_run = tuple(times(g) for g in groups) if groups is not None else ()
    client = []
    bursts = m.decode_dropped()  # a run whose tokens arrived in one burst timed a read, not its cycles
    for i, run in enumerate(m.runs):
        if i in bursts:
            continue
        span = count = 0.0
        for g in run.generations:
            if not g.first_chunk_tokens:  # not streamed: no decode time of its own
                continue
            n = g.verify_ct if spec else g.completion_tokens - 1
            if n and n > 0:
                span, count = span + g.e2e_s - g.ttft_s, count + n
        if count and span > 0:
            client.append(1000.0 * span / count)
    cpu: list[float] = []
    for run in m.runs:  # the server's CPU time per cycle (per step), each run: what waiting for a CPU leaves out
        n = sum((g.verify_ct or 0) if spec else g.completion_tokens - 1 for g in run.generations)
        if run.server_cpu_s is None or n <= 0:
            cpu = []
            break
        cpu.append(1000.0 * run.server_cpu_s / n)
    on_cpu = bool(busy.windows) and all(r.graph_label == "cpu graph" for r in busy.windows)
    return CycleReading(spec, windows, busy.lines, dict(busy.excluded), tuple(client), per_run, tuple(cpu), on_cpu)


def economics(spec: Measurement, baseline: Measurement | None) -> Economics:
    """Speculation's arithmetic for ``spec`` against the plain ``baseline`` (same workload): accept length,
    cycle and step times over busy time, break-even, and the decode throughput both measured."""
    est = accept_estimate(spec)
    return Economics(accept_length=est.value if est else None, accept_source=est.source if est else "",
                     cycle=cycle_reading(spec), step=cycle_reading(baseline) if baseline is not None else None,
                     spec_tok_s=_median(spec.samples("decode_tok_s")),
                     baseline_tok_s=_median(baseline.samples("decode_tok_s")) if baseline is not None else None)


def _median(xs: list[float]) -> float | None:
    xs = [x for x in xs if not math.isnan(x)]
    return statistics.median(xs) if xs else None


def results(profile: str, workload: str, m: Measurement, extra: Mapping[str, Any]) -> list[Result]:
    """The speculation-health results of one measurement (see the module docstring); ``extra``: what
    every result of the measurement records."""
    out = []
    if not m.workload.level:  # a level records bench_serving's accept_length already
        xs, source = accept_samples(m)
        if xs:
            unit, higher = UNITS[ACCEPT]
            more: dict[str, Any] = {**extra, "source": source}
            if per := counts(m):
                more["per_prompt"] = [p.to_dict() for p in per]
            out.append(Result.make(profile, workload, ACCEPT, unit=unit, higher_is_better=higher, samples=xs,
                                   extra=more))
    reading = cycle_reading(m)
    xs, source = reading.samples()
    if xs:
        metric = CYCLE if reading.speculative else STEP
        unit, higher = UNITS[metric]
        out.append(Result.make(profile, workload, metric, unit=unit, higher_is_better=higher, samples=xs,
                               extra={**extra, "source": source, "client_ms": reading.client,
                                      "decode_lines": reading.lines, "busy_windows": len(reading.windows_ms)}))
    return out
