"""The engines specwatch drives, by the name a profile gives (``engine = "..."``), and what follows
from them: the servers it recognises on a host, and why a check cannot run on a server.

Adding an engine is one module beside this one and one entry in :data:`ENGINES` (docs/architecture.md).
"""

from __future__ import annotations

from specwatch.engines.foreign import FOREIGN
from specwatch.engines.openai import OPENAI, unbootable
from specwatch.engines.protocol import Engine, MetricNames, ProcessSignature
from specwatch.engines.reference import REFERENCE
from specwatch.engines.sglang import SGLANG
from specwatch.errors import UsageError

__all__ = [
    "ENGINES",
    "NAMES",
    "NATIVE",
    "bootable",
    "bundled",
    "engine_for",
    "find",
    "native_metrics",
    "signatures",
    "unable",
    "unbootable",
]

#: name -> engine, in the order the schema lists them
ENGINES: dict[str, Engine] = {e.name: e for e in (REFERENCE, SGLANG, OPENAI)}
NAMES = tuple(ENGINES)
#: the engine whose API, signals and metric names the checks were written against
NATIVE: Engine = SGLANG


def find(name: str | None) -> Engine | None:
    """The engine called ``name``, or None (a recorded name specwatch no longer knows, or none)."""
    return ENGINES.get(name or "")


def engine_for(name: str) -> Engine:
    """The engine called ``name`` (UsageError, one line, when there is none)."""
    engine = find(name)
    if engine is None:
        raise UsageError(f"unknown engine {name!r}; known: {', '.join(NAMES)}")
    return engine


def bootable() -> tuple[str, ...]:
    """Names of the engines specwatch boots from a command line."""
    return tuple(name for name, e in ENGINES.items() if e.capabilities.boots)


def bundled(name: str | None) -> bool:
    """Whether the engine called ``name`` ships with specwatch (its commit is specwatch's own)."""
    engine = find(name)
    return engine is not None and engine.identity is not None and engine.identity.bundled


def native_metrics() -> MetricNames:
    """The metric names of :data:`NATIVE` (for data recorded without a profile, e.g. a saved capture)."""
    assert NATIVE.metrics is not None
    return NATIVE.metrics


def signatures() -> tuple[ProcessSignature, ...]:
    """Every server specwatch recognises on a host: its engines' first, then the ones it does not drive."""
    return (*(e.process for e in ENGINES.values() if e.process is not None), *FOREIGN)


def unable(engine: Engine, check: str, needs: tuple[str, ...], profile: str, load_api: str) -> str | None:
    """Why ``check``, which reads what ``needs`` names, cannot run on ``profile``'s server (a skip reason),
    or None when its engine has all of it."""
    if not engine.capabilities.missing(needs):
        return None
    native = NATIVE.title
    return (f"{check} is an {native}-only check: it reads {native}'s /generate meta_info, /server_info, "
            f"/metrics counters, log lines and process tree; {profile} is engine = {engine.name!r} "
            f"({engine.title}, measured through /v1/{'chat/' if load_api == 'chat' else ''}completions)")
