"""Shared helper of the perf tests: turn a gate Outcome into pass, skip or a failing assertion.

The gates record their own verdict rows in the session (summary table, results, benchmark.json);
this helper only adds them to the test's JUnit properties and asserts.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from specwatch.report.table import add_user_properties
from specwatch.run.gates import Outcome
from specwatch.run.session import Session


@pytest.fixture
def enforce(specwatch_session: Session, request: pytest.FixtureRequest) -> Callable[[Outcome], None]:
    """Add the outcome's rows to the JUnit properties, then skip, fail or pass the test."""

    def check(outcome: Outcome) -> None:
        add_user_properties(request.node, outcome.rows)
        if outcome.status == "skip":
            pytest.skip(outcome.message)
        assert not outcome.failed, outcome.message

    return check
