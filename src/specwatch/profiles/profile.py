"""Declarative server profiles (TOML) and the command lines they build.

One profile describes a server once (engine, model, draft, tensor parallelism, speculative
settings, environment profile) and builds both the SGLang 0.5.23 command line and the reference
server's. Environment profiles are named sets of variables applied through the launch environment
(default) or through a generated ``sitecustomize.py`` on PYTHONPATH, the case study's mechanism.

Profile files are validated against one table-driven schema (``SERVER_FIELDS``, ``SPECULATIVE_FIELDS``,
``GATE_FIELDS``, ``WORKLOAD_FIELDS``, ``FIXTURE_FIELDS``, ``TOP_FIELDS``: field name -> rule and meaning)
before anything boots, and every problem is ONE :class:`~specwatch.errors.UsageError` line naming the
file, the field and what was expected. The schema is hand-written rather than built on pydantic or
another validation library on purpose: specwatch is a pytest plugin installed next to users' serving
stacks, so it should not add a framework and its version pins to their environment, and those
libraries' multi-line, nested error reports are not the one line that the CLI (exit 2) and the pytest
plugin (usage error) print.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from specwatch.errors import UsageError
from specwatch.profiles.schema import (
    BOOLEAN,
    NON_EMPTY,
    STRING,
    Field,
    Invalid,
    Rule,
    array_of,
    check_table,
    choice,
    integer,
    number,
    one_line,
    path_key,
    show,
    text,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

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
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
#: What an environment variable's name may be (POSIX portable names).
ENV_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ROLE_NAMES = ("baseline", "spec", "tuned", "untuned")


NAME = text(NAME_PATTERN, "a name of letters, digits, '.', '_' and '-' starting with a letter or digit, at most "
                          "100 characters (it becomes folder and file names)")


ENV_VALUE = text(expected='a string (quote numbers: NCCL_NTHREADS = "512")', allow_empty=True)


def _env_table(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise Invalid(ENV_TABLE.expected, value)
    out: dict[str, str] = {}
    for name, val in value.items():
        if not ENV_NAME_PATTERN.fullmatch(name):
            raise Invalid("", at=f".{path_key(name)}",
                           message=f"{show(name)} is not a valid environment variable name "
                                   "(letters, digits and '_', not starting with a digit)")
        try:
            out[name] = ENV_VALUE.convert(val)
        except Invalid as exc:
            raise exc.under(f".{name}") from None
    return out


ENV_TABLE = Rule('a table of VARIABLE = "value" strings, e.g. { NCCL_P2P_DISABLE = "1" }', _env_table)


SPECULATIVE_FIELDS: dict[str, Field] = {
    "algorithm": Field(choice(*ALGORITHMS, fold_case=True), "SGLang's --speculative-algorithm (any case)"),
    "draft_model": Field(NON_EMPTY, "the draft model's path (--speculative-draft-model-path)"),
    "num_steps": Field(integer(1), "draft steps per cycle"),
    "eagle_topk": Field(integer(1), "branches per draft step (1: a chain)"),
    "num_draft_tokens": Field(integer(2), "tokens verified per cycle; with eagle_topk = 1, num_steps + 1"),
}
_SPECULATIVE_EXPECTED = "a table of speculative settings ({ algorithm = \"EAGLE3\", num_steps = 2 }) or false for none"


def _speculative(value: Any) -> Speculative | None:
    if value is False:  # e.g. a plain-decoding server where [defaults] sets speculative
        return None
    spec = Speculative(**check_table(SPECULATIVE_FIELDS, value, _SPECULATIVE_EXPECTED))
    if spec.eagle_topk == 1 and spec.num_draft_tokens not in (None, spec.num_steps + 1):
        raise Invalid("", at=".num_draft_tokens",
                       message=f"with eagle_topk = 1 it must be num_steps + 1 = {spec.num_steps + 1}, "
                               f"got {spec.num_draft_tokens}")
    return spec


SERVER_FIELDS: dict[str, Field] = {
    "name": Field(NAME, "the server's name, unique in the file (case-insensitively: it names files)"),
    "engine": Field(choice(*ENGINES), "which server to boot"),
    "model": Field(NON_EMPTY, "model path (SGLang) or reference model name (ref-tiny, ref-small, ref-large)"),
    "tp": Field(integer(1), "tensor-parallel size"),
    "device": Field(choice("auto", "cpu", "cuda"), "where the server runs"),
    "speculative": Field(Rule(_SPECULATIVE_EXPECTED, _speculative), "speculative decoding; absent or false: none"),
    "env": Field(NAME, "environment profile: tuned, untuned or one from [env_profiles]"),
    "env_apply": Field(choice(*ENV_APPLY), "how the environment profile is applied"),
    "extra_args": Field(array_of(STRING, 'an array of strings, e.g. ["--trust-remote-code"]', hint_for_string=True),
        "arguments appended to the command line, one element per argument (a string is an error, not split)"),
    "extra_env": Field(ENV_TABLE, "variables added to the server's environment"),
    "pythonpath": Field(array_of(NON_EMPTY, "an array of non-empty strings (directories)"),
                        "directories prepended to PYTHONPATH"),
    "launcher": Field(choice(*SGLANG_LAUNCHERS), "how SGLang is started"),
    "python": Field(NON_EMPTY, "the Python interpreter for the reference server and python -m launchers"),
    "max_running_requests": Field(integer(1), "--max-running-requests"),
    "cuda_graph_max_bs": Field(integer(1), "--cuda-graph-max-bs-decode"),
    "decode_log_interval": Field(integer(1), "--decode-log-interval (decode steps between log lines)"),
    "nccl_debug": Field(BOOLEAN, "add NCCL_DEBUG=INFO so that NCCL reports what it applied"),
    "floor_tok_s": Field(number(0, low_open=True), "absolute floor of the median output tok/s"),
    "tolerance": Field(number(0, 1, low_open=True, high_open=True, meaning="a fraction: 0.05 is 5%"),
                       "drift tolerance against the stored baseline (default: --specwatch-tolerance)"),
}


def _no_name(value: Any) -> Any:
    raise Invalid("", value, message="a name belongs to one [[server]], not to [defaults]")


#: [defaults] holds any server field but the name, which belongs to one server.
DEFAULT_FIELDS: dict[str, Field] = {**SERVER_FIELDS, "name": Field(Rule("no name", _no_name), "not allowed")}

GATE_FIELDS: dict[str, Field] = {
    "spec_margin": Field(number(-1, low_open=True, meaning="speculative ≥ baseline × (1 + margin)"),
                         "how much faster speculation must be; negative allows slower"),
    "tuned_tolerance": Field(number(0, 1, low_open=True, high_open=True, meaning="a fraction: 0.02 is 2%"),
                             "tuned ≥ untuned × (1 - tolerance)"),
    "expect_tuning_effect": Field(BOOLEAN, "the tuning must show a significant gain"),
    "tuning_min_effect": Field(number(0, 1, low_open=True, high_open=True, meaning="a fraction: 0.05 is 5%"),
                               "smallest tuned/untuned gain that counts as an effect"),
    "alternate_rounds": Field(integer(1), "fresh-boot rounds A B A B ... of a relative gate"),
    "interleave_runs": Field(BOOLEAN, "both servers of a gate up at once, runs interleaved"),
}

#: [workload]: overrides for every workload; the bounds are those Workload itself enforces.
WORKLOAD_FIELDS: dict[str, Field] = {
    "runs": Field(integer(1), "measured runs"),
    "warmup": Field(integer(0), "warmup runs, excluded from samples"),
    "warmup_s": Field(number(0, 600, meaning="seconds"), "keep warming up until this much load has passed"),
    "min_duration_s": Field(number(0, 3600, meaning="seconds"), "keep measuring until this much time has passed"),
    "max_new_tokens": Field(integer(1), "tokens per request"),
}

FIXTURE_FIELDS: dict[str, Field] = {
    role: Field(text(expected="a server name (a string)"), f"the server the {role} fixture means")
    for role in _ROLE_NAMES
}


def _env_profiles(value: Any) -> dict[str, dict[str, str]]:
    if not isinstance(value, dict):
        raise Invalid(ENV_PROFILES.expected, value)
    out = {}
    for name, table in value.items():
        if name in BUILTIN_ENV_PROFILES:
            raise Invalid("", at=f".{name}", message=f"{name!r} is built in ({', '.join(BUILTIN_ENV_PROFILES)}: "
                                                      "the case study's tuning and none); choose another name")
        if not NAME_PATTERN.fullmatch(name):
            raise Invalid("", at=f".{path_key(name)}", message=f"expected {NAME.expected}, got {show(name)}")
        try:
            out[name] = ENV_TABLE.convert(table)
        except Invalid as exc:
            raise exc.under(f".{name}") from None
    return out


ENV_PROFILES = Rule('tables of environment profiles: [env_profiles.NAME] with VARIABLE = "value"', _env_profiles)


def _servers(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise Invalid('an array of tables: [[server]] entries with name = "..."', value)
    if not value:
        raise Invalid("", message="no [[server]] entries")
    return value


def _version(value: Any) -> int:
    if type(value) is not int or value != PROFILE_FORMAT_VERSION:
        raise Invalid(f"{PROFILE_FORMAT_VERSION} (the profile format this specwatch reads)", value)
    return value


TOP_FIELDS: dict[str, Field] = {
    "version": Field(Rule(str(PROFILE_FORMAT_VERSION), _version), "profile format version"),
    "defaults": Field(Rule("a table of server fields applied to every [[server]]",
                           lambda v: check_table(DEFAULT_FIELDS, v, "a table of server fields applied to every "
                                                                    "[[server]]")), "server fields for every server"),
    "env_profiles": Field(ENV_PROFILES, "named environment profiles"),
    "server": Field(Rule("[[server]] tables", _servers), "the servers (checked one by one against SERVER_FIELDS)"),
    "fixtures": Field(Rule("a table of fixture = \"server name\"",
                           lambda v: check_table(FIXTURE_FIELDS, v, 'a table of fixture = "server name"')),
                      "which server each named fixture means"),
    "gates": Field(Rule("a table of gate settings", lambda v: check_table(GATE_FIELDS, v, "a table of gate settings")),
                   "relative gates"),
    "workload": Field(Rule("a table of workload settings",
                           lambda v: check_table(WORKLOAD_FIELDS, v, "a table of workload settings")),
                      "overrides for every workload"),
}


def _error(where: str, exc: Invalid) -> UsageError:
    """The one-line UsageError for ``exc`` found in the field ``where`` ("FILE: server[0] (a)")."""
    return UsageError(one_line(f"{where}{exc.at}: {exc.message}"))


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


def _parse_server(source: str, index: int, raw: Mapping[str, Any], defaults: Mapping[str, Any],
                  env_profiles: Mapping[str, Mapping[str, str]]) -> ServerProfile:
    """One [[server]] table (``raw``) over the already checked ``defaults``."""
    where = f"{source}: server[{index}]"
    if "name" not in raw:
        raise UsageError(f"{where}.name: missing; every [[server]] needs a name")
    try:
        name = NAME.convert(raw["name"])
    except Invalid as exc:
        raise _error(f"{where}.name", exc) from None
    here = f"{where} ({name})"
    try:
        values = {**defaults, **check_table(SERVER_FIELDS, raw, "a table of server fields")}
    except Invalid as exc:
        raise _error(here, exc) from None
    env = values.get("env", "untuned")
    if env not in env_profiles:
        origin = here if "env" in raw else f"{source}: defaults"
        raise UsageError(f"{origin}.env: unknown environment profile {env!r}; known: {', '.join(sorted(env_profiles))}")
    prof = ServerProfile(**values, env_vars=dict(env_profiles[env]))
    if prof.speculative and prof.engine == "reference" and prof.speculative.algorithm not in REFERENCE_ALGORITHMS:
        raise UsageError(f"{here}.speculative.algorithm: {prof.speculative.algorithm} is an SGLang algorithm the "
                         f"reference server does not implement (it has {', '.join(REFERENCE_ALGORITHMS)}); "
                         "use engine = \"sglang\"")
    try:
        prof.gpus_needed  # noqa: B018 - validates --dp-size / --pp-size in extra_args
    except UsageError as exc:
        raise UsageError(f"{here}.{exc}") from None
    return prof


def parse_profiles(data: Mapping[str, Any], source: str = "<string>") -> ProfileSet:
    """Validate a parsed TOML document into a ProfileSet; every error is one line naming the file and field."""
    source = source if source.isprintable() else show(source)
    try:
        top = check_table(TOP_FIELDS, data, "a TOML document of profile tables")
    except Invalid as exc:  # exc.at is ".defaults.tp" or "": name the field after the file
        raise UsageError(one_line(f"{source}: {exc.at[1:] + ': ' if exc.at else ''}{exc.message}")) from None
    if "server" not in top:
        raise UsageError(f"{source}: no [[server]] entries")
    env_profiles: dict[str, dict[str, str]] = {k: dict(v) for k, v in BUILTIN_ENV_PROFILES.items()}
    env_profiles.update(top.get("env_profiles", {}))
    servers: dict[str, ServerProfile] = {}
    folded: dict[str, int] = {}
    for i, raw in enumerate(top["server"]):
        prof = _parse_server(source, i, raw, top.get("defaults", {}), env_profiles)
        if prof.name.lower() in folded:
            first = folded[prof.name.lower()]
            raise UsageError(f"{source}: server[{i}].name: duplicate name {prof.name!r} (server[{first}] is "
                             f"{list(servers)[first]!r}; names become file names, which may ignore case)")
        folded[prof.name.lower()] = i
        servers[prof.name] = prof
    roles = _default_roles(servers)
    for role, name in top.get("fixtures", {}).items():
        if name not in servers:
            raise UsageError(f"{source}: fixtures.{role}: no server named {show(name)}; "
                             f"known: {', '.join(sorted(servers))}")
        roles[role] = name
    gates = Gates(**top.get("gates", {}))
    if gates.interleave_runs:
        _check_interleaved_pairs_fit(source, servers, roles)
    return ProfileSet(servers=servers, roles=roles, gates=gates, source=source, workload=top.get("workload", {}))


#: SGLang's flag for the share of each GPU's memory that one server takes for weights and KV cache.
MEM_FRACTION_FLAG = "--mem-fraction-static"
#: What two SGLang servers kept up together may take between them (CUDA graphs and activations
#: live outside the static pool).
MAX_SHARED_MEM_FRACTION = 0.9


def _mem_fraction(where: str, prof: ServerProfile) -> float | None:
    """The ``--mem-fraction-static`` value in a profile's extra_args, if set."""
    args = prof.extra_args
    for i, arg in enumerate(args):
        if arg == MEM_FRACTION_FLAG and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(MEM_FRACTION_FLAG + "="):
            value = arg.split("=", 1)[1]
        else:
            continue
        try:
            fraction = float(value)
        except ValueError:
            fraction = math.nan
        if not 0 < fraction < 1:
            raise UsageError(f"{where}: {prof.name}: {MEM_FRACTION_FLAG} must be a number in (0, 1), got {value!r}")
        return fraction
    return None


def _check_interleaved_pairs_fit(source: str, servers: Mapping[str, ServerProfile], roles: Mapping[str, str]) -> None:
    """``interleave_runs`` keeps both servers of a relative gate up at once on the same GPUs. SGLang
    takes most of each GPU's memory for one server unless told otherwise, so the second boot would
    fail out of memory after minutes of loading: say so when the profiles are read."""
    for first, second in (("baseline", "spec"), ("untuned", "tuned")):
        pair = [servers.get(roles.get(first, "")), servers.get(roles.get(second, ""))]
        if None in pair or pair[0] is pair[1]:
            continue
        sglang = [p for p in pair if p is not None and p.engine == "sglang" and p.device != "cpu"]
        if not sglang:
            continue
        names = " and ".join(p.name for p in pair if p is not None)
        where = f"{source}: gates.interleave_runs"
        fractions = {p.name: _mem_fraction(where, p) for p in sglang}
        unset = [name for name, f in fractions.items() if f is None]
        if unset:
            raise UsageError(
                f"{where} keeps {names} up at once on the same GPUs, but {', '.join(unset)} leaves "
                f"{MEM_FRACTION_FLAG} at SGLang's default, which gives one server most of each GPU's memory; "
                f"set it in extra_args so that the pair takes at most {MAX_SHARED_MEM_FRACTION} together "
                f"(e.g. 0.42 each), or turn interleave_runs off")
        total = sum(f for f in fractions.values() if f is not None)
        if total > MAX_SHARED_MEM_FRACTION:
            raise UsageError(
                f"{where} keeps {names} up at once on the same GPUs, but their {MEM_FRACTION_FLAG} values "
                f"add up to {total:g}, more than {MAX_SHARED_MEM_FRACTION}: the second boot would run out of "
                f"memory; lower them (e.g. 0.42 each) or turn interleave_runs off")


def _default_roles(servers: Mapping[str, ServerProfile]) -> dict[str, str]:
    """Pick fixtures by role and environment when the file does not name them."""

    def first(pred) -> str | None:
        return next((p.name for p in servers.values() if pred(p)), None)

    roles = {
        "spec": first(lambda p: p.speculative and p.env == "tuned") or first(lambda p: p.speculative),
        "baseline": first(lambda p: not p.speculative and p.env == "tuned") or first(lambda p: not p.speculative),
    }
    spec = servers.get(roles["spec"] or "")
    if spec:
        roles["tuned"] = first(lambda p: p.env == "tuned" and p.speculative == spec.speculative)
        roles["untuned"] = first(lambda p: p.env == "untuned" and p.speculative == spec.speculative)
    return {k: v for k, v in roles.items() if v}


def load_profiles(path: str | Path | None) -> ProfileSet:
    """Load a profile file, or the built-in reference-server set when ``path`` is None.

    Every problem with the file (missing, a directory, unreadable, not UTF-8, not TOML, a bad field)
    is one UsageError line naming the file, before anything boots.
    """
    if path is None:
        text = resources.files("specwatch").joinpath("data/default_profiles.toml").read_text()
        return parse_profiles(tomllib.loads(text), "<built-in default_profiles.toml>")
    p = Path(path)
    name = str(p) if str(p).isprintable() else show(str(p))
    try:
        if p.is_dir():
            raise UsageError(f"{name}: is a directory, not a profile file")
        if p.exists() and not p.is_file():
            raise UsageError(f"{name}: not a regular file")
        raw = p.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"profile file {name} does not exist") from None
    except OSError as exc:
        raise UsageError(f"{name}: cannot read profile file: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")  # TOML is UTF-8; a byte-order mark from an editor is harmless
    except UnicodeDecodeError as exc:
        raise UsageError(f"{name}: not UTF-8 text (byte {exc.start} is 0x{raw[exc.start]:02x}); "
                         "TOML files must be UTF-8") from None
    try:
        data = tomllib.loads(text)
    except RecursionError:
        raise UsageError(f"{name}: not valid TOML: nested too deeply") from None
    except ValueError as exc:  # TOMLDecodeError, and integers too long to convert
        raise UsageError(one_line(f"{name}: not valid TOML: {exc}")) from None
    return _anchor_pythonpath(parse_profiles(data, name), p.resolve().parent)


def _anchor_pythonpath(profiles: ProfileSet, folder: Path) -> ProfileSet:
    """Relative ``pythonpath`` entries mean folders beside the profile file, not the server's cwd."""
    servers = {name: replace(prof, pythonpath=tuple(str(folder / e) if not Path(e).is_absolute() else e
                                                     for e in prof.pythonpath))
               for name, prof in profiles.servers.items()}
    return replace(profiles, servers=servers)


def single_server_profiles(engine: str, model: str, draft: str | None, tp: int, device: str) -> ProfileSet:
    """A profile set built from command-line flags: a baseline and, with a draft, an EAGLE3 server."""
    if engine == "reference" and not model:
        model = "ref-tiny"
    if not model:
        raise UsageError("--specwatch-model is required with --specwatch-engine sglang")
    base = ServerProfile(name="baseline-tuned", engine=engine, model=model, tp=tp, device=device,
                         env="tuned", env_vars=dict(TUNED_NCCL))
    servers = {base.name: base}
    if draft or engine == "reference":
        spec = Speculative(algorithm="EAGLE3", draft_model=draft if engine == "sglang" else None)
        for env in ("tuned", "untuned"):
            p = replace(base, name=f"eagle3-{env}", speculative=spec, env=env, env_vars=dict(BUILTIN_ENV_PROFILES[env]))
            servers[p.name] = p
    return ProfileSet(servers=servers, roles=_default_roles(servers), source="command line")


def with_device(profiles: ProfileSet, device: str) -> ProfileSet:
    """Apply a run-wide device choice to reference servers whose profile says ``auto``."""
    if device == "auto":
        return profiles
    servers = {k: replace(v, device=device) if v.engine == "reference" and v.device == "auto" else v
               for k, v in profiles.servers.items()}
    return replace(profiles, servers=servers)
