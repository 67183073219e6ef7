"""Acceptance per concurrency: under greedy decoding a request's output and the drafts it accepts must not depend
on who else shares its batch (TensorRT-LLM issue 9208, accept length falling as the batch grew; PR 4168, a gather
that gave batches above one request the wrong draft rows). The same prompts at concurrency 1, 4, 16 and one above
the largest batch size the server captured as a CUDA graph (checks/accept_concurrency.py).

On the reference server (CPU, CI) the healthy speculative server holds at every level, and the same server started
with ``--ref-fault-batch-draft`` (each request of a shared batch verified against the draft tokens of the request
before it; its code path otherwise untouched) fails at concurrency 4, the first level whose batches hold more than
one request, with the accept lengths named and its output unchanged. On real SGLang the healthy test runs as it
is (harness scenario sglang-8b-accept-x1: the varying draft of docs/validation/sglang_models.py, whose accept
length differs per prompt; the 8B profiles capture bs 1-8, so c=9 and c=16 verify eagerly), and the fault test
skips: the switch is the reference server's.
"""

from __future__ import annotations

import pytest

from correctness.faultkit import fault_profile
from specwatch.checks import accept_concurrency
from specwatch.run.session import Session
from specwatch.server.pool import RunningServer

pytestmark = pytest.mark.correctness


def test_accept_length_and_output_hold_at_every_concurrency(specwatch_session: Session,
                                                            spec_server: RunningServer) -> None:
    result = accept_concurrency.check(specwatch_session, spec_server)
    if result.skipped:
        pytest.skip(result.reason)
    print(result.message)
    assert result.passed, result.message
    report = result.details
    levels = {lv.concurrency: lv for lv in (report.reference, *report.levels)}
    assert {1, 4, 16} <= set(levels), sorted(levels)
    above = [lv for lv in report.levels if lv.why.startswith("one above ")]
    assert above or any(n.startswith(("no batch above ", "the captured batch sizes are unknown"))
                        for n in report.notes), report.message()
    n = len(accept_concurrency.PROMPTS)
    assert all(len(lv.replies) == max(n, c) for c, lv in levels.items())
    assert result.reason.startswith("accept length and greedy output held at concurrency 1, 4"), result.reason


def test_a_draft_gathered_one_request_off_fails_at_the_first_shared_batch(specwatch_session: Session) -> None:
    prof = fault_profile(specwatch_session, "spec", "batch-draft", "--ref-fault-batch-draft")
    server = specwatch_session.server_for_profile(prof)
    result = accept_concurrency.check(specwatch_session, server)
    print(result.message)
    assert result.failed, result.message
    assert result.details.first_parted == 4, result.message
    assert result.reason.startswith("accept length parts at concurrency 4: accept length "), result.reason
    assert " at c=1 vs " in result.reason and " at c=4 (pooled over the same prompts)" in result.reason
    assert all(p.kind == "accept length" for p in result.details.partings), result.message  # output lossless
    assert any(f.check == accept_concurrency.NAME and not f.ok for f in specwatch_session.findings_for(prof.name))
