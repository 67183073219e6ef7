"""One verdict type for every check and gate: pass, fail or skip, with the reason and the evidence, and
the one row type of its rows (:class:`ReportRow`, a result key with its comparison: what the report table
renders, :mod:`specwatch.report.table`).

Pure: stdlib only. A check (environment, verify graphs, accept length, lossless) and a perf gate
(floor, drift, speculation against baseline, tuned against untuned) both return a :class:`Verdict`;
tests assert on ``failed``/``skipped`` and print ``message``.
"""

from __future__ import annotations

import enum
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BAD_VERDICTS", "ReportRow", "Status", "Verdict"]

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




class Status(str, enum.Enum):
    """What a check or gate concluded. Compares equal to its value (``Status.SKIP == "skip"``)."""

    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"  # could not answer; ``reason`` says why

    @classmethod
    def of(cls, ok: bool | None) -> Status:
        """True pass, False fail, None skip."""
        return cls.SKIP if ok is None else cls.PASS if ok else cls.FAIL


@dataclass
class Verdict:
    """The conclusion of one check or gate.

    ``name``: which check or gate ("environment", "drift", ...). ``message``: the full
    explanation, with every number. ``reason``: one line (the cause of a failure, the reason for a
    skip; by default the message's first line). ``profile``: the server profile it is about
    (empty when it concerns several). ``details``: the judge's report (an ``EnvReport``, a
    ``Reconciliation``, ...). ``rows``: the report-table rows a gate adds to the run's results.
    """

    name: str
    status: Status
    message: str
    reason: str = ""
    profile: str = ""
    details: Any = None
    rows: list[ReportRow] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.status = Status(self.status)
        if not self.reason:
            self.reason = self.message.split("\n", 1)[0]

    @classmethod
    def of(cls, name: str, ok: bool | None, message: str, reason: str = "", **fields: Any) -> Verdict:
        """A verdict from a three-way ``ok`` (True pass, False fail, None skip)."""
        return cls(name, Status.of(ok), message, reason, **fields)

    @classmethod
    def skip(cls, name: str, reason: str, profile: str = "") -> Verdict:
        """Could not answer: ``"<name> on <profile>: not checked: <reason>"``."""
        where = f" on {profile}" if profile else ""
        return cls(name, Status.SKIP, f"{name}{where}: not checked: {reason}", reason, profile)

    @property
    def passed(self) -> bool:
        return self.status is Status.PASS

    @property
    def failed(self) -> bool:
        return self.status is Status.FAIL

    @property
    def skipped(self) -> bool:
        return self.status is Status.SKIP

    @property
    def ok(self) -> bool | None:
        """True pass, False fail, None skip (the inverse of :meth:`Status.of`)."""
        return None if self.skipped else self.passed

    def __str__(self) -> str:
        return self.message

