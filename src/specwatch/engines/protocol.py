"""What an engine is, as the tester sees it from outside: the :class:`Engine` Protocol and its parts.

An engine module (``sglang``, ``reference``, ``openai``) answers each member for one kind of server:
how it is started (command line and flags, by version), what it shows (log lines, ``/metrics`` names,
``meta_info``, a process tree and its titles), how its version is known, and which of those it has
(:class:`Capabilities`). Checks ask for capabilities and take names from here; no check names an engine.
Pure: stdlib only (a profile is typed, never imported at run time).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "CAPABILITIES",
    "Capabilities",
    "Engine",
    "Identity",
    "MetricNames",
    "PhaseGraphs",
    "Pieces",
    "ProcessSignature",
    "ServerProfile",
    "SpeculativeSettings",
]


class SpeculativeSettings(Protocol):
    """What an engine reads of a profile's speculative settings (``profiles.profile.Speculative`` has them)."""

    @property
    def algorithm(self) -> str: ...
    @property
    def draft_model(self) -> str | None: ...
    @property
    def num_steps(self) -> int | None: ...
    @property
    def eagle_topk(self) -> int | None: ...
    @property
    def num_draft_tokens(self) -> int | None: ...


class ServerProfile(Protocol):
    """What an engine reads of one server's profile (``profiles.profile.ServerProfile`` has it): a structural
    type, so that engines/ imports nothing of the tester, not even for type checking (no import cycle)."""

    @property
    def name(self) -> str: ...
    @property
    def engine(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def tp(self) -> int: ...
    @property
    def device(self) -> str: ...
    @property
    def extra_args(self) -> Sequence[str]: ...
    @property
    def launcher(self) -> str: ...
    @property
    def python(self) -> str: ...
    @property
    def max_running_requests(self) -> int | None: ...
    @property
    def cuda_graph_max_bs(self) -> int | None: ...
    @property
    def decode_log_interval(self) -> int | None: ...
    @property
    def speculative(self) -> SpeculativeSettings | None: ...

#: Capability names a check may ask for (the fields of :class:`Capabilities`).
CAPABILITIES = ("boots", "native_api", "metrics", "decode_lines", "meta_info", "graph_counters", "process_tree")

#: (flags, why) in order: ``why`` is "" when the profile set the flags, else why specwatch adds them.
Pieces = list[tuple[list[str], str]]


@dataclass(frozen=True)
class Capabilities:
    """What a server of this engine offers the tester."""

    boots: bool  # specwatch starts it from a command line (else it is reached at a URL)
    native_api: bool  # /generate with meta_info, /server_info, /flush_cache, /health_generate
    metrics: bool  # Prometheus text at /metrics, under MetricNames
    decode_lines: bool  # Decode / Prefill / Capture log lines (signals.logscan's format)
    meta_info: bool  # per-request spec_verify_ct, spec_num_correct_drafts, completion_tokens
    graph_counters: bool  # a CUDA-graph pass counter by mode (MetricNames.graph_passes)
    process_tree: bool  # a local process tree with retitled workers (ProcessSignature)

    def missing(self, needs: tuple[str, ...]) -> list[str]:
        """The capabilities of ``needs`` this engine lacks."""
        unknown = [n for n in needs if n not in CAPABILITIES]
        if unknown:
            raise ValueError(f"unknown capabilities {unknown}; known: {', '.join(CAPABILITIES)}")
        return [n for n in needs if not getattr(self, n)]


@dataclass(frozen=True)
class MetricNames:
    """The ``/metrics`` names the checks read (full names, prefix included)."""

    prefix: str
    generation_tokens: str
    verify_calls: str
    requests: str
    accept_length: str
    graph_passes: str  # a counter with a ``mode`` label: decode_cuda_graph, decode_none, ...

    @classmethod
    def with_prefix(cls, prefix: str) -> MetricNames:
        """SGLang's metric names under ``prefix`` (``"sglang:"``)."""
        return cls(prefix, f"{prefix}generation_tokens_total", f"{prefix}spec_verify_calls_total",
                   f"{prefix}num_requests_total", f"{prefix}spec_accept_length", f"{prefix}cuda_graph_passes_total")


@dataclass(frozen=True)
class ProcessSignature:
    """How a server's processes are told apart on a host: its main process's command line and the titles
    its workers give themselves (``setproctitle``)."""

    label: str  # for people: "SGLang server"
    tree_name: str = ""  # the ProcRole engine of its processes ("" for servers specwatch only recognises)
    modules: tuple[str, ...] = ()  # started as ``python -m MODULE``
    commands: tuple[tuple[str, str], ...] = ()  # started as (program, subcommand), e.g. ("vllm", "serve")
    programs: tuple[str, ...] = ()  # started as a program of this name
    scripts: tuple[str, ...] = ()  # started as ``python .../SCRIPT``
    title_prefix: str = ""  # retitled workers' titles start with it, e.g. "sglang::"
    roles: tuple[str, ...] = ()  # the words after the title prefix, e.g. "scheduler", "detokenizer"


@dataclass(frozen=True)
class PhaseGraphs:
    """Which phases of a speculative cycle an engine captures as graphs at startup (each announced by a
    ``Capture {role} {kind} ... graph begin/end`` line, named here ``"{role} {kind}"``), and what keeps each
    from being captured. Read by the phase-graphs check; no check names an engine's flags' meaning itself."""

    verify: str  # the target's verify phase: captured whenever decode graphs are on
    draft_decode: str | None  # the draft's decode steps; None: the engine has no such phase
    draft_decode_min_steps: int  # the draft decode phase is captured only from this many draft steps on
    draft_extend: str | None  # the draft's pass over the accepted tokens; None: the engine has no such phase
    drafted: tuple[str, ...]  # algorithms that run a draft model (draft phases); the others only verify
    graphs_off: tuple[tuple[str, str | None], ...]  # (flag, value) that turn every decode-phase graph off
    extend_backends: tuple[str, ...] = ()  # attention backends whose draft extend phase is captured
    extend_switch: str | None = None  # an environment variable that turns the draft extend capture off
    switch_on: tuple[str, ...] = ()  # its values (lower-cased) read as "on"; anything else leaves it off
    backend_flags: tuple[str, ...] = ()  # flags naming the draft extend's attention backend, most specific first
    decode_mode: tuple[str, str, str] | None = None  # (mode flag, value, flag): in that mode the flag replaces
    # the second of backend_flags
    page_size_flag: str | None = None  # the KV page size flag the default backend depends on
    default_backend: str | None = None  # the attention backend the engine picks, unasked, on default_gpus
    default_gpus: tuple[str, ...] = ()  # words of GPU names (as nvidia-smi prints them) where it picks it
    default_max_topk: int = 1  # ... for a draft tree of at most this topk (unset counts as within)
    default_max_page_size: int = 1  # ... and a page size of at most this (unset counts as within)
    default_words: str = ""  # how a message names that default

    def expected(self, algorithm: str, num_steps: int | None) -> tuple[str, ...]:
        """The phases a healthy server of ``algorithm`` with ``num_steps`` draft steps captures (``num_steps``
        None: unknown, so the draft decode phase is not required)."""
        phases = [self.verify]
        if algorithm.upper() in self.drafted:
            if self.draft_decode and num_steps is not None and num_steps >= self.draft_decode_min_steps:
                phases.append(self.draft_decode)
            if self.draft_extend:
                phases.append(self.draft_extend)
        return tuple(phases)

    def switched_on(self, value: str | None) -> bool:
        """Whether ``value`` of :attr:`extend_switch` (None: unset) turns the draft extend capture off."""
        return value is not None and value.lower() in self.switch_on


@dataclass(frozen=True)
class Identity:
    """How the version of the engine under test is known."""

    package: str  # the Python distribution that is the engine, asked of the server's interpreter
    served_version: bool  # /server_info "version" is the engine's own (a stand-in's imitates another's)
    bundled: bool = False  # ships with specwatch: its import root is specwatch's, its commit specwatch's


class Engine(Protocol):
    """One kind of server under test. See docs/architecture.md, "Adding an engine"."""

    name: str  # the profile's ``engine`` value
    title: str  # for people: "SGLang", "the reference server"
    capabilities: Capabilities
    metrics: MetricNames | None  # None: no /metrics the checks read
    process: ProcessSignature | None  # None: not a local process tree
    identity: Identity | None  # None: its version is what its server says, if anything
    log_format: str | None  # the log-line format signals.logscan reads ("sglang-0.5"), None: none read
    versions: tuple[str, ...]  # versions whose flags, lines and names the module knows, oldest first
    launchers: tuple[str, ...]  # how it may be started (the profile's ``launcher``), first = default
    load_apis: tuple[str, ...]  # the load APIs it serves (profile ``api``), first = the default
    algorithms: tuple[str, ...] | None  # speculative algorithms it implements; None: any of the schema's
    default_model: str | None  # a profile's model when unset (None: the schema's default)
    builtin_draft: bool  # a speculative server needs no draft model path
    device_from_run: bool  # a profile's device "auto" follows --specwatch-device
    mem_fraction_flag: str | None  # the flag that shares a GPU's memory between two servers

    def arg_pieces(self, profile: ServerProfile, host: str, port: int, version: str | None = None) -> Pieces:
        """The profile's flags in order, each with why specwatch adds it ("" when the profile set it)."""
        ...

    def command(self, profile: ServerProfile, host: str, port: int, version: str | None = None) -> list[str]:
        """The full argv that boots ``profile`` (UsageError when this engine is not booted)."""
        ...

    def phase_graphs(self, version: str | None = None) -> PhaseGraphs | None:
        """Which speculative phases ``version`` captures as graphs (None: the engine shows no capture lines)."""
        ...
