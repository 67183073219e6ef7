"""Speculation against context length (-m perf): accept length and decode speedup over plain decoding at several
input lengths on the profile set's plain and speculative servers, and where speculation stops paying.

Reports by default (the rows are in the summary table and the results file, the message names what was measured);
``--specwatch-context-gate-until N`` makes it a gate: every measured input up to N tokens must keep a speedup of
``--specwatch-context-min-speedup`` (1.0) and an accept length within ``--specwatch-context-accept-drop`` (25%) of
the shortest input's. ``--specwatch-context-lengths`` and ``--specwatch-context-output-tokens`` size the table.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from specwatch.judge.verdict import Verdict
from specwatch.run import gatekeeper
from specwatch.run.session import Session

pytestmark = pytest.mark.perf


def test_speculation_by_context_length(specwatch_session: Session, enforce: Callable[[Verdict], None]) -> None:
    """A draft trained on short contexts that drafts worse past them (SGLang issue 6783: slower than plain decoding
    above 2k input tokens) shows here as the length where the speedup falls below 1 and the accept length with it;
    gated, the test fails naming that length and both numbers."""
    verdict = gatekeeper.context_length(specwatch_session)
    print(verdict.message)  # the table, in the -rA report
    enforce(verdict)
