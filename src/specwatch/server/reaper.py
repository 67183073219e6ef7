"""A tiny watchdog process: if the pytest process dies (even by SIGKILL), kill the servers it started.

Started by :mod:`specwatch.server.process` in its own session, so a signal to pytest's process group does
not reach it. It polls the watched pid and, meanwhile, remembers every descendant of each server
it guards (workers reparent to init when their parent dies, so they must be known beforehand).

Usage: ``python -m specwatch.server.reaper WATCHED_PID SERVER_PID [SERVER_PID ...]``
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

import psutil

from specwatch.server.process import signal_group

POLL_S = 0.25
GRACE_S = 3.0


def _kill(pids: set[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
        signal_group(pid, sig)  # servers lead their own process group


def _alive(pid: int) -> bool:
    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _group_alive(pgid: int) -> bool:
    """Whether any process (zombies included) is still in process group ``pgid``."""
    return signal_group(pgid, 0)


def watch(watched: int, servers: list[int]) -> int:
    """Guard ``servers`` until they exit; kill them and their descendants if ``watched`` dies.

    Each server leads its own process group, which its workers inherit, so the group reaches
    them even when the leader already died; descendants seen meanwhile are killed by pid too.
    SIGTERM (the tester's own stop, after it killed the tree) SIGKILLs whatever it still knows
    alive and exits at once: a worker that died a zombie under init keeps the group "alive" until
    init reaps it (1.5 s on a firecracker VM), and the stop need not wait for that.
    """
    known: set[int] = set(servers)

    def on_term(_sig: int, _frame: object) -> None:
        _kill({p for p in known if _alive(p)} | set(servers), signal.SIGKILL)
        sys.exit(0)

    signal.signal(signal.SIGTERM, on_term)
    while True:
        for pid in servers:
            try:
                known.update(c.pid for c in psutil.Process(pid).children(recursive=True))
            except psutil.NoSuchProcess:
                pass
        live = {p for p in known if _alive(p)}
        if not live and not any(_group_alive(s) for s in servers):
            return 0
        if not _alive(watched):
            _kill(live | set(servers), signal.SIGTERM)
            deadline = time.monotonic() + GRACE_S
            while time.monotonic() < deadline and any(_alive(p) for p in live):
                time.sleep(0.1)
            _kill({p for p in live if _alive(p)} | set(servers), signal.SIGKILL)
            return 0
        time.sleep(POLL_S)


def main(argv: list[str] | None = None) -> int:
    args = [int(a) for a in (sys.argv[1:] if argv is None else argv)]
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    return watch(args[0], args[1:])


if __name__ == "__main__":
    sys.exit(main())
