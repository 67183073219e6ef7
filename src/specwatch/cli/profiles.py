"""``specwatch profile show`` and ``specwatch allreduce``: server profiles and what their tuning buys."""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specwatch.cli.args import byte_sizes, existing_file, int_at_least, positive_float, positive_int
from specwatch.errors import EXIT_OK

if TYPE_CHECKING:
    from specwatch.profiles.profile import ServerProfile


#: how ``profile show`` writes the inherited PYTHONPATH and a boot's folder
INHERITED, RUN = "$PYTHONPATH", "<run>"


def environment_lines(prof: ServerProfile, managed: set[str]) -> list[str]:
    """What each boot of ``prof`` finds in its environment beyond what specwatch inherits, and why:
    composed by :func:`specwatch.server.launch.server_environment`, the one owner, into a scratch
    folder shown as ``<run>`` (the boot's folder under the report directory's ``servers/``)."""
    import tempfile

    from specwatch.paths import IMPORT_ROOT
    from specwatch.profiles.profile import NCCL_DEBUG_ENV
    from specwatch.server.launch import server_environment
    from specwatch.signals import probe

    with tempfile.TemporaryDirectory(prefix="specwatch-profile-show-") as tmp:
        run_dir = Path(tmp) / "run"
        env, _ = server_environment(prof, managed=managed, run_dir=run_dir, base_env={"PYTHONPATH": INHERITED})
    env = {k: v.replace(str(run_dir), RUN) for k, v in env.items()}
    parts = {f"{RUN}/probe": "specwatch's probe", f"{RUN}/env-sitecustomize": "sets the env profile's variables in "
             "every Python process (env_apply = \"sitecustomize\")", str(IMPORT_ROOT): "the reference server's package",
             INHERITED: "the inherited one, if any", **{p: "pythonpath" for p in prof.pythonpath}}
    why = {**{k: "specwatch's probe: records each Python process's start environment" for k in
              (probe.ENV_DIR, probe.ENV_VARS, probe.ENV_LATER)},
           **{k: "specwatch: NCCL then logs what it applied; nccl_debug = false leaves it out" for k in NCCL_DEBUG_ENV},
           "PYTHONUNBUFFERED": "specwatch: log lines reach the server log as they are written",
           "PYTHONPATH": "; ".join(f"{p}: {parts.get(p, 'pythonpath')}" for p in env["PYTHONPATH"].split(os.pathsep)),
           **{k: f"env profile {prof.env!r}" for k in prof.env_vars}, **{k: "extra_env" for k in prof.extra_env}}
    lines = [f"# env: {k}={v} ({why.get(k, 'extra_env')})" for k, v in sorted(env.items()) if k in why]
    if prof.gpus_needed:
        lines.append(f"# env: CUDA_VISIBLE_DEVICES=<the {prof.gpus_needed} GPU(s) the pool gives this boot> "
                     "(specwatch, on a host with GPUs)")
    if unset := sorted(managed - set(env)):
        lines.append(f"# env: unset if inherited: {', '.join(unset)} (another server of this set is tuned with them; "
                     "each server gets only its own)")
    return lines


def engine_version_line(prof: ServerProfile, managed: set[str]) -> tuple[str | None, str]:
    """The engine's version a boot of ``prof`` would write its command line for, asked of the server's
    interpreter with the environment a boot gets (:func:`specwatch.server.launch.engine_version`, the one
    owner), and the line that says so."""
    import tempfile

    from specwatch.server.launch import VERSION_PROBE_TIMEOUT_S, engine_version, server_environment

    kind = prof.engine_kind
    if kind.identity is None or kind.identity.bundled:
        return None, (f"# engine version: specwatch's own ({kind.title} ships with it); its flags do not depend "
                      "on a version")
    with tempfile.TemporaryDirectory(prefix="specwatch-profile-show-") as tmp:
        run_dir = Path(tmp) / "run"
        env, _ = server_environment(prof, managed=managed, run_dir=run_dir)
        version = engine_version(prof, env, scratch=run_dir)
    where = f"{prof.interpreter()} with the environment above"
    if version:
        return version, (f"# engine version: {version} (package {kind.identity.package!r}, as {where} sees it); "
                         "the command line below is written for it")
    newest = kind.versions[-1] if kind.versions else "the newest known"
    why = (f"{prof.interpreter()}: no such interpreter" if shutil.which(prof.interpreter()) is None else
           f"{where} has no package {kind.identity.package!r}, or did not answer within "
           f"{VERSION_PROBE_TIMEOUT_S:g} s")
    return None, (f"# engine version: unknown ({why}); the command line below is written for {newest}, the newest "
                  "specwatch knows")


def _cmd_profile_show(args: argparse.Namespace) -> int:
    from specwatch.profiles.loading import load_profiles
    from specwatch.server.launch import managed_variables

    ps = load_profiles(args.file)
    managed = managed_variables(ps.servers.values())
    for name, prof in ps.servers.items():
        roles = [r for r, n in ps.roles.items() if n == name]
        env = " ".join(f"{k}={v}" for k, v in sorted(prof.env_vars.items())) or "(no tuning variables)"
        if not prof.engine_kind.capabilities.boots:  # e.g. engine = "openai": nothing to boot, only where the load goes
            model = prof.model or "the first id of GET /v1/models"
            print(f"# {name} [{', '.join(roles) or '-'}] {prof.engine}: not booted; load: POST "
                  f"{prof.url or '--specwatch-server-url'}/v1/{'chat/' if prof.load_api == 'chat' else ''}completions, "
                  f"model {model}")
            continue
        print(f"# {name} [{', '.join(roles) or '-'}] env {prof.env} via {prof.env_apply}: {env}")
        for flags, why in prof.added_flags(args.host, args.port):
            print(f"#   {flags}: {why}")
        for line in environment_lines(prof, managed):
            print(line)
        version, line = engine_version_line(prof, managed)
        print(line)
        print(" ".join(prof.command(args.host, args.port, version)))
    return EXIT_OK


def _cmd_allreduce(args: argparse.Namespace) -> int:
    from specwatch.checks import allreduce

    allreduce.main(args.file, rounds=args.rounds, sizes=args.sizes, graphed=args.graphed, device=args.device,
                   calls=args.calls, samples=args.samples, timeout_s=args.timeout)
    return EXIT_OK


def register(sub: Any) -> None:
    """Add this module's subcommands to the ``specwatch`` parser."""
    p = sub.add_parser("profile", help="server profiles").add_subparsers(dest="action", required=True)
    show = p.add_parser("show", help="print each server's command line and the environment each boot gets "
                                     "(extra_env, pythonpath, the env profile, what specwatch adds), and why "
                                     "specwatch adds each flag and variable the profile did not set")
    show.add_argument("file", nargs="?", default=None, help="profile TOML (default: the built-in set)")
    show.add_argument("--host", default="127.0.0.1")
    show.add_argument("--port", type=int, default=30000)
    show.set_defaults(func=_cmd_profile_show)

    p = sub.add_parser("allreduce", help="time NCCL all-reduce under the tuned and the untuned server's environment")
    p.add_argument("file", nargs="?", default=None, type=existing_file,
                   help="profile TOML with tuned/untuned servers at TP ≥ 2")
    p.add_argument("--rounds", type=int_at_least(2), default=6,
                   help="untuned/tuned launches in alternation, the statistical unit (default 6: p < 0.01 possible)")
    p.add_argument("--sizes", type=byte_sizes, default="2048,6144,14336",
                   help="message sizes in bytes (default 2048,6144,14336)")
    p.add_argument("--graphed", choices=("auto", "yes", "no"), default="auto",
                   help="all-reduce inside a CUDA graph, as a graphed server runs it (auto: on CUDA)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--calls", type=positive_int, default=20, help="all-reduces per timed sample")
    p.add_argument("--samples", type=positive_int, default=30, help="timed samples per launch and size")
    p.add_argument("--timeout", type=positive_float, default=180.0,
                   help="seconds per launch before its ranks are killed")
    p.set_defaults(func=_cmd_allreduce)
