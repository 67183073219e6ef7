"""Run a workload against a server and collect samples plus the server's own counters.

Per run: output tok/s, TTFT, inter-token latency (``mean_itl_ms``: the mean, which tokens streamed in
bursts leave unchanged; their median is no per-token latency, see :mod:`specwatch.judge.levels`) and
end-to-end latency, measured at the client, and ``sglang.bench_serving``'s metrics of the run
(:data:`specwatch.judge.levels.LEVEL_METRICS`: throughputs, median/p90/p99 of TTFT, ITL, TPOT and e2e
latency, accept length from the requests' ``meta_info`` when the server reports it), which a sweep
level's results carry.
A run sends its requests with at most ``concurrency`` in flight, at the workload's arrival times,
through the API of the server's profile (:func:`specwatch.load.openai_client.client_for`).
Around the measured runs: deltas of ``/metrics`` counters, ``/server_info`` snapshots, and the
engine log lines written meanwhile, so checks can read graph use and accept length from the same
window that was timed.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from specwatch.judge import speculative
from specwatch.judge.levels import (
    DECODE_TIMED,
    LEVEL_METRICS,
    RequestTiming,
    itl_note,
    mean_itl,
    serving_metrics,
    typical_interval,
    unmeasured_decode,
)
from specwatch.load import gpuclock
from specwatch.load.client import Client, Generation
from specwatch.load.openai_client import client_for
from specwatch.load.workload import Request, Workload
from specwatch.served import Served, Setup
from specwatch.server.neighbours import neighbours
from specwatch.server.pool import RunningServer
from specwatch.signals import logscan, proccpu, promtext

Progress = Callable[[str], None]

#: metric -> (unit, higher_is_better)
METRICS: dict[str, tuple[str, bool]] = {
    "output_tok_s": ("tok/s", True),
    "decode_tok_s": ("tok/s", True),
    "ttft_ms": ("ms", False),
    "mean_itl_ms": ("ms", False),  # the mean inter-token latency (bench_serving's mean_itl_ms), not the median
    "e2e_s": ("s", False),
}
#: the decode-rate metric; a run without a measurable decode window is no sample of it, nor of any other key
#: of :data:`~specwatch.judge.levels.DECODE_TIMED` (:meth:`Measurement.decode_dropped`)
DECODE = "decode_tok_s"


@dataclass
class RunSample:
    """One measured run (``concurrency`` requests in flight)."""

    output_tok_s: float  # all completion tokens over the run's wall time (TTFT included)
    decode_tok_s: float  # tokens after the first over the time after the first (what speculation changes)
    ttft_ms: float
    mean_itl_ms: float  # the mean per-token gap (a bursty stream's median sits on its near-zero mode)
    e2e_s: float
    completion_tokens: int
    client_overhead: float  # fraction of the run's time the client spent parsing
    generations: list[Generation] = field(default_factory=list, repr=False)
    #: bench_serving's metrics of this run (LEVEL_METRICS; accept_length only from a speculative server)
    serving: dict[str, float] = field(default_factory=dict)
    itl_note: str = ""  # what a bimodal ITL distribution (tokens in bursts) means (judge.levels.itl_note)
    #: CPU seconds the server's processes used during the run (signals.proccpu); None: not read (remote)
    server_cpu_s: float | None = None


def _value(run: RunSample, metric: str) -> float:
    """A run's value of ``metric``: a RunSample field, or one of its bench_serving metrics (``serving``)."""
    if metric in LEVEL_METRICS and metric not in METRICS:
        return float(run.serving.get(metric, math.nan))
    return float(getattr(run, metric))


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
    #: the host was shared during the runs: other xdist workers, other inference servers or GPU processes
    shared_host: bool = False
    gpu_state: dict[str, dict[str, float]] = field(default_factory=dict)  # gpuclock medians during the runs
    #: runs per boot, in order, for measurements pooled over alternating boots (:func:`merge`); (): one boot
    boots: tuple[int, ...] = ()
    #: what else ran on the host during the runs (:func:`specwatch.server.neighbours.neighbours`)
    neighbours: tuple[str, ...] = ()
    #: what the server's boot served (:meth:`specwatch.profiles.profile.ServerProfile.setup`; None when not known)
    setup: Setup | None = None

    def served(self) -> Served | None:
        """What a prior of this measurement's keys belongs to: its setup at this workload's size (None when the
        server is not known)."""
        wl = self.workload
        return self.setup.at(wl.name, wl.concurrency, wl.max_new_tokens) if self.setup else None

    def samples(self, metric: str) -> list[float]:
        """One value per run: a RunSample field, or one of its bench_serving metrics (``serving``); for a key
        that times the decode window (``DECODE_TIMED``: decode tok/s, mean ITL, ITL and TPOT percentiles), the
        runs without a measurable decode window left out (:meth:`decode_dropped`)."""
        dropped = self.decode_dropped() if metric in DECODE_TIMED else {}
        return [_value(r, metric) for i, r in enumerate(self.runs) if i not in dropped]

    def by_boot(self, metric: str) -> list[list[float]]:
        """:meth:`samples` split by the boot each run was measured on (one list for one boot)."""
        dropped = self.decode_dropped() if metric in DECODE_TIMED else {}
        xs = [(i, _value(r, metric)) for i, r in enumerate(self.runs)]
        out = []
        for n in self.boots or (len(xs),):
            out.append([x for i, x in xs[:n] if i not in dropped])
            xs = xs[n:]
        return out

    def ttft_by_boot(self) -> list[list[float]]:
        """Each boot's requests' time to first token in ms, in order (the boots of :meth:`by_boot`): every request
        of every run, from its :class:`~specwatch.load.client.Generation`; a run whose requests were not kept
        (one read back from a results file) counts once, as its ``ttft_ms``."""
        out, runs = [], self.runs
        for n in self.boots or (len(runs),):
            out.append([x for r in runs[:n] for x in [1000 * g.ttft_s for g in r.generations] or [r.ttft_ms]])
            runs = runs[n:]
        return out

    def decode_dropped(self) -> dict[int, str]:
        """The runs (by index) that are no sample of the decode-timed keys (``DECODE_TIMED``), and why: a request of
        the run had no measurable decode window (:func:`specwatch.judge.levels.unmeasured_decode`); runs without
        streamed requests are kept."""
        windows = [[g.decode_window for g in r.generations] for r in self.runs]
        typical = typical_interval([w for run in windows for w in run if w is not None])
        out = {}
        for i, run in enumerate(windows):
            why = next((w for w in (unmeasured_decode(x, typical) for x in run if x is not None) if w), "")
            if why:
                out[i] = why
        return out

    def decode_timed_keys(self) -> list[str]:
        """The keys of this measurement's workload that time the decode window, in report order."""
        return [k for k in (LEVEL_METRICS if self.workload.level else METRICS) if k in DECODE_TIMED]

    def dropped_note(self, metric: str = "") -> str:
        """One line saying which runs ``metric`` leaves out, and why ("" when none, or for a key that keeps every
        run); without ``metric``, the line names every decode-timed key of the workload."""
        dropped = self.decode_dropped() if metric in DECODE_TIMED or not metric else {}
        if not dropped:
            return ""
        first = next(iter(dropped))
        keys = metric or ", ".join(self.decode_timed_keys())
        return (f"{len(dropped)} of {len(self.runs)} run(s) of {self.profile} {self.workload.name} left out of "
                f"{keys} (run {', '.join(str(i + 1) for i in dropped)}): run {first + 1}: {dropped[first]}")

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


async def _one_run(client: Client, requests: list[Request], wl: Workload) -> RunSample:
    """Send ``requests`` at the workload's arrival times with at most ``wl.concurrency`` in flight
    (all at once for a single wave, as the single-stream runs always have)."""
    gate = asyncio.Semaphore(wl.concurrency)
    offsets = wl.arrivals()
    start = time.perf_counter()

    async def send(req: Request, at: float) -> Generation:
        if at > 0:
            await asyncio.sleep(max(0.0, start + at - time.perf_counter()))
        async with gate:  # TTFT is timed from the send, after any wait here (as bench_serving times it)
            return await client.generate(req.text, max_new_tokens=req.max_new_tokens, ignore_eos=True,
                                         messages=req.messages)

    gens = await asyncio.gather(*(send(r, offsets[i % len(offsets)]) for i, r in enumerate(requests)))
    wall = time.perf_counter() - start
    tokens = sum(g.completion_tokens for g in gens)
    itls = [x for g in gens for x in g.itl_s]
    serving = serving_metrics([RequestTiming(g.ttft_s, g.e2e_s, g.completion_tokens, g.itl_s) for g in gens], wall)
    accept = speculative.from_requests([g.meta_info for g in gens])
    if accept is not None:
        serving["accept_length"] = accept.value
    return RunSample(
        output_tok_s=tokens / wall if wall > 0 else 0.0,
        decode_tok_s=sum(g.decode_tok_s for g in gens),  # concurrent requests decode side by side
        ttft_ms=1000 * statistics.median(g.ttft_s for g in gens),
        mean_itl_ms=1000 * mean_itl(itls),  # NaN without gaps: no ITL, never a 0.0 that reads as instant
        e2e_s=max(g.e2e_s for g in gens),
        completion_tokens=tokens,
        client_overhead=max(g.client_s / g.e2e_s for g in gens if g.e2e_s > 0),
        generations=list(gens),
        serving=serving,
        itl_note=itl_note(itls) or "",
    )


class _Measuring:
    """One server's side of a measurement: warm-up, timed runs, counters and log lines around them."""

    def __init__(self, server: RunningServer, wl: Workload, client: Client) -> None:
        self.server, self.wl, self.client = server, wl, client
        self.prompts = wl.requests()
        self.per = wl.run_size
        self.slots = len(self.prompts) // self.per
        self.runs: list[RunSample] = []
        self.next_slot = wl.warmup

    async def warm_up(self, note: Progress | None = None) -> None:
        """Warm-up runs (excluded), the flush, and the counters before the timed runs.

        SGLang answers ``/flush_cache`` with 400 while it is not idle; the flush is asked again
        once after a second, and a flush that never took is said (the accept-length check then
        relies on the counters' deltas, not on the reset).
        """
        wl, per = self.wl, self.per
        warm_start = time.perf_counter()
        for i in range(wl.warmup):
            await _one_run(self.client, self.prompts[i * per:(i + 1) * per], wl)
        while time.perf_counter() - warm_start < wl.warmup_s:  # same prompts: every run is a repeat
            await _one_run(self.client, self.prompts[:per], wl)
        if wl.flush_after_warmup and not await self.client.flush_cache():
            await asyncio.sleep(1.0)
            if not await self.client.flush_cache() and note is not None:
                note(f"{self.server.profile.name}: /flush_cache was refused twice (server not idle?); its "
                     "accept-length counters are not reset for this window")
        for said in self.client.notes:  # e.g. an OpenAI-compatible server that refused ignore_eos
            if note is not None:
                note(f"{self.server.profile.name}: {said}")
        self.info_before = await self.client.server_info()
        self.text_before = await self.client.metrics()
        self.log_start = self.server.log_size()
        self.pid: int | None = getattr(self.server, "pid", None)  # an external server's: found by its port, once

    async def run_once(self) -> RunSample:
        """One timed run (past ``runs``, the measured prompts come round again)."""
        wl, i = self.wl, self.next_slot
        slot = i if i < self.slots else wl.warmup + (i - wl.warmup) % max(1, self.slots - wl.warmup)
        before = proccpu.tree_cpu_seconds(self.pid)
        run = await _one_run(self.client, self.prompts[slot * self.per:(slot + 1) * self.per], wl)
        after = proccpu.tree_cpu_seconds(self.pid)
        if before is not None and after is not None and after >= before:
            run.server_cpu_s = after - before
        self.runs.append(run)
        self.next_slot += 1
        return self.runs[-1]

    def done(self, elapsed: float) -> bool:
        return len(self.runs) >= self.wl.runs and elapsed >= self.wl.min_duration_s

    def note(self, note: Progress, elapsed: float) -> None:
        wl = self.wl
        goal = f"{wl.runs}" + (f", ≥ {wl.min_duration_s:g} s" if wl.min_duration_s else "")
        note(f"{self.server.profile.name} {wl.name}: run {len(self.runs)}/{goal} ({elapsed:.0f} s), "
             f"{self.runs[-1].output_tok_s:.1f} tok/s")

    async def finish(self, wall: float, gpu_state: dict[str, dict[str, float]],
                     others: tuple[str, ...] = ()) -> Measurement:
        """Counters after the runs, the log lines they wrote, and the Measurement."""
        text_after = await self.client.metrics()
        info_after = await self.client.server_info()
        server = self.server
        records: list[logscan.Record] = []
        if server.log_path is not None:
            records = logscan.LogWindow(server.log_path, start=self.log_start).records()
        before = promtext.parse_text(self.text_before) if self.text_before is not None else None
        after = promtext.parse_text(text_after) if text_after is not None else None
        return Measurement(
            profile=server.profile.name, workload=self.wl, runs=self.runs,
            metrics_delta=promtext.delta(before, after) if before and after else None, metrics_after=after,
            server_info_before=self.info_before, server_info_after=info_after, log_records=records, wall_s=wall,
            shared_host=server.shared_host or bool(others), gpu_state=gpu_state, neighbours=others,
            setup=server.profile.setup(),
        )


async def measure_async(server: RunningServer, wl: Workload, progress: Progress | None = None) -> Measurement:
    """Warm up, flush, then time ``wl.runs`` runs, capturing counters and log lines around them."""
    return (await measure_interleaved_async([server], wl, progress))[0]


async def measure_interleaved_async(servers: list[RunningServer], wl: Workload,
                                    progress: Progress | None = None) -> list[Measurement]:
    """Measure several live servers with their runs interleaved: A B B A A B B A ...

    The servers run one at a time, so they never compete; a machine whose speed wanders over
    seconds then slows both sides alike instead of whichever happened to run in its slow moment
    (docs/validation/README.md, section 6). The ABBA order also cancels a steady drift.
    """
    note = progress or (lambda msg: None)
    async with contextlib.AsyncExitStack() as stack:
        sides = []
        for server in servers:
            client = await stack.enter_async_context(client_for(server.profile, server.url))
            side = _Measuring(server, wl, client)
            await side.warm_up(note)
            sides.append(side)
        own = [pid for side in sides if (pid := getattr(side.server, "pid", None))]
        others = dict.fromkeys(neighbours(own))  # before the runs and after: what shared the host meanwhile
        started = time.perf_counter()
        last_note = started
        k = 0
        with gpuclock.ClockSampler() as clocks:
            # one clock reading decides both the last progress line and the end (two readings let the end come
            # between them, with no last line)
            finished = all(side.done(0.0) for side in sides)
            while not finished:
                for side in sides if k % 2 == 0 else sides[::-1]:
                    await side.run_once()
                k += 1
                now = time.perf_counter()
                finished = all(side.done(now - started) for side in sides)
                if now - last_note > 10 or finished:
                    for side in sides:
                        side.note(note, now - started)
                    last_note = now
        wall = time.perf_counter() - started
        others.update(dict.fromkeys(neighbours(own)))
        if others:
            shown = ", ".join(list(others)[:4]) + (f" and {len(others) - 4} more" if len(others) > 4 else "")
            note(f"{', '.join(s.server.profile.name for s in sides)} {wl.name}: the host was shared during the runs "
                 f"({shown}); their load is in these numbers")
        for side in sides:  # said once per measurement: which runs streamed in bursts, and what it means
            dropped = Measurement(side.server.profile.name, wl, side.runs, None, None, {}, {}, [], 0.0).dropped_note()
            if dropped:
                note(dropped)
            bursty = [r.itl_note for r in side.runs if r.itl_note]
            if bursty:
                note(f"{side.server.profile.name} {wl.name}: {len(bursty)} of {len(side.runs)} run(s): {bursty[0]}")
        await asyncio.sleep(0.05)  # let the servers flush their log lines for the last batch
        return [await side.finish(wall, clocks.result, tuple(others)) for side in sides]


def measure_interleaved(servers: list[RunningServer], wl: Workload,
                        progress: Progress | None = None) -> list[Measurement]:
    """Synchronous :func:`measure_interleaved_async`."""
    return asyncio.run(measure_interleaved_async(servers, wl, progress))


def measure(server: RunningServer, wl: Workload, progress: Progress | None = None) -> Measurement:
    """Synchronous :func:`measure_async`."""
    return asyncio.run(measure_async(server, wl, progress))


def merge(first: Measurement, later: Measurement) -> Measurement:
    """Pool the runs of two measurements of the same server and workload (alternating boots).

    Counters, server info and log records stay those of ``first``; the checks read those, the
    gates read the pooled runs, and ``boots`` keeps which runs came from which boot (the relative
    gates judge per boot).
    """
    from dataclasses import replace

    if (first.profile, first.workload.name) != (later.profile, later.workload.name):
        raise ValueError(f"cannot merge {first.profile}/{first.workload.name} "
                         f"with {later.profile}/{later.workload.name}")
    return replace(first, runs=first.runs + later.runs, wall_s=first.wall_s + later.wall_s,
                   workload=replace(first.workload, runs=len(first.runs) + len(later.runs)),
                   boots=(*(first.boots or (len(first.runs),)), *(later.boots or (len(later.runs),))))
