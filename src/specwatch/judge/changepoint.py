"""E-divisive means change-point detection over a metric's history (Matteson & James 2014).

Why our own ~100 lines and not MongoDB's ``signal-processing-algorithms`` (checked: 2.1.6):
it pins ``numpy<2`` and Python ``~3.11`` (we run numpy 2 and support 3.10+), pulls in gevent,
structlog and PyYAML, and builds a C extension. Our series are short (one point per run, a few
hundred at most), where the O(T²) energy statistic vectorised with numpy costs milliseconds.

Why a permutation test and not Otava's t-test: Otava swapped permutations for a t-test to be
deterministic and cheap on thousands of long series. Ours are short, and a seeded permutation
test is deterministic too; it assumes nothing about the noise (throughput runs are skewed, have
outliers and bimodal spreads such as the case study's 52.8–68.1 tok/s), and under exchangeable
(no change) data its false-positive rate is ``alpha`` by construction. The price is resolution:
with R permutations p ≥ 1/(R+1), and a very short series cannot reach a small alpha at all
(4 + 4 points: at best p ≈ 2/70), which is the honest answer for so little data.

Algorithm (as E-Divisive/Hunter): find the split of a segment that maximises the scaled energy
statistic ``q = m·n/(m+n) · (2·E|X−Y| − E|X−X'| − E|Y−Y'|)`` (α = 1); test the best split over
all current segments against the same maximum over independently permuted segments; accept,
split, repeat; stop at the first split that is not significant. Points are reported in index
order with medians of the neighbouring segments.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_PERMUTATIONS = 499
# Series whose largest magnitude is above this are scaled down before the sums of their differences.
_SCALE_ABOVE = 1e100
_CHUNK = 64


@dataclass(frozen=True)
class ChangePoint:
    """A change at ``index``: series[index] is the first point of the new regime.

    ``magnitude`` is ``after_median / before_median − 1`` over the neighbouring segments.
    ``statistic``: the split's energy statistic (of the series scaled by a power of two when its values
    are extreme).
    """

    index: int
    before_median: float
    after_median: float
    magnitude: float
    p: float
    statistic: float


def _q_all(x: np.ndarray, min_size: int) -> np.ndarray:
    """Scaled energy statistic for every split τ of each row of ``x`` (shape B×L) → B×(L+1).

    Entries for splits closer than ``min_size`` to either end are ``-inf``.
    """
    b, length = x.shape
    d = np.abs(x[:, :, None] - x[:, None, :])
    below = np.tril(np.ones((length, length)), k=-1)
    zeros = np.zeros((b, 1))
    # left[τ] = Σ_{i,j<τ} d_ij (each pair twice); row[τ] = Σ_{i<τ} Σ_j d_ij.
    left = np.concatenate([zeros, np.cumsum(2.0 * np.einsum("bij,ij->bi", d, below), axis=1)], axis=1)
    row = np.concatenate([zeros, np.cumsum(d.sum(axis=2), axis=1)], axis=1)
    total = row[:, -1:]
    cross = row - left
    right = total - 2.0 * row + left
    out = np.full((b, length + 1), -np.inf)
    lo, hi = min_size, length - min_size
    if hi < lo:
        return out
    t = np.arange(lo, hi + 1, dtype=float)
    m, n = t, length - t
    with np.errstate(divide="ignore", invalid="ignore"):
        within_l = np.where(m > 1, left[:, lo : hi + 1] / (m * (m - 1)), 0.0)
        within_r = np.where(n > 1, right[:, lo : hi + 1] / (n * (n - 1)), 0.0)
    e = 2.0 * cross[:, lo : hi + 1] / (m * n) - within_l - within_r
    out[:, lo : hi + 1] = m * n / (m + n) * e
    return out


def _best_split(seg: np.ndarray, min_size: int) -> tuple[int, float]:
    q = _q_all(seg[None, :], min_size)[0]
    tau = int(np.argmax(q))
    return tau, float(q[tau])


def _perm_max(seg: np.ndarray, min_size: int, rng: np.random.Generator, r: int) -> np.ndarray:
    """Best statistic of ``r`` random permutations of one segment."""
    out = np.empty(r)
    for start in range(0, r, _CHUNK):
        k = min(_CHUNK, r - start)
        perm = rng.permuted(np.broadcast_to(seg, (k, seg.size)), axis=1)
        out[start : start + k] = _q_all(perm, min_size).max(axis=1)
    return out


def _welch_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided Welch t-test p of two segments (0 when both are constant and differ)."""
    from scipy import stats

    if np.ptp(a) == 0 and np.ptp(b) == 0:
        return 0.0 if a[0] != b[0] else 1.0
    return float(stats.ttest_ind(a, b, equal_var=False).pvalue)


def detect(
    series: Sequence[float],
    alpha: float = 0.01,
    min_size: int = 3,
    *,
    permutations: int = DEFAULT_PERMUTATIONS,
    min_magnitude: float = 0.0,
    max_points: int | None = None,
    seed: int = 0,
    test: str = "permutation",
) -> list[ChangePoint]:
    """Change points of ``series`` significant at ``alpha``, in index order.

    ``min_size``: fewest points on each side of a change. ``min_magnitude``: drop changes whose
    relative size ``|after/before − 1|`` is smaller (Otava's ``-M``); the splits still stand.
    ``test``: ``"permutation"`` (default, distribution-free, see the module docstring) or
    ``"ttest"``: Otava's choice, a Welch t-test between the two sides of the best split
    (Bonferroni-corrected for the number of candidate splits, since the split is chosen to
    maximise the difference). The
    t-test resolves short histories (5 + 5 points) that no permutation test can, at the price of
    assuming roughly normal noise; ``specwatch history changes --test`` picks one.
    """
    if test not in ("permutation", "ttest"):
        raise ValueError(f"test must be 'permutation' or 'ttest', got {test!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if min_size < 2:
        raise ValueError(f"min_size must be at least 2, got {min_size}")
    raw = np.asarray(series, dtype=float).ravel()
    if not np.all(np.isfinite(raw)):
        raise ValueError("series contains a non-finite value")
    # The statistic, its permutations and the t-test do not change with the scale of the series; a
    # series of extreme values (1e300) is scaled by a power of two (exactly) so their sums stay finite.
    top = float(np.max(np.abs(raw))) if raw.size else 0.0
    x = np.ldexp(raw, -math.frexp(top)[1]) if top > _SCALE_ABOVE else raw
    rng = np.random.default_rng(seed)
    bounds = [0, x.size]
    found: dict[int, tuple[float, float]] = {}
    while max_points is None or len(found) < max_points:
        best: tuple[float, int] | None = None
        segments = list(itertools.pairwise(bounds))
        for s, e in segments:
            if e - s < 2 * min_size:
                continue
            tau, q = _best_split(x[s:e], min_size)
            if math.isfinite(q) and (best is None or q > best[0]):
                best = (q, s + tau)
        if best is None or best[0] <= 0:
            break
        q_obs, idx = best
        if test == "ttest":
            s, e = next((s, e) for s, e in segments if s < idx < e)
            # Bonferroni over the candidate splits: the best split is chosen after looking.
            candidates = (e - s) - 2 * min_size + 1
            p = min(1.0, _welch_p(x[s:idx], x[idx:e]) * max(candidates, 1))
            if p >= alpha:
                break
            found[idx] = (p, q_obs)
            bounds = sorted([*bounds, idx])
            continue
        # Null: every segment permuted on its own; the statistic is the max over segments.
        null = np.full(permutations, -np.inf)
        for s, e in segments:
            if e - s >= 2 * min_size:
                null = np.maximum(null, _perm_max(x[s:e], min_size, rng, permutations))
        p = (1.0 + np.count_nonzero(null >= q_obs * (1.0 - 1e-12))) / (permutations + 1.0)
        if p >= alpha:
            break
        found[idx] = (float(p), q_obs)
        bounds = sorted([*bounds, idx])

    points: list[ChangePoint] = []
    for i, idx in enumerate(bounds[1:-1], start=1):
        before = float(np.median(raw[bounds[i - 1] : idx]))
        after = float(np.median(raw[idx : bounds[i + 1]]))
        mag = after / before - 1.0 if before != 0 else math.inf
        if abs(mag) < min_magnitude:
            continue
        p, q = found[idx]
        points.append(ChangePoint(idx, before, after, mag, p, q))
    return points
