"""Build a server's launch: argv, environment, PYTHONPATH probes, GPU binding and log path.

The environment is composed explicitly, so an A/B comparison means what it says:
- variables that any environment profile manages are removed from the inherited environment, then
  the profile's own are applied (through the launch environment, or through a generated
  ``sitecustomize.py`` when the profile says ``env_apply = "sitecustomize"``);
- the probe ``sitecustomize.py`` goes first on PYTHONPATH and records what every Python process of
  the server really started with (it chains to any other sitecustomize);
- ``NCCL_DEBUG=INFO`` with ``NCCL_DEBUG_SUBSYS=ENV,INIT`` makes NCCL print what it applied.
Anything that leaks in later (a user's sitecustomize, a patched scheduler) is then visible to the
checks instead of silently changing the comparison.

The command line is written for the engine's version that the server's interpreter has installed, asked of it
with this environment before the boot (:func:`engine_version`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from specwatch.paths import IMPORT_ROOT
from specwatch.profiles.profile import NCCL_DEBUG_ENV, ServerProfile
from specwatch.server.process import LaunchSpec
from specwatch.signals import probe
from specwatch.signals.installed import package_info

#: seconds the server's interpreter gets to name the engine's version before a boot
VERSION_PROBE_TIMEOUT_S = 10.0
#: (interpreter, PYTHONPATH, package) -> the version it named (None: it could not tell), asked once a process
_VERSIONS: dict[tuple[str, str, str], str | None] = {}


def managed_variables(profiles: Iterable[ServerProfile]) -> set[str]:
    """Every variable that some environment profile of the run sets."""
    names: set[str] = set()
    for p in profiles:
        names.update(p.env_vars)
    return names


def server_environment(
    profile: ServerProfile,
    *,
    managed: set[str],
    run_dir: Path,
    base_env: Mapping[str, str] | None = None,
    gpus: tuple[int, ...] = (),
    with_probe: bool = True,
) -> tuple[dict[str, str], list[str]]:
    """The one composition of a server's environment (see the module docstring), and the variable
    names the probe watches. Files it needs (probe, env setter) are written under ``run_dir``.
    ``with_probe=False``: the same environment without the recording probe (the all-reduce ranks)."""
    base = dict(os.environ if base_env is None else base_env)
    env = {k: v for k, v in base.items() if k not in managed and not k.startswith("SPECWATCH_PROBE")}
    pythonpath: list[str] = []
    watched = sorted(managed | set(profile.env_vars) | set(profile.extra_env))
    if with_probe:
        probe_dir = run_dir / "probe"
        probe.write_probe(probe_dir)
        pythonpath.append(str(probe_dir))
        probe_vars = probe.probe_env(probe_dir, run_dir / "probe-records", [*watched, "NCCL_*"])
        env.update({k: v for k, v in probe_vars.items() if k != "PYTHONPATH"})
    if profile.env_apply == "sitecustomize" and profile.env_vars:
        setter_dir = run_dir / "env-sitecustomize"
        probe.write_setter(setter_dir, profile.env_vars)
        pythonpath.append(str(setter_dir))
    else:
        env.update(profile.env_vars)
    pythonpath.extend(profile.pythonpath)
    identity = profile.engine_kind.identity
    if identity is not None and identity.bundled:
        pythonpath.append(str(IMPORT_ROOT))  # the reference server ships with specwatch
    if base.get("PYTHONPATH"):
        pythonpath.append(base["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(pythonpath)
    if profile.nccl_debug:
        env.update(NCCL_DEBUG_ENV)
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(profile.extra_env)
    return env, watched


def engine_version(profile: ServerProfile, env: Mapping[str, str], *, scratch: Path | None = None,
                   timeout: float = VERSION_PROBE_TIMEOUT_S) -> str | None:
    """The version of the profile's engine package that the server's interpreter sees with ``env`` (its
    composed environment: the profile's ``pythonpath`` included), asked without importing the package; once
    per interpreter, PYTHONPATH and package in this process. ``PYTHONPATH`` entries under ``scratch`` (the
    boot's folder: the probe, the env setter) and the probe's variables are left out, so boots share the
    answer. None when the engine has no package of its own (or ships with specwatch), or the interpreter does
    not name one within ``timeout`` seconds; never raises."""
    identity = profile.engine_kind.identity
    if identity is None or identity.bundled:
        return None
    root = str(scratch) if scratch is not None else None
    path = [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
            if p and not (root and (p == root or p.startswith(root + os.sep)))]
    asked = {k: v for k, v in env.items() if not k.startswith("SPECWATCH_PROBE") and k != "PYTHONPATH"}
    if path:
        asked["PYTHONPATH"] = os.pathsep.join(path)
    python = profile.interpreter()
    key = (python, asked.get("PYTHONPATH", ""), identity.package)
    if key not in _VERSIONS:
        version = package_info(python, identity.package, env=asked, timeout=timeout).get("version")
        _VERSIONS[key] = str(version) if version else None
    return _VERSIONS[key]


def build_launch(
    profile: ServerProfile,
    *,
    port: int,
    run_dir: Path,
    managed: set[str],
    base_env: Mapping[str, str] | None = None,
    gpus: tuple[int, ...] = (),
    host: str = "127.0.0.1",
    boot_timeout: float = 900.0,
) -> LaunchSpec:
    """Compose the LaunchSpec of one server, its command line written for the engine's version the server's
    interpreter has (:func:`engine_version`; the newest known when it cannot tell); writes its probe files
    under ``run_dir``."""
    env, watched = server_environment(profile, managed=managed, run_dir=run_dir, base_env=base_env, gpus=gpus)
    version = engine_version(profile, env, scratch=run_dir)
    return LaunchSpec(
        name=profile.name, argv=profile.command(host, port, version), env=env, host=host, port=port,
        log_path=run_dir / "server.log", boot_timeout=boot_timeout, gpus=gpus,
        meta={"probe_records": str(run_dir / "probe-records"), "watched": watched},
    )
