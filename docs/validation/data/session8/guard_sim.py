"""Section 12: an F-test guard that stops pooling the round history when a verdict's own rounds are
noisier than it (F-test p below the guard), simulated with ab's rule: 3000 verdicts a row, 2 rounds
up to 4 while unsure, tolerance 0.5%, alpha 0.01, the recorded h200x1 prior (0.76% over 20 df).

    python docs/validation/data/session8/guard_sim.py > docs/validation/data/session8/guard_sim.txt
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from specwatch.judge import paired
from specwatch.revisions.rounds import judge_ratios

PRIOR = paired.RoundPrior(0.0076, 20)


def verdict(x: np.ndarray, guard: float | None) -> str:
    """ab's verdict of log ratios ``x``, the prior dropped when the F test calls the rounds noisier."""
    prior: paired.RoundPrior | None = PRIOR
    if guard and len(x) >= 2 and stats.f.sf(np.var(x, ddof=1) / PRIOR.spread**2, len(x) - 1, PRIOR.df) < guard:
        prior = None
    return judge_ratios(list(np.exp(x)), True, 0.005, 0.01, prior)[1]


def main() -> None:
    rng = np.random.default_rng(1)
    for spread, change in [(0.0076, 0), (0.015, 0), (0.0076, 0.02), (0.015, 0.02), (0.0076, 0.025)]:
        for guard in (None, 0.05, 0.01):
            draws = rng.normal(math.log1p(-change), spread, size=(3000, 4))
            flagged = rounds = 0
            for row in draws:
                for n in range(2, 5):
                    v = verdict(row[:n], guard)
                    if v != "unsure":
                        break
                flagged += v == "regression"
                rounds += n
            print(f"true spread {spread:.2%} change {change:.1%} guard {guard}: regression {flagged / 3000:.1%} "
                  f"rounds {rounds / 3000:.2f}")


if __name__ == "__main__":
    main()
