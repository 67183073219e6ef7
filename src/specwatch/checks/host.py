"""What a live check that boots its own servers needs from its caller (the run's Session is one).

The checks never import the run: each takes a host that keeps its verdict (:class:`VerdictLog`), says whether
the run was given a running server's URL, boots servers by profile and prints progress lines.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Protocol

from specwatch.checks.verdictlog import VerdictLog
from specwatch.profiles.profile import ServerProfile
from specwatch.server.pool import RunningServer

__all__ = ["LiveHost", "ServerUrlOption", "SweepHost"]


class ServerUrlOption(Protocol):
    """The run's options a check reads: ``--specwatch-server-url`` (read only: the run's Config is frozen)."""

    @property
    def server_url(self) -> str | None: ...


class LiveHost(VerdictLog, Protocol):
    """The run's options, servers booted by profile, progress lines, and the verdict log."""

    @property
    def config(self) -> ServerUrlOption: ...

    @property
    def progress(self) -> Callable[[str], None]: ...

    def server_for_profile(self, profile: ServerProfile) -> RunningServer: ...


class SweepHost(LiveHost, Protocol):
    """A :class:`LiveHost` that also says which servers are up (a check may measure one while another waits)."""

    def live_profiles(self) -> Collection[str]: ...
