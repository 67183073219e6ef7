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
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from specwatch.paths import IMPORT_ROOT
from specwatch.profiles.profile import NCCL_DEBUG_ENV, ServerProfile
from specwatch.server.process import LaunchSpec
from specwatch.signals import probe


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
    """Compose the LaunchSpec of one server; writes its probe files under ``run_dir``."""
    env, watched = server_environment(profile, managed=managed, run_dir=run_dir, base_env=base_env, gpus=gpus)
    return LaunchSpec(
        name=profile.name, argv=profile.command(host, port), env=env, host=host, port=port,
        log_path=run_dir / "server.log", boot_timeout=boot_timeout, gpus=gpus,
        meta={"probe_records": str(run_dir / "probe-records"), "watched": watched},
    )
