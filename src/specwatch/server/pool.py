"""Boots each server profile once per session and never runs two servers on the same GPUs at once."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from specwatch.errors import ServerBootError, UsageError
from specwatch.profiles.profile import ServerProfile, unbootable
from specwatch.server.launch import build_launch, managed_variables
from specwatch.server.process import LaunchSpec, ServerProcess, free_port

Progress = Callable[[str], None]


@dataclass
class RunningServer:
    """A server that tests can talk to: booted by the pool, or already running (``--server-url``, or an
    ``openai`` profile's ``url``)."""

    profile: ServerProfile
    url: str
    process: ServerProcess | None = None
    launch: LaunchSpec | None = None
    boot_seconds: float | None = None
    shared_host: bool = False
    notes: list[str] = field(default_factory=list)
    external_log: Path | None = None  # --specwatch-server-log: where a --server-url server logs

    @property
    def external(self) -> bool:
        return self.process is None

    @property
    def pid(self) -> int | None:
        """The server's main pid; for an external server, the process listening on its port."""
        if self.process is not None:
            return self.process.pid
        from specwatch.signals import procenv  # local: psutil walk only when asked

        port = urlparse(self.url).port
        return procenv.find_listener(port) if port else None

    @property
    def log_path(self) -> Path | None:
        return self.process.log_path if self.process else self.external_log

    def log_size(self) -> int:
        path = self.log_path
        try:
            return path.stat().st_size if path else 0
        except OSError:
            return 0

    def log_tail(self, lines: int = 40) -> str:
        from specwatch.server.process import tail

        return tail(self.log_path, lines) if self.log_path else ""

    @property
    def probe_records(self) -> Path | None:
        return Path(str(self.launch.meta["probe_records"])) if self.launch else None


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name)


class ServerPool:
    """Starts servers on demand; at most one live server per GPU set (all CPU servers share one set)."""

    def __init__(
        self,
        profiles: Iterable[ServerProfile],
        run_dir: Path,
        *,
        gpus: tuple[int, ...] = (),
        boot_timeout: float = 900.0,
        progress: Progress | None = None,
        shared_host: bool = False,
    ) -> None:
        self.profiles = list(profiles)
        self.run_dir = run_dir
        self.gpus = gpus
        self.boot_timeout = boot_timeout
        self.progress = progress or (lambda msg: None)
        self.shared_host = shared_host
        self.live: dict[str, RunningServer] = {}
        self.boots: dict[str, int] = {}
        self.failed: dict[str, ServerBootError] = {}
        self.remote: dict[str, RunningServer] = {}  # engine = "openai" servers, at their profile's url
        self._managed = managed_variables(self.profiles)

    def get(self, profile: ServerProfile, keep: tuple[str, ...] = ()) -> RunningServer:
        """The running server for ``profile``, booting it (after stopping any conflicting one).

        ``keep``: servers that stay up beside it on the same GPUs (interleaved relative gates; the
        profiles must leave each other the memory, e.g. SGLang's ``--mem-fraction-static``).
        """
        if not profile.engine_kind.capabilities.boots:  # e.g. an OpenAI-compatible server: reached at its url
            if not profile.url:
                raise UsageError(unbootable(profile))
            return self.remote.setdefault(profile.name, RunningServer(profile=profile, url=profile.url.rstrip("/"),
                                                                      shared_host=self.shared_host))
        if profile.name in self.live:
            booted = self.live[profile.name].process
            assert booted is not None  # live holds only the servers this pool booted
            why = booted.why_dead()
            if not why:
                return self.live[profile.name]
            # polled before every use: a dead server is noticed at once and rebooted, instead of
            # the next test failing with "cannot connect"
            self.progress(f"{profile.name} is dead ({why}; log: {booted.log_path}): "
                          "stopping what is left and booting it again")
            self.stop(profile.name)
        if profile.name in self.failed:
            raise self.failed[profile.name]
        for name in list(self.live):
            if name not in keep:
                self.stop(name)  # one server per GPU set: the pool's GPUs are all its servers share
        gpus = self.gpus[: profile.gpus_needed] if profile.gpus_needed else ()
        n = self.boots.get(profile.name, 0) + 1
        run_dir = self.run_dir / f"{_slug(profile.name)}-{n}"
        launch = build_launch(profile, port=free_port(), run_dir=run_dir, managed=self._managed, gpus=gpus,
                              boot_timeout=self.boot_timeout)
        proc = ServerProcess(launch)
        self.progress(f"booting {profile.name}: {' '.join(launch.argv)}")
        started = time.monotonic()
        try:
            proc.start()
            proc.wait_ready(self.progress)
        except ServerBootError as exc:
            with contextlib.suppress(Exception):
                proc.stop()
            self.failed[profile.name] = exc
            raise
        except BaseException:
            proc.stop()
            raise
        self.boots[profile.name] = n
        server = RunningServer(profile=profile, url=launch.url, process=proc, launch=launch,
                               boot_seconds=time.monotonic() - started, shared_host=self.shared_host)
        self.progress(f"{profile.name} ready in {server.boot_seconds:.1f} s at {server.url} (log: {launch.log_path})")
        self.live[profile.name] = server
        return server

    def stop(self, name: str) -> None:
        server = self.live.pop(name, None)
        if server and server.process:
            server.process.stop()

    def stop_all(self) -> None:
        for name in list(self.live):
            self.stop(name)
