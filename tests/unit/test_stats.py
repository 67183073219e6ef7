"""Property and coverage tests for specwatch.judge.stats."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specwatch.judge import stats

positive = st.floats(min_value=1.0, max_value=1000.0, allow_nan=False, allow_infinity=False)
samples = st.lists(positive, min_size=2, max_size=30)
FAST = settings(max_examples=40, deadline=None)


def test_median_cv_and_robust_cv_basics():
    assert stats.median([3, 1, 2]) == 2
    assert stats.median([1, 2, 3, 4]) == 2.5
    assert stats.cv([5.0]) == 0.0
    assert stats.cv([10.0, 10.0, 10.0]) == 0.0
    assert stats.cv([9.0, 11.0]) == pytest.approx(math.sqrt(2) / 10)
    # One wild outlier blows up the classic CV but barely moves the robust one.
    x = [100, 101, 99, 100.5, 99.5, 100.2, 99.8, 400]
    assert stats.cv(x) > 0.5
    assert stats.robust_cv(x) < 0.01
    with pytest.raises(ValueError):
        stats.median([])
    with pytest.raises(ValueError):
        stats.cv([1.0, float("nan")])


def test_robust_cv_matches_cv_on_normal_data():
    x = np.random.default_rng(3).normal(100, 5, 5000)
    assert stats.robust_cv(x) == pytest.approx(stats.cv(x), rel=0.05)


@pytest.mark.parametrize("n", [10, 25, 60])
def test_bootstrap_median_ci_covers_true_median(n):
    """95% percentile CI of the median covers the true median in >= 90% of 200 seeded trials."""
    rng = np.random.default_rng(1000 + n)
    hits = 0
    trials = 200
    true_median = 100.0  # lognormal(log 100, 0.1) has median exactly 100
    for t in range(trials):
        x = np.exp(rng.normal(math.log(true_median), 0.1, n))
        lo, hi = stats.bootstrap_median_ci(x, confidence=0.95, n_resamples=1000, seed=t)
        hits += lo <= true_median <= hi
    assert hits / trials >= 0.90


def test_bca_covers_and_is_reproducible():
    rng = np.random.default_rng(7)
    hits = 0
    for t in range(100):
        x = rng.gamma(4.0, 25.0, 30)  # skewed
        lo, hi = stats.bootstrap_median_ci(x, method="bca", n_resamples=1000, seed=t)
        true = 25.0 * 3.672060748850897  # median of gamma(4), scale 25
        hits += lo <= true <= hi
    assert hits >= 88
    x = rng.normal(50, 3, 20)
    assert stats.bootstrap_median_ci(x, method="bca", seed=5) == stats.bootstrap_median_ci(
        x, method="bca", seed=5
    )


def test_ratio_ci_covers_true_ratio():
    rng = np.random.default_rng(11)
    hits = 0
    for t in range(150):
        a = np.exp(rng.normal(math.log(82.0), 0.03, 10))
        b = np.exp(rng.normal(math.log(89.0), 0.03, 10))
        lo, hi = stats.bootstrap_ratio_ci(a, b, confidence=0.95, n_resamples=1000, seed=t)
        hits += lo <= 82.0 / 89.0 <= hi
    assert hits / 150 >= 0.90


@FAST
@given(samples, samples, st.integers(0, 2**16))
def test_ratio_ci_symmetry(a, b, seed):
    lo, hi = stats.bootstrap_ratio_ci(a, b, n_resamples=500, seed=seed)
    lo2, hi2 = stats.bootstrap_ratio_ci(b, a, n_resamples=500, seed=seed)
    assert lo <= hi
    assert lo == pytest.approx(1.0 / hi2, rel=1e-12)
    assert hi == pytest.approx(1.0 / lo2, rel=1e-12)


@FAST
@given(samples, samples, st.sampled_from([0.125, 0.5, 2.0, 64.0]), st.integers(0, 100))
def test_ratio_ci_and_p_scale_invariant(a, b, c, seed):
    ci = stats.bootstrap_ratio_ci(a, b, n_resamples=500, seed=seed)
    ci_scaled = stats.bootstrap_ratio_ci([c * x for x in a], [c * x for x in b], n_resamples=500, seed=seed)
    assert ci == ci_scaled
    assert stats.mann_whitney(a, b) == stats.mann_whitney([c * x for x in a], [c * x for x in b])


@FAST
@given(samples)
def test_median_ci_contains_sample_median_range(x):
    lo, hi = stats.bootstrap_median_ci(x, n_resamples=500)
    assert min(x) <= lo <= hi <= max(x)


@FAST
@given(samples, samples)
def test_mann_whitney_p_in_unit_interval_and_consistent(a, b):
    mw = stats.mann_whitney(a, b)
    for p in (mw.p_two_sided, mw.p_greater, mw.p_less):
        assert 0.0 <= p <= 1.0
    assert mw.p_two_sided >= mw.p_min_two_sided
    # Swapping the samples swaps the one-sided alternatives and keeps the two-sided p.
    sw = stats.mann_whitney(b, a)
    assert sw.p_two_sided == pytest.approx(mw.p_two_sided)
    assert sw.p_greater == pytest.approx(mw.p_less)


def test_mann_whitney_clear_shift_and_floor():
    a = [89.0, 89.3, 88.8, 89.1, 89.2, 88.9, 89.0, 89.4, 88.7, 89.1]
    b = [82.1, 82.2, 83.0, 82.4, 82.3, 82.6, 82.0, 82.5, 82.8, 82.2]
    mw = stats.mann_whitney(a, b)
    assert mw.p_two_sided < 0.001
    assert mw.p_greater < 0.001
    assert mw.p_less > 0.99
    # 3 vs 3 can never go below 2/C(6,3) = 0.1, however far apart.
    small = stats.mann_whitney([1.0, 2.0, 3.0], [100.0, 200.0, 300.0])
    assert small.p_two_sided == pytest.approx(0.1)
    assert stats.mann_whitney([5.0, 5.0], [5.0, 5.0]).p_two_sided == 1.0


def test_min_attainable_p_and_runs_to_reach():
    assert stats.min_attainable_p(5, 5) == pytest.approx(2 / 252)
    assert stats.min_attainable_p(5, 5, "greater") == pytest.approx(1 / 252)
    assert stats.runs_to_reach_p(0.01) == 5
    assert stats.runs_to_reach_p(0.002) == 7  # asv's p: 6 vs 6 gives 2/924 > 0.002
    assert stats.runs_to_reach_p(0.01, n_other=20) < 5


def test_mde_and_runs_needed_are_consistent():
    # Feeding the MDE back gives about the same n.
    n = stats.runs_needed(0.05, 0.03, alpha=0.01, power=0.8)
    mde = stats.minimum_detectable_effect(0.03, n, 0.03, n, alpha=0.01, power=0.8)
    assert mde <= 0.05 < stats.minimum_detectable_effect(0.03, n - 1, 0.03, n - 1)
    # More noise needs more runs; a bigger effect needs fewer.
    assert stats.runs_needed(0.05, 0.10) > stats.runs_needed(0.05, 0.02)
    assert stats.runs_needed(0.20, 0.05) < stats.runs_needed(0.05, 0.05)
    # Quiet machine: the exact test's own floor (5 per side for p < 0.01) dominates.
    assert stats.runs_needed(0.05, 0.001) == 5
    assert math.isinf(stats.minimum_detectable_effect(0.01, 3, 0.01, 3))


def test_runs_needed_matches_simulated_power():
    """At the n that runs_needed returns, a simulated MW test finds the effect ~80% of the time."""
    effect, noise = 0.05, 0.04
    n = stats.runs_needed(effect, noise, alpha=0.01, power=0.8)
    rng = np.random.default_rng(2)
    hits = 0
    trials = 200
    for _ in range(trials):
        a = np.exp(rng.normal(0.0, noise, n))
        b = np.exp(rng.normal(math.log1p(effect), noise, n))
        hits += stats.mann_whitney(a, b).p_two_sided < 0.01
    assert 0.65 <= hits / trials <= 0.95


def test_summary_roundtrip():
    s = stats.summarize([81.9, 82.3, 82.0, 82.1, 82.4])
    assert s.n == 5
    assert s.median == 82.1
    assert s.min == 81.9
    assert s.max == 82.4
    assert s.ci_low <= s.median <= s.ci_high
    assert s.cv == pytest.approx(s.stdev / s.mean)
    assert stats.Summary.from_dict(s.to_dict()) == s
    one = stats.summarize([7.0])
    assert one.stdev == 0.0
    assert one.ci_low == one.ci_high == 7.0


def test_argument_checks():
    with pytest.raises(ValueError):
        stats.bootstrap_median_ci([1, 2, 3], confidence=1.5)
    with pytest.raises(ValueError):
        stats.bootstrap_median_ci([1, 2, 3], method="basic")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        stats.bootstrap_ratio_ci([1, 2], [0, 1])
    with pytest.raises(ValueError):
        stats.runs_needed(0.0, 0.1)
