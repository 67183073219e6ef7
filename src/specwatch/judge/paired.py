"""Paired rounds: the A/B of two sides measured in alternating rounds, judged on the rounds' ratios.

Pure: each round is one independent pair (the runs inside a boot share its luck), so the rounds'
log ratios are the samples; a prior round spread from earlier A/B runs can be pooled in, at the weight
:func:`specwatch.judge.roundprior.decide` gives it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as _sps

from specwatch.judge.roundprior import RoundPrior, pool, round_prior
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


def detectable(prior: RoundPrior, rounds: int, alpha: float, tolerance: float) -> float:
    """The smallest slowdown (a fraction) that ``rounds`` rounds flag 19 times in 20 at this round
    spread: a regression needs a one-sided p below ``alpha`` and a change beyond ``tolerance``, so
    the true change must clear the larger of the two by 1.645 standard errors."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    se = prior.spread / math.sqrt(rounds)
    t = float(_sps.t.ppf(1 - alpha, df=pool(prior, 0.0, rounds)[1]))
    return float(-math.expm1(-(max(-math.log1p(-tolerance), t * se) + 1.6448536269514722 * se)))


def paired_rounds(ratios: Sequence[float], confidence: float = 0.90, prior: RoundPrior | None = None) -> PairedRounds:
    """Summarise per-round ratios (head/base, one per alternating round); needs ≥ 2 rounds, or 1
    with a ``prior`` (whose spread then stands for the round-to-round noise alone)."""
    x = np.log(as_array(ratios, "ratios"))
    if x.size < (1 if prior else 2):
        raise ValueError("paired_rounds needs at least 2 rounds (1 with a prior)")
    mean = float(x.mean())
    sd = float(x.std(ddof=1)) if x.size >= 2 else 0.0
    spread, df = pool(prior, sd, int(x.size))  # pooled with the prior at its capped weight (a moderated t)
    used = float(spread)
    se = used / math.sqrt(x.size)
    pooled = used if prior is not None else None
    if se == 0:
        return PairedRounds(int(x.size), math.exp(mean), math.exp(mean), math.exp(mean),
                            0.0 if mean else 1.0, sd, pooled, int(df))
    t = float(_sps.t.ppf(0.5 + confidence / 2, df=df))
    p = float(2 * _sps.t.sf(abs(mean) / se, df=df))
    return PairedRounds(int(x.size), math.exp(mean), math.exp(mean - t * se), math.exp(mean + t * se), p, sd,
                        pooled, int(df))


#: RoundPrior and round_prior are the prior rule's (:mod:`specwatch.judge.roundprior`), named here for callers
#: that judge paired rounds
__all__ = ["PairedRounds", "RoundPrior", "detectable", "paired_rounds", "round_prior"]
