"""The environment-propagation check on a live server: does every process carry its profile's variables?

Evidence from what any server offers: its process tree's ``/proc`` environ, the recording probe's
records, the NCCL lines of its log. :func:`evaluate` judges already collected views (recorded data
too) with :func:`specwatch.checks.envcheck.check_environment`; :func:`check` collects them from a
live server first. Both return a :class:`~specwatch.judge.verdict.Verdict` named ``environment``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from specwatch.checks import envcheck, envtree
from specwatch.checks.verdictlog import VerdictLog, record
from specwatch.judge.verdict import Verdict
from specwatch.profiles.profile import TUNED_NCCL, ServerProfile
from specwatch.signals import ncclenv, probe, procenv
from specwatch.signals.logscan import LogWindow

if TYPE_CHECKING:
    from specwatch.server.pool import RunningServer

__all__ = ["NAME", "NEEDS", "check", "evaluate", "expectation", "views_by_process"]

NAME = "environment"
#: what the live check reads (:data:`specwatch.engines.protocol.CAPABILITIES`)
NEEDS = ("process_tree",)


def expectation(profile: ServerProfile) -> tuple[str, dict[str, str]]:
    """(mode, variables): a tuned profile must carry its variables; an untuned one none of TUNED_NCCL."""
    if profile.env_vars:
        return "tuned", dict(profile.env_vars)
    return "untuned", dict(TUNED_NCCL)


def views_by_process(
    report: envcheck.EnvReport,
    procs: Iterable[procenv.ProcInfo],
    probe_records: Mapping[int, probe.ProcessRecords],
    nccl: Mapping[tuple[int, int], ncclenv.NcclProcess],
) -> dict[int, str]:
    """Per checked pid: which views could answer and which one the verdicts came from."""
    by_pid = {p.pid: p for p in procs}
    nccl_pids = {np_.pid for np_ in nccl.values()}
    out: dict[int, str] = {}
    pids = sorted({f.pid for f in report.findings if f.pid})
    for pid in pids:
        p = by_pid.get(pid)
        parts = [f"/proc environ {p.environ.describe()}" if p else "/proc environ not read (not in the tree)"]
        recs = probe_records.get(pid)
        if recs is None:
            parts.append("no probe record")
        else:
            phases = [name for name, rec in (("start", recs.start), ("later", recs.later)) if rec is not None]
            parts.append(f"probe {'+'.join(phases) or 'none'}")
        parts.append("NCCL lines" if pid in nccl_pids else "no NCCL lines")
        used = sorted({f.view for f in report.findings
                       if f.pid == pid and f.view and f.status not in ("note", "unreadable")})
        parts.append(f"verdict from {', '.join(used) if used else 'no view'}")
        out[pid] = "; ".join(parts)
    return out


def _short(title: str, width: int = 50) -> str:
    """A process title without the interpreter's directory, cut to ``width``."""
    if not title:
        return "?"
    first, _, rest = title.partition(" ")
    text = (first.rsplit("/", 1)[-1] + (" " + rest if rest else "")).strip()
    return text if len(text) <= width else text[: width - 3] + "..."


def _cause(
    report: envcheck.EnvReport,
    procs: Sequence[procenv.ProcInfo],
    probe_records: Mapping[int, probe.ProcessRecords],
    mode: str,
) -> str:
    """Where the failing variables came from or got lost, when the views show it."""
    failing = report.failures
    bad_vars = {f.variable for f in failing if f.variable}
    if mode == "untuned":
        setters = sorted(pid for pid, recs in probe_records.items()
                         if recs.start and any(v is not None and k in bad_vars
                                               for k, v in recs.start.set_by_sitecustomize.items()))
        if setters:
            return ("set at interpreter start by a sitecustomize.py on PYTHONPATH (probe: set_by_sitecustomize) "
                    f"in pid {', '.join(str(p) for p in setters)}")
        after = [sa for sa in report.set_after_start if bad_vars & set(sa.variables)]
        return "; ".join(envtree.describe_set_after_start(after).values())
    roles = {p.pid: p.role.role if p.role else "" for p in procs}
    failing_pids = {f.pid for f in failing}
    mains = [pid for pid, role in roles.items() if role == "main"]
    main_ok = bool(mains) and all(report.verdict_for(pid, v) == "ok" for pid in mains for v in bad_vars)
    if main_ok and failing_pids and not failing_pids & set(mains):
        return ("the main server process carries them but its workers do not: they were lost when the workers "
                "were spawned (an environment filtered or rebuilt for the children)")
    return ""


def evaluate(
    profile: ServerProfile,
    procs: Sequence[procenv.ProcInfo],
    probe_records: Mapping[int, probe.ProcessRecords] | None = None,
    nccl: Mapping[tuple[int, int], ncclenv.NcclProcess] | None = None,
    launch_env: Mapping[str, str] | None = None,
    starts: Mapping[int, float] | None = None,
) -> Verdict:
    """Judge environment propagation for ``profile`` from already collected views.

    ``starts`` (pid -> start time): recorded trees have them; they let a blank worker be judged
    from a readable sibling started before it (see :func:`envcheck.check_environment`).
    """
    probe_records = probe_records or {}
    nccl = nccl or {}
    mode, expected = expectation(profile)
    launched = None
    if mode == "untuned" and launch_env is not None:
        launched = {k: launch_env[k] for k in expected if k in launch_env}
    report = envcheck.check_environment(procs, expected, mode, probe=probe_records, nccl=nccl, launched=launched,
                                        starts=starts)
    titles = {f.pid: f.title for f in report.findings}
    views = views_by_process(report, procs, probe_records, nccl)
    lines = [report.message(), "views per process:"]
    lines += [f"  pid {pid} ({_short(titles.get(pid, ''))}): {text}" for pid, text in views.items()]
    message = "\n".join(lines)
    if report.verdict == "fail":
        failing = report.failures
        var_names = sorted({f.variable for f in failing if f.variable})
        who = sorted({f"{_short(f.title)} (pid {f.pid})" for f in failing})
        kind = "leaked into" if mode == "untuned" else "missing or wrong in"
        reason = f"{', '.join(var_names)} {kind} {', '.join(who)}"
        cause = _cause(report, procs, probe_records, mode)
        if cause:
            reason += f"; {cause}"
            message += f"\ncause: {cause}"
        return Verdict.of(NAME, False, message, reason, profile=profile.name, details=report)
    if report.verdict == "unknown":
        reason = "no view could answer for: " + report.unknown_reason(_short)
        return Verdict.of(NAME, None, message, reason, profile=profile.name, details=report)
    return Verdict.of(NAME, True, message, f"{mode} environment as expected in every process",
                      profile=profile.name, details=report)


def _wait_for_probe(records_dir: Path | None, pids: Iterable[int], wait_s: float) -> dict[int, probe.ProcessRecords]:
    """Probe records, waiting up to ``wait_s`` for every pid's ``later`` record to appear."""
    if records_dir is None:
        return {}
    want = set(pids)
    deadline = time.monotonic() + wait_s
    while True:
        recs = probe.read_records(records_dir)
        have_later = {pid for pid, r in recs.items() if r.later is not None}
        if want <= have_later or time.monotonic() >= deadline:
            return recs
        time.sleep(0.2)


def check(log: VerdictLog | None, server: RunningServer, wait_s: float = 5.0) -> Verdict:
    """Environment propagation on a live server: /proc of its process tree, probe records, NCCL lines.

    A pass or fail is kept in ``log``. A server with no local process (``--server-url`` elsewhere)
    is skipped: the /proc, probe and log views are out of reach.
    """
    prof = server.profile
    if why := prof.unable(NAME, NEEDS):
        return Verdict.skip(NAME, why, prof.name)
    pid = server.pid
    if pid is None:
        return Verdict.skip(NAME, f"no local process listens for {server.url}: the /proc, probe and log views "
                                  "are unavailable", prof.name)
    procs = procenv.walk(pid)
    if not procs:
        return Verdict.skip(NAME, f"process {pid} of {server.url} could not be read", prof.name)
    checked = [p.pid for p in procs if p.role and p.role.role in envcheck.CHECKED_ROLES]
    records = _wait_for_probe(server.probe_records, checked, wait_s)
    nccl: dict[tuple[int, int], ncclenv.NcclProcess] = {}
    if server.log_path is not None:
        nccl = ncclenv.parse_nccl_lines(LogWindow(server.log_path, start=0).lines())
    launch_env = server.launch.env if server.launch is not None else None
    return record(log, evaluate(prof, procs, records, nccl, launch_env))
