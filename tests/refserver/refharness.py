"""Test helper: boot ``python -m specwatch.refserver`` as an outside client would, talk HTTP, read stderr.

Only the command line, HTTP, the log file and psutil are used (never the server's modules).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

SRC = Path(__file__).resolve().parents[2] / "src"
BOOT_TIMEOUT_S = 90.0
READY_LINE = "The server is fired up and ready to roll!"

PREFIX = r"^\[(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{3})?)(?P<ranks>(?: [A-Z_]+\d+)*)\] "
DECODE = PREFIX + (r"Decode batch(?: \[\d+\])?, #running-req: (?P<running>\d+), .*?(?:cuda|cpu|npu|musa) graph: "
                   r"(?P<graph>True|False), gen throughput \(token/s\): (?P<gen_tput>[\d.]+), #queue-req: "
                   r"(?P<queue>\d+)")
ACCEPT = r", accept len: (?P<accept_len>[\d.]+), accept rate: (?P<accept_rate>[\d.]+), "
PREFILL = PREFIX + (r"Prefill batch(?: \[\d+\])?, #new-seq: (?P<new_seq>\d+), #new-token: (?P<new_tok>\d+), "
                    r"#cached-token: (?P<cached>\d+), .*?(?:cuda|cpu|npu|musa) graph: (?P<graph>True|False), "
                    r"input throughput \(token/s\): (?P<in_tput>[\d.]+)")


def title(proc: psutil.Process) -> str:
    """The process title as ps shows it (setproctitle pads argv with NULs, psutil splits on them)."""
    return " ".join(part for part in proc.cmdline() if part)


def free_port() -> int:
    """An unused TCP port on localhost."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The launch environment: ours, with src/ on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), *filter(None, [env.get("PYTHONPATH")])])
    env.update(extra or {})
    return env


@dataclass
class Server:
    """One running reference server."""

    proc: subprocess.Popen
    port: int
    log_path: Path
    boot_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_lines(self, start: int = 0) -> list[str]:
        return self.log()[start:].splitlines()

    def log_size(self) -> int:
        return len(self.log())

    def workers(self) -> list[psutil.Process]:
        """Descendants retitled as schedulers."""
        out = []
        for p in psutil.Process(self.proc.pid).children(recursive=True):
            try:
                if title(p).startswith("refserver::scheduler"):
                    out.append(p)
            except psutil.Error:
                pass
        return out

    def request(self, method: str, path: str, body: Any = None, raw: bytes | None = None,
                timeout: float = 60.0) -> tuple[int, bytes]:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def get_json(self, path: str) -> Any:
        status, body = self.request("GET", path)
        assert status == 200, (path, status, body[:500])
        return json.loads(body)

    def generate(self, body: dict[str, Any], expect: int = 200) -> Any:
        status, data = self.request("POST", "/generate", body)
        assert status == expect, (status, data[:500])
        return json.loads(data)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int | None:
        """Signal the main process, wait; kill the whole group if it lingers."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)
        return self.proc.returncode


def boot(args: list[str], log_path: Path, env: dict[str, str] | None = None) -> Server:
    """Start the server and wait for its ready line and a 200 from /health."""
    port = free_port()
    cmd = [sys.executable, "-m", "specwatch.refserver", "--port", str(port), *args]
    t0 = time.perf_counter()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env or server_env(),
                                start_new_session=True)
    srv = Server(proc=proc, port=port, log_path=log_path)
    deadline = time.monotonic() + BOOT_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{srv.log()[-3000:]}")
        if READY_LINE in srv.log():
            try:
                status, _ = srv.request("GET", "/health", timeout=10)
            except OSError:
                status = 0
            if status == 200:
                srv.boot_s = time.perf_counter() - t0
                return srv
        time.sleep(0.1)
    srv.stop(signal.SIGKILL)
    raise RuntimeError(f"server not ready in {BOOT_TIMEOUT_S} s:\n{srv.log()[-3000:]}")


def decode_lines(text: str) -> list[re.Match]:
    return [m for line in text.splitlines() if (m := re.match(DECODE, line))]


def prefill_lines(text: str) -> list[re.Match]:
    return [m for line in text.splitlines() if (m := re.match(PREFILL, line))]


def parse_metrics(text: str) -> dict[tuple[str, frozenset], float]:
    """Prometheus text to {(name, labels): value}."""
    out: dict[tuple[str, frozenset], float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$", line)
        assert m, f"not a Prometheus sample line: {line!r}"
        labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def metric_sum(samples: dict[tuple[str, frozenset], float], name: str, **labels: str) -> float:
    """Sum of every series of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, lab), v in samples.items() if n == name and want <= set(lab))
