"""Speculation health as gated, low-noise signals (-m perf): the accept length against its baseline, exact per
greedy prompt, and the verify cycle's cost over busy time against its baseline, with the break-even beside it.

Each runs per server of the profile set; a plain server has no accept length (skipped, saying so) and its
decode step is what the speculative servers' break-even divides by. The summary prints one line per
speculative server: accept length, cycle cost, break-even and each verdict.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from specwatch.judge.verdict import Verdict
from specwatch.run import gatekeeper
from specwatch.run.session import Session

pytestmark = pytest.mark.perf
Enforce = Callable[[Verdict], None]


def test_accept_length_against_baseline(specwatch_session: Session, profile_name: str, enforce: Enforce) -> None:
    """Every greedy prompt takes its recorded verify count (a changed one is named, with the first output token
    where acceptance diverged and the cause that fits); the aggregate accept length has not drifted."""
    enforce(gatekeeper.accept_length_vs_baseline(specwatch_session, profile_name))


def test_cycle_cost_against_baseline(specwatch_session: Session, profile_name: str, enforce: Enforce) -> None:
    """The time per draft+verify cycle (a plain server: per decode step), over busy time only, and the
    break-even against the plain server's step have not regressed: an eager verify fails here."""
    enforce(gatekeeper.cycle_cost_vs_baseline(specwatch_session, profile_name))
