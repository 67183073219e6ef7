"""Judge a saved capture (:mod:`specwatch.store.capture`) with the live run's checks, booting nothing.

Each check gets the same evidence it gets live, from the capture instead of the server:

* ``environment``: the saved process tree (every process's start environment, start time and title),
  the probe records when the server ran with the probe, and the NCCL lines of the log;
  :func:`specwatch.checks.environment.evaluate` judges it, including what the tree shows about
  variables set inside a process after it started;
* ``verify graphs``: ``sglang:cuda_graph_passes_total`` over the server's life, the log's Decode and
  capture lines, ``/server_info``; :func:`specwatch.checks.verify_graphs.evaluate`;
* ``accept length``: the log's Decode lines and the ``/metrics`` counters since the server started
  (its whole life as one window); :func:`specwatch.checks.accept_length.evaluate`.

Without a server profile the expectation is the capture's own launch: a server whose main process
started with tuned ``NCCL_*`` variables must carry them in every process; one that started without
any must carry none (the untuned rule).
"""

from __future__ import annotations

from specwatch.checks import accept_length, envcheck, environment, verify_graphs
from specwatch.judge.verdict import Verdict
from specwatch.profiles.profile import ServerProfile
from specwatch.signals import ncclenv
from specwatch.signals.logscan import CaptureRecord, DecodeRecord, parse_lines
from specwatch.signals.procenv import ProcInfo
from specwatch.store.capture import Capture

__all__ = ["AS_LAUNCHED", "inspect_capture", "launch_profile", "profile_notes"]

#: the name of the profile :func:`launch_profile` derives from a capture
AS_LAUNCHED = "as launched"


def _main(cap: Capture) -> ProcInfo | None:
    """The captured main process (else the one classified as a server's main)."""
    procs = cap.proc_infos()
    main = next((p for p in procs if p.pid == cap.main_pid), None)
    return main or next((p for p in procs if p.role and p.role.role == "main"), None)


def launch_profile(cap: Capture) -> ServerProfile | None:
    """The profile the capture's launch implies: its main process's ``NCCL_*`` start variables (None: unreadable).

    NCCL's logging switches and the variables the engine sets itself are left out.
    """
    main = _main(cap)
    if main is None or not main.environ.readable:
        return None
    skip = ncclenv.ALWAYS_SILENT | envcheck.ENGINE_SET_NCCL
    tuned = {k: v for k, v in main.environ.env.items() if k.startswith("NCCL_") and k not in skip}
    return ServerProfile(name=AS_LAUNCHED, env="tuned" if tuned else "untuned", env_vars=tuned)


def _environment(cap: Capture, profile: ServerProfile | None) -> Verdict:
    procs = cap.proc_infos()
    if not procs:
        return Verdict.skip(environment.NAME, "the capture has no process tree", profile.name if profile else "")
    launch_env: dict[str, str] | None = None
    if profile is None:
        profile = launch_profile(cap)
        if profile is None:
            return Verdict.skip(environment.NAME, "no profile given and the main process's start environment was "
                                "not readable: pass --profile/--server to say what it should carry")
    else:
        launch_env = dict(profile.extra_env)
    nccl = ncclenv.parse_nccl_lines(cap.log_lines())
    return environment.evaluate(profile, procs, cap.probe_records(), nccl, launch_env, starts=cap.starts())


def _speculative(cap: Capture, profile: ServerProfile | None) -> str | None:
    """The speculative algorithm (profile first, then /server_info); None: not speculative."""
    if profile is not None:
        return profile.speculative.algorithm if profile.speculative else None
    return (cap.server_info or {}).get("speculative_algorithm") or None


def _not_speculative(cap: Capture, profile: ServerProfile | None, check: str, name: str, what: str) -> Verdict | None:
    """The skip of a speculation-only check on a server that does not speculate (or may not: no /server_info)."""
    if cap.server_info is None and profile is None:
        return Verdict.skip(check, f"no /server_info in the capture ({_why(cap, 'server_info')}): cannot tell "
                                   "whether the server speculates (pass --profile/--server)", name)
    if _speculative(cap, profile) is None:
        return Verdict.skip(check, f"not a speculative server: {what}", name)
    return None


def _verify_graphs(cap: Capture, profile: ServerProfile | None, name: str,
                   decodes: list[DecodeRecord], captures: list[CaptureRecord]) -> Verdict:
    skip = _not_speculative(cap, profile, verify_graphs.NAME, name, "there is no verify step")
    if skip is not None:
        return skip
    names = profile.engine_kind.metrics if profile is not None else None
    return verify_graphs.evaluate(
        name, counters=verify_graphs.graph_counters(cap.metrics(), names), decode_records=decodes, captures=captures,
        server_info=cap.server_info or {}, batch_sizes=[r.running for r in decodes], metrics=names)


def _accept_length(cap: Capture, profile: ServerProfile | None, name: str, decodes: list[DecodeRecord]) -> Verdict:
    info = cap.server_info or {}
    skip = _not_speculative(cap, profile, accept_length.NAME, name, "no accept length")
    if skip is not None:
        return skip
    steps = accept_length.num_steps(profile or ServerProfile(name=name), info)
    if steps is None:
        return Verdict.skip(accept_length.NAME, "num_steps is unknown: neither the profile nor the captured "
                                                "/server_info (speculative_num_steps) says it", name)
    names = profile.engine_kind.metrics if profile is not None else None
    ests, problems, notes = accept_length.estimates(num_steps=steps, decode_records=decodes,
                                                    metrics_delta=cap.metrics(), metrics=names)
    if cap.metrics_text is None:
        notes.append(f"no /metrics in the capture ({_why(cap, 'metrics')})")
    if cap.log is None:
        notes.append(f"no log in the capture ({_why(cap, 'log')}): Decode-line windows not read")
    notes.append("/server_info avg_spec_accept_length not compared: one snapshot of a mean since the last "
                 "/flush_cache")
    spec = profile.speculative if profile is not None else None
    ndt = (spec.draft_tokens if spec else None) or info.get("speculative_num_draft_tokens")
    return accept_length.evaluate(name, steps, ests, problems, notes, num_draft_tokens=ndt,
                                  means=accept_length.averages(decodes))


def profile_notes(cap: Capture, profile: ServerProfile | None) -> list[str]:
    """Where ``profile`` and the captured server's ``/server_info`` disagree (the verdicts follow the profile)."""
    info = cap.server_info
    if profile is None or info is None:
        return []
    spec = profile.speculative
    pairs = [("speculative_algorithm", spec.algorithm if spec else None, info.get("speculative_algorithm")),
             ("tp_size", profile.tp, info.get("tp_size"))]
    if spec is not None:
        pairs += [("speculative_num_steps", spec.num_steps, info.get("speculative_num_steps")),
                  ("speculative_eagle_topk", spec.eagle_topk, info.get("speculative_eagle_topk")),
                  ("speculative_num_draft_tokens", spec.draft_tokens, info.get("speculative_num_draft_tokens"))]
    return [f"profile {profile.name} says {key} {want}, the captured /server_info says {got}"
            for key, want, got in pairs if got is not None and want is not None and want != got]


def _why(cap: Capture, part: str) -> str:
    return cap.missing.get(part, "not captured")


def inspect_capture(cap: Capture, profile: ServerProfile | None = None) -> list[Verdict]:
    """The environment, verify-graph and accept-length verdicts of a capture (``profile``: what it should be)."""
    name = profile.name if profile is not None else AS_LAUNCHED
    needs = {environment.NAME: environment.NEEDS, verify_graphs.NAME: verify_graphs.NEEDS,
             accept_length.NAME: accept_length.NEEDS}
    # as the live checks skip them: never a pass
    unable = {check: why for check, what in needs.items()
              if profile is not None and (why := profile.unable(check, what))}
    records = parse_lines(cap.log_lines()) if len(unable) < len(needs) else []
    decodes = [r for r in records if isinstance(r, DecodeRecord)]
    captures = [r for r in records if isinstance(r, CaptureRecord)]
    judged = {environment.NAME: lambda: _environment(cap, profile),
              verify_graphs.NAME: lambda: _verify_graphs(cap, profile, name, decodes, captures),
              accept_length.NAME: lambda: _accept_length(cap, profile, name, decodes)}
    return [Verdict.skip(check, unable[check], name) if check in unable else judge() for check, judge in judged.items()]
