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
skips: the switch is the reference server's. With ``SPECWATCH_EXPECTED_ACCEPT`` naming that draft's made.json, each
prompt's counts alone must also be the ones the draft was built for (its table by the prompt's last token).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from correctness.faultkit import fault_profile
from specwatch.checks import accept_concurrency
from specwatch.run.session import Session
from specwatch.server.pool import RunningServer

pytestmark = pytest.mark.correctness

#: a made.json of docs/validation/sglang_models.py --draft-profile varying: the counts each prompt must show alone
EXPECTED_ENV = "SPECWATCH_EXPECTED_ACCEPT"


def _unexpected(report, made_json: str) -> list[str]:
    """Each reply at c=1 whose spec_verify_ct and correct drafts are not made.json's for its last prompt token."""
    made = json.loads(Path(made_json).read_text())
    table = made["expected"][str(accept_concurrency.MAX_NEW_TOKENS)]["by_last_token"]
    wrong = []
    for r in report.reference.replies:
        if not r.scored.prompt_ids:
            wrong.append(f"prompt {r.prompt}: the server returned no prompt token ids")
        elif table[str(r.scored.prompt_ids[-1])] != [r.verify_ct, r.correct_drafts]:
            wrong.append(f"prompt {r.prompt} (last token {r.scored.prompt_ids[-1]}): expected "
                         f"{table[str(r.scored.prompt_ids[-1])]}, got {[r.verify_ct, r.correct_drafts]}")
    return wrong


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
    if made_json := os.environ.get(EXPECTED_ENV):
        assert _unexpected(report, made_json) == [], report.message()
        each = {round(a, 2) for r in report.reference.replies if (a := r.accept_length) is not None}
        print(f"{EXPECTED_ENV}: every prompt's counts are {made_json}'s; {len(each)} distinct accept lengths")


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
