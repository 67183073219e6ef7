"""Prefix reuse under speculation (-m perf): on a multi-turn workload whose prompts grow turn by turn, the
speculative server keeps the plain server's prompt-cache hits of deep turns and their time to first token."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from specwatch.judge.verdict import Verdict
from specwatch.run import gatekeeper
from specwatch.run.session import Session

pytestmark = pytest.mark.perf


def test_speculation_keeps_prefix_reuse(specwatch_session: Session, enforce: Callable[[Verdict], None]) -> None:
    """A speculative server whose KV pool evicts the sessions' prefixes (97% of deep-turn prompt tokens cached
    without speculation, 40-53% with it) fails here, naming both hit rates, the turn where they part, both TTFT
    p50s and input throughputs; when the plain server itself reuses nothing the test skips, saying why."""
    enforce(gatekeeper.prefix_reuse(specwatch_session))
