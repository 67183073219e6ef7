"""The one rule for a recorded round spread (a prior): whether a run pools it, and at what weight.

Pure (numpy/scipy). A prior is the round-to-round spread of earlier A/B runs of the same served model and
workload (:class:`RoundPrior`, the SD of their log head/base ratios around each run's mean, with its degrees
of freedom). Every verdict that pools one (``specwatch ab``'s looks, the speculation and tuned-against-untuned
gates) asks :func:`decide`, which says:

* **whether** it is pooled: the data outrank the prior. The run's own rounds are tested against it (a
  two-sided F test of their variance against the prior's, the prior counted at its weight); rounds that fit
  it worse than :data:`PRIOR_FIT_P` set it aside, and the run is judged on its own rounds alone (Student's t
  with their own degrees of freedom, an exact test whatever the spread). Why: rounds of a GPU-bound model
  that agreed within 0.1 % pooled with a tiny launch-bound model's 25.9 % passed a -9 % slowdown;
* **at what weight**: its degrees of freedom, at most :data:`MAX_PRIOR_DF` rounds of evidence
  (:func:`weight`); :func:`pool` is the one pooled variance (a moderated t) at that weight;
* **why** it is set aside, in a short phrase for a verdict's message.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as _sps

#: a prior is set aside when the run's rounds fit it worse than this (two-sided F test, :func:`decide`): the
#: false alarms this adds are bounded by the chance of setting a right prior aside (this level) times the
#: chance that a healthy head then crosses the tolerance, replayed on every recorded A/A (tests/unit/test_prior_fit.py)
PRIOR_FIT_P = 0.01
#: a recorded round spread counts as at most this many rounds of evidence: recorded rounds are heavier-tailed
#: than normal (kurtosis 7-9 on h200x1), and at 39 df the replayed false-alarm rate of ab's rule on h200x1's own
#: rounds was 1.7 % against an alpha of 1 %; at 20 it is within alpha
MAX_PRIOR_DF = 20


@dataclass(frozen=True)
class RoundPrior:
    """The round-to-round spread (SD of log head/base ratios around their mean) measured on earlier
    A/B runs of one machine class, with its degrees of freedom (rounds - 1, summed over runs)."""

    spread: float
    df: int

    def __post_init__(self) -> None:
        if not (self.spread >= 0 and math.isfinite(self.spread)) or self.df < 1:
            raise ValueError(f"a round prior needs a finite spread >= 0 and df >= 1, got {self.spread}, {self.df}")


def round_prior(residual_sets: Sequence[Sequence[float]]) -> RoundPrior | None:
    """Pool per-run round ratios into a prior: each run's log ratios around their own mean (a real
    difference between the sides does not inflate it); None when no run has two rounds."""
    ss, df = 0.0, 0
    for ratios in residual_sets:
        x = _logs(ratios)
        if x.size >= 2:
            ss += float(((x - x.mean()) ** 2).sum())
            df += int(x.size - 1)
    return RoundPrior(math.sqrt(ss / df), df) if df else None


def weight(prior: RoundPrior) -> int:
    """The rounds of evidence a prior counts as where it is pooled: its df, at most :data:`MAX_PRIOR_DF`."""
    return min(prior.df, MAX_PRIOR_DF)


def pool(prior: RoundPrior | None, sd: np.ndarray | float, rounds: int) -> tuple[np.ndarray | float, int]:
    """(the spread a verdict uses, its degrees of freedom) for ``rounds`` rounds of own spread ``sd`` (an array
    of rows, or one value): pooled with ``prior`` at its :func:`weight` (a moderated t), or the rounds' own
    spread alone on ``rounds - 1`` df where ``prior`` is None (set aside, or none recorded)."""
    if prior is None:
        return sd, rounds - 1
    w = weight(prior)
    df = w + rounds - 1
    return np.sqrt((w * prior.spread**2 + (rounds - 1) * np.square(sd)) / df), df


def _logs(ratios: Sequence[float]) -> np.ndarray:
    return np.log(np.asarray([r for r in ratios if r > 0 and math.isfinite(r)], dtype=float))


def _f(logs: np.ndarray, prior: RoundPrior) -> tuple[np.ndarray, int, int]:
    """(F per row, d1, d2): each row's variance of log ratios over the prior's, the prior at its :func:`weight`
    (against a spread of 0: inf, or nan where a row's rounds agree exactly)."""
    var = np.atleast_2d(logs).var(axis=1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        f = var / prior.spread**2 if prior.spread > 0 else np.where(var > 0, np.inf, np.nan)
    return f, int(np.atleast_2d(logs).shape[1] - 1), weight(prior)


def fit_p(logs: np.ndarray, prior: RoundPrior) -> np.ndarray:
    """Per row of log ratios (rows x rounds, rounds >= 2), the two-sided p of "these rounds wander as the prior
    says" (an F test of their variance against the prior's). A small p says the prior is not this key's: its
    rounds are far tighter (a prior measured on another model) or far looser than it."""
    f, d1, d2 = _f(logs, prior)
    p = np.minimum(1.0, 2 * np.minimum(_sps.f.cdf(f, d1, d2), _sps.f.sf(f, d1, d2)))
    return np.where(np.isnan(f), 1.0, p)


def fits(logs: np.ndarray, prior: RoundPrior) -> np.ndarray:
    """Per row of log ratios (rows x rounds, rounds >= 2): whether the rounds fit the prior, so that it is pooled
    (:func:`fit_p` at :data:`PRIOR_FIT_P`); where not, it is set aside."""
    return fit_p(logs, prior) >= PRIOR_FIT_P


def noisier_p(ratios: Sequence[float], prior: RoundPrior) -> float:
    """One-sided p of "these rounds are no noisier than the prior" (the F test of :func:`fit_p`; 1.0 with fewer
    than 2 rounds). A small p means today's rounds wander more than the record says, so a verdict that pools the
    record claims too much."""
    x = _logs(ratios)
    if x.size < 2:
        return 1.0
    f, d1, d2 = _f(x, prior)
    return 1.0 if np.isnan(f[0]) else float(_sps.f.sf(f[0], d1, d2))


@dataclass(frozen=True)
class PriorUse:
    """What :func:`decide` made of one prior against a run's rounds."""

    prior: RoundPrior
    weight: int  # the rounds of evidence it counts as where pooled (its df, at most MAX_PRIOR_DF)
    p: float  # the F test's two-sided p (1.0: fewer than 2 rounds, nothing to test)
    own: float | None  # the rounds' own spread, SD of their log ratios (None: fewer than 2 rounds)
    set_aside: str = ""  # why it is not pooled ("": pooled)

    @property
    def pooled(self) -> RoundPrior | None:
        """The prior a verdict pools (None: set aside, the rounds judged alone)."""
        return None if self.set_aside else self.prior

    @property
    def worth(self) -> str:
        """'39 df (counted as 20)' or '14 df': the prior's degrees of freedom and the weight pooled."""
        return f"{self.prior.df} df" + (f" (counted as {self.weight})" if self.weight < self.prior.df else "")


def decide(prior: RoundPrior, ratios: Sequence[float] = ()) -> PriorUse:
    """The rule: whether the run's rounds (``ratios``, head/base per round) fit ``prior`` (the F test at
    :data:`PRIOR_FIT_P`; with fewer than 2 rounds there is nothing to test and it is pooled), the weight it is
    pooled at, and why it is set aside where it is."""
    x = _logs(ratios)
    if x.size < 2:
        return PriorUse(prior, weight(prior), 1.0, None)
    own, p = float(x.std(ddof=1)), float(fit_p(x, prior)[0])
    if fits(x, prior)[0]:
        return PriorUse(prior, weight(prior), p, own)
    far = "less" if own < prior.spread else "more"
    why = f"this run's {x.size} rounds wander {own:.2%}, far {far} than it (F test p={p:.2g} < {PRIOR_FIT_P:g})"
    return PriorUse(prior, weight(prior), p, own, why)


__all__ = ["MAX_PRIOR_DF", "PRIOR_FIT_P", "PriorUse", "RoundPrior", "decide", "fit_p", "fits", "noisier_p", "pool",
           "round_prior", "weight"]
