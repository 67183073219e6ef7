"""A reference server started by hand, as a user starts one on their host (not through a profile):
the integration tests of ``--server-url`` and ``specwatch capture`` share it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from specwatch.server.process import free_port

#: an EAGLE3 ref-tiny server with the counters and Decode lines the checks read
ARGS = ("--model-path", "ref-tiny", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "2",
        "--enable-metrics", "--decode-log-interval", "5")


def start(log: Path, env: Mapping[str, str], extra: Sequence[str] = (),
          timeout_s: float = 90.0) -> tuple[subprocess.Popen[bytes], str]:
    """(process, url) of a server in its own session, stderr to ``log``, ready on /health_generate;
    the test fails with the log's tail when it does not come up in ``timeout_s``."""
    port = free_port()
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "specwatch.refserver", *ARGS, "--port", str(port), *extra],
                                env=dict(env), stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if urllib.request.urlopen(url + "/health_generate", timeout=5).status == 200:
                return proc, url
        except OSError:
            time.sleep(0.3)
    os.killpg(proc.pid, 9)
    pytest.fail(f"the reference server did not start:\n{log.read_text()[-2000:]}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's whole process group, and wait for it."""
    os.killpg(proc.pid, 15)
    proc.wait(timeout=30)
