"""`--server-url`: checks run against a server that is already running, found through its port."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import handstarted
import pytest

from specwatch.profiles.profile import TUNED_NCCL

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def running_server(tmp_path_factory: pytest.TempPathFactory):
    """A tuned EAGLE3 reference server started by hand, as a user would on their host, logging to a file."""
    log = tmp_path_factory.mktemp("external") / "server.log"
    env = {**os.environ, **TUNED_NCCL, "PYTHONPATH": str(ROOT / "src")}
    proc, url = handstarted.start(log, env)
    yield url, log
    handstarted.stop(proc)


def test_checks_against_an_external_server(running_server: tuple[str, Path], tmp_path: Path) -> None:
    url, log = running_server
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs", "--rootdir", str(ROOT),
           str(ROOT / "tests" / "correctness" / "test_env_propagation.py"),
           str(ROOT / "tests" / "correctness" / "test_accept_length.py"),
           str(ROOT / "tests" / "correctness" / "test_lossless.py"),
           str(ROOT / "tests" / "correctness" / "test_verify_graphs.py"), "-rsx",
           f"--server-url={url}", f"--specwatch-server-log={log}", f"--specwatch-report-dir={tmp_path}",
           f"--specwatch-history={tmp_path / 'h.sqlite'}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECWATCH_")}
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-3000:]
    assert "booting" not in text, "with --server-url nothing may be booted"
    summary = text.split("short test summary info")[-1]
    # accept-length reconciliation and graph counters ran against the external server
    assert "4 passed" in summary, summary  # accept length (3) and graph counters
    # the env check found the server's process tree through its port, but a worker that retitled itself
    # has a blank /proc environ and a server we did not launch has no probe: it says so, it does not guess
    assert "no view could answer for: refserver::scheduler" in summary and "unreadable (retitled)" in summary
    # a second server (untuned, baseline for lossless) cannot be had: skipped with the reason, not failed
    assert "eagle3-untuned is not running" in summary, summary
    assert "--server-url: only one server" in summary, summary
    # the server's own log (--specwatch-server-log) lets the graph check name the cause from its lines
    assert "runs on CPU (log label 'cpu graph')" in summary, summary
