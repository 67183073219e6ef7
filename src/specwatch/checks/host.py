"""What a live check that boots its own servers needs from its caller (the run's Session is one).

The checks never import the run: each takes a host that keeps its verdict (:class:`VerdictLog`), says whether
the run was given a running server's URL, boots servers by profile and prints progress lines.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Protocol

from specwatch.checks.verdictlog import VerdictLog
from specwatch.judge.verdict import Verdict
from specwatch.profiles.profile import ServerProfile
from specwatch.server.pool import RunningServer

__all__ = ["LiveHost", "ServerUrlOption", "SweepHost", "pair_skip"]


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


def pair_skip(host: LiveHost, name: str, needs: Sequence[str], plain: ServerProfile, spec: ServerProfile,
              compared: str) -> Verdict | None:
    """Why check ``name`` (reading ``needs``) cannot compare ``plain`` with ``spec``, as a skip; None when it can.
    ``compared``: what the comparison needs both servers for, in the skip's words ("the speedup")."""
    for prof in (spec, plain):
        if why := prof.unable(name, tuple(needs)):
            return Verdict.skip(name, why, spec.name)
    if spec.speculative is None or plain.speculative is not None:
        return Verdict.skip(name, f"needs a plain and a speculative server; {plain.name} is "
                                  f"{'speculative' if plain.speculative else 'plain'} and {spec.name} is "
                                  f"{'speculative' if spec.speculative else 'plain'}", spec.name)
    if host.config.server_url:
        return Verdict.skip(name, f"--server-url: only one server ({host.config.server_url}) is reachable; "
                                  f"{compared} needs the plain and the speculative one", spec.name)
    return None
