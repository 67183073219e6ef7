"""Every speculative phase captured as a CUDA graph at startup: a phase left eager (EAGLE's draft extend under
SGLang's default attention backend on Hopper, or with SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH set) costs about a
tenth of the latency with no message. On CPU no server captures graphs, so these tests skip there."""

from __future__ import annotations

import dataclasses

import pytest

from correctness.faultkit import fault_profile
from specwatch.checks import phase_graphs
from specwatch.load.client import Client, run_sync
from specwatch.run.session import Session
from specwatch.server.pool import RunningServer

pytestmark = pytest.mark.correctness


def _server_info(server: RunningServer) -> dict:
    async def ask() -> dict:
        async with Client(server.url) as client:
            return await client.server_info()

    return run_sync(ask())


def test_every_speculative_phase_is_graphed(specwatch_session: Session, spec_server: RunningServer) -> None:
    """The speculative server captured each phase its engine can graph (target verify, draft decode, draft extend
    where the engine has one)."""
    info = _server_info(spec_server)
    result = phase_graphs.check(specwatch_session, spec_server, info)
    if result.skipped:
        pytest.skip(result.reason)  # on CPU: no CUDA graphs exist
    assert result.ok, result.message
    facts = spec_server.profile.engine_kind.phase_graphs(info.get("version"))
    assert facts is not None and facts.verify in result.details.captured, result.message


def test_the_draft_extend_switch_is_named(specwatch_session: Session, spec_server: RunningServer) -> None:
    """The same server started with the engine's draft-extend switch on fails, naming the switch (as the release the
    spec server runs has it: SGLang reads the switch from 0.5.16 on, so before it this test skips, not boots)."""
    base = fault_profile(specwatch_session, "spec", "no-draft-extend-graph")
    facts = base.engine_kind.phase_graphs(_server_info(spec_server).get("version"))
    if facts is None or facts.extend_switch is None or facts.draft_extend is None:
        pytest.skip(f"{base.engine_kind.title} has no draft extend phase (and no switch for it): nothing to turn off")
    prof = dataclasses.replace(base, extra_env={**base.extra_env, facts.extend_switch: "1"})
    server = specwatch_session.server_for_profile(prof)
    result = phase_graphs.check(specwatch_session, server, _server_info(server))
    if result.skipped:
        pytest.skip(result.reason)
    assert result.failed, result.message
    assert [m.phase for m in result.details.missing] == [facts.draft_extend], result.message
    assert f"{facts.extend_switch}=1 is set in the server's environment" in result.reason, result.message
