"""OpenAI-compatible servers (vLLM, TensorRT-LLM, a remote endpoint): reached at a URL, never booted.

specwatch measures them through ``/v1/completions`` or ``/v1/chat/completions`` and reads nothing else:
no ``meta_info``, no log lines, no process tree, no metric names it knows, so every check that needs
one of those skips with the profile's reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specwatch.engines.protocol import Capabilities, Identity, MetricNames, PhaseGraphs, Pieces, ProcessSignature
from specwatch.errors import UsageError

if TYPE_CHECKING:
    from specwatch.engines.protocol import ServerProfile

__all__ = ["OPENAI", "OpenAICompatible", "unbootable"]


def unbootable(profile: ServerProfile) -> str:
    """The one-line message for a server specwatch does not boot and that has no URL to be reached at."""
    return (f"{profile.name}: engine = {profile.engine!r} is a server specwatch does not boot; give its URL "
            "(url = \"http://host:8000\" in the profile, or --specwatch-server-url URL)")


class OpenAICompatible:
    """Any server that speaks the OpenAI routes; only the load's client talks to it."""

    name: str = "openai"
    title: str = "an OpenAI-compatible server"
    capabilities: Capabilities = Capabilities(boots=False, native_api=False, metrics=False, decode_lines=False,
                                              meta_info=False, graph_counters=False, process_tree=False)
    metrics: MetricNames | None = None
    process: ProcessSignature | None = None
    identity: Identity | None = None  # its version is GET /version's, when it answers (load.openai_client)
    log_format: str | None = None
    versions: tuple[str, ...] = ()
    launchers: tuple[str, ...] = ()
    load_apis: tuple[str, ...] = ("completions", "chat")
    algorithms: tuple[str, ...] | None = None
    default_model: str | None = ""  # the served model name is asked of GET /v1/models
    builtin_draft: bool = False
    device_from_run: bool = False
    mem_fraction_flag: str | None = None

    def arg_pieces(self, profile: ServerProfile, host: str, port: int, version: str | None = None) -> Pieces:
        """None: specwatch passes it no flags."""
        return []

    def command(self, profile: ServerProfile, host: str, port: int, version: str | None = None) -> list[str]:
        """Never booted: UsageError."""
        raise UsageError(unbootable(profile))

    def phase_graphs(self, version: str | None = None) -> PhaseGraphs | None:
        """None: no capture lines are read."""
        return None


OPENAI = OpenAICompatible()
