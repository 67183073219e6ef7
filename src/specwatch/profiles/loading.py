"""Loading server profiles (TOML): validation against one schema, defaults, roles and checks.

One profile describes a server once (engine, model, draft, tensor parallelism, speculative
settings, environment profile); its engine (:mod:`specwatch.engines`) builds its command line.
Environment profiles are named sets of variables applied through the launch environment
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
import sys
from collections.abc import Mapping
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

from specwatch.engines.registry import ENGINES, NATIVE, engine_for
from specwatch.errors import UsageError
from specwatch.profiles.schema import (
    Invalid,
    check_table,
    one_line,
    show,
)
from specwatch.userfile import read_user_file

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from specwatch.profiles.profile import (
    BUILTIN_ENV_PROFILES,
    TUNED_NCCL,
    Gates,
    ProfileSet,
    ServerProfile,
    Speculative,
    unbootable,
)
from specwatch.profiles.tables import NAME, SERVER_FIELDS, TOP_FIELDS


def _error(where: str, exc: Invalid) -> UsageError:
    """The one-line UsageError for ``exc`` found in the field ``where`` ("FILE: server[0] (a)")."""
    return UsageError(one_line(f"{where}{exc.at}: {exc.message}"))


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
    engine = engine_for(values.get("engine", ServerProfile.engine))
    if "model" not in values and engine.default_model is not None:
        values["model"] = engine.default_model  # openai: "", the served model name is asked of GET /v1/models
    prof = ServerProfile(**values, env_vars=dict(env_profiles[env]))
    _check_api(here, prof)
    algorithms = engine.algorithms
    if prof.speculative and algorithms is not None and prof.speculative.algorithm not in algorithms:
        raise UsageError(f"{here}.speculative.algorithm: {prof.speculative.algorithm} is an {NATIVE.title} algorithm "
                         f"{engine.title} does not implement (it has {', '.join(algorithms)}); "
                         f"use engine = \"{NATIVE.name}\"")
    try:
        prof.gpus_needed  # noqa: B018 - validates --dp-size / --pp-size in extra_args
    except UsageError as exc:
        raise UsageError(f"{here}.{exc}") from None
    return prof


def _check_api(here: str, prof: ServerProfile) -> None:
    """The load API and URL must suit the engine (one line each)."""
    engine = prof.engine_kind
    if engine.capabilities.boots and prof.url is not None:
        reached = " or ".join(f'"{n}"' for n, e in ENGINES.items() if not e.capabilities.boots)
        raise UsageError(f"{here}.url: only for engine = {reached}; specwatch boots a {prof.engine} server on a "
                         "port of its own (a running one: --specwatch-server-url URL)")
    if not engine.capabilities.native_api and prof.api == "generate":
        raise UsageError(f"{here}.api: an OpenAI-compatible server has no SGLang /generate; use \"completions\" "
                         "or \"chat\"")
    if engine.load_apis == ("generate",) and prof.load_api != "generate":
        others = " or ".join(f'"{n}"' for n, e in ENGINES.items() if prof.load_api in e.load_apis)
        raise UsageError(f"{here}.api: {engine.title} streams only /generate (its /v1/completions does not "
                         f"stream); use \"generate\", or engine = {others}")


def check_reachable(profiles: ProfileSet, server_url: str | None) -> None:
    """Every ``openai`` server needs a URL: its profile's ``url`` or ``--specwatch-server-url``
    (UsageError, one line, before anything boots)."""
    if server_url:
        return
    for prof in profiles.servers.values():
        if not prof.engine_kind.capabilities.boots and not prof.url:
            raise UsageError(f"{profiles.source}: {unbootable(prof)}")


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
MEM_FRACTION_FLAG = NATIVE.mem_fraction_flag or ""
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
        sharing = [p for p in pair if p is not None and p.engine_kind.mem_fraction_flag and p.device != "cpu"]
        if not sharing:
            continue
        names = " and ".join(p.name for p in pair if p is not None)
        where = f"{source}: gates.interleave_runs"
        fractions = {p.name: _mem_fraction(where, p) for p in sharing}
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
    _, text = read_user_file(p, "profile file")
    try:
        data = tomllib.loads(text)
    except RecursionError:
        raise UsageError(f"{name}: not valid TOML: nested too deeply") from None
    except ValueError as exc:  # TOMLDecodeError, and integers too long to convert
        raise UsageError(one_line(f"{name}: not valid TOML: {exc}")) from None
    return _anchor_pythonpath(parse_profiles(data, name), p.resolve().parent)


def _anchor_pythonpath(profiles: ProfileSet, folder: Path) -> ProfileSet:
    """Relative ``pythonpath`` entries mean folders beside the profile file, not the server's cwd; a
    relative ``[workload] dataset`` means a file beside it too."""
    servers = {name: replace(prof, pythonpath=tuple(str(folder / e) if not Path(e).is_absolute() else e
                                                     for e in prof.pythonpath))
               for name, prof in profiles.servers.items()}
    workload = dict(profiles.workload)
    dataset = workload.get("dataset")
    if dataset and dataset != "builtin" and not Path(dataset).is_absolute():  # so is [workload] dataset
        workload["dataset"] = str(folder / dataset)
    return replace(profiles, servers=servers, workload=workload)


def single_server_profiles(engine: str, model: str, draft: str | None, tp: int, device: str) -> ProfileSet:
    """A profile set built from command-line flags: a baseline and, with a draft, an EAGLE3 server."""
    kind = engine_for(engine)
    if not model:
        model = kind.default_model or ""
    if not model:
        raise UsageError(f"--specwatch-model is required with --specwatch-engine {engine}")
    base = ServerProfile(name="baseline-tuned", engine=engine, model=model, tp=tp, device=device,
                         env="tuned", env_vars=dict(TUNED_NCCL))
    servers = {base.name: base}
    if draft or kind.builtin_draft:
        spec = Speculative(algorithm="EAGLE3", draft_model=None if kind.builtin_draft else draft)
        for env in ("tuned", "untuned"):
            p = replace(base, name=f"eagle3-{env}", speculative=spec, env=env, env_vars=dict(BUILTIN_ENV_PROFILES[env]))
            servers[p.name] = p
    return ProfileSet(servers=servers, roles=_default_roles(servers), source="command line")


def with_device(profiles: ProfileSet, device: str) -> ProfileSet:
    """Apply a run-wide device choice to reference servers whose profile says ``auto``."""
    if device == "auto":
        return profiles
    servers = {k: replace(v, device=device) if v.engine_kind.device_from_run and v.device == "auto" else v
               for k, v in profiles.servers.items()}
    return replace(profiles, servers=servers)
