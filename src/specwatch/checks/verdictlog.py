"""Where a live check keeps its verdict: a :class:`VerdictLog` handed in by the caller.

The checks never import the run. A pass or a fail is kept in the caller's log (the run's Session
is one) so that a later perf failure can cite it; a skip is not kept.
"""

from __future__ import annotations

from typing import Protocol

from specwatch.judge.verdict import Verdict

__all__ = ["VerdictLog", "record"]


class VerdictLog(Protocol):
    """Keeps each check's conclusion once (``Session.note``)."""

    def note(self, check: str, profile: str, ok: bool, summary: str) -> None: ...


def record(log: VerdictLog | None, verdict: Verdict) -> Verdict:
    """Keep a pass or fail in ``log`` (summary: the reason, then the full message); returns ``verdict``."""
    if log is not None and not verdict.skipped:
        log.note(verdict.name, verdict.profile, verdict.passed, f"{verdict.reason}\n{verdict.message}")
    return verdict
