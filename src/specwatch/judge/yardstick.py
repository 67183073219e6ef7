"""Whether a drift verdict reads throughput against the machine yardstick, and how (pure).

Every run and every baseline session records the machine yardstick (:mod:`specwatch.load.yardstick`),
a score that is higher on a faster machine. A session's metric *normalised* by it is its samples
times ``ref / score`` (a metric where higher is better: throughput moves with the machine) or
times ``score / ref`` (lower is better: a latency), where ``ref`` is the geometric mean of the
baseline sessions' scores, so normalised numbers stay in the metric's unit, "as on the baseline's
typical machine".

The rule (:func:`decide`), in this order; the first that applies gives the reason:

1. no baseline session carries a comparable yardstick → not normalised, and ``quiet`` (an old
   baseline: nothing is said);
2. the run carries no comparable yardstick → not normalised;
3. fewer than :data:`MIN_SESSIONS` (6) sessions carry one → not normalised;
4. over the sessions that carry one, the normalised session spread (SD of log medians) is not
   below :data:`SHRINK` (3/4) of the raw spread of the same sessions → not normalised. Dividing by a
   yardstick that does not move with the server adds its own spread; with a handful of sessions
   chance alone often makes it look smaller, so it must shrink clearly, over at least 6 sessions
   (the issue asked for 6 freshly started machines before trusting it);
5. some sessions carry none, and the drift tolerance from the normalised spread of those that do
   (:func:`specwatch.judge.stats.drift_tolerance`) is wider than the one from the raw spread of
   all sessions → not normalised (normalising would blunt the gate);
6. otherwise normalised: the drift verdict compares the normalised samples of the run and of
   the sessions that carry a yardstick, at the tolerance of their normalised spread.

Two yardsticks compare only with the same ``version``, ``device`` kind, ``gpu`` model and ``width``
(:func:`comparable`); a session's yardstick that does not compare with the run's counts as none.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from specwatch.judge import stats, variance

#: sessions with a yardstick needed before normalising (fewer: a chance correlation can pass for one)
MIN_SESSIONS = 6
#: the normalised session spread must be below this share of the raw one
SHRINK = 0.75
#: the fields that must agree for two scores to compare
KIND_KEYS = ("version", "device", "gpu", "width")


def score(yardstick: Any) -> float | None:
    """The yardstick's score, or None when it has no positive finite one."""
    s = yardstick.get("score") if isinstance(yardstick, Mapping) else None
    if isinstance(s, (int, float)) and not isinstance(s, bool) and math.isfinite(s) and s > 0:
        return float(s)
    return None


def kind(yardstick: Any) -> tuple[Any, ...] | None:
    """What a yardstick's score is comparable with (version, device kind, GPU model, width); None without a score."""
    if score(yardstick) is None:
        return None
    return tuple(yardstick.get(k) for k in KIND_KEYS)


def comparable(a: Any, b: Any) -> bool:
    """Whether two yardsticks' scores compare (same version, device kind, GPU model and width)."""
    ka = kind(a)
    return ka is not None and ka == kind(b)


def scores_for(run: Any, sessions: Sequence[Any]) -> tuple[float | None, list[float | None]]:
    """The run's score and each session's, None where a session's yardstick does not compare with
    the run's. Without a run yardstick, the sessions of the kind most of them share (ties: the latest)."""
    like = run if kind(run) is not None else None
    if like is None:
        kinds = [kind(y) for y in sessions]
        counts = Counter(k for k in kinds if k is not None)
        if counts:
            top = max(counts.values())
            like = next(
                y
                for y, k in zip(reversed(sessions), reversed(kinds), strict=True)
                if k is not None and counts[k] == top
            )
    return score(run), [score(y) if like is not None and comparable(y, like) else None for y in sessions]


@dataclass(frozen=True)
class Normalisation:
    """The decision of :func:`decide`, with both spreads and a one-line reason."""

    use_normalised: bool
    raw_spread: float | None  # SD of log session medians, over the sessions with a yardstick
    normalised_spread: float | None  # the same, normalised
    sessions: int  # the baseline's sessions
    with_yardstick: int  # of them, those with a comparable yardstick
    reference_score: float | None  # geometric mean of their scores
    run_score: float | None
    reason: str
    quiet: bool = False  # nothing worth saying: no session carries a yardstick

    @property
    def machine_change(self) -> float | None:
        """How much faster (+) or slower (-) the run's machine scored than the baseline's typical one."""
        if self.run_score is None or self.reference_score is None:
            return None
        return self.run_score / self.reference_score - 1.0


def _factor(s: float, ref: float, higher_is_better: bool) -> float:
    return ref / s if higher_is_better else s / ref


def _spread(medians: Sequence[float]) -> float:
    return float(np.log(np.asarray(medians, dtype=float)).std(ddof=1))


def decide(
    medians: Sequence[float],
    scores: Sequence[float | None],
    run_score: float | None,
    *,
    higher_is_better: bool = True,
    alpha: float = 0.01,
) -> Normalisation:
    """Whether to normalise a drift verdict by the yardstick: the rule of the module docstring.

    ``medians``: each baseline session's median of the metric; ``scores``: each session's
    yardstick score (None: none, or not comparable); ``run_score``: the run's.
    """
    if len(medians) != len(scores):
        raise ValueError(f"{len(medians)} session medians but {len(scores)} scores")
    n = len(medians)
    pairs = [(m, s) for m, s in zip(medians, scores, strict=True) if s is not None]
    k = len(pairs)
    ref = math.exp(sum(math.log(s) for _, s in pairs) / k) if pairs else None
    raw = norm = None
    if k >= 2:
        raw = _spread([m for m, _ in pairs])
        norm = _spread([m * _factor(s, ref, higher_is_better) for m, s in pairs])  # type: ignore[arg-type]

    def out(use: bool, reason: str, quiet: bool = False) -> Normalisation:
        return Normalisation(use, raw, norm, n, k, ref, run_score, reason, quiet)

    if k == 0:
        return out(False, f"not normalised: none of {n} session(s) carries a machine yardstick", quiet=True)
    if run_score is None:
        return out(False, "not normalised: this run carries no machine yardstick comparable with the baseline's")
    if k < MIN_SESSIONS:
        return out(
            False,
            f"not normalised: only {k} of {n} sessions {'carries' if k == 1 else 'carry'} a machine yardstick "
            f"(needs {MIN_SESSIONS})",
        )
    assert raw is not None and norm is not None
    if not norm < SHRINK * raw:
        return out(
            False,
            f"not normalised by the machine yardstick: it does not shrink the session spread by a quarter "
            f"({raw:.1%} -> {norm:.1%})",
        )
    if k < n:
        mine = stats.drift_tolerance(norm, k, alpha).tolerance
        every = stats.drift_tolerance(_spread(medians), n, alpha).tolerance
        if mine > every:
            return out(
                False,
                f"not normalised: the {k} of {n} sessions with a machine yardstick give a wider "
                f"tolerance normalised ({mine:.1%}) than all {n} raw ({every:.1%})",
            )
    change = run_score / ref - 1.0  # type: ignore[operator]
    return out(
        True,
        f"normalised by the machine yardstick: session spread {raw:.1%} -> {norm:.1%} over {k} "
        f"sessions; this machine scores {change:+.1%} against the baseline's",
    )


@dataclass(frozen=True)
class Normalised:
    """The samples a drift verdict compares: normalised when ``decision.use_normalised``, else as given."""

    decision: Normalisation
    current: list[float]
    reference: list[float]
    sessions: Sequence[Sequence[float]]


def normalise(
    current: Sequence[float],
    reference: Sequence[float],
    sessions: Sequence[Sequence[float]],
    scores: Sequence[float | None],
    run_score: float | None,
    *,
    higher_is_better: bool = True,
    alpha: float = 0.01,
) -> Normalised:
    """:func:`decide` on the sessions' medians, and the samples to compare accordingly: when
    normalised, the run's samples and those of each session with a yardstick (the reference is
    their pool); otherwise ``current``, ``reference`` and ``sessions`` unchanged."""
    medians = [float(np.median(np.asarray(s, dtype=float))) for s in sessions]
    d = decide(medians, scores, run_score, higher_is_better=higher_is_better, alpha=alpha)
    if not d.use_normalised:  # the sessions as given (each keeps the machine it names)
        return Normalised(d, list(current), list(reference), list(sessions))
    ref = d.reference_score
    assert ref is not None and run_score is not None
    scaled = [
        variance.MachineSession([x * _factor(s, ref, higher_is_better) for x in xs], variance.machine_of(xs))
        for xs, s in zip(sessions, scores, strict=True)
        if s is not None
    ]
    now = [x * _factor(run_score, ref, higher_is_better) for x in current]
    return Normalised(d, now, [x for xs in scaled for x in xs], scaled)


__all__ = [
    "KIND_KEYS",
    "MIN_SESSIONS",
    "SHRINK",
    "Normalisation",
    "Normalised",
    "comparable",
    "decide",
    "kind",
    "normalise",
    "score",
    "scores_for",
]
