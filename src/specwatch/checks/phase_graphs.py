"""The phase-graphs check: did a speculative server capture every phase of its cycle as a graph at startup?

The verify-graphs check asks whether the verify step replayed its graph; this one asks whether each phase the
engine can graph (target verify, draft decode, draft extend: the engine's
:class:`~specwatch.engines.protocol.PhaseGraphs`) was captured, from the server's startup ``Capture`` lines, and
names the cause of each one missing from the server's command line, environment and GPU.
:func:`evaluate` judges recorded data with :func:`specwatch.checks.phasegraphs.check_phase_graphs`;
:func:`check` collects it from a booted server. Both return a :class:`~specwatch.judge.verdict.Verdict` named
``phase graphs``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from specwatch.checks import phasegraphs
from specwatch.checks.verdictlog import VerdictLog, record
from specwatch.engines.protocol import PhaseGraphs
from specwatch.judge.verdict import Verdict
from specwatch.signals.logscan import CaptureRecord, LogWindow

if TYPE_CHECKING:
    from specwatch.server.pool import RunningServer

__all__ = ["NAME", "NEEDS", "check", "evaluate", "server_env"]

NAME = "phase graphs"
#: what the live check reads (:data:`specwatch.engines.protocol.CAPABILITIES`): the Capture lines, /server_info
NEEDS = ("decode_lines", "native_api")


def evaluate(profile: str, facts: PhaseGraphs, captures: Sequence[CaptureRecord], *, algorithm: str,
             num_steps: int | None, topk: int | None = None, argv: Sequence[str] = (),
             env: Mapping[str, str] | None = None, server_info: Mapping[str, Any] | None = None,
             gpus: Sequence[str] = (), device: str | None = None) -> Verdict:
    """Judge recorded capture lines and the server's settings (see :func:`phasegraphs.check_phase_graphs`)."""
    rep = phasegraphs.check_phase_graphs(facts, captures, algorithm=algorithm, num_steps=num_steps, topk=topk,
                                         argv=argv, env=env, server_info=server_info, gpus=gpus, device=device)
    if rep.ok is None:
        return Verdict.skip(NAME, rep.why_not, profile)
    return Verdict.of(NAME, rep.ok, rep.message(), rep.reason(), profile=profile, details=rep)


def server_env(server: RunningServer) -> dict[str, str]:
    """The server's environment as specwatch started it (the launch's), with the profile's variables on top (a
    ``sitecustomize`` profile sets those inside the server)."""
    prof = server.profile
    env = dict(server.launch.env) if server.launch is not None else {}
    env.update(prof.env_vars)
    env.update(prof.extra_env)
    return env


def _gpu_names(server: RunningServer) -> list[str]:
    """The names of the GPUs the server was given (nvidia-smi), or none on CPU or without nvidia-smi."""
    if server.profile.device == "cpu":
        return []
    from specwatch.server.gpu import gpu_report  # local: runs nvidia-smi only when asked

    env = server.launch.env if server.launch is not None else None
    return [name for name, _ in gpu_report(env=env).gpus]


def check(log: VerdictLog | None, server: RunningServer, server_info: Mapping[str, Any] | None = None,
          gpus: Sequence[str] | None = None) -> Verdict:
    """Did ``server`` capture every speculative phase its engine can graph? Fails naming each missing one and its
    cause. ``server_info``: its ``/server_info`` (a measurement's ``server_info_after``), for what it resolved
    (the attention backend, the draft steps, the device); ``gpus``: GPU names (default: nvidia-smi's for the
    server's GPUs). A pass or fail is kept in ``log``."""
    prof = server.profile
    if why := prof.unable(NAME, NEEDS):
        return Verdict.skip(NAME, why, prof.name)
    spec = prof.speculative
    if spec is None:
        return Verdict.skip(NAME, "not a speculative server: there are no speculative phases", prof.name)
    facts = prof.engine_kind.phase_graphs(str((server_info or {}).get("version") or "") or None)
    if facts is None:
        return Verdict.skip(NAME, f"{prof.engine_kind.title} shows no capture lines", prof.name)
    if server.log_path is None or not server.log_path.exists():
        return Verdict.skip(NAME, "no server log to read the startup Capture lines from (give "
                                  "--specwatch-server-log for a server specwatch did not start)", prof.name)
    info = server_info or {}
    captures = LogWindow(server.log_path, start=0).capture_records()
    num_steps = info.get("speculative_num_steps", spec.num_steps)
    topk = info.get("speculative_eagle_topk", spec.eagle_topk)
    argv = list(server.launch.argv) if server.launch is not None else list(prof.extra_args)
    device = str(info.get("device") or ("cpu" if prof.device == "cpu" else "")) or None
    result = evaluate(prof.name, facts, captures, algorithm=spec.algorithm, num_steps=num_steps, topk=topk,
                      argv=argv, env=server_env(server), server_info=info,
                      gpus=_gpu_names(server) if gpus is None else gpus, device=device)
    return record(log, result)
