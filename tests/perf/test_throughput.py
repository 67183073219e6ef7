"""Throughput floors and drift against stored baselines, per server profile (the main job: -m perf)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from specwatch.judge.verdict import Verdict
from specwatch.run import gatekeeper
from specwatch.run.session import Session

pytestmark = pytest.mark.perf
Enforce = Callable[[Verdict], None]


def test_throughput_floor(specwatch_session: Session, profile_name: str, enforce: Enforce) -> None:
    """Each profile's single-stream median tok/s is at least its floor_tok_s."""
    enforce(gatekeeper.floor(specwatch_session, profile_name))


@pytest.mark.parametrize("metric", ["output_tok_s", "decode_tok_s"])
def test_no_drift_against_baseline(
    specwatch_session: Session, profile_name: str, metric: str, enforce: Enforce
) -> None:
    """Single-stream tok/s (end to end, and decode only) has not regressed against the stored baseline
    (a regression is a change beyond the tolerance AND significant at p < alpha)."""
    enforce(gatekeeper.drift(specwatch_session, profile_name, metric=metric))
