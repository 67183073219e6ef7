"""Run configuration, resolved once: command-line flag > SPECWATCH_* variable > ini key > default.

Every option is declared once in :data:`OPTIONS`; the pytest plugin and the CLI both register
flags from it, so a flag means the same thing everywhere.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, overload

from specwatch.engines.registry import bootable
from specwatch.errors import UsageError
from specwatch.paths import DEFAULT_BASELINE_DIR, DEFAULT_HISTORY


def _number(text: str, what: str) -> float:
    """A finite float from ``text``, or ValueError saying ``what`` was expected (NaN and inf included)."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"must be {what}") from None
    if not math.isfinite(value):
        raise ValueError(f"must be {what}")
    return value


def _positive_float(text: str) -> float:
    value = _number(text, "a number > 0")
    if value <= 0:
        raise ValueError("must be a number > 0")
    return value


def _probability(text: str) -> float:
    value = _number(text, "a probability in (0, 1)")
    if not 0 < value < 1:
        raise ValueError("must be a probability in (0, 1)")
    return value


def _fraction(text: str) -> float:
    what = "a fraction in (0, 1) or a percentage like 5%"
    value = _number(text.rstrip("%"), what) / (100.0 if text.endswith("%") else 1.0)
    if not 0 < value < 1:  # 0 would make every change a regression (compare() refuses it)
        raise ValueError(f"must be {what}")
    return value


def _integer(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if value < low:
        raise ValueError("must be a positive integer" if low == 1 else f"must be an integer ≥ {low}")
    return value


def _positive_int(text: str) -> int:
    return _integer(text, 1)


def _non_negative_int(text: str) -> int:
    return _integer(text, 0)


def _bool(text: str) -> bool:
    low = str(text).strip().lower()
    if low in {"1", "true", "yes", "on"}:
        return True
    if low in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError("must be true or false")


def _device(text: str) -> str:
    if text not in {"auto", "cpu", "cuda"}:
        raise ValueError("must be auto, cpu or cuda")
    return text


def _yardstick(text: str) -> str:
    if text not in {"auto", "on", "off"}:
        raise ValueError("must be auto, on or off")
    return text


def _lengths(text: str) -> tuple[int, ...]:
    try:
        lengths = tuple(sorted({int(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        lengths = ()
    if not lengths or lengths[0] < 1:
        raise ValueError("must be input lengths in tokens, comma-separated, each ≥ 1 (e.g. 128,1024,2048,4096)")
    return lengths


def _engine(text: str) -> str:
    if text not in bootable():
        raise ValueError(f"must be {' or '.join(bootable())}")
    return text


@dataclass(frozen=True)
class Option:
    """One option: its flag, environment variable, ini key, parser, default and help."""

    name: str
    help: str
    parse: Callable[[str], Any] = str
    default: Any = None
    is_flag: bool = False
    #: older spellings still accepted (``--server-url``, ``--update-baselines``); the flag is always prefixed
    aliases: tuple[str, ...] = ()

    @property
    def flag(self) -> str:
        return "--specwatch-" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return "SPECWATCH_" + self.name.upper()

    @property
    def ini(self) -> str:
        return "specwatch_" + self.name


OPTIONS: tuple[Option, ...] = (
    Option("profiles", "TOML file of server profiles (default: the built-in reference-server set)"),
    Option("engine", f"boot a single server of this engine ({'|'.join(bootable())}) instead of a profile file",
           _engine),
    Option("model", "model path for --specwatch-engine (e.g. ref-tiny or a HF path)"),
    Option("draft", "draft model path for --specwatch-engine (enables EAGLE3)"),
    Option("tp", "tensor-parallel size for --specwatch-engine", _positive_int, 1),
    Option("device", "device for reference servers: auto|cpu|cuda", _device, "auto"),
    Option("server_url", "use an already running server at this URL instead of booting one",
           aliases=("--server-url",)),
    Option("server_log", "with --server-url: the running server's log file (stderr), for the checks that "
           "read engine and NCCL log lines"),
    Option("boot_timeout", "seconds a server may take to become ready", _positive_float, 900.0),
    Option("runs", "measured runs per workload (overrides the workload's own)", _positive_int),
    Option("warmup", "warmup runs per workload, excluded from samples", _non_negative_int, None),
    Option("tolerance", "regression tolerance as a fraction or percentage", _fraction, 0.05),
    Option("alpha", "significance level for regression verdicts", _probability, 0.01),
    Option("baseline_dir", "directory of stored baselines", str, DEFAULT_BASELINE_DIR),
    Option("require_baseline", "fail (not skip) a drift test whose stored baseline is missing: a perf gate "
           "that silently did not compare is worse than one that fails (on in the CI templates)", _bool, False, True),
    Option("project", "the project folder that relative baseline, report and history paths start from "
           "(default: the folder of the pytest ini file, else the nearest folder above the working directory "
           "that has one; never pytest's rootdir guess)"),
    Option("update_baselines", "write baselines from this run's measurements", _bool, False, True,
           ("--update-baselines",)),
    Option("baseline_sessions", "with --update-baselines: keep only the last N recording sessions, this one "
           "included (default: every session; a second --update-baselines adds one)", _positive_int, None),
    Option("replace_baselines", "with --update-baselines: replace each baseline with this run's session, dropping "
           "its earlier sessions (said in one line)", _bool, False, True),
    Option("record_failed", "with --update-baselines: record even when a test of this run failed (by default a run "
           "with a failed test records no baseline, said in one line)", _bool, False, True),
    Option("results", "write this run's results file (JSON) here"),
    Option("reference", "compare against this results file instead of stored baselines"),
    Option("history", "history to append results to: a SQLite file, or postgresql://user@host/db for one "
           "history shared by many hosts", str, DEFAULT_HISTORY),
    Option("report_dir", "directory for reports, plots and server logs", str, "reports"),
    Option("machine_class", "override the detected machine class used for baselines"),
    Option("commit", "commit of the server under test (default: git HEAD of the working directory)"),
    Option("yardstick", "time the machine yardstick (GEMV, tiny-kernel and round-trip graphs, ~5 s) before the "
           "first server boot and record it with the results and baseline sessions: auto (GPU machines), on (CPU "
           "too), off", _yardstick, "auto"),
    Option("prefix_hit_allowance", "prefix-reuse gate: how far (a fraction: 0.10 = 10 points, or 10%) the speculative "
           "server's cache hit rate of turns >= 2 may fall below the plain server's", _fraction, 0.10),
    Option("prefix_ttft_allowance", "prefix-reuse gate: how far the speculative server's TTFT p50 of turns >= 2 may "
           "rise above the plain server's (1.0 = up to twice it)", _positive_float, 1.0),
    Option("prefix_workload", "prefix-reuse gate: the multi-turn workload, as sessions=N,turns=N,concurrency=N,"
           "first_tokens=N,user_tokens=N,output_tokens=N,seed=N (any subset; default: 32 sessions x 4 turns, 8 in "
           "flight, 512 + 64 output + 64 user tokens)"),
    Option("acceptance_soak", "acceptance soak: repeat the cache-life check's greedy set N times, each after half the "
           "KV pool's worth of unrelated prompts, and fail on a change point where its accept length falls (unset: the "
           "soak test skips)", _positive_int, None),
    Option("context_lengths", "context-length table: the input lengths (tokens) measured on the plain and speculative "
           "servers, comma-separated (default 128,1024,2048,4096; each cut to the server's input limit)", _lengths),
    Option("context_output_tokens", "context-length table: output tokens of each request", _positive_int, 128),
    Option("context_gate_until", "context-length gate: speculation must keep paying (speedup and accept length) at "
           "every measured input up to this many tokens (unset: the table is reported, not gated)", _positive_int),
    Option("context_min_speedup", "context-length gate: the decode speedup over plain decoding each gated length "
           "needs", _positive_float, 1.0),
    Option("context_accept_drop", "context-length gate: how far (a fraction, or a percentage) a gated length's "
           "accept length may fall below the shortest input's", _fraction, 0.25),
)


#: every option's default: the one place defaults are written (Config and the CLI read them here)
DEFAULTS: dict[str, Any] = {opt.name: opt.default for opt in OPTIONS}


@dataclass(frozen=True)
class Config:
    """The resolved, frozen configuration of one run (defaults: :data:`DEFAULTS`, from :data:`OPTIONS`)."""

    profiles: str | None = DEFAULTS["profiles"]
    engine: str | None = DEFAULTS["engine"]
    model: str | None = DEFAULTS["model"]
    draft: str | None = DEFAULTS["draft"]
    tp: int = DEFAULTS["tp"]
    device: str = DEFAULTS["device"]
    server_url: str | None = DEFAULTS["server_url"]
    server_log: str | None = DEFAULTS["server_log"]
    boot_timeout: float = DEFAULTS["boot_timeout"]
    runs: int | None = DEFAULTS["runs"]
    warmup: int | None = DEFAULTS["warmup"]
    tolerance: float = DEFAULTS["tolerance"]
    alpha: float = DEFAULTS["alpha"]
    baseline_dir: str = DEFAULTS["baseline_dir"]
    require_baseline: bool = DEFAULTS["require_baseline"]
    project: str | None = DEFAULTS["project"]
    update_baselines: bool = DEFAULTS["update_baselines"]
    baseline_sessions: int | None = DEFAULTS["baseline_sessions"]
    replace_baselines: bool = DEFAULTS["replace_baselines"]
    record_failed: bool = DEFAULTS["record_failed"]
    results: str | None = DEFAULTS["results"]
    reference: str | None = DEFAULTS["reference"]
    history: str = DEFAULTS["history"]
    report_dir: str = DEFAULTS["report_dir"]
    machine_class: str | None = DEFAULTS["machine_class"]
    commit: str | None = DEFAULTS["commit"]
    yardstick: str = DEFAULTS["yardstick"]
    prefix_hit_allowance: float = DEFAULTS["prefix_hit_allowance"]
    prefix_ttft_allowance: float = DEFAULTS["prefix_ttft_allowance"]
    prefix_workload: str | None = DEFAULTS["prefix_workload"]
    acceptance_soak: int | None = DEFAULTS["acceptance_soak"]
    context_lengths: tuple[int, ...] | None = DEFAULTS["context_lengths"]
    context_output_tokens: int = DEFAULTS["context_output_tokens"]
    context_gate_until: int | None = DEFAULTS["context_gate_until"]
    context_min_speedup: float = DEFAULTS["context_min_speedup"]
    context_accept_drop: float = DEFAULTS["context_accept_drop"]
    rootdir: Path = field(default_factory=Path.cwd)

    @overload
    def path(self, value: str) -> Path: ...
    @overload
    def path(self, value: None) -> None: ...
    @overload
    def path(self, value: str | None) -> Path | None: ...

    def path(self, value: str | None) -> Path | None:
        """Resolve a configured path relative to the run's root directory."""
        if value is None:
            return None
        p = Path(value).expanduser()
        return p if p.is_absolute() else self.rootdir / p


def resolve(
    flags: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
    ini: Mapping[str, Any] | None = None,
    rootdir: Path | None = None,
) -> Config:
    """Resolve every option by precedence and validate it; bad values raise UsageError naming the source."""
    environ = os.environ if environ is None else environ
    ini = ini or {}
    values: dict[str, Any] = {}
    for opt in OPTIONS:
        raw, source = flags.get(opt.name), opt.flag
        if raw is None or (opt.is_flag and raw is False):
            raw, source = environ.get(opt.env), opt.env
        if raw in (None, ""):
            raw, source = ini.get(opt.ini), f"ini key {opt.ini}"
        if raw in (None, "", []):
            continue
        if isinstance(raw, str):
            try:
                raw = opt.parse(raw)
            except (ValueError, TypeError) as exc:
                raise UsageError(f"{source}={raw!r}: {exc}") from None
        values[opt.name] = raw
    known = {f.name for f in fields(Config)}
    return Config(rootdir=rootdir or Path.cwd(), **{k: v for k, v in values.items() if k in known})
