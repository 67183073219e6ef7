"""Replays of the drift verdict on recorded sessions: false alarms and the smallest slowdown flagged.

Pure: samples in, verdicts out (``specwatch baseline check`` and ``specwatch sensitivity`` read the
files). A *session* is the samples of one recording session: one pytest run, one boot. Every
verdict here is the drift gate's own, :func:`specwatch.judge.compare.drift`, against a baseline
made of the given sessions (their pooled samples, and the sessions themselves, which set the
tolerance from their spread when there are ``MIN_SESSIONS`` or more).

A *slowdown* ``s`` lowers the throughput by the fraction ``s``: the samples times ``1 - s`` for a
metric where higher is better, divided by ``1 - s`` where lower is better (a latency).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from specwatch.judge.compare import MIN_SESSIONS, Comparison, DriftBasis, DriftVerdict, drift
from specwatch.judge.variance import MachineSession, PooledTerm, machine_of, machines_of

Sessions = Sequence[Sequence[float]]
Scores = Sequence[float | None]
#: a detector: (the held-out session's samples, the reference sessions in recorded order) -> flagged as slower
Detector = Callable[[Sequence[float], Sessions], bool]
#: the scalings of a held-out session in the leave-one-machine-out replay (2, 4, 6 and 8% slower)
SCALES = (0.98, 0.96, 0.94, 0.92)
#: the grid of the smallest slowdown flagged: 0.1 %
STEP = 0.001
#: no slowdown beyond this is tried: a baseline that cannot flag 90 % flags nothing useful
LIMIT = 0.9


@dataclass(frozen=True)
class Judge:
    """How every verdict of one replay is made: the gate's settings and the metric's direction."""

    higher_is_better: bool = True
    requested: float = 0.05  # the tolerance asked for (the drift gate's default)
    alpha: float = 0.01
    class_spread: tuple[float, str] | None = None  # the machine class's spread, for baselines of few sessions
    n_resamples: int = 4000  # of each verdict's ratio CI (no regression verdict depends on it)
    machine_term: PooledTerm | None = None  # the hardware's pooled machine term, for a run on a new machine

    def verdict(self, current: Sequence[float], sessions: Sessions, scores: Scores | None = None,
                score: float | None = None) -> tuple[Comparison, DriftBasis]:
        """The drift verdict of ``current`` against a baseline made of ``sessions``, as the gate judges a run
        on the machine ``current`` names (:func:`specwatch.judge.variance.machine_of`: against that machine's
        own sessions when it has enough of them, else as one on a new machine); ``scores``: the sessions'
        machine yardstick scores (None where none), ``score``: the current run's."""
        pooled = [float(x) for s in sessions for x in s]
        return drift(current, pooled, higher_is_better=self.higher_is_better, requested=self.requested,
                     alpha=self.alpha, sessions=list(sessions), class_spread=self.class_spread,
                     session_scores=None if scores is None else list(scores), run_score=score,
                     n_resamples=self.n_resamples, machine=machine_of(current), machine_term=self.machine_term)

    def flags(self, current: Sequence[float], sessions: Sessions) -> bool:
        """Whether the drift gate calls ``current`` a regression against ``sessions`` (a :data:`Detector`)."""
        return self.verdict(current, sessions)[0].verdict is DriftVerdict.REGRESSION

    def slowed(self, samples: Sequence[float], slowdown: float) -> MachineSession:
        """``samples`` of a server slower by the fraction ``slowdown``, on the machine they name."""
        keep = 1.0 - slowdown
        return MachineSession([x * keep for x in samples] if self.higher_is_better else [x / keep for x in samples],
                              machine_of(samples))


@dataclass(frozen=True)
class HeldOut:
    """One session judged against the others, as measured and slowed."""

    index: int  # position among the sessions given
    median: float
    comparison: Comparison  # as measured
    basis: DriftBasis
    detects: float | None  # smallest slowdown (on the STEP grid) called a regression; None: not even LIMIT

    @property
    def false_alarm(self) -> bool:
        """A healthy session that the verdict calls a regression."""
        return self.comparison.verdict is DriftVerdict.REGRESSION


def _start(judge: Judge, sessions: Sessions, c: Comparison, tolerance: float) -> float:
    """Where the search for the smallest flagged slowdown starts: the slowdown at which the change of
    medians passes the tolerance and (with enough sessions) the median leaves the sessions' spread
    (which the tolerance from data is made of). Only a guess: the verdict itself decides."""
    refs = [c.median_reference]
    if len(sessions) >= MIN_SESSIONS:  # the sessions' geometric mean: the centre of the session test
        refs.append(math.exp(statistics.fmean(math.log(statistics.median(s)) for s in sessions)))
    if judge.higher_is_better:
        return 1.0 - (1.0 - tolerance) * min(refs) / c.median_current
    return 1.0 - c.median_current * (1.0 - tolerance) / max(refs)


def _first(flagged: Callable[[int], bool], start: int, top: int) -> int | None:
    """The smallest k in 1..top with ``flagged(k)`` (monotone, ``flagged(0)`` false), searched from ``start``."""
    lo, hi = 0, None
    k = min(max(start, 1), top)
    if flagged(k):
        hi, step = k, 1
        while hi - step > lo:  # gallop down until an unflagged point
            if not flagged(hi - step):
                lo = hi - step
                break
            hi, step = hi - step, step * 2
    else:
        lo, step = k, 1
        while hi is None:  # gallop up until a flagged point
            if lo >= top:
                return None
            j = min(lo + step, top)
            if flagged(j):
                hi = j
            else:
                lo, step = j, step * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if flagged(mid):
            hi = mid
        else:
            lo = mid
    return hi


def hold_out(judge: Judge, current: Sequence[float], others: Sessions, index: int = -1,
             scores: Scores | None = None, score: float | None = None) -> HeldOut:
    """``current`` judged against ``others`` as measured, and the smallest slowdown of it that the
    verdict calls a regression (0.0 when it already is one); ``scores`` and ``score``: the machine
    yardstick scores of ``others`` and of ``current``, as :meth:`Judge.verdict` takes them."""
    c, basis = judge.verdict(current, others, scores, score)
    if c.verdict is DriftVerdict.REGRESSION:
        return HeldOut(index, c.median_current, c, basis, 0.0)

    def flagged(k: int) -> bool:
        slowed = judge.slowed(current, k * STEP)
        return judge.verdict(slowed, others, scores, score)[0].verdict is DriftVerdict.REGRESSION

    start = math.ceil(_start(judge, others, c, basis.tolerance) / STEP)
    k = _first(flagged, start, round(LIMIT / STEP))
    return HeldOut(index, c.median_current, c, basis, None if k is None else round(k * STEP, 6))


def leave_one_out(judge: Judge, sessions: Sessions, scores: Scores | None = None) -> list[HeldOut]:
    """Each session judged against all the others (needs 2 or more sessions); ``scores``: each
    session's machine yardstick score (None where none), so the verdicts normalise as the gate would."""
    if len(sessions) < 2:
        raise ValueError(f"leave-one-out needs at least 2 sessions, got {len(sessions)}")

    def others(xs: Sequence, i: int) -> list:
        return [x for j, x in enumerate(xs) if j != i]

    return [hold_out(judge, current, others(sessions, i), i, None if scores is None else others(scores, i),
                     None if scores is None else scores[i])
            for i, current in enumerate(sessions)]


@dataclass
class Rate:
    """How often one group of runs was called a regression."""

    group: str
    verdicts: list[DriftVerdict] = field(default_factory=list)
    changes: list[float] = field(default_factory=list)  # each run's change of medians against its baseline
    tolerances: list[float] = field(default_factory=list)  # the tolerance each verdict used

    def add(self, c: Comparison, basis: DriftBasis) -> None:
        self.verdicts.append(c.verdict)
        self.changes.append(c.change)
        self.tolerances.append(basis.tolerance)

    @property
    def judged(self) -> int:
        return len(self.verdicts)

    @property
    def regressions(self) -> int:
        return sum(1 for v in self.verdicts if v is DriftVerdict.REGRESSION)

    @property
    def rate(self) -> float:
        return self.regressions / self.judged if self.verdicts else 0.0


def rates(
    judge: Judge,
    healthy: Sessions,
    slowed: Sequence[tuple[str, Sessions]] = (),
    *,
    baseline: Sessions | None = None,
    synthetic: Sequence[float] = (),
) -> list[Rate]:
    """The verdict's false alarms on ``healthy`` runs and its detections on slowed ones.

    Against ``baseline`` when given; otherwise each healthy run (and each synthetic slowdown of it)
    is judged against the other healthy runs, and each run of a ``slowed`` group against all of
    them. ``synthetic``: slowdowns applied to the healthy runs (a detection rate without slowed runs).
    """
    if baseline is None and len(healthy) < 2:
        raise ValueError("without a baseline, at least 2 healthy runs are needed (each is judged against the others)")

    def reference(i: int | None) -> Sessions:
        if baseline is not None:
            return baseline
        return [s for j, s in enumerate(healthy) if j != i]

    out = [Rate("healthy")]
    for i, run in enumerate(healthy):
        out[0].add(*judge.verdict(run, reference(i)))
    for s in synthetic:
        rate = Rate(f"synthetic -{s:.1%}".replace(".0%", "%"))
        for i, run in enumerate(healthy):
            rate.add(*judge.verdict(judge.slowed(run, s), reference(i)))
        out.append(rate)
    for name, runs in slowed:
        rate = Rate(name)
        for run in runs:
            rate.add(*judge.verdict(run, reference(None)))
        out.append(rate)
    return out


@dataclass
class HeldOutRates:
    """One detector's counts over every held-out session: false alarms as recorded, and detections of
    each scaling (:data:`SCALES`)."""

    detector: str
    judged: int = 0
    false_alarms: int = 0
    detected: dict[float, int] = field(default_factory=dict)


def leave_one_machine_out(detectors: Sequence[tuple[str, Detector]], sessions: Sessions, *,
                          higher_is_better: bool = True, scales: Sequence[float] = SCALES,
                          machines: Sequence[str] | None = None) -> list[HeldOutRates]:
    """Each session judged by each detector against the sessions of every *other* machine (in recorded
    order), as recorded and with its samples scaled by each of ``scales`` (a slower server: times the
    scale where higher is better, divided by it where lower is). ``machines``: each session's machine
    (default: the machine each names, :func:`specwatch.judge.variance.machines_of`); needs 2 or more."""
    labels = list(machines) if machines is not None else machines_of(sessions)
    if len(set(labels)) < 2:
        raise ValueError(f"leave-one-machine-out needs sessions of 2 or more machines, got {len(set(labels))}")
    out = [HeldOutRates(name, detected=dict.fromkeys(scales, 0)) for name, _ in detectors]
    for i, current in enumerate(sessions):
        others = [s for s, m in zip(sessions, labels, strict=True) if m != labels[i]]
        for rate, (_, flagged) in zip(out, detectors, strict=True):
            rate.judged += 1
            rate.false_alarms += bool(flagged(list(current), others))
            for k in scales:
                slowed = [x * k if higher_is_better else x / k for x in current]
                rate.detected[k] += bool(flagged(slowed, others))
    return out


def machine_labels(sessions: Sessions) -> list[str | None]:
    """The machine each session names (None: none)."""
    return [machine_of(s) for s in sessions]
