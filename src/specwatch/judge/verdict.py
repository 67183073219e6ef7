"""One verdict type for every check and gate: pass, fail or skip, with the reason and the evidence.

Pure: stdlib only. A check (environment, verify graphs, accept length, lossless) and a perf gate
(floor, drift, speculation against baseline, tuned against untuned) both return a :class:`Verdict`;
tests assert on ``failed``/``skipped`` and print ``message``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from specwatch.judge.row import ReportRow

__all__ = ["Status", "Verdict"]


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

