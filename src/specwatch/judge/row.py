"""One row of the report table: a result key with its comparison, the type of a verdict's rows
(:attr:`specwatch.judge.verdict.Verdict.rows`) and of the renderers' input (:mod:`specwatch.report.table`).

Pure: stdlib only. ``ReportRow.from_comparison`` adapts anything shaped like ``compare.Comparison``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BAD_VERDICTS", "ReportRow"]

BAD_VERDICTS = frozenset({"regression"})


@dataclass(frozen=True)
class ReportRow:
    """One result key with its comparison, as the renderers need it.

    ``ci_low``/``ci_high`` bound the median (same unit); ``change`` is the relative change against the
    baseline (+0.05 = 5 % higher): of the medians, unless ``change_basis`` names another estimate (the
    paired rounds of a relative gate); ``verdict`` is a plain string such as "regression", "improvement",
    "no_change", "inconclusive", "noisy" or "new". ``gated``: whether the gate that made the row fails on
    its verdict; the gate decides (a key it reports beside the one it judges is not), and a row that is
    not gated is never a regression (:attr:`is_bad`). ``dropped``: runs left out of the samples, and why.
    """

    key: str
    n: int
    median: float
    unit: str = ""
    ci_low: float | None = None
    ci_high: float | None = None
    baseline_median: float | None = None
    change: float | None = None
    p: float | None = None
    verdict: str = "new"
    #: the change a verdict needs to exceed to count (a fraction), shown beside it in the table
    tolerance: float | None = None
    higher_is_better: bool = True
    samples: tuple[float, ...] = ()
    nodeid: str = ""  # the pytest test that measured it, if any
    message: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)
    gated: bool = True
    change_basis: str = ""
    dropped: str = ""

    @property
    def is_bad(self) -> bool:
        """A regression that its gate judges (a reported key that got worse is not one)."""
        return self.gated and self.verdict in BAD_VERDICTS

    @property
    def medians_change(self) -> float | None:
        """The relative change of the median against the baseline's median (None without both)."""
        if self.baseline_median is None or not self.baseline_median or math.isnan(self.median):
            return None
        return self.median / self.baseline_median - 1

    @property
    def change_disagrees(self) -> bool:
        """Whether the change shown and the medians shown differ in sign (by more than rounding)."""
        other = self.medians_change
        if self.change is None or other is None:
            return False
        return round(self.change * 1000) * round(other * 1000) < 0

    @classmethod
    def from_comparison(
        cls,
        key: str,
        comparison: Any,
        *,
        unit: str = "",
        samples: Sequence[float] = (),
        median_ci: tuple[float, float] | None = None,
        nodeid: str = "",
        extra: Mapping[str, Any] | None = None,
    ) -> ReportRow:
        """Build a row from a ``compare.Comparison``-like object (duck-typed)."""
        verdict = getattr(comparison, "verdict", "new")
        return cls(
            key=key,
            n=int(getattr(comparison, "n_current", len(samples))),
            median=float(getattr(comparison, "median_current", _median(samples))),
            unit=unit,
            ci_low=median_ci[0] if median_ci else None,
            ci_high=median_ci[1] if median_ci else None,
            baseline_median=getattr(comparison, "median_reference", None),
            change=getattr(comparison, "ratio", 1.0) - 1.0 if hasattr(comparison, "ratio") else None,
            p=getattr(comparison, "p", None),
            verdict=str(getattr(verdict, "value", verdict)),
            tolerance=getattr(comparison, "tolerance", None),
            higher_is_better=bool(getattr(comparison, "higher_is_better", True)),
            samples=tuple(float(x) for x in samples),
            nodeid=nodeid,
            message=str(getattr(comparison, "message", "")),
            extra=dict(extra or {}),
        )


def _median(samples: Sequence[float]) -> float:
    return float(statistics.median(samples)) if samples else math.nan
