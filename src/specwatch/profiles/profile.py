"""Server profiles: what to boot and how (engine, model, draft, parallelism, speculative settings,
environment profile); each profile's engine (:mod:`specwatch.engines`) builds its command line.

Loading and validating profile files is :mod:`specwatch.profiles.loading`; the schema's field
tables are :mod:`specwatch.profiles.tables`.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specwatch.engines.openai import unbootable
from specwatch.engines.protocol import Engine
from specwatch.engines.reference import REFERENCE
from specwatch.engines.registry import ENGINES as ENGINE_TABLE
from specwatch.engines.registry import NAMES, engine_for, unable
from specwatch.engines.sglang import ALGORITHMS, EAGLE_FAMILY, SGLANG, SPEC_DECODE_LOG_INTERVAL
from specwatch.errors import UsageError
from specwatch.profiles.schema import Invalid
from specwatch.served import Setup, Spec

__all__ = [
    "ALGORITHMS",
    "BUILTIN_ENV_PROFILES",
    "EAGLE_FAMILY",
    "ENGINES",
    "ENV_APPLY",
    "LOAD_APIS",
    "NCCL_DEBUG_ENV",
    "PARALLEL_FLAGS",
    "PROFILE_FORMAT_VERSION",
    "REFERENCE_ALGORITHMS",
    "SGLANG_ENGINES",
    "SGLANG_LAUNCHERS",
    "SPEC_DECODE_LOG_INTERVAL",
    "TUNED_NCCL",
    "Gates",
    "ProfileSet",
    "ServerProfile",
    "Speculative",
    "parallel_size",
    "unbootable",
]

PROFILE_FORMAT_VERSION = 1

#: The case study's NCCL tuning (seeds/): what "tuned" means everywhere in specwatch.
TUNED_NCCL: dict[str, str] = {
    "NCCL_PROTO": "LL",
    "NCCL_ALGO": "Ring",
    "NCCL_P2P_LEVEL": "SYS",
    "NCCL_MAX_NCHANNELS": "16",
    "NCCL_BUFFSIZE": "16777216",
    "NCCL_NTHREADS": "512",
}
BUILTIN_ENV_PROFILES: dict[str, dict[str, str]] = {"tuned": TUNED_NCCL, "untuned": {}}
#: Variables the harness itself adds so that NCCL reports what it applied (ncclenv view).
NCCL_DEBUG_ENV: dict[str, str] = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "ENV,INIT"}

#: The engines a profile may name (:mod:`specwatch.engines`), in the schema's order.
ENGINES = NAMES
#: Engines that speak SGLang's native API and leave its signals (``/generate`` with ``meta_info``,
#: ``/server_info``, ``/flush_cache``, the Decode/Capture/NCCL log lines, its process tree): the
#: SGLang-only checks need one of these. Any other is an OpenAI-compatible server (vLLM,
#: TensorRT-LLM, a remote endpoint): specwatch never boots it and measures it through the OpenAI routes.
SGLANG_ENGINES = tuple(name for name, e in ENGINE_TABLE.items() if e.capabilities.native_api)
#: How the load reaches a server: SGLang's streamed ``/generate``, or the OpenAI routes
#: ``/v1/completions`` and ``/v1/chat/completions`` (streamed, ``stream_options.include_usage``).
LOAD_APIS = ("generate", "completions", "chat")
ENV_APPLY = ("launch", "sitecustomize")
SGLANG_LAUNCHERS = SGLANG.launchers
#: what the reference server implements (chain drafting with a draft model, greedy verification)
REFERENCE_ALGORITHMS = REFERENCE.algorithms or ()
#: SGLang flags (and their accepted prefixes) that multiply the GPUs one server occupies beyond --tp-size
PARALLEL_FLAGS = {"--dp-size": "--dp-size", "--dp": "--dp-size", "--data-parallel-size": "--dp-size",
                  "--pp-size": "--pp-size", "--pp": "--pp-size", "--pipeline-parallel-size": "--pp-size"}


@dataclass(frozen=True)
class Speculative:
    """Speculative decoding settings, with SGLang's names; None leaves a setting to the engine.

    SGLang 0.5.23 picks num_steps, eagle_topk and num_draft_tokens per model when none is set
    (srt/arg_groups/speculative_hook.py ``_auto_choose_speculative_params``: (5, 4, 8) for Llama,
    (3, 1, 4) otherwise); the reference server picks (3, 1, 4).
    """

    algorithm: str = "EAGLE3"
    draft_model: str | None = None
    num_steps: int | None = None
    eagle_topk: int | None = None
    num_draft_tokens: int | None = None  # None: the engine's (num_steps + 1 when eagle_topk == 1)

    @property
    def chain(self) -> bool:
        """Whether the draft is a chain: eagle_topk 1, or unset for the EAGLE family (specwatch and the
        reference server then use 1)."""
        return self.eagle_topk == 1 or (self.eagle_topk is None and self.algorithm.upper() in EAGLE_FAMILY)

    def __post_init__(self) -> None:
        if self.num_steps is not None:
            if self.chain and self.num_draft_tokens not in (None, self.num_steps + 1):  # 0.5.23 would override it
                raise Invalid("", at=".num_draft_tokens", message=f"with eagle_topk = 1 it must be num_steps + 1 = "
                              f"{self.num_steps + 1}, got {self.num_draft_tokens}")
            return
        # _handle_eagle_family asserts that topk and draft tokens are unset when num_steps is
        given = [f for f in ("eagle_topk", "num_draft_tokens") if getattr(self, f) is not None]
        chain_tokens = self.eagle_topk == 1 and self.num_draft_tokens is not None  # num_steps + 1: needs num_steps
        if given and (self.algorithm.upper() in EAGLE_FAMILY or chain_tokens):
            raise Invalid("", at=f".{given[0]}", message=f"{given[0]} needs num_steps: SGLang 0.5.23 chooses all "
                          "three per model when num_steps is unset (set num_steps too, or none of them)")

    @property
    def draft_tokens(self) -> int | None:
        """Tokens per request in one verify forward, when the profile determines it."""
        if self.num_draft_tokens is not None:
            return self.num_draft_tokens
        if self.num_steps is not None and self.chain:
            return self.num_steps + 1
        return None

    @property
    def max_accept_length(self) -> int | None:
        """Largest canonical accept length (every drafted token plus the bonus), when num_steps is set."""
        return None if self.num_steps is None else self.num_steps + 1


@dataclass(frozen=True)
class ServerProfile:
    """One server, described once."""

    name: str
    engine: str = REFERENCE.name
    model: str = "ref-tiny"
    tp: int = 1
    device: str = "auto"
    speculative: Speculative | None = None
    env: str = "untuned"
    env_vars: Mapping[str, str] = field(default_factory=dict)
    env_apply: str = "launch"
    extra_args: tuple[str, ...] = ()
    extra_env: Mapping[str, str] = field(default_factory=dict)
    pythonpath: tuple[str, ...] = ()
    launcher: str = SGLANG_LAUNCHERS[0]
    python: str = sys.executable
    max_running_requests: int | None = None
    cuda_graph_max_bs: int | None = None
    decode_log_interval: int | None = None  # None: the engine's 40, or SPEC_DECODE_LOG_INTERVAL on a speculative server
    nccl_debug: bool = True
    floor_tok_s: float | None = None
    tolerance: float | None = None
    api: str | None = None  # None: "generate" for SGLang engines, "completions" for openai (see load_api)
    url: str | None = None  # engine = "openai": where the server answers (--specwatch-server-url overrides it)

    @property
    def engine_kind(self) -> Engine:
        """The profile's :class:`~specwatch.engines.protocol.Engine` (UsageError for an unknown name)."""
        return engine_for(self.engine)

    @property
    def load_api(self) -> str:
        """The API the load uses (:data:`LOAD_APIS`): the profile's ``api``, else its engine's first
        (``generate`` for an SGLang engine, ``completions`` for an OpenAI-compatible one)."""
        return self.api or self.engine_kind.load_apis[0]

    @property
    def speaks_sglang(self) -> bool:
        """Whether the server is SGLang-compatible (its engine has the native API); checks ask :meth:`unable`."""
        return self.engine_kind.capabilities.native_api

    def unable(self, check: str, needs: tuple[str, ...] = ("native_api",)) -> str | None:
        """Why ``check``, which reads what ``needs`` names (:data:`~specwatch.engines.protocol.CAPABILITIES`),
        cannot run on this server (a skip reason), or None when its engine has all of it: the one owner of
        that question for every check."""
        return unable(self.engine_kind, check, needs, self.name, self.load_api)

    def sglang_only(self, check: str) -> str | None:
        """:meth:`unable` for a check that needs every capability of the native engine (tests' shorthand)."""
        return self.unable(check, ("native_api", "metrics", "decode_lines", "meta_info", "process_tree"))

    def setup(self) -> Setup:
        """What a boot of this server serves, whatever the profile's name: engine, model, tensor parallelism and
        speculative settings (:class:`specwatch.served.Setup`). Two profiles that serve the same (twins that differ
        only in their environment) share their boot-to-boot spread; a different model never borrows another's
        (:mod:`specwatch.store.roundspread`). At a workload's size it is what a measurement served
        (:meth:`specwatch.load.measure.Measurement.served`)."""
        spec = self.speculative
        return Setup(self.engine, self.model, self.ranks,
                     Spec(spec.algorithm, spec.draft_model or "", spec.num_steps, spec.eagle_topk,
                          spec.num_draft_tokens) if spec else None)

    @property
    def role(self) -> str:
        """``spec`` for a speculative server, ``baseline`` otherwise."""
        return "spec" if self.speculative else "baseline"

    @property
    def ranks(self) -> int:
        """Processes in the server's parallel group: tp × dp × pp, with dp and pp from ``extra_args``
        (1: no collective, so NCCL is never initialised)."""
        return self.tp * parallel_size(self.extra_args, "--dp-size") * parallel_size(self.extra_args, "--pp-size")

    @property
    def gpus_needed(self) -> int:
        """GPUs the server occupies (0 on CPU, and for an ``openai`` server, which specwatch does not
        boot): :attr:`ranks`."""
        if self.device == "cpu" or not self.engine_kind.capabilities.boots:
            return 0
        return self.ranks

    def arg_pieces(self, host: str, port: int) -> list[tuple[list[str], str]]:
        """The engine's command-line flags in order, each with why it is there: ``""`` when the profile
        set it, else the reason specwatch adds it (``specwatch profile show`` prints these)."""
        return self.engine_kind.arg_pieces(self, host, port)

    def server_args(self, host: str, port: int) -> list[str]:
        """The engine's flags: the profile's settings and the few specwatch needs (see :meth:`arg_pieces`);
        every speculative setting the profile leaves unset stays unset, for the engine to choose."""
        return [arg for args, _ in self.arg_pieces(host, port) for arg in args]

    def added_flags(self, host: str = "127.0.0.1", port: int = 30000) -> list[tuple[str, str]]:
        """(flags, why) for each flag specwatch adds that the profile did not ask for."""
        return [(" ".join(args), why) for args, why in self.arg_pieces(host, port) if why]

    def interpreter(self) -> str:
        """The Python the server runs in: ``python`` for the reference server and ``python -m`` launchers;
        for ``sglang serve``, the interpreter of the ``sglang`` script on the server's PATH (its ``#!``
        line), which need not be the one running specwatch; ``python`` when that cannot be read."""
        name = self.launcher.split()[0]
        if not self.engine_kind.launchers or name == "python":
            return self.python
        path = self.extra_env.get("PATH", os.environ.get("PATH"))
        exe = shutil.which(name, path=path)
        try:
            with open(exe or "", "rb") as fh:
                first = fh.readline(4096).decode("utf-8", errors="replace")
        except OSError:
            return self.python
        words = first[2:].split() if first.startswith("#!") else []
        if words and os.path.basename(words[0]) == "env":  # "#!/usr/bin/env python3"
            return shutil.which(words[-1], path=path) or self.python
        return words[0] if words else self.python

    def command(self, host: str, port: int, version: str | None = None) -> list[str]:
        """The full argv that boots this server with the flags its engine's ``version`` accepts (None: the
        newest version the engine module knows); one specwatch does not boot: UsageError."""
        return self.engine_kind.command(self, host, port, version)


@dataclass(frozen=True)
class Gates:
    """Relative gates judged within one session."""

    spec_margin: float = 0.0  # speculative >= baseline * (1 + margin)
    # speculative TTFT (p50, p99) <= baseline's * (1 + margin): the draft prefills the prompt too, so
    # speculation may cost some time to first token (docs/reference/speculation-health.md says why 25%)
    spec_ttft_margin: float = 0.25
    tuned_tolerance: float = 0.02  # tuned >= untuned * (1 - tolerance)
    expect_tuning_effect: bool = False  # on NVLink graphed all-reduce, tuning changes ~nothing
    # A significant tuned/untuned difference smaller than this is "no meaningful effect", never a win:
    # on the H200 pair, boot-to-boot drift alone moved the pair by 2% at p = 0.0015.
    tuning_min_effect: float = 0.05
    # Boot the two servers of a relative gate in alternation (A B A B ...) this many rounds, each
    # round a fresh boot: drift of the machine and boot-to-boot differences then hit both sides
    # alike instead of deciding the verdict (docs/validation/README.md, section 3).
    # A server in both gates boots once a round for both. 1: one boot each.
    alternate_rounds: int = 1
    # Keep both servers of a relative gate up at once and interleave their runs (A B B A ...), in
    # every round: the machine's wander over seconds then hits both sides alike. Both must fit on
    # the GPUs together (for SGLang, lower --mem-fraction-static in the profiles).
    interleave_runs: bool = False
    # A concurrency sweep's crossover (the first level where speculation stops paying) must not come
    # below this; None: the crossover is reported, not gated.
    min_crossover_concurrency: int | None = None


@dataclass(frozen=True)
class ProfileSet:
    """The servers of a run plus which of them the named fixtures mean."""

    servers: dict[str, ServerProfile]
    roles: dict[str, str]
    gates: Gates = Gates()
    source: str = "<built-in>"
    workload: dict[str, Any] = field(default_factory=dict)  # [workload]: overrides for every workload

    def get(self, name: str) -> ServerProfile:
        try:
            return self.servers[name]
        except KeyError:
            raise UsageError(f"{self.source}: no server profile named {name!r}; "
                             f"known: {', '.join(sorted(self.servers))}") from None

    def for_role(self, role: str) -> ServerProfile | None:
        """The profile a named fixture (baseline, spec, tuned, untuned) uses, if any."""
        name = self.roles.get(role)
        return self.servers.get(name) if name else None


# --------------------------------------------------------------------------------------------------
# The profile schema (hand-written: see the module docstring). Every field of every table is declared
# once below (field name -> Rule: what it accepts, as a phrase for messages, and how it is converted),
# and every bad value becomes ONE line: "FILE: TABLE.FIELD: expected WHAT, got VALUE".
# --------------------------------------------------------------------------------------------------

def parallel_size(args: tuple[str, ...] | list[str], flag: str) -> int:
    """The value of ``flag`` (``--dp-size`` or ``--pp-size``, any accepted spelling) in ``args``; 1 if unset."""
    value = 1
    for i, arg in enumerate(args):
        name, eq, inline = arg.partition("=")
        if PARALLEL_FLAGS.get(name) != flag:
            continue
        text = inline if eq else (args[i + 1] if i + 1 < len(args) else "")
        try:
            value = int(text)
        except ValueError:
            raise UsageError(f"extra_args: {name} needs a whole number, got {text!r}") from None
        if value < 1:
            raise UsageError(f"extra_args: {name} must be at least 1, got {value}")
    return value


