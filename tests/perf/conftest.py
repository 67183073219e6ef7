"""Shared helper of the perf tests: turn a gate Outcome into pass, skip or a failing assertion."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from specwatch.gates import Outcome
from specwatch.report import add_user_properties
from specwatch.session import Session


@pytest.fixture
def enforce(specwatch_session: Session, request: pytest.FixtureRequest) -> Callable[[Outcome], None]:
    """Record the outcome's rows (summary table, JUnit properties), then skip, fail or pass the test."""

    def check(outcome: Outcome) -> None:
        specwatch_session.verdict_rows.extend(outcome.rows)
        add_user_properties(request.node, outcome.rows)
        if outcome.status == "skip":
            pytest.skip(outcome.message)
        assert not outcome.failed, outcome.message

    return check
