"""CUDA graphs in the verify step: the case study's 30 ms verify was an eager one."""

from __future__ import annotations

import pytest

from correctness.faultkit import baseline_measurement, fault_profile
from specwatch.checks import verify_graphs
from specwatch.run.session import Session
from specwatch.server.pool import RunningServer

pytestmark = pytest.mark.correctness


def _on_cpu(measurement) -> bool:
    labels = {r.graph_label for r in measurement.decode_records}
    return measurement.server_info_after.get("device") == "cpu" or labels == {"cpu graph"}


def test_verify_runs_as_cuda_graphs(specwatch_session: Session, spec_server: RunningServer) -> None:
    m = specwatch_session.measure("spec")
    result = verify_graphs.check(specwatch_session, spec_server, m, baseline_measurement(specwatch_session, m))
    if _on_cpu(m):
        # There are no CUDA graphs on CPU: the check must fail and say exactly that.
        assert result.failed, result.message
        assert "runs on CPU" in result.reason and "no CUDA graphs exist" in result.reason, result.message
        pytest.xfail(f"expected on CPU: {result.reason}")
    if result.skipped:
        pytest.skip(result.reason)
    assert result.ok, result.message


def test_graph_counters_count_every_verify_step(specwatch_session: Session, spec_server: RunningServer) -> None:
    """The /metrics signal the check trusts first covers every verify cycle of the workload."""
    m = specwatch_session.measure("spec")
    counters = verify_graphs.graph_counters(m.metrics_delta)
    if counters is None:
        pytest.skip("the server exposes no sglang:cuda_graph_passes_total")
    verify_steps = counters.get("decode_cuda_graph", 0.0) + counters.get("decode_none", 0.0)
    verify_calls = m.counter("sglang:spec_verify_calls_total")
    assert verify_steps > 0
    # at concurrency 1 every verify batch holds one request: one pass per verify call
    if m.workload.concurrency == 1 and verify_calls:
        assert verify_steps == pytest.approx(verify_calls, abs=1), (counters, verify_calls)


def test_eager_verify_fault_is_reported(specwatch_session: Session, boot_and_measure) -> None:
    """A server whose verify runs eagerly (decode still graphed) fails the check with the cause."""
    prof = fault_profile(specwatch_session, "spec", "eager-verify", "--ref-fault-eager-verify")
    server, m = boot_and_measure(prof)
    assert m.server_info_after.get("ref_fault_eager_verify") is True
    result = verify_graphs.check(specwatch_session, server, m, baseline_measurement(specwatch_session, m))
    assert result.failed, result.message
    if _on_cpu(m):
        assert "runs on CPU" in result.reason and "no CUDA graphs exist" in result.reason, result.message
    else:
        assert "did not replay" in result.reason, result.message
    assert result.details.decided_by == "sglang:cuda_graph_passes_total"
    assert any(f.check == "verify graphs" and not f.ok for f in specwatch_session.findings_for(prof.name))
