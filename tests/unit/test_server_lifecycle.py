"""Lifecycle of a server process tree: readiness, boot failures, teardown, Ctrl-C and SIGKILL of pytest."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from specwatch.errors import ServerBootError
from specwatch.server.process import LaunchSpec, ServerProcess, free_port, port_is_free

TREE = Path(__file__).parent / "data" / "tree_server.py"
SRC = str(Path(__file__).resolve().parents[2] / "src")


def _spec(tmp_path: Path, *extra: str, timeout: float = 30.0) -> LaunchSpec:
    port = free_port()
    return LaunchSpec(name="tree", argv=[sys.executable, str(TREE), str(port), *extra], env=dict(os.environ),
                      host="127.0.0.1", port=port, log_path=tmp_path / "server.log", boot_timeout=timeout)


def _gone(pids: set[int], within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return True
        time.sleep(0.1)
    return False


def test_ready_then_teardown_leaves_no_process(tmp_path: Path) -> None:
    server = ServerProcess(_spec(tmp_path))
    server.start()
    server.wait_ready()
    pids = server.tree_pids()
    assert len(pids) >= 3, f"expected the server and its two workers, got {pids}"
    server.stop()
    assert _gone(pids), "processes survived teardown"
    assert port_is_free("127.0.0.1", server.spec.port)


def test_teardown_kills_a_server_that_ignores_sigterm(tmp_path: Path) -> None:
    server = ServerProcess(_spec(tmp_path, "--ignore-sigterm"))
    server.start()
    server.wait_ready()
    pids = server.tree_pids()
    server.stop(grace=1.0)
    assert _gone(pids)


def test_crash_during_boot_is_a_clear_error_with_log_tail(tmp_path: Path) -> None:
    # a boot timeout far beyond any loaded host's delay: "at once" is then told from "after the boot
    # timeout" by a margin of minutes, not by a stopwatch threshold a busy CI machine can cross
    server = ServerProcess(_spec(tmp_path, "--crash-during-boot", timeout=600.0))
    server.start()
    started = time.monotonic()
    with pytest.raises(ServerBootError) as info:
        server.wait_ready()
    assert time.monotonic() - started < 300, "a crash must be reported at once, not after the boot timeout"
    text = str(info.value)
    assert "exited with code 3 during boot" in text
    assert "CUDA out of memory" in text  # the log tail is attached
    server.stop()


def test_boot_timeout_reports_progress_and_log(tmp_path: Path) -> None:
    notes: list[str] = []
    server = ServerProcess(_spec(tmp_path, "--boot-delay", "30", timeout=2.5))
    server.start()
    pids = server.tree_pids() | {server.pid}
    with pytest.raises(ServerBootError, match="not ready after 2 s"):
        server.wait_ready(progress=notes.append, every=1.0)
    assert notes and "elapsed" in notes[0] and "last log line" in notes[0]
    assert _gone(pids)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["ctrl-c", "sigterm", "sigkill"])
def test_no_server_survives_the_harness(tmp_path: Path, sig: int) -> None:
    """A harness process that boots a server and then gets Ctrl-C, SIGTERM (``timeout``, a cancelled CI job, the
    validation harness's limit) or SIGKILL leaves nothing behind."""
    pidfile = tmp_path / "pids"
    script = textwrap.dedent(f"""
        import signal, sys, time
        # Ctrl-C raises KeyboardInterrupt even where SIGINT came in ignored (a shell's background job passes
        # SIG_IGN down, and Python then installs no handler: the harness slept its 120 s through the signal)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.path.insert(0, {SRC!r})
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from pathlib import Path
        from test_server_lifecycle import _spec
        from specwatch.server.process import ServerProcess
        s = ServerProcess(_spec(Path({str(tmp_path)!r})))
        s.start()
        try:
            s.wait_ready()
            Path({str(pidfile)!r}).write_text(" ".join(map(str, s.tree_pids())))
            time.sleep(120)
        finally:
            s.stop()
    """)
    harness = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": SRC})
    deadline = time.monotonic() + 120
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pidfile.exists(), "harness did not boot its server"
    pids = {int(p) for p in pidfile.read_text().split()}
    harness.send_signal(sig)
    harness.wait(timeout=120)  # a hang guard: a loaded CI host once needed more than 30 s
    assert _gone(pids, within=60.0), f"server processes survived {signal.Signals(sig).name} of the harness"


def test_a_killed_worker_is_noticed_before_the_next_request(tmp_path: Path) -> None:
    """kill -9 of one worker: the server is dead at once, though its main process still listens."""
    server = ServerProcess(_spec(tmp_path))
    server.start()
    try:
        server.wait_ready()
        assert server.why_dead() == ""
        worker = min(server.tree_pids() - {server.pid})
        os.kill(worker, signal.SIGKILL)
        deadline = time.monotonic() + 60  # a hang guard: why_dead() is polled until it speaks
        while not server.why_dead() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert f"worker process(es) {worker} died" in server.why_dead() or "exited" in server.why_dead()
    finally:
        server.stop()


def test_a_workers_own_helper_quitting_is_not_a_death(tmp_path: Path) -> None:
    """A worker's helper process that quits after readiness (an idle compile-worker pool) leaves the server alive:
    real SGLang 0.5.16 on a cold H100 was rebooted mid-suite for that before."""
    release = tmp_path / "quit"
    server = ServerProcess(_spec(tmp_path, "--helpers-quit-on", str(release)))
    server.start()
    try:
        server.wait_ready()  # the server answers only once both helpers run
        helpers = server.tree_pids() - {server.pid} - {c.pid for c in psutil.Process(server.pid).children()}
        assert len(helpers) >= 2, "the workers started no helper"
        release.write_text("")
        assert _gone(helpers, within=60.0)
        assert server.why_dead() == ""
        worker = min(c.pid for c in psutil.Process(server.pid).children())
        os.kill(worker, signal.SIGKILL)  # a worker itself still counts
        deadline = time.monotonic() + 60
        while not server.why_dead() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert f"worker process(es) {worker} died" in server.why_dead() or "exited" in server.why_dead()
    finally:
        server.stop()


def test_the_pool_reboots_a_server_whose_worker_was_killed(tmp_path: Path) -> None:
    """kill -9 of a reference server's scheduler: the next test gets a fresh server, not "cannot connect"."""
    import urllib.request

    from specwatch.profiles.profile import ServerProfile
    from specwatch.server.pool import ServerPool

    prof = ServerProfile(name="tiny", model="ref-tiny", device="cpu")
    notes: list[str] = []
    pool = ServerPool([prof], tmp_path, boot_timeout=120, progress=notes.append)
    try:
        first = pool.get(prof)
        assert first.process is not None
        worker = max(first.process.tree_pids() - {first.process.pid})
        os.kill(worker, signal.SIGKILL)
        time.sleep(0.5)
        second = pool.get(prof)
        assert second is not first and second.process is not None
        assert second.process.pid != first.process.pid
        assert any("is dead" in n and str(worker) in n for n in notes) or any("exited" in n for n in notes), notes
        with urllib.request.urlopen(second.url + "/health_generate", timeout=30) as reply:
            assert reply.status == 200
    finally:
        pool.stop_all()


def test_a_servers_port_stays_where_a_port_plus_10000_is_still_a_port(monkeypatch: pytest.MonkeyPatch) -> None:
    """SGLang 0.5.12 to 0.5.15.post1 refuse any --port above 55535 (they derive a gRPC port of port + 10000 and
    validate it): on the real 8B ladder, 0.5.13 given port 58147 stopped with "SGLANG_GRPC_PORT (68147) must be
    between 1 and 65535". A system pick above the limit is replaced by a free port below it."""
    import socket

    from specwatch.server import process

    assert process.free_port() <= process.HIGHEST_SERVER_PORT
    real = socket.socket

    class HighPick(real):  # type: ignore[misc, valid-type]
        """The system's pick is 58147, as on the H200."""

        def getsockname(self):  # type: ignore[no-untyped-def]
            host, port = super().getsockname()[:2]
            return (host, 58147) if self._zero else (host, port)

        def bind(self, address):  # type: ignore[no-untyped-def]
            self._zero = address[1] == 0
            return super().bind(address)

    monkeypatch.setattr(socket, "socket", HighPick)
    ports = {process.free_port() for _ in range(20)}
    assert all(process.LOWEST_SERVER_PORT <= p <= process.HIGHEST_SERVER_PORT for p in ports), ports
    monkeypatch.setattr(socket, "socket", real)
    assert all(process.port_is_free("127.0.0.1", p) for p in ports)
