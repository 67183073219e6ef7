"""Shared helper of the perf tests: turn a gate Verdict into pass, skip or a failing assertion.

The gates record their own verdict rows in the session (summary table, results, benchmark.json);
this helper only adds them to the test's JUnit properties and asserts.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from specwatch.judge.verdict import Verdict
from specwatch.report.table import add_user_properties
from specwatch.run.session import Session


@pytest.fixture
def enforce(specwatch_session: Session, request: pytest.FixtureRequest) -> Callable[[Verdict], None]:
    """Add the verdict's rows to the JUnit properties, then skip, fail or pass the test."""

    def check(verdict: Verdict) -> None:
        add_user_properties(request.node, verdict.rows)
        if verdict.skipped:
            pytest.skip(verdict.message)
        assert not verdict.failed, verdict.message

    return check
