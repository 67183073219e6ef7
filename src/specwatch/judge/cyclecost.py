"""The verify cycle's cost over busy time, and speculation's economics beside the measured throughput.

Pure: stdlib only (with :mod:`specwatch.judge.spechealth`'s accept tolerance). A Decode line's ``gen
throughput`` divides the window's tokens by the time since the previous line, idle time between requests
included (one real SGLang window read 3.07 tok/s), so only windows that held decode batches alone count
(``signals.logscan.busy_windows``). Over such a window one draft+verify cycle costs ``accept_len · bs /
gen_tput`` and a plain decode step ``bs / gen_tput`` (:func:`window_cycle_ms`). The client reads the same
over each request's decode time: ``(e2e − ttft) / spec_verify_ct``. :class:`CycleReading` keeps both and
says whether they agree.

Speculation pays when the accept length exceeds the break-even ``cycle / step``. :class:`Economics` states
it beside the decode throughput measured in the same run and never contradicts that throughput: when the
readings predict a speedup the run does not show, it says so and why (the case study's contradiction,
"+28.8% throughput" yet "speculation LOSES", came from windows that counted idle time).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from specwatch.judge.spechealth import ACCEPT_TOLERANCE

__all__ = ["AGREE", "CPU_SOURCE", "MIN_BUSY_WINDOWS", "PAIRED_SOURCE", "CycleReading", "Economics", "alike",
           "cpu_run_ratios", "cycle_cause", "paired_run_ratios", "ratio_samples", "window_cycle_ms"]

#: Two readings of one time (busy Decode windows and the client; a prediction and a measurement) agree
#: within this fraction.
AGREE = 0.2
#: Busy Decode windows a measurement needs before its cycle cost is read from them (else the client's).
MIN_BUSY_WINDOWS = 3


def window_cycle_ms(accept_len: float | None, running: int, gen_tput: float) -> float:
    """One busy Decode window's time per decode batch, ms: a draft+verify cycle commits ``accept_len``
    tokens for each of ``running`` requests (a plain step one), at the window's ``gen_tput`` tokens/s."""
    if gen_tput <= 0:
        raise ValueError(f"gen throughput {gen_tput} is not a rate")
    per_batch = (accept_len if accept_len is not None else 1.0) * max(running, 1)
    return 1000.0 * per_batch / gen_tput


@dataclass(frozen=True)
class CycleReading:
    """The time per decode batch of one measurement: per busy Decode window (the server's own timing)
    and per run from the client (decode time / verify cycles, or / tokens after the first)."""

    speculative: bool
    windows_ms: tuple[float, ...] = ()
    lines: int = 0  # Decode lines read
    excluded: Mapping[str, int] = field(default_factory=dict)  # why the other lines were left out
    client_ms: tuple[float, ...] = ()
    #: the busy windows of each timed run, in run order (() when the log cannot be split by run)
    run_windows_ms: tuple[tuple[float, ...], ...] = ()
    #: each run's CPU time of the server's processes per cycle (per step), ms (() when not read for every run)
    cpu_ms: tuple[float, ...] = ()
    on_cpu: bool = False  # the server decodes on the CPU (its Decode lines say ``cpu graph``)

    @property
    def what(self) -> str:
        return "draft+verify cycle" if self.speculative else "decode step"

    @property
    def server_ms(self) -> float | None:
        return statistics.median(self.windows_ms) if len(self.windows_ms) >= MIN_BUSY_WINDOWS else None

    @property
    def client(self) -> float | None:
        return statistics.median(self.client_ms) if self.client_ms else None

    @property
    def agree(self) -> bool | None:
        """Whether the busy windows and the client read the same time (None: one of them is missing)."""
        s, c = self.server_ms, self.client
        return None if s is None or c is None else abs(s / c - 1) <= AGREE

    def samples(self) -> tuple[list[float], str]:
        """What a results key records: the busy windows (the server's timing) when there are enough,
        else the client's runs; and a sentence naming the source."""
        if self.server_ms is not None:
            return list(self.windows_ms), f"busy Decode windows ({len(self.windows_ms)} of {self.lines} lines)"
        if self.client_ms:
            per = "verify cycle" if self.speculative else "token after the first"
            return list(self.client_ms), f"client: each run's decode time per {per}"
        return [], ""

    def chosen(self, prefer_client: bool = False) -> tuple[float | None, str]:
        """(ms, source) for the economics: the busy windows (the engine's own timing), else the client's."""
        if self.server_ms is not None and not (prefer_client and self.client is not None):
            return self.server_ms, f"busy Decode windows, {len(self.windows_ms)} of {self.lines}"
        if self.client is not None:
            return self.client, "client: decode time / " + ("spec_verify_ct" if self.speculative else "tokens")
        return None, ""

    def describe(self) -> str:
        """The readings and how they compare, one line."""
        parts = []
        if self.server_ms is not None:
            parts.append(f"{self.server_ms:.2f} ms over {len(self.windows_ms)} busy Decode windows")
        elif self.lines:
            why = ", ".join(f"{n} {k}" for k, n in sorted(self.excluded.items()))
            parts.append(f"too few busy Decode windows ({len(self.windows_ms)} of {self.lines} lines; left out: {why})")
        if self.client is not None:
            parts.append(f"{self.client:.2f} ms by the client")
        text = f"{self.what}: " + (", ".join(parts) if parts else "no reading")
        if self.agree is False:
            text += (f" (the client reads {self.client / self.server_ms - 1:+.0%}: time outside the engine's "  # type: ignore[operator]
                     "windows, in the HTTP front end, the stream and the client)")
        return text


def alike(cycle: CycleReading, step: CycleReading) -> bool:
    """Whether a cycle and a step are compared by their busy Decode windows (both have enough: the engine's
    own timing) rather than by the client's readings: the two are always timed alike."""
    return cycle.server_ms is not None and step.server_ms is not None


def ratio_samples(cycle: CycleReading, step: CycleReading) -> tuple[list[float], str]:
    """The break-even accept length, timed alike (:func:`alike`); ([], "") when the two cannot be.

    On servers that decode on the CPU, one sample per run pair: run k's CPU time per cycle over the plain
    server's CPU time per step in its run k (:func:`cpu_run_ratios`). By busy windows, one sample per run
    pair: run k's fastest cycle window over the plain server's fastest step window of its run k
    (:func:`paired_run_ratios`), when both logs split by run; else each cycle window over the median step.
    By the client, each run's cycle over the median step."""
    if by_cpu := cpu_run_ratios(cycle, step):
        return by_cpu, CPU_SOURCE
    if alike(cycle, step):
        if paired := paired_run_ratios(cycle, step):
            return paired, PAIRED_SOURCE
        return [x / step.server_ms for x in cycle.windows_ms], "busy Decode windows of both servers"  # type: ignore[operator]
    if cycle.client_ms and step.client:
        return [x / step.client for x in cycle.client_ms], "the client's decode times on both servers"
    return [], ""


#: The source :func:`ratio_samples` names for :func:`cpu_run_ratios`.
CPU_SOURCE = "CPU time of each server's processes, per run pair: per cycle / per step"


def cpu_run_ratios(cycle: CycleReading, step: CycleReading) -> list[float]:
    """One break-even per run pair from CPU time: run k's CPU ms per cycle over the plain server's CPU ms per
    step of its run k; [] unless both servers decode on the CPU and both read CPU time for as many runs.

    A server that decodes on the CPU is slowed by other processes mostly by waiting for a CPU, which its wall
    clock holds and its CPU time does not. On a shared 2-core machine with three busy loops beside it, the busy
    windows' break-evens of healthy sessions ranged from 1.2 to 3.1 (a cycle and a step, even of the same run
    pair, queued behind different processes), so an eager verify (+55% to +475%) could read less than a
    healthy session; their CPU times' ranged within 26% while the eager verify read at least +161%. On a GPU
    the CPU time is the host's launching and waiting, not the decode: never used there."""
    a, b = cycle.cpu_ms, step.cpu_ms
    if not (cycle.on_cpu and step.on_cpu) or not a or len(a) != len(b):
        return []
    return [x / y for x, y in zip(a, b, strict=True)]


#: The source :func:`ratio_samples` names for :func:`paired_run_ratios`.
PAIRED_SOURCE = "busy Decode windows of both servers, per run pair: fastest cycle window / fastest step window"


def paired_run_ratios(cycle: CycleReading, step: CycleReading) -> list[float]:
    """One break-even per run pair: run k's fastest busy cycle window over the plain server's fastest busy
    step window of its run k ([] unless both readings split their windows into as many runs, each with a
    window: a run dropped for want of one would leave fewer samples than the per-window fallback judges).

    Interleaved runs (``gates.interleave_runs``) put run k of both servers next to each other in time, so
    a machine whose speed wanders over seconds moves both sides of a pair alike; the fastest window of each
    run is the one least preempted by other processes (load only adds time to a window), where a median
    still holds the load: on a shared 2-core machine a loaded plain step read 2.5 times its unloaded time
    and a cycle twice, which moved the ratio of medians by 21% (1.36 against 1.72). One sample per pair:
    the windows of one run share its moment of the machine, and are not independent samples of it."""
    a, b = cycle.run_windows_ms, step.run_windows_ms
    if not a or len(a) != len(b) or not all(a) or not all(b):
        return []
    return [min(x) / min(y) for x, y in zip(a, b, strict=True)]


def cycle_cause(cycle_change: float | None, step_change: float | None, accept_change: float | None) -> str:
    """What a moved cycle cost points at, from the relative changes (against the baseline) of the cycle,
    the plain server's decode step and the accept length (None: not known)."""
    if cycle_change is None or cycle_change <= 0:
        return ""
    others = []
    if step_change is not None:
        others.append(f"the plain decode step {step_change:+.1%}")
    if accept_change is not None:
        held = "held" if abs(accept_change) <= ACCEPT_TOLERANCE else "moved"
        others.append(f"the accept length {held} ({accept_change:+.1%})")
    beside = f" ({', '.join(others)})" if others else ""
    if step_change is not None and step_change >= 0.5 * cycle_change:
        return (f"the draft+verify cycle is {cycle_change:+.1%} slower{beside}: the machine or the target model got "
                "slower, not the speculative path alone")
    return (f"the draft+verify cycle is {cycle_change:+.1%} slower{beside}: the speculative path itself got slower. "
            "A verify that runs eager (the seeds' root cause: 29-30 ms per cycle against 12 ms for a graphed step) "
            "shows this way even where no graph counter is exposed; the verify-graphs check names it where one is")


@dataclass(frozen=True)
class Economics:
    """Speculation's arithmetic for one workload, beside the throughput measured in the same run.

    ``accept_length``: canonical (committed tokens per request per verify cycle, bonus included).
    ``spec_tok_s`` / ``baseline_tok_s``: decode tokens per second (TTFT excluded), medians over runs.
    """

    accept_length: float | None
    accept_source: str = ""
    cycle: CycleReading | None = None
    step: CycleReading | None = None
    spec_tok_s: float | None = None
    baseline_tok_s: float | None = None
    client_only: bool = False  # timed by the client alone (:attr:`by_client`)

    def _times(self) -> tuple[float | None, str, float | None, str]:
        """(cycle ms, its source, step ms, its source), timed alike (:func:`alike`)."""
        if self.cycle is None:
            return None, "", None, ""
        if self.step is None:
            c, cs = self.cycle.chosen(prefer_client=self.client_only)
            return c, cs, None, ""
        windows = alike(self.cycle, self.step) and not self.client_only
        c, cs = self.cycle.chosen(prefer_client=not windows)
        s, ss = self.step.chosen(prefer_client=not windows)
        return c, cs, s, ss

    @property
    def cycle_ms(self) -> float | None:
        return self._times()[0]

    @property
    def decode_step_ms(self) -> float | None:
        return self._times()[2]

    @property
    def break_even(self) -> float | None:
        """The accept length at which speculation only ties plain decoding: cycle time / decode step time."""
        c, _, s, _ = self._times()
        return c / s if c and s else None

    @property
    def predicted_speedup(self) -> float | None:
        be = self.break_even
        return self.accept_length / be if be and self.accept_length else None

    @property
    def measured_speedup(self) -> float | None:
        return self.spec_tok_s / self.baseline_tok_s if self.spec_tok_s and self.baseline_tok_s else None

    @property
    def consistent(self) -> bool | None:
        """Whether the readings predict the speedup the run measured (None: one of them is missing)."""
        p, m = self.predicted_speedup, self.measured_speedup
        return None if p is None or m is None else abs(p / m - 1) <= AGREE

    @property
    def by_client(self) -> Economics | None:
        """The same arithmetic timed by the client, when the busy windows' prediction disagrees with the
        throughput measured in this run and the client timed both servers (None otherwise)."""
        if self.client_only or self.consistent is not False or self.cycle is None or self.cycle.client is None:
            return None
        if self.step is not None and self.step.client is None:
            return None
        return replace(self, client_only=True)

    @property
    def verdict(self) -> str:
        """``pays`` or ``loses`` (accept length against break-even); ``about break-even`` when the prediction
        and the measured throughput fall on either side of 1 within noise, ``unclear`` when they contradict
        each other beyond it; ``""`` when unknown."""
        if (other := self.by_client) is not None:
            return other.verdict
        be, p, m = self.break_even, self.predicted_speedup, self.measured_speedup
        if be is None or self.accept_length is None:
            return ""
        if p is not None and m is not None and (p >= 1) != (m >= 1):
            return "unclear" if self.consistent is False else "about break-even"
        return "pays" if self.accept_length > be else "loses"

    def lines(self) -> list[str]:
        out: list[str] = []
        if self.spec_tok_s and self.baseline_tok_s:
            out.append(f"throughput: speculative {self.spec_tok_s:.1f} decode tok/s vs baseline "
                       f"{self.baseline_tok_s:.1f} decode tok/s ({self.spec_tok_s / self.baseline_tok_s - 1:+.1%})")
        if self.accept_length is not None:
            src = f"; {self.accept_source}" if self.accept_source else ""
            out.append(f"accept length: {self.accept_length:.2f} committed tokens per verify cycle "
                       f"(bonus included{src})")
        c, cs, s, ss = self._times()
        if c is not None and s is not None:
            out.append(f"cycle time (busy time only): {c:.2f} ms per draft+verify cycle ({cs}) vs {s:.2f} ms per "
                       f"baseline decode step ({ss}) ({c / s:.1f}x)")
        elif c is not None:
            out.append(f"cycle time (busy time only): {c:.2f} ms per draft+verify cycle ({cs})")
        for reading in (self.cycle, self.step):
            if reading is not None and reading.agree is False:
                out.append(f"  {reading.describe()}")
        be, p, m = self.break_even, self.predicted_speedup, self.measured_speedup
        if be is None:
            return out
        if (other := self.by_client) is not None:
            out.append(f"break-even accept length over the busy windows: {be:.2f}; it predicts {p:.2f}x decode "
                       f"throughput, but this run measured {m:.2f}x: the client's times hold work outside the engine's "
                       "windows (the HTTP front end, the stream, the client); timed by the client, as the throughput "
                       "was:")
            out.append(f"  {other._verdict_line()}")
            return out
        out.append(self._verdict_line())
        return out

    def _verdict_line(self) -> str:
        be, p, m, verdict = self.break_even, self.predicted_speedup, self.measured_speedup, self.verdict
        head = f"break-even accept length: {be:.2f} (= cycle time / decode step time)"
        if verdict == "unclear":
            return (f"{head} -> unclear: accept length {self.accept_length:.2f} and these times predict {p:.2f}x "
                    f"decode throughput, but this run measured {m:.2f}x; the cycle reading disagrees with the "
                    "measured throughput by more than noise, so it decides nothing (the accept length and the "
                    "times come from different requests or windows)")
        word = {"pays": "speculation pays: accept length is above break-even",
                "loses": "speculation LOSES: accept length is below break-even",
                "about break-even": "about break-even: speculation neither clearly pays nor loses"}[verdict]
        agree = ""
        if p is not None and m is not None:
            agree = (f"; predicts {p:.2f}x decode throughput, this run measured {m:.2f}x"
                     + ("" if self.consistent else " (they disagree by more than noise)"))
        return f"{head} -> {word}{agree}"
