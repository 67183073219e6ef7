"""Server profiles: what to boot and how (engine, model, draft, parallelism, speculative settings,
environment profile), and the SGLang 0.5.23 and reference-server command lines they build.

Loading and validating profile files is :mod:`specwatch.profiles.loading`; the schema's field
tables are :mod:`specwatch.profiles.tables`.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specwatch.errors import UsageError

if sys.version_info >= (3, 11):
    pass
else:  # pragma: no cover
    pass

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

ENGINES = ("reference", "sglang")
ENV_APPLY = ("launch", "sitecustomize")
SGLANG_LAUNCHERS = ("sglang serve", "python -m sglang.launch_server")
#: SGLang 0.5.23's built-in --speculative-algorithm values (srt/arg_groups/fields/spec.py:31)
ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO")
#: what the reference server implements (chain drafting with a draft model, greedy verification)
REFERENCE_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")
#: SGLang flags (and their accepted prefixes) that multiply the GPUs one server occupies beyond --tp-size
PARALLEL_FLAGS = {"--dp-size": "--dp-size", "--dp": "--dp-size", "--data-parallel-size": "--dp-size",
                  "--pp-size": "--pp-size", "--pp": "--pp-size", "--pipeline-parallel-size": "--pp-size"}


@dataclass(frozen=True)
class Speculative:
    """Chain or tree speculative decoding settings, with SGLang's names."""

    algorithm: str = "EAGLE3"
    draft_model: str | None = None
    num_steps: int = 2
    eagle_topk: int = 1
    num_draft_tokens: int | None = None  # None: num_steps + 1 (SGLang forces it when topk == 1)

    @property
    def draft_tokens(self) -> int:
        """Tokens per request in one verify forward."""
        return self.num_draft_tokens or self.num_steps + 1

    @property
    def max_accept_length(self) -> int:
        """Largest canonical accept length: every drafted token plus the bonus token."""
        return self.num_steps + 1


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
    decode_log_interval: int = 10
    nccl_debug: bool = True
    floor_tok_s: float | None = None
    tolerance: float | None = None

    @property
    def role(self) -> str:
        """``spec`` for a speculative server, ``baseline`` otherwise."""
        return "spec" if self.speculative else "baseline"

    @property
    def gpus_needed(self) -> int:
        """GPUs the server occupies (0 on CPU): tp × dp × pp, with dp and pp from ``extra_args``."""
        if self.device == "cpu":
            return 0
        return self.tp * parallel_size(self.extra_args, "--dp-size") * parallel_size(self.extra_args, "--pp-size")

    def server_args(self, host: str, port: int) -> list[str]:
        """Flags shared by SGLang 0.5.23 and the reference server."""
        args = ["--model-path", self.model, "--host", host, "--port", str(port)]
        if self.tp != 1:
            args += ["--tp-size", str(self.tp)]
        args += ["--enable-metrics", "--decode-log-interval", str(self.decode_log_interval)]
        if self.max_running_requests is not None:
            args += ["--max-running-requests", str(self.max_running_requests)]
        if self.cuda_graph_max_bs is not None:
            args += ["--cuda-graph-max-bs-decode", str(self.cuda_graph_max_bs)]
        spec = self.speculative
        if spec:
            args += ["--speculative-algorithm", spec.algorithm]
            if spec.draft_model:
                args += ["--speculative-draft-model-path", spec.draft_model]
            args += [
                "--speculative-num-steps", str(spec.num_steps),
                "--speculative-eagle-topk", str(spec.eagle_topk),
                "--speculative-num-draft-tokens", str(spec.draft_tokens),
            ]
        return args

    def command(self, host: str, port: int) -> list[str]:
        """The full argv that boots this server."""
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


