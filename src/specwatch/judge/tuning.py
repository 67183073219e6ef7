"""What a relative gate's comparison means, in words: the tuned-against-untuned and the speculation
gates (judged on their boots), and ``specwatch profile allreduce`` (judged on its launches).

Pure: judging only (:mod:`specwatch.judge.compare`, :mod:`specwatch.judge.paired`).

A relative gate boots its two servers ``alternate_rounds`` times each, A B A B ...; the runs inside a
boot share that boot's luck (boot-to-boot differences of 5-13 % on one H200, tens of percent on a
shared 2-core VM), so a round, one fresh boot of each side, is the independent sample, as in
``specwatch ab``: the rounds' ratios are judged with :func:`specwatch.judge.paired.paired_rounds`,
their round-to-round spread pooled with the one recorded for the machine class when there is one.
One round with no recorded spread (a first run on a new host) is judged by :func:`beats` only against
a conservative boot-to-boot term scaled from the runs' own within-boot spread
(:func:`first_round_spread`): it decides a difference that is large against that noise, and otherwise
says in one line how many rounds would decide it, or that none in reach would.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as _sps

from specwatch.judge import compare, paired, roundprior

__all__ = ["FIRST_ROUND_BOOT_FACTOR", "FIRST_ROUND_MIN_BOOT", "MAX_ADVISED_ROUNDS", "NOT_JUDGED", "UNSURE",
           "RoundsVerdict", "beats", "first_round_spread", "round_ratios", "rounds_to_decide", "tuning_effect",
           "tuning_rounds", "unread_difference"]

#: the verdicts of :class:`RoundsVerdict` beyond pass / fail / no_effect
UNSURE, NOT_JUDGED = "unsure", "not_judged"
#: one round and no recorded round spread: the boot-to-boot term of the round's log ratio, as a multiple of
#: the runs' own within-boot spread. Chosen on the shipped baselines' sessions: two sessions of one profile
#: recorded within an hour stand for two boots of one round of an A/A. At 4 such pairs are decided (pass or
#: fail at margin 0, alpha 0.01) 0/16 on cpu-2core, 2/122 on h200x1, 0/20 on h200x2-nvlink: 1.3 %, within
#: 2 x alpha; at 3, 6/122 on h200x1 (docs/reference/statistics.md)
FIRST_ROUND_BOOT_FACTOR = 4.0
#: ... and never below 2 % (above the smallest recorded round spread, h200x1's 1.26 %)
FIRST_ROUND_MIN_BOOT = 0.02
#: the most rounds an undecided verdict may advise; beyond it, it says that no number in reach decides
MAX_ADVISED_ROUNDS = 10


def tuning_effect(gain: compare.GateResult, min_effect: float) -> tuple[str, str]:
    """What a tuned/untuned gate result means: (sentence, verdict for the table).

    A win needs significance AND a gain of at least ``min_effect``; a significant gain below it is
    "no meaningful effect" (boot-to-boot drift alone reaches 2% with p < 0.01 on the H200 pair).
    """
    size = f"{min_effect * 100:g}%"
    if gain.passed and gain.gain >= min_effect:
        return f"tuning helps: {gain.gain * 100:+.1f}% (p={gain.p_pass:.2g}), at least {size}", "pass"
    if gain.passed:
        return (f"no meaningful effect: {gain.gain * 100:+.1f}% is significant (p={gain.p_pass:.2g}) but "
                f"smaller than the {size} this profile counts as an effect", "no_effect")
    if gain.verdict is compare.GateVerdict.NO_EFFECT:
        return f"no measurable effect: {gain.gain * 100:+.1f}% (p={gain.p_differ:.2g})", "no_effect"
    if gain.verdict is compare.GateVerdict.FAIL:
        return f"tuning makes it worse: {gain.gain * 100:+.1f}% (p={gain.p_fail:.2g})", "fail"
    return f"{gain.verdict.value}: {gain.gain * 100:+.1f}%", gain.verdict.value


#: how a side misses what :func:`beats` asks: falls short of a floor, or (``at_most``) exceeds an allowance
_MISS = {False: "falls short", True: "exceeds it"}

#: what would decide rounds that are unsure
MORE_ROUNDS = "more rounds would decide ([gates] alternate_rounds)"

@dataclass(frozen=True)
class RoundsVerdict:
    """A relative gate judged on its rounds (each round one fresh boot of each side).

    ``verdict``: pass, fail, no_effect, unsure (the rounds can neither show nor rule out what the gate
    asks) or not_judged (one round and no recorded round spread). ``ratio``: side a over side b, the
    geometric mean of the rounds' ratios; ``low``/``high`` its one-sided 1 - alpha bounds (None when not
    judged); ``p``: the one-sided p of the direction that decided (None when not judged). ``advice``: what
    would decide it (more rounds, a recorded round spread), kept apart so that a caller for whom it cannot
    help (settings the server never reads) leaves it out (:attr:`finding`).
    """

    verdict: str
    ratio: float
    low: float | None
    high: float | None
    p: float | None
    rounds: int
    finding: str  # what it means, with the numbers
    design: str  # the rounds and where the boot-to-boot term came from
    advice: str = ""  # what would decide it, when more rounds or a round spread would

    @property
    def sentence(self) -> str:
        """The finding and the advice."""
        return f"{self.finding}; {self.advice}" if self.advice else self.finding

    @property
    def judged(self) -> bool:
        return self.verdict != NOT_JUDGED

    @property
    def message(self) -> str:
        return f"{self.sentence}\n{self.design}"


def round_ratios(a_rounds: Sequence[Sequence[float]], b_rounds: Sequence[Sequence[float]]) -> list[float]:
    """Per round, the median of side a's runs over the median of side b's (rounds paired in order;
    a round that is missing on either side, or not positive, is left out)."""
    out = []
    for a, b in zip(a_rounds, b_rounds, strict=False):
        if a and b:
            ma, mb = statistics.median(a), statistics.median(b)
            if ma > 0 and mb > 0 and math.isfinite(ma / mb):
                out.append(ma / mb)
    return out


def _pct(ratio: float) -> str:
    return f"{(ratio - 1) * 100:+.1f}%"


def _num(x: float) -> str:
    """A ratio or bound: three decimals, or three significant digits far from 1 (a bound of one wide round)."""
    return f"{x:.3f}" if 1e-3 <= abs(x) < 1e3 else f"{x:.3g}"


def _summary(ratios: Sequence[float], alpha: float, prior: paired.RoundPrior | None, source: str,
             names: tuple[str, str], scale: float = 1.0) -> tuple[paired.PairedRounds | None, str]:
    """(paired rounds of ``ratios / scale`` at one-sided 1 - alpha bounds, the design sentence); (None,
    why) when one round has no prior."""
    per_round = ", ".join(f"{r:.3f}" for r in ratios)
    head = f"{names[0]}/{names[1]} per round ({len(ratios)} round(s), each a fresh boot of both): {per_round}"
    if not ratios:
        return None, f"{names[0]}/{names[1]}: no round measured both sides"
    if len(ratios) < 2 and prior is None:
        return None, (f"{head}; one round and no round spread recorded for this machine class: the runs of one "
                      "boot share its luck, so they cannot tell a change from boot-to-boot drift")
    use = roundprior.decide(prior, ratios) if prior is not None else None  # the data outrank the prior
    summary = paired.paired_rounds([r / scale for r in ratios], confidence=1 - 2 * alpha,
                                   prior=use.pooled if use is not None else None)
    if use is None or use.set_aside:
        aside = (f"; the round spread {use.prior.spread:.1%} of {source} is set aside: {use.set_aside}"
                 if use is not None else "")
        spread = f"round-to-round spread {summary.spread:.1%} of these rounds alone ({summary.df} df){aside}"
    else:
        spread = (f"round-to-round spread {summary.spread:.1%} pooled with {use.prior.spread:.1%} over {use.worth} "
                  f"of {source}: {summary.pooled_spread:.1%} over {summary.df} df")
    return summary, f"{head}; {spread}"


def _not_judged(ratios: Sequence[float], design: str, what: str) -> RoundsVerdict:
    ratio = ratios[0] if ratios else math.nan
    shown = f" ({_pct(ratio)} in its one round)" if ratios else ""
    return RoundsVerdict(NOT_JUDGED, ratio, None, None, None, len(ratios),
                         f"not judged{shown}: {what} needs the boot-to-boot term", design,
                         "set [gates] alternate_rounds = 3 or more (each round boots both servers afresh), or record "
                         "the machine class's round spread (specwatch ab --record-rounds)")


def _robust_sd(logs: np.ndarray) -> float:
    """SD of log samples, from their median absolute deviation (one burst run cannot blow it up), else the
    plain SD when the MAD is 0."""
    mad = float(np.median(np.abs(logs - np.median(logs)))) * 1.4826
    return mad if mad > 0 else float(logs.std(ddof=1))


def first_round_spread(a_runs: Sequence[float], b_runs: Sequence[float]) -> tuple[float, float, float] | None:
    """(total, boot term, within term) of one round's log ratio a/b, or None without 2 positive runs a side.

    The within term is the standard error of the two boots' log medians from their own runs; the
    boot-to-boot term, which one round cannot see, is :data:`FIRST_ROUND_BOOT_FACTOR` times the runs'
    pooled spread, at least :data:`FIRST_ROUND_MIN_BOOT`."""
    la = np.log(np.asarray([x for x in a_runs if x > 0 and math.isfinite(x)], dtype=float))
    lb = np.log(np.asarray([x for x in b_runs if x > 0 and math.isfinite(x)], dtype=float))
    if la.size < 2 or lb.size < 2:
        return None
    sa, sb = _robust_sd(la), _robust_sd(lb)
    within = math.sqrt(sa**2 / la.size + sb**2 / lb.size)
    boot = max(FIRST_ROUND_BOOT_FACTOR * math.sqrt((sa**2 + sb**2) / 2), FIRST_ROUND_MIN_BOOT)
    return math.sqrt(boot**2 + within**2), boot, within


def rounds_to_decide(distance: float, spread: float, alpha: float) -> int | None:
    """The fewest rounds (2 to :data:`MAX_ADVISED_ROUNDS`) whose one-sided t bound at ``alpha`` clears a log
    ``distance`` at a round spread ``spread``, if the distance holds; None when none does."""
    for n in range(2, MAX_ADVISED_ROUNDS + 1):
        if abs(distance) > float(_sps.t.isf(alpha, n - 1)) * spread / math.sqrt(n):
            return n
    return None


def _first_round(ratio: float, runs: tuple[Sequence[float], Sequence[float]], target: float, alpha: float,
                 names: tuple[str, str], want: str, at_most: bool = False) -> RoundsVerdict | None:
    """One round, no recorded spread: pass or fail when the round's ratio clears ``target`` (from above, or
    with ``at_most`` from below) by more than the noise :func:`first_round_spread` assumes; else unsure,
    saying in one line what would decide it."""
    found = first_round_spread(*runs)
    if found is None:
        return None
    total, boot, within = found
    z = float(_sps.norm.isf(alpha))
    low, high = ratio * math.exp(-z * total), ratio * math.exp(z * total)
    distance = math.log(ratio / target)
    design = (f"{names[0]}/{names[1]} in one round (a fresh boot of both): {ratio:.3f}; no round spread recorded "
              f"for this machine class, so a first-round boot-to-boot term "
              f"{boot:.1%} ({FIRST_ROUND_BOOT_FACTOR:g}x the runs' own spread, at least {FIRST_ROUND_MIN_BOOT:.0%})"
              f" and the runs' {within:.1%}: {total:.1%}, at one-sided alpha {alpha:g}")
    nums = f"{names[0]}/{names[1]} {_num(ratio)} [{_num(low)}, {_num(high)}] in one round"
    above, below = float(_sps.norm.sf(distance / total)), float(_sps.norm.cdf(distance / total))
    if (high < target) if at_most else (low > target):
        p = below if at_most else above
        return RoundsVerdict("pass", ratio, low, high, p, 1, f"pass: {want} (one-sided p={p:.2g}); {nums}", design)
    if (low > target) if at_most else (high < target):
        p = above if at_most else below
        return RoundsVerdict("fail", ratio, low, high, p, 1,
                             f"fail: not {want} (one-sided p={p:.2g} that it {_MISS[at_most]}); {nums}", design)
    n = rounds_to_decide(distance, total, alpha)
    if n is not None:
        what = (f"[gates] alternate_rounds = {n} would decide it if the rounds spread as assumed (or record the "
                f"class's round spread: specwatch ab --record-rounds)")
    else:
        what = (f"{_pct(ratio / target)} from the margin is within this noise: no number of rounds up to "
                f"{MAX_ADVISED_ROUNDS} would decide it")
    return RoundsVerdict(UNSURE, ratio, low, high, below if at_most else above, 1,
                         f"unsure: {nums} can neither show nor rule out {want} against the noise one round "
                         f"assumes; {what}", design)


def _one_sided(summary: paired.PairedRounds) -> tuple[float, float]:
    """(p that a is below b, p that a is above b), one-sided, from the two-sided p of the log mean."""
    half = summary.p / 2
    return (half, 1 - half) if summary.ratio < 1 else (1 - half, half)


def beats(ratios: Sequence[float], *, margin: float, alpha: float, prior: paired.RoundPrior | None = None,
          source: str = "", names: tuple[str, str] = ("a", "b"),
          runs: tuple[Sequence[float], Sequence[float]] | None = None, at_most: bool = False) -> RoundsVerdict:
    """Judge "a ≥ b × (1 + margin)" on per-round ratios a/b: pass when the one-sided 1 - alpha lower bound
    clears 1 + margin, fail when the upper bound stays below it, else unsure. With ``at_most`` the same rule
    judges "a ≤ b × (1 + margin)" (a cost such as a latency, allowed ``margin``): pass when the upper bound
    stays below 1 + margin, fail when the lower bound clears it. One round without ``prior`` is judged on
    ``runs`` (that round's runs of a and of b) as :func:`first_round_spread` says."""
    target = 1.0 + margin
    summary, design = _summary(ratios, alpha, prior, source, names, scale=target)
    want = f"{names[0]} {'≤' if at_most else '≥'} {names[1]}×{target:g}"
    if summary is None:
        first = (_first_round(ratios[0], runs, target, alpha, names, want, at_most)
                 if runs is not None and len(ratios) == 1 else None)
        return first or _not_judged(ratios, design, want)
    ratio, low, high = summary.ratio * target, summary.low * target, summary.high * target
    below, above = _one_sided(summary)
    nums = f"{names[0]}/{names[1]} {_num(ratio)} [{_num(low)}, {_num(high)}] over {summary.rounds} round(s)"
    shown, missed = (summary.high < 1, summary.low > 1) if at_most else (summary.low > 1, summary.high < 1)
    if shown:
        p = below if at_most else above
        return RoundsVerdict("pass", ratio, low, high, p, summary.rounds,
                             f"pass: {want} (one-sided p={p:.2g}); {nums}", design)
    if missed:
        p = above if at_most else below
        return RoundsVerdict("fail", ratio, low, high, p, summary.rounds,
                             f"fail: not {want} (one-sided p={p:.2g} that it {_MISS[at_most]}); {nums}", design)
    return RoundsVerdict(UNSURE, ratio, low, high, below if at_most else above, summary.rounds,
                         f"unsure: {nums} can neither show nor rule out {want}", design, MORE_ROUNDS)


def tuning_rounds(ratios: Sequence[float], *, tolerance: float, min_effect: float, alpha: float,
                  prior: paired.RoundPrior | None = None, source: str = "",
                  names: tuple[str, str] = ("tuned", "untuned")) -> RoundsVerdict:
    """Judge per-round ratios tuned/untuned the way ``specwatch ab`` judges head/base: worse is a
    significant slowdown (one-sided p < alpha) whose estimate is beyond ``tolerance``; a win is a
    significant gain of at least ``min_effect``; no effect when the bound rules out harm beyond the
    tolerance (or the gain is significant but smaller than ``min_effect``); else unsure."""
    summary, design = _summary(ratios, alpha, prior, source, names)
    if summary is None:
        return _not_judged(ratios, design, "telling the tuning's effect from a lucky boot")
    worse, better = _one_sided(summary)
    r, lo, hi = summary.ratio, summary.low, summary.high
    nums = f"{names[0]}/{names[1]} {_num(r)} [{_num(lo)}, {_num(hi)}] over {summary.rounds} round(s)"
    size = f"{min_effect * 100:g}%"

    def verdict(kind: str, p: float, text: str, advice: str = "") -> RoundsVerdict:
        return RoundsVerdict(kind, r, lo, hi, p, summary.rounds, f"{text}; {nums}", design, advice)

    if worse < alpha and r < 1 - tolerance:
        return verdict("fail", worse, f"tuning makes it worse: {_pct(r)}, beyond the {tolerance:.0%} tolerance "
                                      f"(one-sided p={worse:.2g})")
    if better < alpha and r >= 1 + min_effect:
        return verdict("pass", better, f"tuning helps: {_pct(r)} (one-sided p={better:.2g}), at least {size}")
    if better < alpha:
        return verdict("no_effect", better, f"no meaningful effect: {_pct(r)} is significant (one-sided "
                                            f"p={better:.2g}) but smaller than the {size} this profile counts")
    if lo > 1 - tolerance:
        return verdict("no_effect", worse, f"no measurable effect: {_pct(r)}; the bound rules out harm beyond "
                                           f"the {tolerance:.0%} tolerance")
    return verdict(UNSURE, worse, f"unsure: {_pct(r)} can neither be shown nor ruled out as harm beyond the "
                                  f"{tolerance:.0%} tolerance", MORE_ROUNDS)


#: what only NCCL reads: a server of one rank runs no collective, so NCCL is never initialised for one
NCCL_PREFIX = "NCCL_"


def unread_difference(a: Mapping[str, str], b: Mapping[str, str], ranks: int) -> str | None:
    """Why two servers' environments cannot make them differ in speed, or None when they may.

    ``a``/``b``: what differs between the two servers' launches (their environment variables; the
    caller makes sure nothing else differs). ``ranks``: processes in one server's parallel group
    (tp × dp × pp). Every differing variable is NCCL's and the server runs one rank: it never
    initialises NCCL, so the difference is one of settings it never reads.
    """
    differ = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    if not differ or ranks > 1 or not all(k.startswith(NCCL_PREFIX) for k in differ):
        return None
    return (f"the two servers differ only in {', '.join(differ)}, which only NCCL reads, and they run on one rank "
            "(TP=1): NCCL is never initialised, so the server never reads them")
