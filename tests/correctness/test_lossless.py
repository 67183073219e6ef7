"""Greedy speculative output must equal the baseline's, token for token."""

from __future__ import annotations

import dataclasses

import pytest

from correctness.faultkit import LOSSLESS_MAX_NEW, LOSSLESS_PROMPTS, repeat_report
from specwatch.checks import lossless_live
from specwatch.load.client import run_sync
from specwatch.run.fixtures import profile_or_skip
from specwatch.run.session import Session
from specwatch.server.pool import RunningServer

pytestmark = pytest.mark.correctness


def test_baseline_greedy_output_is_deterministic(specwatch_session: Session, baseline_server: RunningServer) -> None:
    """The premise of the comparison (and the memo the next tests reuse while the baseline is up).

    Asked twice, the plain server must give the same greedy tokens, up to near-tie flips told apart
    from bugs exactly as the lossless check tells them (:mod:`specwatch.checks.lossless`: the two
    runs' own logprobs, the noise where they agree, re-anchoring after a flip). A float32 server
    shows no noise, so it must repeat itself exactly; a bf16 one may flip where two tokens are tied
    to the last bits (a second run hits the prefix cache: other kernels, other rounding).
    """
    base = specwatch_session.profile_for("baseline")
    first = lossless_live.scored_outputs(specwatch_session, base, LOSSLESS_PROMPTS, LOSSLESS_MAX_NEW)
    assert [len(o.ids) for o in first] == [LOSSLESS_MAX_NEW] * len(LOSSLESS_PROMPTS)

    def ask(requests, lens):
        return run_sync(lossless_live.generate_scored(baseline_server.url, requests, lens))

    report = repeat_report(first, ask, LOSSLESS_PROMPTS, LOSSLESS_MAX_NEW, base.name)
    print(report.message())  # near-tie flips, their margins and the noise bound, in the -rA report
    assert report.ok, report.message()


def test_speculative_output_equals_baseline(specwatch_session: Session, spec_server: RunningServer) -> None:
    profile_or_skip(specwatch_session, "baseline", "the lossless check compares the speculative server with it")
    result = lossless_live.check(specwatch_session, "baseline", "spec", LOSSLESS_PROMPTS, LOSSLESS_MAX_NEW)
    if result.skipped:
        pytest.skip(result.reason)
    print(result.message)  # near-tie flips, their margins and the noise bound, in the -rA report
    assert result.ok, result.message
    assert result.details.identical_fraction == 1.0
    assert len(result.details.diffs) == len(LOSSLESS_PROMPTS)


def test_perfect_draft_output_equals_baseline(specwatch_session: Session) -> None:
    """Every draft token accepted (accept length num_steps+1) must still give the baseline's tokens."""
    what = "a reference-server test (the perfect-draft preset is one of its models)"
    spec = profile_or_skip(specwatch_session, "spec", what)
    profile_or_skip(specwatch_session, "baseline", what)
    if spec.engine != "reference":
        pytest.skip(f"{what}: {spec.name} runs engine = {spec.engine!r}")
    if specwatch_session.config.server_url:
        pytest.skip(f"{what}: --server-url: the perfect-draft server cannot be booted")
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
