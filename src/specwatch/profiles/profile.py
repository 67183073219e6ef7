"""Server profiles: what to boot and how (engine, model, draft, parallelism, speculative settings,
environment profile), and the SGLang 0.5.23 and reference-server command lines they build.

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

from specwatch.errors import UsageError
from specwatch.profiles.schema import Invalid

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

ENGINES = ("reference", "sglang", "openai")
#: Engines that speak SGLang's native API and leave its signals (``/generate`` with ``meta_info``,
#: ``/server_info``, ``/flush_cache``, the Decode/Capture/NCCL log lines, its process tree): the
#: SGLang-only checks need one of these. ``openai`` is any other OpenAI-compatible server (vLLM,
#: TensorRT-LLM, a remote endpoint): specwatch never boots it and measures it through the OpenAI routes.
SGLANG_ENGINES = ("reference", "sglang")
#: How the load reaches a server: SGLang's streamed ``/generate``, or the OpenAI routes
#: ``/v1/completions`` and ``/v1/chat/completions`` (streamed, ``stream_options.include_usage``).
LOAD_APIS = ("generate", "completions", "chat")
ENV_APPLY = ("launch", "sitecustomize")
SGLANG_LAUNCHERS = ("sglang serve", "python -m sglang.launch_server")
#: SGLang 0.5.23's built-in --speculative-algorithm values (srt/arg_groups/fields/spec.py:31)
ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO")
#: what the reference server implements (chain drafting with a draft model, greedy verification)
REFERENCE_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")
#: the algorithms 0.5.23 resolves in ``_handle_eagle_family`` (speculative_hook.py), NEXTN being EAGLE
EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")
#: Decode-line interval specwatch asks of a speculative server whose profile sets none (0.5.23's default is 40)
SPEC_DECODE_LOG_INTERVAL = 10
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
    engine: str = "reference"
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
    launcher: str = "sglang serve"
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
    def load_api(self) -> str:
        """The API the load uses (:data:`LOAD_APIS`): the profile's ``api``, else ``generate`` for an
        SGLang engine and ``completions`` for ``openai``."""
        return self.api or ("generate" if self.speaks_sglang else "completions")

    @property
    def speaks_sglang(self) -> bool:
        """Whether the server is SGLang-compatible (:data:`SGLANG_ENGINES`): the one owner of that
        question for every SGLang-only check (environment, verify graphs, accept length, lossless)."""
        return self.engine in SGLANG_ENGINES

    def sglang_only(self, check: str) -> str | None:
        """Why the SGLang-only ``check`` cannot run on this server (a skip reason), or None when it can."""
        if self.speaks_sglang:
            return None
        return (f"{check} is an SGLang-only check: it reads SGLang's /generate meta_info, /server_info, "
                f"/metrics counters, log lines and process tree; {self.name} is engine = {self.engine!r} "
                f"(an OpenAI-compatible server, measured through /v1/{'chat/' if self.load_api == 'chat' else ''}"
                "completions)")

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
        if self.device == "cpu" or not self.speaks_sglang:
            return 0
        return self.ranks

    def arg_pieces(self, host: str, port: int) -> list[tuple[list[str], str]]:
        """The shared command-line flags in order, each with why it is there: ``""`` when the profile
        set it, else the reason specwatch adds it (``specwatch profile show`` prints these)."""
        pieces: list[tuple[list[str], str]] = [
            (["--model-path", self.model], ""),
            (["--host", host, "--port", str(port)], "where specwatch reaches the server (the pool picks the port)"),
        ]
        if self.tp != 1:
            pieces.append((["--tp-size", str(self.tp)], ""))
        pieces.append((["--enable-metrics"], "the checks and gates read /metrics counters (cuda_graph_passes_total, "
                                            "spec_verify_calls_total, generation_tokens_total); 0.5.23 serves "
                                            "/metrics only with this flag"))
        if self.decode_log_interval is not None:
            pieces.append((["--decode-log-interval", str(self.decode_log_interval)], ""))
        elif self.speculative:
            pieces.append((["--decode-log-interval", str(SPEC_DECODE_LOG_INTERVAL)],
                           "the accept-length and verify-graph checks read the Decode lines (accept len, "
                           "#running-req, cuda graph); 0.5.23 writes one per 40 decode batches, too few for a "
                           "short workload"))
        if self.max_running_requests is not None:
            pieces.append((["--max-running-requests", str(self.max_running_requests)], ""))
        if self.cuda_graph_max_bs is not None:
            pieces.append((["--cuda-graph-max-bs-decode", str(self.cuda_graph_max_bs)], ""))
        spec = self.speculative
        if spec:
            pieces.append((["--speculative-algorithm", spec.algorithm], ""))
            if spec.draft_model:
                pieces.append((["--speculative-draft-model-path", spec.draft_model], ""))
            if spec.num_steps is not None:
                pieces.append((["--speculative-num-steps", str(spec.num_steps)], ""))
            if spec.eagle_topk is not None:
                pieces.append((["--speculative-eagle-topk", str(spec.eagle_topk)], ""))
            elif spec.num_steps is not None and self.engine == "sglang" and spec.algorithm.upper() in EAGLE_FAMILY:
                pieces.append((["--speculative-eagle-topk", "1"],
                               "num_steps is set: 0.5.23 then needs eagle_topk too (speculative_hook.py compares "
                               "it with 1 and fails on None); 1 drafts a chain"))
            if spec.num_draft_tokens is not None:
                pieces.append((["--speculative-num-draft-tokens", str(spec.num_draft_tokens)], ""))
        return pieces

    def server_args(self, host: str, port: int) -> list[str]:
        """Flags shared by SGLang 0.5.23 and the reference server: the profile's settings and the few
        specwatch needs (see :meth:`arg_pieces`); every speculative setting the profile leaves unset
        stays unset, for the engine to choose."""
        return [arg for args, _ in self.arg_pieces(host, port) for arg in args]

    def added_flags(self, host: str = "127.0.0.1", port: int = 30000) -> list[tuple[str, str]]:
        """(flags, why) for each flag specwatch adds that the profile did not ask for."""
        return [(" ".join(args), why) for args, why in self.arg_pieces(host, port) if why]

    def interpreter(self) -> str:
        """The Python the server runs in: ``python`` for the reference server and ``python -m`` launchers;
        for ``sglang serve``, the interpreter of the ``sglang`` script on the server's PATH (its ``#!``
        line), which need not be the one running specwatch; ``python`` when that cannot be read."""
        name = self.launcher.split()[0]
        if self.engine != "sglang" or name == "python":
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

    def command(self, host: str, port: int) -> list[str]:
        """The full argv that boots this server (an ``openai`` server is never booted: UsageError)."""
        if not self.speaks_sglang:
            raise UsageError(unbootable(self))
        if self.engine == "sglang":
            launcher = self.launcher.split()
            if launcher[0] == "python":
                launcher[0] = self.python
            args = self.server_args(host, port)
            if self.device != "auto":
                args += ["--device", self.device]
            return [*launcher, *args, *self.extra_args]
        args = [*self.server_args(host, port), "--device", self.device]
        return [self.python, "-m", "specwatch.refserver", *args, *self.extra_args]


@dataclass(frozen=True)
class Gates:
    """Relative gates judged within one session."""

    spec_margin: float = 0.0  # speculative >= baseline * (1 + margin)
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

#: Server names become folder and file names (reports/servers/<run>/<name>-N, baselines/<class>/<name>.json).
def unbootable(profile: ServerProfile) -> str:
    """The one-line message for an ``openai`` server that has no URL to be reached at."""
    return (f"{profile.name}: engine = {profile.engine!r} is a server specwatch does not boot; give its URL "
            "(url = \"http://host:8000\" in the profile, or --specwatch-server-url URL)")


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


