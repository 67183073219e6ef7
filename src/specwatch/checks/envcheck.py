"""Environment-propagation verdicts per process from three views.

Views, strongest last:

* ``/proc environ``: the environment a process STARTED with (:mod:`specwatch.signals.procenv`); blank
  after ``setproctitle`` (SGLang's workers), so it often cannot answer;
* ``probe start`` / ``probe later``: the ``sitecustomize`` probe's records (:mod:`specwatch.signals.probe`),
  written at interpreter start and a few seconds later;
* ``NCCL applied``: NCCL's own "set by environment" lines (:mod:`specwatch.signals.ncclenv`), the truth
  for what NCCL used, but only for variables NCCL consulted and only in processes that created a
  communicator.

The rest of the tree is evidence too (:mod:`specwatch.checks.envtree`): a readable child shows what
its parent's environment carried after the parent started (view ``a child's /proc environ``), and
with start times an earlier readable sibling speaks for a blank worker (view ``an earlier
sibling's /proc environ``), which can name it as a leak or a mismatch but never pass it.

For a tuned environment profile every checked process must carry each expected variable with its
value; for an untuned server the processes must NOT carry the tuned variables (leaks). A view that
cannot answer says so; a process no view can answer about gets ``unknown``, never ``missing``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from specwatch.checks.envtree import (
    SetAfterStart,
    describe_set_after_start,
    earlier_sibling,
    find_set_after_start,
    short_title,
)
from specwatch.signals import ncclenv
from specwatch.signals.ncclenv import NcclProcess
from specwatch.signals.probe import ProcessRecords
from specwatch.signals.procenv import UNREAD, WORKER_ROLES, EnvRead, ProcInfo, ProcRole, classify

__all__ = [
    "CHECKED_ROLES",
    "ENGINE_SET_NCCL",
    "VIEW_CHILD",
    "VIEW_NCCL",
    "VIEW_PROBE_LATER",
    "VIEW_PROBE_START",
    "VIEW_PROC",
    "VIEW_SIBLING",
    "EnvReport",
    "Finding",
    "check_environment",
]

VIEW_PROC = "/proc environ (start)"
VIEW_PROBE_START = "probe start"
VIEW_PROBE_LATER = "probe later"
VIEW_NCCL = "NCCL applied"
VIEW_CHILD = "a child's /proc environ"
VIEW_SIBLING = "an earlier sibling's /proc environ"
# Variables SGLang 0.5.23 itself sets before spawning (facts 1.4): applied-but-not-launched is fine.
ENGINE_SET_NCCL = frozenset(
    {"NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE", "NCCL_GRAPH_REGISTER", "NCCL_GRAPH_MIXING_SUPPORT", "NCCL_MNNVL_ENABLE"}
)
CHECKED_ROLES = frozenset(WORKER_ROLES | {"main", "nccl_rank"})
FAILING = frozenset({"missing", "mismatch", "leak", "not_applied"})
_ORDER = {"mismatch": 0, "missing": 0, "leak": 0, "not_applied": 0, "unknown": 1, "unexpected": 2,
          "unreadable": 3, "note": 4, "ok": 5}


@dataclass(frozen=True)
class Finding:
    """One verdict or observation about one process (and usually one variable)."""

    status: str  # ok | missing | mismatch | leak | not_applied | unexpected | unknown | unreadable | note
    pid: int
    title: str
    variable: str | None
    expected: str | None  # None: must be absent (untuned)
    found: str | None  # None: absent or not known (see status/view)
    view: str  # which view the verdict came from ("" when none could answer)
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.status in FAILING

    def line(self) -> str:
        tag = {"ok": "ok", "unknown": "UNKNOWN", "unexpected": "WARN", "unreadable": "note",
               "note": "note"}.get(self.status, "FAIL")
        title = self.title or "?"
        if len(title) > 60:
            title = title[:57] + "..."
        who = f"{title} (pid {self.pid})"
        if self.variable is None:
            return f"  {tag:<7} {who}: {self.detail}"
        exp = "<absent>" if self.expected is None else repr(self.expected)
        fnd = "?" if self.status in ("unknown",) else "<absent>" if self.found is None else repr(self.found)
        where = f" [{self.view}]" if self.view else ""
        extra = f": {self.detail}" if self.detail else ""
        return f"  {tag:<7} {who} {self.variable}: {self.status}, expected {exp}, found {fnd}{where}{extra}"


@dataclass
class EnvReport:
    """All findings of one environment check."""

    mode: str  # "tuned" | "untuned"
    expected: dict[str, str]
    findings: list[Finding] = field(default_factory=list)
    set_after_start: list[SetAfterStart] = field(default_factory=list)

    @property
    def failures(self) -> list[Finding]:
        return [f for f in self.findings if f.failed]

    @property
    def unknowns(self) -> list[Finding]:
        return [f for f in self.findings if f.status == "unknown"]

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def verdict(self) -> str:
        """``fail`` if any process failed, else ``unknown`` if any could not be judged, else ``pass``."""
        if self.failures:
            return "fail"
        if self.unknowns:
            return "unknown"
        return "pass"

    def verdict_for(self, pid: int, variable: str) -> str | None:
        for f in self.findings:
            if f.pid == pid and f.variable == variable and f.status not in ("note", "unreadable", "unexpected"):
                return f.status
        return None

    def message(self, verbose: bool = False) -> str:
        want = ", ".join(f"{k}={v}" for k, v in sorted(self.expected.items())) or "(none)"
        if self.mode == "tuned":
            head = f"environment check (tuned: every process must carry {want})"
        else:
            head = f"environment check (untuned: no process may carry {', '.join(sorted(self.expected))})"
        n_ok = sum(1 for f in self.findings if f.status == "ok")
        lines = [
            f"{head}: {self.verdict.upper()} — {len(self.failures)} failing, {len(self.unknowns)} unknown, "
            f"{n_ok} ok"
        ]
        shown = sorted(
            (f for f in self.findings if verbose or f.status != "ok"),
            key=lambda f: (_ORDER.get(f.status, 9), f.pid, f.variable or ""),
        )
        lines += [f.line() for f in shown]
        return "\n".join(lines)

    def unknown_reason(self, short: Callable[[str], str] = short_title) -> str:
        """Why no view could answer, per process (``short`` shortens its title), with the variables an
        earlier sibling suggests are fine named once per process, and processes that share the
        explanation named together: not one clause per variable and process (a tuned server with
        blank workers read as one line of thousands of characters)."""
        by_pid: dict[int, list[Finding]] = {}
        for f in self.unknowns:
            by_pid.setdefault(f.pid, []).append(f)
        who: dict[str, list[str]] = {}
        for pid, found in sorted(by_pid.items()):
            text = "; ".join(dict.fromkeys(f.detail.split(_LIKELY, 1)[0] for f in found))
            likely = sorted(f.variable for f in found if f.variable and _LIKELY in f.detail)
            sibling = next((m.groups() for f in found if (m := _SIBLING.search(f.detail))), None)
            if likely and sibling is not None:
                names = f"all {len(likely)} variables" if len(likely) == len(self.expected) else ", ".join(likely)
                text += (f"; likely ok for {names}: its sibling {sibling[0]} (pid {sibling[1]}), started earlier by "
                         f"the same parent (pid {sibling[2]}), carries each as expected, but an inference never "
                         "passes a process")
            who.setdefault(text, []).append(f"{short(found[0].title)} (pid {pid})")
        return "; ".join(f"{', '.join(names)}: {text}" for text, names in who.items())


def _processes(
    procs: Iterable[ProcInfo],
    probe: Mapping[int, ProcessRecords],
    nccl: Mapping[tuple[int, int], NcclProcess],
) -> list[ProcInfo]:
    """Union of the processes the three views know about (pseudo-entries for the latter two)."""
    out = {p.pid: p for p in procs}
    for pid, recs in probe.items():
        if pid in out:
            continue
        rec = recs.later or recs.start
        cmd = list(rec.cmdline or rec.argv) if rec else []
        p = ProcInfo(pid, recs.ppid, recs.title, cmd, EnvRead(UNREAD))
        p.role = classify(p)
        out[pid] = p
    for (pid, _rank), np_ in nccl.items():
        if pid in out:
            continue
        p = ProcInfo(pid, 0, f"NCCL rank {np_.rank} on {np_.host or '?'}", [], EnvRead(UNREAD))
        p.role = ProcRole("unknown", "nccl_rank")
        out[pid] = p
    for p in out.values():
        if p.role is None:
            p.role = classify(p)
    return sorted(out.values(), key=lambda p: p.pid)


def _evidence(
    p: ProcInfo, var: str, probe: Mapping[int, ProcessRecords], nccl_by_pid: Mapping[int, list[NcclProcess]],
    later: Mapping[str, str] | None = None,
) -> tuple[list[tuple[str, str | None]], bool, str | None]:
    """(definite answers [(view, value-or-None)] weakest first, NCCL has lines for pid, NCCL value).

    ``later``: the variables a child shows ``p`` set in itself after it started (:class:`SetAfterStart`).
    """
    answers: list[tuple[str, str | None]] = []
    can, val = p.environ.lookup(var)
    if can:
        answers.append((VIEW_PROC, val))
    if later and var in later:
        answers.append((VIEW_CHILD, later[var]))
    recs = probe.get(p.pid)
    if recs is not None:
        for view, rec in ((VIEW_PROBE_START, recs.start), (VIEW_PROBE_LATER, recs.later)):
            if rec is not None:
                can, val = rec.lookup(var)
                if can:
                    answers.append((view, val))
    ranks = nccl_by_pid.get(p.pid, [])
    applied = next((r.applied[var] for r in ranks if var in r.applied), None)
    return answers, bool(ranks), applied


def _cannot_answer(p: ProcInfo, probe: Mapping[int, ProcessRecords], has_nccl: bool) -> str:
    parts = [f"/proc environ {p.environ.describe()}"]
    parts.append("probe record present but without this variable" if p.pid in probe else "no probe record")
    parts.append("NCCL lines present but silent on it" if has_nccl else "no NCCL lines")
    return "; ".join(parts)


def check_environment(
    procs: Iterable[ProcInfo],
    expected: Mapping[str, str],
    mode: str = "tuned",
    probe: Mapping[int, ProcessRecords] | None = None,
    nccl: Mapping[tuple[int, int], NcclProcess] | None = None,
    launched: Mapping[str, str] | None = None,
    roles: Iterable[str] = CHECKED_ROLES,
    engine_set: Iterable[str] = ENGINE_SET_NCCL,
    starts: Mapping[int, float] | None = None,
) -> EnvReport:
    """Findings per process for ``expected`` (the tuned profile's variables).

    ``mode="tuned"``: each checked process must carry each variable with its value. The verdict
    comes from the strongest view with a value (NCCL applied > probe later > probe start >
    /proc); absent everywhere that can answer -> ``missing``; only NCCL silent -> ``not_applied``;
    nothing can answer -> ``unknown``.
    ``mode="untuned"``: a checked process carrying any of the variables (any view) is a
    ``leak``, unless ``launched`` (the untuned launch environment) set it explicitly.
    ``launched`` (default: ``expected`` when tuned, empty when untuned) also drives the NCCL
    comparison: variables NCCL applied that were not launched (minus ``engine_set``) are
    ``unexpected`` warnings.
    The tree is evidence too: a variable a readable child carries but its parent's start
    environment lacks was set in the parent after it started (view ``a child's /proc environ``,
    a ``note`` naming both; ``NCCL_*`` ones outside ``expected`` are ``unexpected``). ``starts``
    (pid -> start time, any clock) lets a process no view answers for take what a readable sibling
    started before it carries: a leak or mismatch, never a pass (then ``unknown``, saying so).
    """
    if mode not in ("tuned", "untuned"):
        raise ValueError(f"mode must be 'tuned' or 'untuned', got {mode!r}")
    probe = probe or {}
    nccl = nccl or {}
    launched = dict(launched) if launched is not None else (dict(expected) if mode == "tuned" else {})
    want_roles = set(roles)
    report = EnvReport(mode, dict(expected))
    nccl_by_pid: dict[int, list[NcclProcess]] = {}
    for np_ in nccl.values():
        nccl_by_pid.setdefault(np_.pid, []).append(np_)

    everyone = _processes(procs, probe, nccl)
    report.set_after_start = find_set_after_start(everyone, expected, engine_set=engine_set)
    later: dict[int, dict[str, str]] = {}  # the parent's own environment now, where a direct child shows it
    titles = {sa.pid: sa.title for sa in report.set_after_start}
    for pid, text in describe_set_after_start(report.set_after_start).items():
        report.findings.append(Finding("note", pid, titles[pid], None, None, None, VIEW_CHILD, text))
    for sa in report.set_after_start:
        for var, val in sa.variables.items():
            if not sa.via:
                later.setdefault(sa.pid, {}).setdefault(var, val)
        for var, val in sorted(sa.variables.items()):
            if var not in expected and var not in launched:
                report.findings.append(Finding("unexpected", sa.pid, sa.title, var, None, val, VIEW_CHILD,
                                               f"set after start (seen in pid {sa.child_pid}), not expected"))
    by_pid = {p.pid: p for p in everyone}
    for child in everyone:  # a blank process's readable children show what its environment carried
        parent = by_pid.get(child.ppid)
        if parent is None or parent.environ.readable or not child.environ.readable or child.pid == parent.pid:
            continue
        for var in expected:
            if child.environ.env.get(var) is not None:
                later.setdefault(parent.pid, {}).setdefault(var, child.environ.env[var])
    checked = [p for p in everyone if p.role and p.role.role in want_roles]
    if not checked:
        report.findings.append(Finding("unknown", 0, "", None, None, None, "",
                                       "no server process to check (no worker found in any view)"))
        return report

    for p in checked:
        title = p.title
        if p.environ.status not in ("ok", "empty", UNREAD):
            report.findings.append(Finding(
                "unreadable", p.pid, title, None, None, None, VIEW_PROC,
                f"/proc environ {p.environ.describe()}: verdict from the other views",
            ))
        for var in sorted(expected):
            exp = ncclenv.normalize_value(expected[var])
            answers, has_nccl, applied = _evidence(p, var, probe, nccl_by_pid, later.get(p.pid))
            sibling = None if answers or has_nccl else earlier_sibling(p, var, everyone, starts or {})
            if mode == "tuned":
                report.findings.extend(_tuned(p, title, var, exp, answers, has_nccl, applied, probe, sibling))
            else:
                report.findings.extend(_untuned(p, title, var, answers, has_nccl, applied, launched, probe, sibling))

    if nccl:
        for diff in ncclenv.compare(launched, nccl, ignore=set(engine_set) | set(expected)):
            title = next((p.title for p in everyone if p.pid == diff.pid), f"pid {diff.pid}")
            for var, val in sorted(diff.not_launched.items()):
                report.findings.append(Finding(
                    "unexpected", diff.pid, title, var, None, val, VIEW_NCCL,
                    f"applied by NCCL (rank {diff.rank}) but not in the launch environment",
                ))
            for var, val in sorted(diff.not_applied.items()):
                report.findings.append(Finding(
                    "note", diff.pid, title, var, val, None, VIEW_NCCL,
                    f"launched but NCCL (rank {diff.rank}) did not report it (not reached, or not consulted)",
                ))
            for var, (a, b) in sorted(diff.mismatched.items()):
                report.findings.append(Finding(
                    "mismatch", diff.pid, title, var, a, b, VIEW_NCCL, f"rank {diff.rank}",
                ))
    return report


def _same(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return a is b
    return ncclenv.normalize_value(a) == ncclenv.normalize_value(b)


def _sibling_says(p: ProcInfo, var: str, sibling: ProcInfo | None) -> tuple[str | None, str]:
    """(the value an earlier sibling carries, the sentence saying so); (None, "") when it carries none."""
    if sibling is None:
        return None, ""
    val = sibling.environ.env.get(var)
    if val is None:
        return None, ""
    return val, (f"inferred: started after its sibling {short_title(sibling.title, 40)} (pid {sibling.pid}), "
                 f"which carries {var}={val!r}, by the same parent (pid {p.ppid})")


#: how an unknown finding's detail adds what an earlier sibling suggests (:meth:`EnvReport.unknown_reason` reads it)
_LIKELY = "; likely ok ("
_SIBLING = re.compile(r"started after its sibling (.+?) \(pid (\d+)\), which carries .*?, by the same parent "
                      r"\(pid (\d+)\)")


def _tuned(
    p: ProcInfo, title: str, var: str, exp: str,
    answers: list[tuple[str, str | None]], has_nccl: bool, applied: str | None,
    probe: Mapping[int, ProcessRecords], sibling: ProcInfo | None = None,
) -> list[Finding]:
    out: list[Finding] = []
    present = [(v, val) for v, val in answers if val is not None]
    if applied is not None:
        present.append((VIEW_NCCL, applied))
    if present:
        view, val = present[-1]  # strongest view with a value
        status = "ok" if _same(val, exp) else "mismatch"
        detail = ""
        absent_views = [v for v, vv in answers if vv is None]
        if status == "ok" and absent_views:
            detail = f"absent in {', '.join(absent_views)}: set after start"
        out.append(Finding(status, p.pid, title, var, exp, val, view, detail))
        for v2, val2 in present[:-1]:
            if not _same(val2, val):
                out.append(Finding("note", p.pid, title, var, exp, val2, v2, f"differs from {view} ({val!r})"))
        return out
    if answers:  # every view that can answer says absent
        view = answers[-1][0]
        detail = "NCCL lines present but silent on it" if has_nccl else ""
        out.append(Finding("missing", p.pid, title, var, exp, None, view, detail))
        return out
    if has_nccl:
        out.append(Finding("not_applied", p.pid, title, var, exp, None, VIEW_NCCL,
                           "NCCL did not report it and no other view can answer "
                           f"(/proc environ {p.environ.describe()})"))
        return out
    inferred, why = _sibling_says(p, var, sibling)
    if inferred is not None and not _same(inferred, exp):
        out.append(Finding("mismatch", p.pid, title, var, exp, inferred, VIEW_SIBLING, why))
        return out
    detail = _cannot_answer(p, probe, has_nccl)
    if inferred is not None:
        detail += f"{_LIKELY}{why}), but an inference never passes a process"
    out.append(Finding("unknown", p.pid, title, var, exp, None, "", detail))
    return out


def _untuned(
    p: ProcInfo, title: str, var: str,
    answers: list[tuple[str, str | None]], has_nccl: bool, applied: str | None,
    launched: Mapping[str, str], probe: Mapping[int, ProcessRecords], sibling: ProcInfo | None = None,
) -> list[Finding]:
    present = [(v, val) for v, val in answers if val is not None]
    if applied is not None:
        present.append((VIEW_NCCL, applied))
    inferred, why = _sibling_says(p, var, sibling)
    if not present and inferred is not None:
        present.append((VIEW_SIBLING, inferred))
    if present:
        view, val = present[-1]
        if var in launched:
            return [Finding("note", p.pid, title, var, None, val, view,
                            f"set explicitly in the untuned launch environment ({launched[var]!r})")]
        detail = why if view == VIEW_SIBLING else "a tuned variable reached an untuned server's process"
        if view == VIEW_CHILD:
            detail += ": a child it started carries it"
            if (VIEW_PROC, None) in answers:
                detail += ", so it was set after it started (not in its /proc start environment)"
        return [Finding("leak", p.pid, title, var, None, val, view, detail)]
    if answers or has_nccl:
        view = answers[-1][0] if answers else VIEW_NCCL
        return [Finding("ok", p.pid, title, var, None, None, view)]
    return [Finding("unknown", p.pid, title, var, None, None, "", _cannot_answer(p, probe, has_nccl))]
