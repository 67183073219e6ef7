"""Two tools' readings of one metric on one server and workload, judged: agree, differ, or cannot tell.

Pure: numbers in, a verdict out. One side ("ours") is specwatch's: one sample per run. The other ("theirs") is
another tool's, one number per run of it (``sglang.bench_serving`` writes one line a run). The question is whether
the difference of their means is inside what the two sides' own run-to-run spreads allow:

* with two or more runs of theirs, Welch's interval of the difference of means (each side's own standard
  deviation, Welch-Satterthwaite degrees of freedom);
* with one, the prediction interval of one more of our runs (``t(n-1) * s * sqrt(1 + 1/n)``): their one number is
  judged as if it were one more run of ours, so the verdict rests on our spread only (a run of theirs must then
  be the size of one of ours: the same requests and concurrency).

The allowance is that interval's half-width at ``alpha`` (two-sided), relative to our mean, and never below
``floor``: a difference smaller than that is no difference, however tight the spreads. A difference beyond the
allowance **differs**; one inside it **agrees**, unless the allowance is wider than ``widest`` (the spreads are too
wide to show agreement): then it **cannot tell**, as it cannot without numbers on both sides or with fewer than
two runs of ours (no spread).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as _sps

AGREE, DIFFER, CANNOT_TELL = "agree", "differ", "cannot tell"
#: a difference below this share of our mean is no difference, however tight the spreads
FLOOR = 0.01
#: an allowance wider than this share of our mean shows no agreement
WIDEST = 0.10
#: the two-sided significance level of the allowance
ALPHA = 0.01


@dataclass(frozen=True)
class Agreement:
    """One metric's verdict, with the numbers it came from (NaN where a side has none)."""

    metric: str
    verdict: str  # AGREE, DIFFER or CANNOT_TELL
    ours: float  # the mean of our runs
    theirs: float  # the mean of theirs
    n_ours: int
    n_theirs: int
    difference: float  # theirs / ours - 1
    allowance: float  # the relative half-width the spreads allow (at least the floor)
    basis: str  # whose spreads the allowance comes from
    reason: str = ""  # why it cannot tell ("" otherwise)

    @property
    def message(self) -> str:
        """One line: the verdict, the difference against the allowance, and its basis or why it cannot tell."""
        if self.reason:
            return f"{self.metric}: cannot tell: {self.reason}"
        rel = "beyond" if self.verdict == DIFFER else "within"
        return (f"{self.metric}: {self.verdict}: {self.difference * 100:+.2f}% {rel} ±{self.allowance * 100:.2f}% "
                f"({self.basis})")


def _finite(xs: Sequence[float]) -> np.ndarray:
    x = np.asarray([float(v) for v in xs], dtype=float)
    return x[np.isfinite(x)]


def agreement(metric: str, ours: Sequence[float], theirs: Sequence[float], *, alpha: float = ALPHA,
              floor: float = FLOOR, widest: float = WIDEST, ours_name: str = "specwatch",
              theirs_name: str = "the other tool") -> Agreement:
    """Whether ``theirs`` (one number per run of the other tool) agrees with ``ours`` (one sample per run) on
    ``metric``: see the module docstring. Non-finite values are left out."""
    a, b = _finite(ours), _finite(theirs)
    mean_a = float(a.mean()) if a.size else math.nan
    mean_b = float(b.mean()) if b.size else math.nan
    diff = mean_b / mean_a - 1 if a.size and b.size and mean_a > 0 else math.nan

    def cannot(reason: str, allowance: float = math.nan, basis: str = "") -> Agreement:
        return Agreement(metric, CANNOT_TELL, mean_a, mean_b, int(a.size), int(b.size), diff, allowance, basis,
                         reason)

    if not b.size:
        return cannot(f"{theirs_name} has no value of it")
    if not a.size:
        return cannot(f"{ours_name} recorded no value of it")
    if a.size < 2:
        return cannot(f"{ours_name} has {a.size} run of it: no spread to judge a difference by")
    if not mean_a > 0:
        return cannot(f"{ours_name}'s mean is {mean_a:g}: no relative difference")
    var_a = float(a.var(ddof=1))
    if b.size >= 2:
        var_b = float(b.var(ddof=1))
        se2 = var_a / a.size + var_b / b.size
        denom = (var_a / a.size) ** 2 / (a.size - 1) + (var_b / b.size) ** 2 / (b.size - 1)
        df = se2 ** 2 / denom if denom > 0 else float(a.size + b.size - 2)
        basis = f"both spreads: {a.size} runs of {ours_name}, {b.size} of {theirs_name}"
    else:
        se2 = var_a * (1 + 1 / a.size)
        df = float(a.size - 1)
        basis = f"{ours_name}'s spread only ({a.size} runs): one run of {theirs_name}"
    half = float(_sps.t.ppf(1 - alpha / 2, df)) * math.sqrt(se2) / mean_a
    allowance = max(floor, half)
    if abs(diff) > allowance:
        return Agreement(metric, DIFFER, mean_a, mean_b, int(a.size), int(b.size), diff, allowance, basis)
    if half > widest:
        return cannot(f"{diff * 100:+.2f}% is within ±{half * 100:.2f}%, an allowance over ±{widest * 100:g}%: "
                      f"spreads that wide show no agreement ({basis})", allowance, basis)
    return Agreement(metric, AGREE, mean_a, mean_b, int(a.size), int(b.size), diff, allowance, basis)


def overall(found: Sequence[Agreement]) -> str:
    """The verdict of several metrics: DIFFER when one differs; AGREE when none does and at least one agrees;
    CANNOT_TELL when none could be judged."""
    verdicts = {a.verdict for a in found}
    if DIFFER in verdicts:
        return DIFFER
    return AGREE if AGREE in verdicts else CANNOT_TELL
