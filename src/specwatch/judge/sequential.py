"""The group-sequential A/B rule: every round is a look at the data, and alpha is spent across them.

Pure (numpy/scipy). An A/B measures rounds; after each round from ``first`` to ``last`` each key
is looked at, and it stops at the first look where it crosses a boundary:

* **regression**: the head is shown slower (the one-sided upper bound of head/base, at this look's
  nominal level ``alpha_k``, is below 1) and its estimate is worse than the tolerance;
* **no regression**: the one-sided lower bound, at this look's nominal level ``miss_k``, rules
  out a slowdown beyond the tolerance;
* neither by the last look, but the upper bound at the last look's ``alpha_k`` is below 1:
  **slower**, a real slowdown that is not shown beyond the tolerance (nor ruled out beyond it);
* neither by the last look, and not shown slower: **unsure**.

The nominal levels come from Lan-DeMets alpha spending (:func:`spent`): the false-alarm rate
(a healthy head called a regression) summed over all looks is at most ``alpha``, and the rate of
calling a slowdown of exactly the tolerance "no regression" is at most ``miss``. The boundaries
are computed for the z statistic of independent rounds (information ``n / last``) by the
numerical integration of Armitage, McPherson and Rowe (Jennison and Turnbull, *Group Sequential
Methods*, ch. 19), then read on Student's t with the look's degrees of freedom at the same nominal
level (J&T ch. 11). Each boundary is non-binding for the other test, so stopping for one never
raises the error rate of the other. "Slower" reads the same upper bound as "regression" without
the tolerance, so a healthy head (no change) is called a regression *or* slower at most ``alpha``
over all looks: the regression boundary, crossed at some look, is what both need.

The round-to-round variance is pooled with a prior (:class:`~specwatch.judge.roundprior.RoundPrior`,
a moderated t): the round spread of earlier A/B runs of the same served model and workload, or
:data:`DEFAULT_PRIOR` where none is recorded. Whether a prior is pooled, and at what weight, is the prior
rule's (:func:`specwatch.judge.roundprior.decide`: set aside where the run's own rounds do not fit it, worth
at most :data:`~specwatch.judge.roundprior.MAX_PRIOR_DF` rounds); :func:`look` takes the prior it decided
to pool, or None to judge the rounds alone (Student's t with their own degrees of freedom). :func:`look` is
the one rule; :func:`run_paths` applies it look after look to many rows at once (the simulations
of ``specwatch ab-power``, :func:`detectable`, :func:`resolvable_tolerance`), so a simulated
verdict is the verdict ``ab`` would give.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize as _opt
from scipy import stats as _sps

from specwatch.judge import roundprior
from specwatch.judge.roundprior import RoundPrior

#: the spending functions: Lan-DeMets Pocock-type (spends evenly: large changes stop at the first
#: looks) and O'Brien-Fleming-type (spends little early: the last look keeps nearly all of alpha)
POCOCK, OBRIEN_FLEMING = "pocock", "obrien-fleming"
SPENDING = (POCOCK, OBRIEN_FLEMING)
#: the default miss rate: a slowdown of exactly the tolerance is called "no regression" at most 1 in 20
DEFAULT_MISS = 0.05
#: the round spread assumed where a machine class records none: 15 % of the log ratio (a shared
#: 2-core CPU's A/A rounds read 5-17 %, GPU ones 0.5-3 %), worth 3 rounds of evidence, so that
#: a run's own rounds soon outweigh it (see docs/reference/ab-and-bisect.md)
DEFAULT_PRIOR = RoundPrior(0.15, 3)
#: most looks one design may have (a boundary per look is integrated numerically)
MAX_LOOKS = 64
#: codes of one look's outcome; SLOWER only at the last look
UNDECIDED, NO_REGRESSION, REGRESSION, SLOWER = -1, 0, 1, 2
#: the share of simulated verdicts that "19 times in 20" asks for
POWER = 0.95


@dataclass(frozen=True)
class Design:
    """Looks after rounds ``first`` .. ``last``; one-sided false-alarm rate ``alpha`` and miss rate ``miss``."""

    first: int
    last: int
    alpha: float
    miss: float = DEFAULT_MISS
    spending: str = POCOCK

    def __post_init__(self) -> None:
        if not 1 <= self.first <= self.last <= MAX_LOOKS:
            raise ValueError(f"a design needs 1 <= first <= last <= {MAX_LOOKS}, got {self.first}, {self.last}")
        if not (0 < self.alpha < 0.5 and 0 < self.miss < 0.5):
            raise ValueError(f"alpha and miss must be in (0, 0.5), got {self.alpha}, {self.miss}")
        if self.spending not in SPENDING:
            raise ValueError(f"spending must be one of {', '.join(SPENDING)}, got {self.spending!r}")

    @property
    def looks(self) -> range:
        """The round counts at which a look is taken."""
        return range(self.first, self.last + 1)

    def nominal(self, rounds: int) -> tuple[float, float]:
        """(alpha_k, miss_k): the one-sided nominal levels of the look after ``rounds`` rounds."""
        k = rounds - self.first
        return (_nominal(self.first, self.last, self.alpha, self.spending)[k],
                _nominal(self.first, self.last, self.miss, self.spending)[k])

    def describe(self) -> str:
        kind = "Pocock" if self.spending == POCOCK else "O'Brien-Fleming"
        return (f"looks after rounds {self.first}-{self.last}, Lan-DeMets {kind}-type spending of alpha "
                f"{self.alpha:g} (false alarms) and {self.miss:g} (a slowdown of the tolerance called none)")


def spent(t: float, level: float, spending: str) -> float:
    """Cumulative one-sided error spent by information fraction ``t`` (Lan and DeMets 1983)."""
    t = min(max(t, 0.0), 1.0)
    if t == 0:
        return 0.0
    if spending == POCOCK:
        return level * math.log1p((math.e - 1) * t)
    return float(2 * _sps.norm.sf(_sps.norm.isf(level / 2) / math.sqrt(t)))


@functools.lru_cache(maxsize=256)
def _nominal(first: int, last: int, level: float, spending: str) -> tuple[float, ...]:
    """One-sided nominal levels of the looks after ``first`` .. ``last`` rounds (z scale, independent rounds)."""
    h = 0.02
    kernel_x = np.arange(-8.0, 8.0 + h / 2, h)
    kernel = _sps.norm.pdf(kernel_x) * h
    levels: list[float] = []
    grid: np.ndarray | None = None  # partial-sum values S_k on the continuation region
    dens: np.ndarray | None = None  # their sub-density
    before = 0.0
    for n in range(first, last + 1):
        target = spent(n / last, level, spending) - before
        if grid is None or dens is None:
            c = float(_sps.norm.isf(target))
            sd = math.sqrt(n)
            bound = c * sd
            grid = np.arange(-10 * sd, bound, h)
            dens = _sps.norm.pdf(grid, scale=sd)
        else:
            d = 1.0  # one more round: an increment of variance 1

            bound = _crossing_bound(grid, dens, h, d, target)
            new = np.convolve(dens, kernel)  # density of S_{k-1} + N(0, 1) on the extended grid
            new_grid = grid[0] + kernel_x[0] + h * np.arange(new.size)
            keep = new_grid < bound
            grid, dens = new_grid[keep], new[keep]
            c = bound / math.sqrt(n)
        levels.append(float(_sps.norm.sf(c)))
        before += target
    return tuple(levels)


def _crossing_bound(grid: np.ndarray, dens: np.ndarray, h: float, d: float, target: float) -> float:
    """The bound b on the partial sum at which paths still open (``dens`` on ``grid``) cross, after one
    increment of variance ``d``, with probability ``target``."""

    def excess(b: float) -> float:
        return float(np.sum(dens * _sps.norm.sf((b - grid) / math.sqrt(d))) * h) - target

    lo, hi = float(grid[-1]) - 40.0, float(grid[-1]) + 12.0
    if excess(hi) >= 0:
        return hi
    if excess(lo) <= 0:
        return lo
    return float(_opt.brentq(excess, lo, hi, xtol=1e-9))


@dataclass(frozen=True)
class Look:
    """One look at rows of oriented log ratios (> 0: head better): per row its outcome and bounds."""

    rounds: int
    code: np.ndarray  # REGRESSION, NO_REGRESSION, SLOWER (last look only) or UNDECIDED
    mean: np.ndarray  # mean log ratio
    low: np.ndarray  # lower bound at the look's miss level (what "no regression" reads)
    high: np.ndarray  # upper bound at the look's alpha level (what "regression" reads)
    p: np.ndarray  # one-sided p of "head is not slower"
    spread: np.ndarray  # SD of this run's own log ratios (0 with one round)
    pooled: np.ndarray  # the spread the bounds used
    df: int


def look(x: np.ndarray, prior: RoundPrior | None, tolerance: float, design: Design) -> Look:
    """The rule: judge rows ``x`` (shape rows x n; oriented log ratios, > 0 better) at the look after n rounds."""
    x = np.atleast_2d(np.asarray(x, dtype=float))
    n = x.shape[1]
    if not design.first <= n <= design.last:
        raise ValueError(f"no look after {n} rounds in a design of looks {design.first}-{design.last}")
    if prior is None and n < 2:
        raise ValueError("a look after one round needs a prior round spread")
    mean = x.mean(axis=1)
    sd = x.std(axis=1, ddof=1) if n >= 2 else np.zeros(x.shape[0])
    spread, df = roundprior.pool(prior, sd, n)
    pooled = np.asarray(spread, dtype=float)
    se = pooled / math.sqrt(n)
    a_k, m_k = design.nominal(n)
    high = mean + float(_sps.t.isf(a_k, df)) * se
    low = mean - float(_sps.t.isf(m_k, df)) * se
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(se > 0, _sps.t.cdf(mean / np.where(se > 0, se, 1.0), df), np.where(mean < 0, 0.0, 1.0))
    edge = math.log1p(-tolerance)
    code = np.full(x.shape[0], UNDECIDED)
    code[low > edge] = NO_REGRESSION
    code[(high < 0) & (mean < edge)] = REGRESSION
    if n == design.last:
        code[(code == UNDECIDED) & (high < 0)] = SLOWER
    return Look(n, code, mean, low, high, p, sd, pooled, int(df))


def run_paths(x: np.ndarray, prior: RoundPrior | None, tolerance: float, design: Design) -> tuple[np.ndarray,
                                                                                                   np.ndarray]:
    """(outcome, rounds used) of each row of ``x`` (rows x ``design.last`` oriented log ratios) when
    every row stops at its first decided look; rows never decided end SLOWER or UNDECIDED at the last look."""
    x = np.atleast_2d(np.asarray(x, dtype=float))
    out = np.full(x.shape[0], UNDECIDED)
    used = np.full(x.shape[0], design.last)
    open_rows = np.arange(x.shape[0])
    for n in design.looks:
        if open_rows.size == 0:
            break
        code = look(x[open_rows, :n], prior, tolerance, design).code
        done = code != UNDECIDED
        out[open_rows[done]] = code[done]
        used[open_rows[done]] = n
        open_rows = open_rows[~done]
    return out, used


def draws(prior: RoundPrior | None, rounds: int, trials: int, seed: int, spread: float | None = None,
          pool: Sequence[float] | None = None) -> np.ndarray:
    """Rows of round noise (log ratios around 0): lognormal at ``spread`` (default the prior's), or
    drawn with replacement from ``pool`` (recorded rounds' residuals: a replay, not a model)."""
    rng = np.random.default_rng(seed)
    if pool is not None:
        values = np.asarray(pool, dtype=float)
        return rng.choice(values, size=(trials, rounds), replace=True)
    sigma = spread if spread is not None else (prior.spread if prior is not None else DEFAULT_PRIOR.spread)
    return rng.normal(0.0, sigma, size=(trials, rounds))


def detectable(prior: RoundPrior | None, tolerance: float, design: Design, *, trials: int = 4000, seed: int = 0,
               spread: float | None = None, within: int | None = None) -> float | None:
    """The smallest slowdown (a fraction) that the design calls a regression 19 times in 20 (by look
    ``within``, default the last), simulated at ``spread`` (default the prior's); None beyond 99 %."""
    noise = draws(prior, design.last, trials, seed, spread)
    last = design.last if within is None else within

    def power(slowdown: float) -> float:
        code, used = run_paths(noise + math.log1p(-slowdown), prior, tolerance, design)
        return float(np.mean((code == REGRESSION) & (used <= last)))

    if power(0.99) < POWER:
        return None
    lo, hi = 0.0, 0.99
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if power(mid) >= POWER else (mid, hi)
        if hi - lo < 2e-4:
            break
    return hi


def resolvable_tolerance(prior: RoundPrior | None, design: Design, *, trials: int = 4000, seed: int = 1,
                         spread: float | None = None) -> float | None:
    """The smallest tolerance at which a healthy head (A/A) ends "no regression" 19 times in 20 by
    the last look, at ``spread`` (default the prior's); None when not even 90 % does. It aims half a
    point above 95 %, so that the Monte Carlo error of ``trials`` draws does not eat the margin."""
    noise = draws(prior, design.last, trials, seed, spread)
    target = POWER + 0.005

    def resolved(tolerance: float) -> float:
        code, _ = run_paths(noise, prior, tolerance, design)
        return float(np.mean(code == NO_REGRESSION))

    if resolved(0.9) < target:
        return None
    lo, hi = 1e-4, 0.9
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if resolved(mid) >= target else (mid, hi)
        if hi - lo < 1e-4:
            break
    return hi


def nice_tolerance(value: float) -> float:
    """A tolerance rounded up to a figure people write: 0.1 % steps below 5 %, 0.5 % below 10 %, 1 % below
    30 %, then 5 %."""
    pct = value * 100
    step = 0.1 if pct < 5 else 0.5 if pct < 10 else 1.0 if pct < 30 else 5.0
    return round(math.ceil(pct / step - 1e-9) * step / 100, 6)


__all__ = ["DEFAULT_MISS", "DEFAULT_PRIOR", "MAX_LOOKS", "NO_REGRESSION", "OBRIEN_FLEMING", "POCOCK", "POWER",
           "REGRESSION", "SLOWER", "SPENDING", "UNDECIDED", "Design", "Look", "detectable", "draws", "look",
           "nice_tolerance", "resolvable_tolerance", "run_paths", "spent"]
