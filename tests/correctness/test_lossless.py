"""Greedy speculative output must equal the baseline's, token for token."""

from __future__ import annotations

import dataclasses

import pytest

from correctness.faultkit import LOSSLESS_MAX_NEW, LOSSLESS_PROMPTS
from specwatch.checks import lossless_live
from specwatch.load.client import run_sync
from specwatch.load.greedy import generate_greedy
from specwatch.run.session import Session
from specwatch.server.pool import RunningServer

pytestmark = pytest.mark.correctness


def test_baseline_greedy_output_is_deterministic(specwatch_session: Session, baseline_server: RunningServer) -> None:
    """The premise of the comparison (and the memo the next tests reuse while the baseline is up)."""
    first = lossless_live.greedy_outputs(specwatch_session, specwatch_session.profile_for("baseline"), LOSSLESS_PROMPTS,
                                  LOSSLESS_MAX_NEW)
    again = run_sync(generate_greedy(baseline_server.url, LOSSLESS_PROMPTS, LOSSLESS_MAX_NEW))
    assert [len(o) for o in first] == [LOSSLESS_MAX_NEW] * len(LOSSLESS_PROMPTS)
    assert first == again


def test_speculative_output_equals_baseline(specwatch_session: Session, spec_server: RunningServer) -> None:
    result = lossless_live.check(specwatch_session, "baseline", "spec", LOSSLESS_PROMPTS, LOSSLESS_MAX_NEW)
    if result.skipped:
        pytest.skip(result.reason)
    print(result.message)  # near-tie flips, their margins and the noise bound, in the -rA report
    assert result.ok, result.message
    assert result.details.identical_fraction == 1.0
    assert len(result.details.diffs) == len(LOSSLESS_PROMPTS)


def test_perfect_draft_output_equals_baseline(specwatch_session: Session) -> None:
    """Every draft token accepted (accept length num_steps+1) must still give the baseline's tokens."""
    spec = specwatch_session.profile_for("spec")
    if spec.engine != "reference" or specwatch_session.config.server_url:
        pytest.skip("the perfect-draft preset is a reference-server model")
    perfect = dataclasses.replace(spec, name=f"{spec.name}+perfect-draft", model=f"{spec.model}-perfect")
    result = lossless_live.check(specwatch_session, "baseline", perfect, LOSSLESS_PROMPTS, LOSSLESS_MAX_NEW)
    print(result.message)
    assert result.ok, result.message
    # and the draft really was perfect: every verify cycle accepted every draft token
    server = specwatch_session.server_for_profile(perfect)
    gen = run_sync(_one(server.url))
    steps = spec.speculative.num_steps  # None: the server's own choice, which proposed_drafts reflects
    meta = gen.meta_info
    assert meta["spec_num_correct_drafts"] == meta["spec_num_proposed_drafts"] > 0, meta
    if steps is not None:
        assert meta["spec_num_correct_drafts"] == steps * meta["spec_verify_ct"], meta


async def _one(url: str):
    from specwatch.load.client import Client

    async with Client(url) as client:
        return await client.generate(LOSSLESS_PROMPTS[0], max_new_tokens=31, stream=False)
