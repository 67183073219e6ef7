"""Start an OpenAI-compatible server for a test and wait until it serves ``/v1/models``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from specwatch.server.process import die_with_parent, free_port

FAKE = Path(__file__).resolve().parents[1] / "unit" / "openai_fake.py"


def wait_until_serving(url: str, proc: subprocess.Popen, timeout_s: float, what: str,
                       tail: Callable[[], str], poll_s: float = 0.2) -> None:
    """Poll ``url``/v1/models until it answers 200; fail the test (killing ``proc``'s group) if it dies or times out."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if urllib.request.urlopen(url + "/v1/models", timeout=5).status == 200:
                return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                pytest.fail(f"{what} did not start:\n{tail()}")
            time.sleep(poll_s)


@contextmanager
def fake_openai_server() -> Iterator[str]:
    """The project's fake OpenAI-compatible server (tests/unit/openai_fake.py) on a free port: its URL."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(FAKE), str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, preexec_fn=die_with_parent)  # kill -9 of pytest takes it too
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(url, proc, 30, "the fake OpenAI server", lambda: proc.stderr.read().decode()[-2000:])
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
