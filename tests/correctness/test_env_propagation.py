"""Environment propagation into the spawned workers: the case study's first suspect, checked directly."""

from __future__ import annotations

import pytest

from specwatch.checks import environment
from specwatch.checks.envcheck import VIEW_PROC
from specwatch.profiles.profile import TUNED_NCCL
from specwatch.run.session import Session
from specwatch.server.pool import RunningServer
from specwatch.signals import procenv

pytestmark = pytest.mark.correctness


def _workers(server: RunningServer) -> list[procenv.ProcInfo]:
    pid = server.pid
    if pid is None:
        pytest.skip(f"no local process for {server.url}")
    found = procenv.workers(procenv.walk(pid))
    assert found, f"no worker process under pid {pid} of {server.profile.name}"
    return found


def test_tuned_variables_reach_every_worker(specwatch_session: Session, tuned_server: RunningServer) -> None:
    result = environment.check(specwatch_session, tuned_server)
    if result.skipped:
        pytest.skip(result.reason)
    assert result.ok, result.message
    expected = dict(tuned_server.profile.env_vars)
    assert expected, f"{tuned_server.profile.name} is the tuned fixture but has no environment variables"
    report = result.details
    for worker in _workers(tuned_server):
        for var, value in expected.items():
            verdict = report.verdict_for(worker.pid, var)
            assert verdict == "ok", f"{var} in {worker.title} (pid {worker.pid}): {verdict}\n{result.message}"
            ok = next(f for f in report.findings if f.pid == worker.pid and f.variable == var and f.status == "ok")
            assert ok.found == value, result.message
            if not worker.environ.readable:
                # a retitled worker's /proc environ is blank: the verdict must come from another view
                assert ok.view != VIEW_PROC, result.message
        assert f"pid {worker.pid}" in result.message  # which view answered, per process
    assert any(f.check == "environment" and f.ok for f in specwatch_session.findings_for(tuned_server.profile.name))


def test_untuned_workers_carry_no_tuned_variable(specwatch_session: Session, untuned_server: RunningServer) -> None:
    assert not untuned_server.profile.env_vars, "the untuned fixture must not set tuning variables"
    result = environment.check(specwatch_session, untuned_server)
    if result.skipped:
        pytest.skip(result.reason)
    assert result.ok, result.message
    assert result.details.mode == "untuned"
    for worker in _workers(untuned_server):
        for var in TUNED_NCCL:
            assert result.details.verdict_for(worker.pid, var) == "ok", f"{var} in pid {worker.pid}\n{result.message}"
