"""Accept length: one canonical value, whichever source reports it (the case study read 0.92)."""

from __future__ import annotations

import pytest

from specwatch.checks import accept_length
from specwatch.judge import speculative
from specwatch.run.session import Session
from specwatch.server.pool import RunningServer

pytestmark = pytest.mark.correctness


def _steps(server: RunningServer, info: dict | None = None) -> int:
    """The server's num_steps: its profile's, else what the server resolved (a profile may leave it unset)."""
    spec = server.profile.speculative
    assert spec is not None, f"{server.profile.name} is the spec fixture but is not speculative"
    steps = accept_length.num_steps(server.profile, info or {})
    assert steps is not None, f"{server.profile.name}: num_steps unset and unknown"
    return steps


def test_sources_reconcile_on_the_live_server(specwatch_session: Session, spec_server: RunningServer) -> None:
    m = specwatch_session.measure("spec")
    result = accept_length.check(specwatch_session, spec_server, m)
    if result.skipped:
        pytest.skip(result.reason)
    assert result.ok, result.message
    sources = {e.source for e in result.details.estimates}
    assert any(s.startswith("meta_info of") for s in sources), result.message
    names = spec_server.profile.engine_kind.metrics
    if names is not None and m.metrics_delta is not None and not m.metrics_delta.has(names.verify_calls):
        # a server without the verify-call counter (SGLang 0.5.12) is read from its other sources, and said so
        assert f"the server exposes no {names.verify_calls} counter" in result.message, result.message
    else:
        assert "/metrics delta" in sources, result.message
    if not spec_server.external:
        # a pool server also offers its log windows and /server_info: every source took part
        assert any(s.startswith("Decode lines") for s in sources), result.message
        assert "/server_info avg_spec_accept_length" in sources, result.message
    top = _steps(spec_server, m.server_info_after) + 1
    for est in result.details.estimates:
        assert 1.0 <= est.value <= top, est.describe()


def test_every_value_within_bounds(specwatch_session: Session, spec_server: RunningServer) -> None:
    m = specwatch_session.measure("spec")
    steps = _steps(spec_server, m.server_info_after)
    values = [r.accept_len for r in m.decode_records if r.accept_len is not None]
    values += [speculative.from_request_meta(g.meta_info, steps).value for g in m.generations]
    assert values
    for v in values:
        speculative.check_bounds(v, steps)  # raises with the explanation


def test_histogram_identities_per_request(specwatch_session: Session, spec_server: RunningServer) -> None:
    m = specwatch_session.measure("spec")
    steps = _steps(spec_server, m.server_info_after)
    metas = [g.meta_info for g in m.generations]
    with_hist = [mi for mi in metas if "spec_correct_drafts_histogram" in mi]
    if not with_hist:
        pytest.skip("the server reports no spec_correct_drafts_histogram")
    for meta in with_hist:
        hist = [int(h) for h in meta["spec_correct_drafts_histogram"]]
        problems = speculative.check_histogram(hist, int(meta["spec_verify_ct"]),
                                               int(meta["spec_num_correct_drafts"]), steps)
        assert problems == [], (problems, meta)
        assert speculative.from_histogram(hist).value == pytest.approx(
            speculative.from_request_meta(meta, steps).value)
