"""Relative gates measured in one session: speculation against plain decoding, tuned against untuned."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from specwatch.judge.verdict import Verdict
from specwatch.run import gatekeeper
from specwatch.run.session import Session

pytestmark = pytest.mark.perf
Enforce = Callable[[Verdict], None]


def test_speculation_beats_baseline(specwatch_session: Session, enforce: Enforce) -> None:
    """EAGLE at 60 tok/s against a baseline of 82 fails here, with accept length and break-even."""
    enforce(gatekeeper.speculation_beats_baseline(specwatch_session))


def test_speculation_ttft_within_allowance(specwatch_session: Session, enforce: Enforce) -> None:
    """The draft prefills too: speculative TTFT p50 and p99 within [gates] spec_ttft_margin of plain decoding's,
    judged on the same rounds as the throughput gate (no extra boot)."""
    enforce(gatekeeper.speculation_ttft(specwatch_session))


def test_tuned_not_worse_than_untuned(specwatch_session: Session, enforce: Enforce) -> None:
    """Tuning must not hurt; a tuning with no measurable effect is reported as such, not as a win."""
    enforce(gatekeeper.tuned_vs_untuned(specwatch_session))
