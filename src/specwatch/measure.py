"""Run a workload against a server and collect samples plus the server's own counters.

Per run: output tok/s, TTFT, inter-token latency and end-to-end latency, measured at the client.
Around the measured runs: deltas of ``/metrics`` counters, ``/server_info`` snapshots, and the
engine log lines written meanwhile, so checks can read graph use and accept length from the same
window that was timed.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from specwatch import gpuclock, logscan, promtext
from specwatch.client import Client, Generation
from specwatch.pool import RunningServer
from specwatch.workload import Workload

Progress = Callable[[str], None]

#: metric -> (unit, higher_is_better)
METRICS: dict[str, tuple[str, bool]] = {
    "output_tok_s": ("tok/s", True),
    "decode_tok_s": ("tok/s", True),
    "ttft_ms": ("ms", False),
    "itl_ms": ("ms", False),
    "e2e_s": ("s", False),
}


@dataclass
class RunSample:
    """One measured run (``concurrency`` requests in flight)."""

    output_tok_s: float  # all completion tokens over the run's wall time (TTFT included)
    decode_tok_s: float  # tokens after the first over the time after the first (what speculation changes)
    ttft_ms: float
    itl_ms: float
    e2e_s: float
    completion_tokens: int
    client_overhead: float  # fraction of the run's time the client spent parsing
    generations: list[Generation] = field(default_factory=list, repr=False)


@dataclass
class Measurement:
    """Everything one workload produced on one server."""

    profile: str
    workload: Workload
    runs: list[RunSample]
    metrics_delta: promtext.Exposition | None
    metrics_after: promtext.Exposition | None
    server_info_before: dict[str, Any]
    server_info_after: dict[str, Any]
    log_records: list[logscan.Record]
    wall_s: float
    shared_host: bool = False
    gpu_state: dict[str, dict[str, float]] = field(default_factory=dict)  # gpuclock medians during the runs

    def samples(self, metric: str) -> list[float]:
        return [float(getattr(r, metric)) for r in self.runs]

    @property
    def generations(self) -> list[Generation]:
        return [g for r in self.runs for g in r.generations]

    @property
    def decode_records(self) -> list[logscan.DecodeRecord]:
        return [r for r in self.log_records if isinstance(r, logscan.DecodeRecord)]

    @property
    def client_overhead(self) -> float:
        """Worst per-run fraction of time spent in the client's own parsing."""
        return max((r.client_overhead for r in self.runs), default=0.0)

    def counter(self, name: str, **labels: str) -> float | None:
        """Delta of a server counter over the measured runs (None without /metrics)."""
        if self.metrics_delta is None:
            return None
        return self.metrics_delta.value(name, default=0.0, **labels)

    @property
    def median_tok_s(self) -> float:
        return statistics.median(self.samples("output_tok_s"))


async def _one_run(client: Client, prompts: list[str], wl: Workload) -> RunSample:
    start = time.perf_counter()
    gens = await asyncio.gather(*(client.generate(p, max_new_tokens=wl.max_new_tokens, ignore_eos=True)
                                  for p in prompts))
    wall = time.perf_counter() - start
    tokens = sum(g.completion_tokens for g in gens)
    itls = [x for g in gens for x in g.itl_s]
    return RunSample(
        output_tok_s=tokens / wall if wall > 0 else 0.0,
        decode_tok_s=sum(g.decode_tok_s for g in gens),  # concurrent requests decode side by side
        ttft_ms=1000 * statistics.median(g.ttft_s for g in gens),
        itl_ms=1000 * statistics.median(itls) if itls else 0.0,
        e2e_s=max(g.e2e_s for g in gens),
        completion_tokens=tokens,
        client_overhead=max(g.client_s / g.e2e_s for g in gens if g.e2e_s > 0),
        generations=list(gens),
    )


async def measure_async(server: RunningServer, wl: Workload, progress: Progress | None = None) -> Measurement:
    """Warm up, flush, then time ``wl.runs`` runs, capturing counters and log lines around them."""
    note = progress or (lambda msg: None)
    prompts = wl.prompts()
    per = wl.concurrency
    async with Client(server.url) as client:
        warm_start = time.perf_counter()
        for i in range(wl.warmup):
            await _one_run(client, prompts[i * per:(i + 1) * per], wl)
        while time.perf_counter() - warm_start < wl.warmup_s:  # same prompts: every run is a repeat
            await _one_run(client, prompts[:per], wl)
        if wl.flush_after_warmup:
            await client.flush_cache()
        info_before = await client.server_info()
        text_before = await client.metrics()
        log_start = server.log_size()
        runs: list[RunSample] = []
        started = time.perf_counter()
        last_note = started
        slots = len(prompts) // per
        with gpuclock.ClockSampler() as clocks:
            i = wl.warmup
            while len(runs) < wl.runs or time.perf_counter() - started < wl.min_duration_s:
                slot = i if i < slots else wl.warmup + (i - wl.warmup) % max(1, slots - wl.warmup)
                runs.append(await _one_run(client, prompts[slot * per:(slot + 1) * per], wl))
                i += 1
                now = time.perf_counter()
                done = len(runs) >= wl.runs and now - started >= wl.min_duration_s
                if now - last_note > 10 or done:
                    goal = f"{wl.runs}" + (f", ≥ {wl.min_duration_s:g} s" if wl.min_duration_s else "")
                    note(f"{server.profile.name} {wl.name}: run {len(runs)}/{goal} ({now - started:.0f} s), "
                         f"{runs[-1].output_tok_s:.1f} tok/s")
                    last_note = now
        wall = time.perf_counter() - started
        await asyncio.sleep(0.05)  # let the server flush its log line for the last batch
        text_after = await client.metrics()
        info_after = await client.server_info()
    records: list[logscan.Record] = []
    if server.log_path is not None:
        records = logscan.LogWindow(server.log_path, start=log_start).records()
    before = promtext.parse_text(text_before) if text_before is not None else None
    after = promtext.parse_text(text_after) if text_after is not None else None
    return Measurement(
        profile=server.profile.name, workload=wl, runs=runs,
        metrics_delta=promtext.delta(before, after) if before and after else None, metrics_after=after,
        server_info_before=info_before, server_info_after=info_after, log_records=records, wall_s=wall,
        shared_host=server.shared_host, gpu_state=clocks.result,
    )


def measure(server: RunningServer, wl: Workload, progress: Progress | None = None) -> Measurement:
    """Synchronous :func:`measure_async`."""
    return asyncio.run(measure_async(server, wl, progress))


def merge(first: Measurement, later: Measurement) -> Measurement:
    """Pool the runs of two measurements of the same server and workload (alternating boots).

    Counters, server info and log records stay those of ``first``; the checks read those, the
    gates read the pooled runs.
    """
    from dataclasses import replace

    if (first.profile, first.workload.name) != (later.profile, later.workload.name):
        raise ValueError(f"cannot merge {first.profile}/{first.workload.name} "
                         f"with {later.profile}/{later.workload.name}")
    return replace(first, runs=first.runs + later.runs, wall_s=first.wall_s + later.wall_s,
                   workload=replace(first.workload, runs=len(first.runs) + len(later.runs)))
