"""Paired rounds: the A/B of two sides measured in alternating rounds, judged on the rounds' ratios.

Pure: each round is one independent pair (the runs inside a boot share its luck), so the rounds'
log ratios are the samples; a prior round spread from earlier A/B runs can be pooled in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as _sps

from specwatch.judge.stats import as_array


@dataclass(frozen=True)
class PairedRounds:
    """Per-round ratios of two sides measured in alternating rounds, summarised on the log scale.

    ``ratio`` is the geometric mean of the rounds' ratios, ``low``/``high`` its two-sided CI at
    ``confidence`` (Student's t on the log ratios: each round is one independent pair, the runs
    inside a boot are not), ``p`` the two-sided p of "no difference". With a :class:`RoundPrior`
    the round-to-round variance is pooled with the one measured before on the machine class
    (``df`` counts both), so few rounds still give a usable interval.
    """

    rounds: int
    ratio: float
    low: float
    high: float
    p: float
    spread: float  # standard deviation of the log ratios (≈ the relative round-to-round noise)
    pooled_spread: float | None = None  # the spread the interval used, pooled with a prior (None: no prior)
    df: int | None = None  # degrees of freedom of the interval's spread


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
        x = np.log(np.asarray([r for r in ratios if r > 0 and math.isfinite(r)], dtype=float))
        if x.size >= 2:
            ss += float(((x - x.mean()) ** 2).sum())
            df += int(x.size - 1)
    return RoundPrior(math.sqrt(ss / df), df) if df else None


def detectable(prior: RoundPrior, rounds: int, alpha: float, tolerance: float) -> float:
    """The smallest slowdown (a fraction) that ``rounds`` rounds flag 19 times in 20 at this round
    spread: a regression needs a one-sided p below ``alpha`` and a change beyond ``tolerance``, so
    the true change must clear the larger of the two by 1.645 standard errors."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    se = prior.spread / math.sqrt(rounds)
    t = float(_sps.t.ppf(1 - alpha, df=prior.df + rounds - 1))
    return float(-math.expm1(-(max(-math.log1p(-tolerance), t * se) + 1.6448536269514722 * se)))


def noisier_than_prior(ratios: Sequence[float], prior: RoundPrior) -> float:
    """One-sided p of "these rounds are no noisier than the prior's spread" (an F test of their
    variance against the prior's; 1.0 with fewer than 2 rounds). A small p means today's rounds
    wander more than the record says, so a verdict that pools the record claims too much."""
    x = np.log(np.asarray([r for r in ratios if r > 0 and math.isfinite(r)], dtype=float))
    if x.size < 2:
        return 1.0
    if prior.spread == 0:
        return 0.0 if float(x.var(ddof=1)) > 0 else 1.0
    return float(_sps.f.sf(float(x.var(ddof=1)) / prior.spread**2, x.size - 1, prior.df))


def prior_fit(ratios: Sequence[float], prior: RoundPrior, weight: int | None = None) -> float:
    """Two-sided p of "these rounds wander as the prior says" (an F test of their variance against the prior's,
    the prior worth ``weight`` rounds, default its df; 1.0 with fewer than 2 rounds). A small p says the prior is
    not this key's: its rounds are far tighter (a prior measured on another model) or far looser than it."""
    x = np.log(np.asarray([r for r in ratios if r > 0 and math.isfinite(r)], dtype=float))
    if x.size < 2:
        return 1.0
    var = float(x.var(ddof=1))
    if prior.spread == 0:
        return 0.0 if var > 0 else 1.0
    f, d1, d2 = var / prior.spread**2, x.size - 1, weight or prior.df
    return float(min(1.0, 2 * min(_sps.f.cdf(f, d1, d2), _sps.f.sf(f, d1, d2))))


def paired_rounds(ratios: Sequence[float], confidence: float = 0.90, prior: RoundPrior | None = None) -> PairedRounds:
    """Summarise per-round ratios (head/base, one per alternating round); needs ≥ 2 rounds, or 1
    with a ``prior`` (whose spread then stands for the round-to-round noise alone)."""
    x = np.log(as_array(ratios, "ratios"))
    if x.size < (1 if prior else 2):
        raise ValueError("paired_rounds needs at least 2 rounds (1 with a prior)")
    mean = float(x.mean())
    sd = float(x.std(ddof=1)) if x.size >= 2 else 0.0
    if prior is not None:  # pooled variance, as in a moderated t: the prior's df plus this run's
        df = prior.df + x.size - 1
        used = math.sqrt((prior.df * prior.spread**2 + (x.size - 1) * sd**2) / df)
    else:
        df, used = x.size - 1, sd
    se = used / math.sqrt(x.size)
    pooled = used if prior is not None else None
    if se == 0:
        return PairedRounds(int(x.size), math.exp(mean), math.exp(mean), math.exp(mean),
                            0.0 if mean else 1.0, sd, pooled, int(df))
    t = float(_sps.t.ppf(0.5 + confidence / 2, df=df))
    p = float(2 * _sps.t.sf(abs(mean) / se, df=df))
    return PairedRounds(int(x.size), math.exp(mean), math.exp(mean - t * se), math.exp(mean + t * se), p, sd,
                        pooled, int(df))


__all__ = ["PairedRounds", "RoundPrior", "detectable", "noisier_than_prior", "paired_rounds", "prior_fit",
           "round_prior"]
