"""Speculation at every load level of the profile set's sweep, and its crossover concurrency.

Runs when the profile set's ``[workload]`` declares levels (``concurrency = [1, 4, 16, 64]`` and/or
``request_rate = [2.0, 8.0]``); skipped, saying so, otherwise. Fails only when ``[gates]
min_crossover_concurrency`` is set and speculation stops paying below it; the per-level verdicts,
p99 latencies and the crossover are in the summary's sweep table and in the results file.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from specwatch.judge.verdict import Verdict
from specwatch.run import gatekeeper
from specwatch.run.session import Session

pytestmark = pytest.mark.perf
Enforce = Callable[[Verdict], None]


def test_speculation_by_load_level(specwatch_session: Session, enforce: Enforce) -> None:
    """Per level: spec vs baseline output throughput (spec_margin), p99 TTFT/ITL/TPOT/e2e; the crossover."""
    enforce(gatekeeper.speculation_by_level(specwatch_session))
