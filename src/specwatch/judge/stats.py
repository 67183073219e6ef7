"""Pure measurement statistics: median, bootstrap CIs, Mann-Whitney U, CV, detectable effects.

numpy/scipy only. Every random step takes a seed, so the same samples always give the same
numbers. Ratios are ``median(current) / median(reference)``; noise is treated on the log scale,
where a coefficient of variation ``cv`` is (for cv well below 1) the standard deviation of
``log(sample)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np
from scipy import stats as _sps

Alternative = Literal["two-sided", "greater", "less"]
CIMethod = Literal["percentile", "bca"]

DEFAULT_RESAMPLES = 4000
DEFAULT_SEED = 0
# Var(Mann-Whitney / Hodges-Lehmann) ≈ (π/3)·σ²/n for normal data (ARE 3/π vs the t-test).
_MW_VARIANCE_FACTOR = math.pi / 3.0
# MAD → standard deviation for normal data.
_MAD_TO_SD = 1.482602218505602
# Largest x with a finite exp(x) (math.exp overflows just above 709.78).
_EXP_MAX = 709.0


def as_array(samples: Sequence[float] | np.ndarray, name: str = "samples") -> np.ndarray:
    """``samples`` as a flat float array; ValueError naming them (``name``) when empty or not all finite."""
    x = np.asarray(samples, dtype=float).ravel()
    if x.size == 0:
        raise ValueError(f"{name} is empty")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} contains a non-finite value")
    return x


def median(samples: Sequence[float] | np.ndarray) -> float:
    """The sample median."""
    return float(np.median(as_array(samples)))


def cv(samples: Sequence[float] | np.ndarray) -> float:
    """Coefficient of variation: sample stdev (ddof=1) / |mean|; 0 for one sample, inf for mean 0."""
    x = as_array(samples)
    if x.size < 2:
        return 0.0
    m = float(np.mean(x))
    sd = float(np.std(x, ddof=1))
    if m == 0.0:
        return math.inf if sd > 0 else 0.0
    return sd / abs(m)


def robust_cv(samples: Sequence[float] | np.ndarray) -> float:
    """Robust CV: 1.4826·MAD / |median| (equals the CV for normal data, ignores a few outliers)."""
    x = as_array(samples)
    med = float(np.median(x))
    mad = float(np.median(np.abs(x - med))) * _MAD_TO_SD
    if med == 0.0:
        return math.inf if mad > 0 else 0.0
    return mad / abs(med)


# ----------------------------------------------------------------------------- bootstrap


def _percentile_interval(boot: np.ndarray, confidence: float) -> tuple[float, float]:
    """Percentile interval from order statistics (k-th smallest and k-th largest).

    Order statistics, not interpolation, so the interval maps exactly through any monotone
    transform: the CI of 1/X is the inverse of the CI of X.
    """
    b = boot.size
    k = max(1, math.floor((1.0 - confidence) / 2.0 * (b + 1)))
    srt = np.sort(boot)
    return float(srt[k - 1]), float(srt[b - k])


def _bca_interval(
    boot: np.ndarray, estimate: float, jackknife: np.ndarray, confidence: float
) -> tuple[float, float]:
    """Bias-corrected and accelerated interval (Efron 1987) from a bootstrap distribution."""
    b = boot.size
    below = np.count_nonzero(boot < estimate) + 0.5 * np.count_nonzero(boot == estimate)
    prop = min(max(below / b, 1.0 / (2 * b)), 1.0 - 1.0 / (2 * b))
    z0 = float(_sps.norm.ppf(prop))
    d = jackknife.mean() - jackknife
    denom = 6.0 * float(np.sum(d**2)) ** 1.5
    acc = float(np.sum(d**3)) / denom if denom > 0 else 0.0
    tail = (1.0 - confidence) / 2.0
    qs = []
    for z in (_sps.norm.ppf(tail), _sps.norm.ppf(1.0 - tail)):
        adj = z0 + (z0 + z) / (1.0 - acc * (z0 + z))
        qs.append(100.0 * float(_sps.norm.cdf(adj)))
    lo, hi = np.percentile(boot, qs)
    return float(lo), float(hi)


def _boot_medians(sorted_x: np.ndarray, rng: np.random.Generator, n_resamples: int) -> np.ndarray:
    """Medians of ``n_resamples`` bootstrap resamples (vectorised; indices depend on n and rng only)."""
    n = sorted_x.size
    if n == 1:
        return np.full(n_resamples, sorted_x[0])
    idx = rng.integers(0, n, size=(n_resamples, n))
    return np.median(sorted_x[idx], axis=1)


def _jackknife_medians(x: np.ndarray) -> np.ndarray:
    n = x.size
    if n < 2:
        return np.zeros(1)
    mask = ~np.eye(n, dtype=bool)
    return np.median(np.broadcast_to(x, (n, n))[mask].reshape(n, n - 1), axis=1)


def _check_ci_args(confidence: float, n_resamples: int, method: str) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n_resamples < 100:
        raise ValueError(f"n_resamples must be at least 100, got {n_resamples}")
    if method not in ("percentile", "bca"):
        raise ValueError(f"method must be 'percentile' or 'bca', got {method!r}")


def bootstrap_median_ci(
    samples: Sequence[float] | np.ndarray,
    *,
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    method: CIMethod = "percentile",
) -> tuple[float, float]:
    """Bootstrap confidence interval of the median (percentile or BCa)."""
    _check_ci_args(confidence, n_resamples, method)
    x = np.sort(as_array(samples))
    boot = _boot_medians(x, np.random.default_rng(seed), n_resamples)
    if method == "bca" and x.size > 2:
        return _bca_interval(boot, float(np.median(x)), _jackknife_medians(x), confidence)
    return _percentile_interval(boot, confidence)


def _paired_rngs(a: np.ndarray, b: np.ndarray, seed: int) -> tuple[np.random.Generator, np.random.Generator]:
    """Two independent streams, assigned by a canonical, role-free and scale-free order of a and b.

    The order is decided by (size, ranks in the pooled sample), so swapping a and b swaps the
    streams with them (exact symmetry of the ratio CI) and multiplying both by a constant leaves
    the assignment alone (exact scale invariance).
    """
    s0, s1 = np.random.SeedSequence(seed).spawn(2)
    ranks = _sps.rankdata(np.concatenate([a, b]))
    key_a = (a.size, tuple(np.sort(ranks[: a.size])))
    key_b = (b.size, tuple(np.sort(ranks[a.size :])))
    if key_a <= key_b:
        return np.random.default_rng(s0), np.random.default_rng(s1)
    return np.random.default_rng(s1), np.random.default_rng(s0)


def bootstrap_ratio_ci(
    current: Sequence[float] | np.ndarray,
    reference: Sequence[float] | np.ndarray,
    *,
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    method: CIMethod = "percentile",
) -> tuple[float, float]:
    """Bootstrap CI of ``median(current) / median(reference)`` (each sample resampled on its own).

    Both samples must be positive. With the percentile method the interval is exactly symmetric,
    ``ci(a, b) == (1 / ci(b, a)[1], 1 / ci(b, a)[0])``, and invariant to scaling both samples.
    """
    _check_ci_args(confidence, n_resamples, method)
    a = np.sort(as_array(current, "current"))
    b = np.sort(as_array(reference, "reference"))
    if a[0] <= 0 or b[0] <= 0:
        raise ValueError("ratio CI needs positive samples")
    ra, rb = _paired_rngs(a, b, seed)
    if a.size == b.size and np.array_equal(a, b):
        # Same multiset: make the null-like distribution symmetric (r and 1/r) so the CI is too.
        half = _boot_medians(a, ra, n_resamples // 2) / _boot_medians(b, rb, n_resamples // 2)
        boot = np.concatenate([half, 1.0 / half])
    else:
        boot = _boot_medians(a, ra, n_resamples) / _boot_medians(b, rb, n_resamples)
    if method == "bca" and a.size > 2 and b.size > 2:
        ma, mb = float(np.median(a)), float(np.median(b))
        jack = np.log(np.concatenate([_jackknife_medians(a) / mb, ma / _jackknife_medians(b)]))
        lo, hi = _bca_interval(np.log(boot), math.log(ma / mb), jack, confidence)
        return math.exp(lo), math.exp(hi)
    return _percentile_interval(boot, confidence)


# ----------------------------------------------------------------------------- Mann-Whitney


@dataclass(frozen=True)
class MannWhitney:
    """Mann-Whitney U of ``a`` vs ``b``. ``p_greater``: a tends to be larger than b."""

    u: float
    p_two_sided: float
    p_greater: float
    p_less: float
    p_min_two_sided: float

    def p(self, alternative: Alternative = "two-sided") -> float:
        """The p-value for one alternative."""
        return {"two-sided": self.p_two_sided, "greater": self.p_greater, "less": self.p_less}[
            alternative
        ]


def min_attainable_p(n: int, m: int, alternative: Alternative = "two-sided") -> float:
    """Smallest p an exact Mann-Whitney test can give with n and m samples (no ties).

    asv uses the same bound: below it a U test cannot declare anything, whatever the data.
    """
    if n < 1 or m < 1:
        return 1.0
    one = 1.0 / math.comb(n + m, n)
    return min(1.0, 2.0 * one) if alternative == "two-sided" else one


def runs_to_reach_p(alpha: float, n_other: int | None = None, alternative: Alternative = "two-sided") -> int:
    """Fewest runs n so that ``min_attainable_p(n, n_other or n) < alpha``."""
    for n in range(1, 10_000):
        if min_attainable_p(n, n if n_other is None else n_other, alternative) < alpha:
            return n
    raise ValueError(f"alpha={alpha} cannot be reached with n_other={n_other}")


def mann_whitney(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> MannWhitney:
    """Two-sided and one-sided Mann-Whitney U p-values (scipy; exact for small samples without ties).

    p-values are floored at the exact minimum attainable for the sample sizes, so an asymptotic
    approximation never claims more than the samples can show.
    """
    x = as_array(a, "a")
    y = as_array(b, "b")
    floor2 = min_attainable_p(x.size, y.size, "two-sided")
    floor1 = min_attainable_p(x.size, y.size, "greater")
    if np.ptp(np.concatenate([x, y])) == 0.0:
        return MannWhitney(x.size * y.size / 2.0, 1.0, 1.0, 1.0, floor2)
    res2 = _sps.mannwhitneyu(x, y, alternative="two-sided")
    res_g = _sps.mannwhitneyu(x, y, alternative="greater")
    res_l = _sps.mannwhitneyu(x, y, alternative="less")

    def clip(p: float, floor: float) -> float:
        return float(min(1.0, max(floor, p)))

    return MannWhitney(
        u=float(res2.statistic),
        p_two_sided=clip(res2.pvalue, floor2),
        p_greater=clip(res_g.pvalue, floor1),
        p_less=clip(res_l.pvalue, floor1),
        p_min_two_sided=floor2,
    )


# ----------------------------------------------------------------------------- power


def _z(alpha: float, power: float, alternative: Alternative) -> float:
    if not 0.0 < alpha < 1.0 or not 0.0 < power < 1.0:
        raise ValueError("alpha and power must be in (0, 1)")
    a = alpha / 2.0 if alternative == "two-sided" else alpha
    return float(_sps.norm.ppf(1.0 - a) + _sps.norm.ppf(power))


def minimum_detectable_effect(
    cv_current: float,
    n_current: int,
    cv_reference: float,
    n_reference: int,
    *,
    alpha: float = 0.01,
    power: float = 0.8,
    alternative: Alternative = "two-sided",
) -> float:
    """Smallest relative change (e.g. 0.05 = 5%) a Mann-Whitney test sees with the given power.

    Normal approximation on the log scale: ``exp(z·sqrt(π/3·(cv_c²/n_c + cv_r²/n_r))) − 1`` with
    ``z = z_{1−α/2} + z_{power}``. ``inf`` when the sample sizes cannot reach ``alpha`` at all.
    """
    if min_attainable_p(n_current, n_reference, alternative) >= alpha:
        return math.inf
    # products, not **: a huge cv then gives inf rather than OverflowError
    var = _MW_VARIANCE_FACTOR * (cv_current * cv_current / n_current + cv_reference * cv_reference / n_reference)
    x = _z(alpha, power, alternative) * math.sqrt(var)
    if not x < _EXP_MAX:  # also a noise that is not a number: no effect is known to be seen
        return math.inf
    return math.expm1(x)


def runs_needed(
    effect: float,
    noise_cv: float,
    *,
    alpha: float = 0.01,
    power: float = 0.8,
    alternative: Alternative = "two-sided",
) -> int | None:
    """Runs per side (equal sizes) to detect a relative ``effect`` at run-to-run noise ``noise_cv``.

    ``n = 2·(π/3)·z²·cv² / log(1+effect)²``, and never fewer than the exact test needs to reach
    ``alpha`` at all (5 per side for a two-sided p < 0.01). None when the count is not a finite
    number: a noise that is infinite or not a number, or so large that the count overflows.
    """
    if effect <= -1.0 or effect == 0.0:
        raise ValueError(f"effect must be a non-zero relative change above -1, got {effect}")
    delta = abs(math.log1p(effect))
    ratio = _z(alpha, power, alternative) * noise_cv / delta
    n = 2.0 * _MW_VARIANCE_FACTOR * ratio * ratio  # a product, not **: overflow gives inf, not an error
    if not math.isfinite(n):
        return None
    return max(math.ceil(n), runs_to_reach_p(alpha, alternative=alternative), 2)


# ----------------------------------------------------------------------------- recording noise


@dataclass(frozen=True)
class RecordingNoise:
    """Why samples about to become a baseline would blunt later verdicts: their CV, and the runs far from
    the rest (a transient on the machine while recording)."""

    cv: float
    outliers: list[int]  # indices of the runs more than ``outlier_mads`` robust SDs from the median
    noisy: bool = True  # the CV is above the limit (False: quiet runs but for the outliers)
    worst: float = 0.0  # the largest outlier's distance from the median, as a fraction of it


def recording_noise(samples: Sequence[float], noisy_cv: float = 0.05,
                    outlier_mads: float = 4.0) -> RecordingNoise | None:
    """The noise of ``samples`` when their CV is above ``noisy_cv`` or a run lies more than ``outlier_mads``
    MADs (scaled to an SD, 1.4826) *and* more than ``noisy_cv`` from their median; None when they are quiet, or
    fewer than 3. Both: at a cv of 0.5 % (real SGLang at the 8B shape) a run 1.6 % off is 4 MADs out, and no
    verdict is blunted by it."""
    if len(samples) < 3:
        return None
    med = median(samples)
    mad = median([abs(x - med) for x in samples]) * 1.4826
    far = [(i, abs(x - med) / abs(med)) for i, x in enumerate(samples)
           if mad > 0 and med and abs(x - med) > outlier_mads * mad and abs(x - med) > noisy_cv * abs(med)]
    spread = cv(samples)
    if spread <= noisy_cv and not far:
        return None
    return RecordingNoise(spread, [i for i, _ in far], spread > noisy_cv, max((d for _, d in far), default=0.0))


# ----------------------------------------------------------------------------- summary


@dataclass(frozen=True)
class Summary:
    """Descriptive summary of one metric's samples, with a bootstrap CI of the median."""

    n: int
    median: float
    mean: float
    stdev: float
    cv: float
    min: float
    max: float
    ci_low: float
    ci_high: float
    confidence: float = 0.95

    def to_dict(self) -> dict[str, float | int]:
        """Plain JSON-ready dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Summary:
        """Inverse of :meth:`to_dict` (unknown keys ignored)."""
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class SessionDrift:
    """Where one session's median falls among the medians of K earlier sessions (log scale).

    Runs of one session share the machine's state of that moment (on the lent H200 the throughput
    wanders about 6% between windows of a few seconds, docs/validation/README.md), so a test on
    runs alone treats machine drift as signal. Sessions are the unit here: ``p`` is the two-sided
    probability, under a t prediction interval with K − 1 degrees of freedom, that a session of the
    same machine lands this far from the baseline sessions' mean; ``mde`` is the smallest relative
    change that can reach ``alpha`` at this spread.
    """

    sessions: int
    spread: float  # SD of the log session medians (≈ relative SD)
    change: float  # current median / geometric mean of the session medians − 1
    p: float
    mde: float


def session_drift(current: Sequence[float] | np.ndarray, sessions: Sequence[Sequence[float]],
                  alpha: float = 0.01) -> SessionDrift:
    """Judge ``current`` against ``sessions`` (K ≥ 2 lists of samples) with sessions as the unit."""
    if len(sessions) < 2:
        raise ValueError(f"need at least 2 sessions, got {len(sessions)}")
    cur = as_array(current, "current")
    meds = np.log([median(as_array(s, "session")) for s in sessions])
    k = meds.size
    mu, sd = float(meds.mean()), float(meds.std(ddof=1))
    scale = sd * math.sqrt(1.0 + 1.0 / k)
    delta = math.log(median(cur)) - mu
    t = abs(delta) / scale if scale > 0.0 else (math.inf if delta else 0.0)
    p = float(2.0 * _sps.t.sf(t, k - 1))
    mde = float(math.expm1(_sps.t.ppf(1.0 - alpha / 2.0, k - 1) * scale))
    return SessionDrift(sessions=k, spread=sd, change=math.expm1(delta), p=p, mde=mde)


def summarize(
    samples: Sequence[float] | np.ndarray,
    *,
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> Summary:
    """Summary of samples (stdev with ddof=1; 0 for a single sample)."""
    x = as_array(samples)
    lo, hi = bootstrap_median_ci(x, confidence=confidence, n_resamples=n_resamples, seed=seed)
    return Summary(
        n=int(x.size),
        median=float(np.median(x)),
        mean=float(np.mean(x)),
        stdev=float(np.std(x, ddof=1)) if x.size > 1 else 0.0,
        cv=cv(x),
        min=float(np.min(x)),
        max=float(np.max(x)),
        ci_low=lo,
        ci_high=hi,
        confidence=confidence,
    )


@dataclass(frozen=True)
class DriftTolerance:
    """How far a healthy session may land from a baseline, from the session-to-session spread.

    ``tolerance``: the relative change a session of the same, unchanged machine exceeds with
    probability ``alpha`` (two-sided t prediction interval over ``sessions`` recorded sessions; a
    spread known only for the machine class uses the normal quantile). ``detects``: the smallest
    slowdown flagged in 19 of 20 runs at that tolerance (the new session has the same spread).
    """

    tolerance: float
    spread: float
    sessions: int
    detects: float


def drift_tolerance(spread: float, sessions: int, alpha: float = 0.01, *, known: bool = True) -> DriftTolerance:
    """The tolerance a baseline of ``sessions`` sessions with this ``spread`` (SD of log medians) supports.

    ``known``: the spread was measured on this baseline's own sessions (t with sessions − 1 degrees
    of freedom); else it is a prior for the machine class (normal quantile, ``sessions`` may be 0).
    """
    if spread < 0 or not 0 < alpha < 1:
        raise ValueError(f"spread must be ≥ 0 and alpha in (0, 1), got {spread}, {alpha}")
    k = max(sessions, 1)
    scale = spread * math.sqrt(1.0 + 1.0 / k)
    q = float(_sps.t.ppf(1 - alpha / 2, k - 1)) if known and k >= 2 else float(_sps.norm.ppf(1 - alpha / 2))
    z95 = float(_sps.norm.ppf(0.95))
    return DriftTolerance(tolerance=float(-math.expm1(-q * scale)), spread=spread, sessions=sessions,
                          detects=float(-math.expm1(-(q + z95) * scale)))


def session_spread(sessions: Sequence[Sequence[float]]) -> float:
    """SD of the log medians of ≥ 2 sessions' samples (≈ the relative session-to-session spread)."""
    if len(sessions) < 2:
        raise ValueError(f"need at least 2 sessions, got {len(sessions)}")
    meds = np.log([median(as_array(s, "session")) for s in sessions])
    return float(meds.std(ddof=1))
