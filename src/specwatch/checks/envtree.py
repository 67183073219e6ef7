"""What a process tree shows about environments beyond each process's own ``/proc`` start view.

Pure: plain data in (:class:`~specwatch.signals.procenv.ProcInfo`), plain data out; the verdicts are
:mod:`specwatch.checks.envcheck`'s.

* A child inherits its parent's environment as it is when the child starts, so a readable child
  shows what its parent carried, even a blank parent. A variable absent from (or different in) a
  process's start environment but present in a readable child (a helper such as
  ``multiprocessing``'s resource tracker) was set inside that process after it started: by a
  ``sitecustomize.py``, a patch, or code that exports it (:func:`find_set_after_start`). That
  holds when setproctitle blanked every worker.
* With start times, a blank worker started after a readable sibling of the same parent most likely
  inherited what that sibling carries (:func:`earlier_sibling`). Only likely: a parent may filter
  the environment of one child (the reference server's ``--ref-fault-drop-env`` does), so the
  verdicts let it name a leak or a mismatch, never pass a process.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from specwatch.signals import ncclenv
from specwatch.signals.procenv import ProcInfo

__all__ = ["SetAfterStart", "describe_set_after_start", "earlier_sibling", "find_set_after_start", "short_title"]


@dataclass(frozen=True)
class SetAfterStart:
    """Variables a process set in itself after it started, shown by a child that it started later.

    ``started_with``: each variable's value in the parent's ``/proc`` start environment (None:
    absent); ``variables``: its value in the child. ``via``: processes between the two whose
    ``/proc`` could not answer (the variable was set in the parent or in one of them).
    """

    pid: int
    title: str
    child_pid: int
    child_title: str
    variables: dict[str, str]
    started_with: dict[str, str | None]
    via: tuple[int, ...] = ()

    def describe(self) -> str:
        """One sentence: who set what, and the evidence."""
        return describe_set_after_start([self])[self.pid]


def describe_set_after_start(items: Iterable[SetAfterStart]) -> dict[int, str]:
    """Per parent pid, one sentence: what it set after it started, and the children that show it."""
    by_parent: dict[int, list[SetAfterStart]] = {}
    for sa in items:
        by_parent.setdefault(sa.pid, []).append(sa)
    out = {}
    for pid, kids in by_parent.items():
        first, via = kids[0], sorted({v for k in kids for v in k.via})
        other = " or has other values of" if any(v is not None for k in kids for v in k.started_with.values()) else ""
        where = f"set inside {short_title(first.title)} (pid {first.pid}) after it started" + (
            f", or inside pid {', '.join(map(str, via))} below it (unreadable)" if via else "")
        kin = ("descendant" if via else "child") if len(kids) == 1 else ("descendants" if via else "children")
        who = ", ".join(f"{short_title(k.child_title)} (pid {k.child_pid})" for k in kids)
        out[pid] = (f"{where}, by a sitecustomize.py or a patch: its /proc start environment lacks{other} "
                    f"{', '.join(sorted({v for k in kids for v in k.variables}))}, but its {kin} {who}, started "
                    f"after it, {'carries' if len(kids) == 1 else 'carry'} them")
    return out


def short_title(title: str, width: int = 60) -> str:
    """``title`` cut to ``width`` characters ("?" when empty)."""
    title = title or "?"
    return title if len(title) <= width else title[: width - 3] + "..."


def _in_scope(var: str, variables: Iterable[str], scope: str) -> bool:
    return var in set(variables) or any(var.startswith(p[:-1]) if p.endswith("*") else var == p
                                        for p in scope.split(",") if p)


def find_set_after_start(
    procs: Iterable[ProcInfo],
    variables: Iterable[str] = (),
    scope: str = "NCCL_*",
    engine_set: Iterable[str] = (),
) -> list[SetAfterStart]:
    """Per (process, readable child): the variables the child carries that the process's start environment lacks.

    Considered: ``variables`` and names matching ``scope`` (``PREFIX*``, comma-separated), minus
    ``engine_set`` (the engine sets those itself before spawning: not a sitecustomize's doing). The
    parent is the child's nearest ancestor whose ``/proc`` start environment can answer.
    """
    by_pid = {p.pid: p for p in procs}
    wanted = set(variables)
    skip = set(engine_set) - wanted
    out: list[SetAfterStart] = []
    for child in sorted(by_pid.values(), key=lambda p: p.pid):
        if not child.environ.readable:
            continue
        via: list[int] = []
        parent = by_pid.get(child.ppid)
        while parent is not None and not parent.environ.readable and parent.pid not in via:
            via.append(parent.pid)
            parent = by_pid.get(parent.ppid)
        if parent is None or parent.pid == child.pid:
            continue
        found: dict[str, str] = {}
        before: dict[str, str | None] = {}
        for var, val in child.environ.env.items():
            if var in skip or not _in_scope(var, wanted, scope):
                continue
            can, had = parent.environ.lookup(var)
            if can and (had is None or ncclenv.normalize_value(had) != ncclenv.normalize_value(val)):
                found[var], before[var] = val, had
        if found:
            out.append(SetAfterStart(parent.pid, parent.title, child.pid, child.title, found, before, tuple(via)))
    return out


def earlier_sibling(
    p: ProcInfo, var: str, everyone: Sequence[ProcInfo], starts: Mapping[int, float],
) -> ProcInfo | None:
    """The readable sibling (same parent) started last before ``p`` that can answer for ``var``."""
    mine = starts.get(p.pid)
    if mine is None:
        return None
    best: ProcInfo | None = None
    for s in everyone:
        t = starts.get(s.pid)
        if s.pid == p.pid or s.ppid != p.ppid or t is None or t > mine or not s.environ.covers(var):
            continue
        if best is None or t > starts[best.pid]:
            best = s
    return best
