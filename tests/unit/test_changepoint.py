"""E-divisive change points: the case study's step, multiple steps, and controlled false alarms."""

from __future__ import annotations

import numpy as np
import pytest

from specwatch.judge.changepoint import detect

# Case study: ~89 tok/s runs, then ~82 tok/s after the patches (more points follow the "...").
CASE = [89.0, 89.3, 88.8, 89.1, 82.1, 82.2, 83.0, 82.4, 82.3, 82.7, 82.5, 82.1]


def test_finds_the_case_study_step():
    cps = detect(CASE)
    assert [c.index for c in cps] == [4]
    cp = cps[0]
    assert cp.before_median == pytest.approx(89.05)
    assert cp.after_median == pytest.approx(82.35)
    assert cp.magnitude == pytest.approx(82.35 / 89.05 - 1)
    assert cp.p < 0.01


def test_finds_the_step_in_a_longer_noisy_history():
    rng = np.random.default_rng(8)
    series = np.r_[89 * (1 + 0.01 * rng.standard_normal(25)), 82 * (1 + 0.01 * rng.standard_normal(15))]
    cps = detect(series)
    assert [c.index for c in cps] == [25]
    assert cps[0].magnitude == pytest.approx(-0.079, abs=0.01)


def test_too_short_to_reach_alpha_reports_nothing():
    # 4 + 4 points: the best permutation p is about 2/70 > 0.01.
    assert detect(CASE[:8]) == []
    assert [c.index for c in detect(CASE[:8], alpha=0.05)] == [4]


def test_two_changes_in_index_order():
    rng = np.random.default_rng(5)
    series = np.r_[100 + rng.standard_normal(30), 90 + rng.standard_normal(30), 96 + rng.standard_normal(30)]
    cps = detect(series)
    assert [c.index for c in cps] == [30, 60]
    assert cps[0].magnitude < 0 < cps[1].magnitude


def test_false_positive_rate_on_flat_noisy_series():
    """Flat series, 150 seeds: about alpha of them get a change point (well under 4%)."""
    flagged = 0
    for seed in range(150):
        y = 89.0 * (1 + 0.03 * np.random.default_rng(seed).standard_normal(30))
        flagged += bool(detect(y, seed=seed))
    assert flagged <= 6


def test_heavy_tailed_flat_series_rarely_flagged():
    flagged = 0
    for seed in range(60):
        y = 89.0 + np.random.default_rng(10_000 + seed).standard_t(2, 30)
        flagged += bool(detect(y, seed=seed))
    assert flagged <= 3


def test_min_magnitude_and_max_points_and_determinism():
    rng = np.random.default_rng(9)
    series = np.r_[100 + 0.1 * rng.standard_normal(20), 99 + 0.1 * rng.standard_normal(20)]
    assert [c.index for c in detect(series)] == [20]
    assert detect(series, min_magnitude=0.05) == []
    assert detect(series, seed=3) == detect(series, seed=3)
    three = np.r_[np.full(10, 1.0), np.full(10, 2.0), np.full(10, 3.0)] + 0.01 * rng.standard_normal(30)
    assert len(detect(three, max_points=1)) == 1


def test_flat_constant_and_argument_checks():
    assert detect([5.0] * 20) == []
    assert detect([1.0, 2.0]) == []
    with pytest.raises(ValueError):
        detect(CASE, min_size=1)
    with pytest.raises(ValueError):
        detect(CASE, alpha=0)
    with pytest.raises(ValueError):
        detect([1.0, float("nan"), 2.0])


def test_ttest_mode_finds_the_case_study_step_in_a_short_history() -> None:
    """Otava's t-test resolves 3 + 5 points, which no permutation test can reach at alpha 0.01."""
    short = [89.0, 89.3, 88.8, 82.1, 82.2, 83.0, 82.4, 82.6]
    points = detect(short, test="ttest")
    assert [p.index for p in points] == [3]
    assert points[0].magnitude == pytest.approx(82.4 / 89.0 - 1, abs=1e-9) and points[0].p < 0.01


def test_ttest_mode_false_positive_rate_on_flat_series() -> None:
    hits = sum(bool(detect(np.random.default_rng(s).normal(89, 1.5, 12), test="ttest")) for s in range(300))
    assert hits / 300 <= 0.03  # alpha 0.01, Bonferroni over the candidate splits


def test_unknown_test_is_rejected() -> None:
    with pytest.raises(ValueError, match="ttest"):
        detect([1.0] * 10, test="bayes")
