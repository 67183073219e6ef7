"""Declarative server profiles (TOML) and the command lines they build.

One profile describes a server once (engine, model, draft, tensor parallelism, speculative
settings, environment profile) and builds both the SGLang 0.5.23 command line and the reference
server's. Environment profiles are named sets of variables applied through the launch environment
(default) or through a generated ``sitecustomize.py`` on PYTHONPATH, the case study's mechanism.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from specwatch.errors import UsageError

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
ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")


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
        """GPUs the server occupies (0 on CPU)."""
        return 0 if self.device == "cpu" else self.tp

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


_SERVER_KEYS = {
    "name", "engine", "model", "tp", "device", "speculative", "env", "env_apply", "extra_args", "extra_env",
    "pythonpath", "launcher", "python", "max_running_requests", "cuda_graph_max_bs", "decode_log_interval",
    "nccl_debug", "floor_tok_s", "tolerance",
}
_SPEC_KEYS = {"algorithm", "draft_model", "num_steps", "eagle_topk", "num_draft_tokens"}
_ROLE_NAMES = ("baseline", "spec", "tuned", "untuned")


def _expect(where: str, value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise UsageError(f"{where}: must be {what}, got {value!r}")
    return value


def _parse_speculative(where: str, raw: Mapping[str, Any]) -> Speculative:
    unknown = set(raw) - _SPEC_KEYS
    if unknown:
        known = ", ".join(sorted(_SPEC_KEYS))
        raise UsageError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; known: {known}")
    algo = str(raw.get("algorithm", "EAGLE3")).upper()
    if algo not in ALGORITHMS:
        raise UsageError(f"{where}.algorithm: {algo!r} is not one of {', '.join(ALGORITHMS)}")
    spec = Speculative(
        algorithm=algo,
        draft_model=raw.get("draft_model"),
        num_steps=_expect(f"{where}.num_steps", raw.get("num_steps", 2), int, "an integer ≥ 1"),
        eagle_topk=_expect(f"{where}.eagle_topk", raw.get("eagle_topk", 1), int, "an integer ≥ 1"),
        num_draft_tokens=raw.get("num_draft_tokens"),
    )
    if spec.num_steps < 1:
        raise UsageError(f"{where}.num_steps: must be ≥ 1, got {spec.num_steps}")
    if spec.eagle_topk == 1 and spec.num_draft_tokens not in (None, spec.num_steps + 1):
        raise UsageError(f"{where}.num_draft_tokens: with eagle_topk = 1 it must be num_steps + 1 = "
                         f"{spec.num_steps + 1}, got {spec.num_draft_tokens}")
    return spec


def _parse_server(where: str, raw: Mapping[str, Any], defaults: Mapping[str, Any],
                  env_profiles: Mapping[str, Mapping[str, str]]) -> ServerProfile:
    merged = {**defaults, **raw}
    unknown = set(merged) - _SERVER_KEYS
    if unknown:
        known = ", ".join(sorted(_SERVER_KEYS))
        raise UsageError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; known: {known}")
    name = _expect(f"{where}.name", merged.get("name"), str, "a string")
    where = f"{where} ({name})"
    engine = merged.get("engine", "reference")
    if engine not in ENGINES:
        raise UsageError(f"{where}.engine: {engine!r} is not one of {', '.join(ENGINES)}")
    env = merged.get("env", "untuned")
    if env not in env_profiles:
        raise UsageError(f"{where}.env: unknown environment profile {env!r}; known: {', '.join(sorted(env_profiles))}")
    env_apply = merged.get("env_apply", "launch")
    if env_apply not in ENV_APPLY:
        raise UsageError(f"{where}.env_apply: {env_apply!r} is not one of {', '.join(ENV_APPLY)}")
    launcher = merged.get("launcher", "sglang serve")
    if launcher not in SGLANG_LAUNCHERS:
        raise UsageError(f"{where}.launcher: {launcher!r} is not one of {', '.join(SGLANG_LAUNCHERS)}")
    device = merged.get("device", "auto")
    if device not in ("auto", "cpu", "cuda"):
        raise UsageError(f"{where}.device: {device!r} is not one of auto, cpu, cuda")
    tp = _expect(f"{where}.tp", merged.get("tp", 1), int, "a positive integer")
    if tp < 1:
        raise UsageError(f"{where}.tp: must be ≥ 1, got {tp}")
    spec_raw = merged.get("speculative")
    spec = _parse_speculative(f"{where}.speculative", spec_raw) if spec_raw else None
    extra_env = {str(k): str(v) for k, v in (merged.get("extra_env") or {}).items()}
    return ServerProfile(
        name=name, engine=engine, model=str(merged.get("model", "ref-tiny")), tp=tp, device=device,
        speculative=spec, env=env, env_vars=dict(env_profiles[env]), env_apply=env_apply,
        extra_args=tuple(str(a) for a in merged.get("extra_args", ())), extra_env=extra_env,
        pythonpath=tuple(str(p) for p in merged.get("pythonpath", ())), launcher=launcher,
        python=str(merged.get("python", sys.executable)),
        max_running_requests=merged.get("max_running_requests"),
        cuda_graph_max_bs=merged.get("cuda_graph_max_bs"),
        decode_log_interval=_expect(f"{where}.decode_log_interval", merged.get("decode_log_interval", 10), int,
                                    "a positive integer"),
        nccl_debug=bool(merged.get("nccl_debug", True)),
        floor_tok_s=merged.get("floor_tok_s"), tolerance=merged.get("tolerance"),
    )


def parse_profiles(data: Mapping[str, Any], source: str = "<string>") -> ProfileSet:
    """Validate a parsed TOML document into a ProfileSet; errors name the file and field."""
    version = data.get("version", PROFILE_FORMAT_VERSION)
    if version != PROFILE_FORMAT_VERSION:
        raise UsageError(f"{source}: version = {version!r} is not supported (expected {PROFILE_FORMAT_VERSION})")
    unknown = set(data) - {"version", "defaults", "env_profiles", "server", "fixtures", "gates", "workload"}
    if unknown:
        raise UsageError(f"{source}: unknown top-level key(s) {', '.join(sorted(unknown))}")
    env_profiles: dict[str, dict[str, str]] = {k: dict(v) for k, v in BUILTIN_ENV_PROFILES.items()}
    for name, values in (data.get("env_profiles") or {}).items():
        _expect(f"{source}: env_profiles.{name}", values, dict, "a table of VARIABLE = value")
        env_profiles[name] = {str(k): str(v) for k, v in values.items()}
    defaults = data.get("defaults") or {}
    raw_servers = data.get("server") or []
    if not raw_servers:
        raise UsageError(f"{source}: no [[server]] entries")
    servers: dict[str, ServerProfile] = {}
    for i, raw in enumerate(raw_servers):
        prof = _parse_server(f"{source}: server[{i}]", raw, defaults, env_profiles)
        if prof.name in servers:
            raise UsageError(f"{source}: server[{i}].name: duplicate name {prof.name!r}")
        servers[prof.name] = prof
    roles = _default_roles(servers)
    for role, name in (data.get("fixtures") or {}).items():
        if role not in _ROLE_NAMES:
            raise UsageError(f"{source}: fixtures.{role}: unknown fixture; known: {', '.join(_ROLE_NAMES)}")
        if name not in servers:
            raise UsageError(f"{source}: fixtures.{role}: no server named {name!r}")
        roles[role] = name
    gates_raw = dict(data.get("gates") or {})
    unknown = set(gates_raw) - {"spec_margin", "tuned_tolerance", "expect_tuning_effect", "alternate_rounds",
                             "tuning_min_effect", "interleave_runs"}
    if unknown:
        raise UsageError(f"{source}: gates: unknown key(s) {', '.join(sorted(unknown))}")
    rounds = gates_raw.get("alternate_rounds", 1)
    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1:
        raise UsageError(f"{source}: gates.alternate_rounds: must be an integer ≥ 1, got {rounds!r}")
    gates = Gates(**gates_raw)
    if gates.interleave_runs:
        _check_interleaved_pairs_fit(source, servers, roles)
    return ProfileSet(servers=servers, roles=roles, gates=gates, source=source,
                      workload=_parse_workload(source, data.get("workload") or {}))


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
            return float(value)
        except ValueError:
            raise UsageError(f"{where}: {prof.name}: {MEM_FRACTION_FLAG} must be a number, got {value!r}") from None
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


def _parse_workload(source: str, raw: Any) -> dict[str, Any]:
    """``[workload]``: runs, warmup, warmup_s, min_duration_s, max_new_tokens for every workload."""
    from specwatch.workload import PROFILE_OVERRIDABLE

    _expect(f"{source}: workload", raw, dict, "a table")
    unknown = set(raw) - set(PROFILE_OVERRIDABLE)
    if unknown:
        raise UsageError(f"{source}: workload: unknown key(s) {', '.join(sorted(unknown))}; "
                         f"known: {', '.join(PROFILE_OVERRIDABLE)}")
    out: dict[str, Any] = {}
    for key, value in raw.items():
        number = float if key.endswith("_s") else int
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
        if not ok or (number is int and not isinstance(value, int)):
            raise UsageError(f"{source}: workload.{key}: must be a non-negative {number.__name__}, got {value!r}")
        out[key] = number(value)
    return out


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
    """Load a profile file, or the built-in reference-server set when ``path`` is None."""
    if path is None:
        text = resources.files("specwatch").joinpath("data/default_profiles.toml").read_text()
        return parse_profiles(tomllib.loads(text), "<built-in default_profiles.toml>")
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"profile file {p} does not exist")
    try:
        data = tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{p}: not valid TOML: {exc}") from None
    return parse_profiles(data, str(p))


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
