"""One server process: launch in its own process group, log to a file, wait for readiness, tear down.

Works the same for SGLang and the reference server: only the command line, the HTTP health
endpoint, the log file and the process tree are used.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from specwatch.errors import InfraError, ServerBootError
from specwatch.paths import with_specwatch_importable

Progress = Callable[[str], None]
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class LaunchSpec:
    """Everything needed to start one server."""

    name: str
    argv: Sequence[str]
    env: Mapping[str, str]
    host: str
    port: int
    log_path: Path
    boot_timeout: float = 900.0
    cwd: str | None = None
    gpus: tuple[int, ...] = ()
    meta: Mapping[str, object] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


#: the highest port a server is given: SGLang 0.5.12 to 0.5.15.post1 derive a gRPC port of ``--port`` + 10000 and
#: refuse to start when it passes 65535, even when serving HTTP only (server_args.py ``_handle_deprecated_args``;
#: 0.5.16 derives it only in gRPC mode), and Linux hands out ephemeral ports up to 60999
HIGHEST_SERVER_PORT = 55535
#: where a port is looked for when the system's pick is above :data:`HIGHEST_SERVER_PORT`
LOWEST_SERVER_PORT = 20000


def free_port(host: str = "127.0.0.1", highest: int = HIGHEST_SERVER_PORT) -> int:
    """A TCP port at or below ``highest`` that is free right now: the system's pick, else a random free one from
    :data:`LOWEST_SERVER_PORT` up (OSError when none of 500 tries is free)."""
    with socket.socket() as s:
        s.bind((host, 0))
        port = int(s.getsockname()[1])
    if port <= highest:
        return port
    pick = random.Random()
    for _ in range(500):
        port = pick.randint(min(LOWEST_SERVER_PORT, highest), highest)
        if port_is_free(host, port):
            return port
    raise OSError(f"no free TCP port at or below {highest} on {host}")


def port_is_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a text file ('' when it does not exist)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            data = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


def die_with_parent() -> None:
    """``preexec_fn``: a new session (its own process group), and SIGTERM when the parent dies (kill -9)."""
    os.setsid()
    exit_with_parent(signal.SIGTERM)


def exit_with_parent(sig: int = signal.SIGKILL, parent_pid: int | None = None) -> None:
    """Have Linux send this process ``sig`` when its parent dies (``prctl``; a no-op where that fails).
    ``parent_pid``: the parent it was started by; if that one is already gone, exit now (it died
    before the request was made, so no signal would ever come)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, sig)
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)


class ServerProcess:
    """A launched server and its whole process tree."""

    def __init__(self, spec: LaunchSpec) -> None:
        self.spec = spec
        self.proc: subprocess.Popen[bytes] | None = None
        self._reaper: subprocess.Popen[bytes] | None = None
        self._known: set[int] = set()
        self._at_ready: set[int] = set()  # the main process and its children when it became ready: its workers
        self.boot_seconds: float | None = None

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise InfraError(f"server {self.spec.name} is not started")
        return self.proc.pid

    @property
    def url(self) -> str:
        return self.spec.url

    @property
    def log_path(self) -> Path:
        return self.spec.log_path

    def log_size(self) -> int:
        """Current size of the log, as an offset for reading a window of it later."""
        try:
            return self.spec.log_path.stat().st_size
        except OSError:
            return 0

    def log_tail(self, lines: int = 40) -> str:
        return tail(self.spec.log_path, lines)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def dead_workers(self) -> set[int]:
        """The main process's children at readiness that are gone now.

        A server whose worker was killed may keep its main process (and port) for a while before
        it notices; a request in that window fails with "cannot connect" instead of naming the cause.
        Deeper descendants are not workers: a pool of compile workers under a scheduler (torch
        inductor's, 16 on a 16-core host) quits when idle, minutes after readiness, and a healthy
        real SGLang 0.5.16 server was rebooted mid-suite for it (2026-12-05, three lanes on one H100).
        """
        return {p for p in self._at_ready if not psutil.pid_exists(p) or _is_zombie(p)}

    def why_dead(self) -> str:
        """"" while the server and every worker it became ready with live; else what died."""
        if self.proc is None:
            return "not started"
        code = self.proc.poll()
        if code is not None:
            return f"its main process {self.proc.pid} exited with code {code}"
        gone = self.dead_workers()
        return f"worker process(es) {', '.join(map(str, sorted(gone)))} died" if gone else ""

    def start(self) -> None:
        """Start the server in its own session (process group) with a reaper guarding it."""
        spec = self.spec
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        if not port_is_free(spec.host, spec.port):
            raise InfraError(f"port {spec.port} on {spec.host} is already in use; cannot start {spec.name}")
        log = open(spec.log_path, "ab")  # noqa: SIM115 - handed to the child
        try:
            self.proc = subprocess.Popen(
                list(spec.argv), env=dict(spec.env), cwd=spec.cwd, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent,
            )
        except OSError as exc:
            raise ServerBootError(f"could not start {spec.name}: {exc} (argv: {' '.join(spec.argv)})") from exc
        finally:
            log.close()
        self._reaper = subprocess.Popen(
            [sys.executable, "-m", "specwatch.server.reaper", str(os.getpid()), str(self.proc.pid)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, env={**os.environ, "PYTHONPATH": _own_pythonpath()},
        )

    def wait_ready(self, progress: Progress | None = None, every: float = 10.0) -> float:
        """Poll ``/health_generate`` until 200; fail fast with the log tail if the process exits."""
        start = time.monotonic()
        deadline = start + self.spec.boot_timeout
        next_note = start + every
        while True:
            code = self.proc.poll() if self.proc else None
            if code is not None:
                raise ServerBootError(
                    f"server {self.spec.name} exited with code {code} during boot "
                    f"after {time.monotonic() - start:.1f} s (log: {self.spec.log_path})", self.log_tail())
            if _http_ok(self.url + "/health_generate"):
                self.boot_seconds = time.monotonic() - start
                self._remember_tree()
                self._at_ready = self._children()
                return self.boot_seconds
            now = time.monotonic()
            if now > deadline:
                tail_text = self.log_tail()
                self.stop()
                raise ServerBootError(
                    f"server {self.spec.name} was not ready after {self.spec.boot_timeout:.0f} s "
                    f"(log: {self.spec.log_path})", tail_text)
            if progress and now >= next_note:
                last = (self.log_tail(1) or "(no output yet)")[-160:]
                progress(f"waiting for {self.spec.name}: {now - start:.0f} s elapsed; last log line: {last}")
                next_note = now + every
            time.sleep(0.25)

    def _children(self) -> set[int]:
        """The main process's direct children now (empty once it is gone)."""
        with contextlib.suppress(psutil.NoSuchProcess):
            return {c.pid for c in psutil.Process(self.pid).children()}
        return set()

    def _remember_tree(self) -> None:
        with contextlib.suppress(psutil.NoSuchProcess):
            root = psutil.Process(self.pid)
            self._known = {root.pid, *(c.pid for c in root.children(recursive=True))}

    def tree_pids(self) -> set[int]:
        """Pids of the server and every descendant seen so far that is still alive."""
        if self.alive():
            self._remember_tree()
        return {p for p in self._known if psutil.pid_exists(p) and not _is_zombie(p)}

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM the process group, wait, then SIGKILL everything left, including reparented workers."""
        if self.proc is None:
            return
        self.tree_pids()
        pids = set(self._known) | {self.proc.pid}
        signal_group(self.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            self.proc.poll()
            if not any(psutil.pid_exists(p) and not _is_zombie(p) for p in pids):
                break
            time.sleep(0.1)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        signal_group(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        if self._reaper is not None:  # the tree is killed: the reaper kills what it still knows alive, and exits
            self._reaper.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._reaper.wait(timeout=5)
            if self._reaper.poll() is None:
                self._reaper.kill()
        _wait_port_free(self.spec.host, self.spec.port, 10.0)


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to process group ``pgid``; False when the group is gone or not ours."""
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError, OSError):
        return False


def kill_process_group(proc: subprocess.Popen[Any], grace: float = 10.0) -> None:
    """The one way specwatch stops a child that leads its own process group (``start_new_session``):
    SIGTERM to the group, ``grace`` seconds to exit, then SIGKILL to the group, and reap the child."""
    for sig, wait_s in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        signal_group(proc.pid, sig)
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _is_zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _http_ok(url: str, timeout: float = 5.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _wait_port_free(host: str, port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_is_free(host, port):
            return True
        time.sleep(0.2)
    return False


def _own_pythonpath() -> str:
    """PYTHONPATH that lets ``python -m specwatch.server.reaper`` import this package (installed or not)."""
    return with_specwatch_importable(os.environ.get("PYTHONPATH"))
