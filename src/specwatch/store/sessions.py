"""Recorded sessions per result key, read for the drift replays (``baseline_check.py``, ``sensitivity.py``; the
gate's floor and machine term of a baseline's key: :func:`specwatch.store.driftinput.of_baseline`).

A stored baseline keeps the samples of each recording session per metric; a results file is one
session of every key it holds. Both are read by their versioned loaders
(:func:`specwatch.store.baseline.load_baseline`, :meth:`specwatch.store.result.ResultSet.load`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from specwatch.errors import UsageError
from specwatch.judge.variance import MachineSession
from specwatch.store.baseline import Baseline, load_baseline, session_machine
from specwatch.store.machine import run_machine
from specwatch.store.result import ResultSet, make_key


@dataclass
class KeySessions:
    """The sessions of one result key: samples per session and where each came from."""

    key: str  # <profile>/<workload>/<metric>
    unit: str
    higher_is_better: bool
    sessions: list[MachineSession] = field(default_factory=list)  # each names its machine (session_machine)
    labels: list[str] = field(default_factory=list)  # a file name, or the recording date and machine
    yardsticks: list[dict | None] = field(default_factory=list)  # each session's machine yardstick, if recorded
    machine_classes: list[str | None] = field(default_factory=list)  # each results file's machine class, if recorded

    @property
    def metric(self) -> str:
        return self.key.rsplit("/", 1)[-1]

    @property
    def machines(self) -> list[str]:
        """Each session's machine (:func:`specwatch.store.baseline.session_machine`)."""
        return [s.machine or "?" for s in self.sessions]


def baseline_sessions(path: str | os.PathLike[str]) -> tuple[Baseline, list[KeySessions]]:
    """A baseline file and the recorded sessions of each of its metrics (sorted by key)."""
    base = load_baseline(path)
    found = []
    for _, m in sorted(base.metrics.items()):
        kept = [s for s in m.sessions if s.get("samples")]
        found.append(KeySessions(make_key(base.profile, m.workload, m.metric), m.unit, m.higher_is_better,
                                 [MachineSession(s["samples"], session_machine(s)) for s in kept],
                                 [recorded_label(s) for s in kept], [s.get("yardstick") for s in kept]))
    return base, found


def recorded_label(session: dict) -> str:
    """'2026-11-29 20:57 on host:631fc92cbeb5': when (to the minute) and on which machine (labelled as the drift
    gate groups sessions, :func:`specwatch.store.machine.session_machine`) a session was recorded."""
    when = str(session.get("recorded") or "-")[:16].replace("T", " ")
    machine = session_machine(session)
    return f"{when} on {machine}" if machine else when


def results_sessions(paths: Sequence[str | os.PathLike[str]]) -> dict[str, KeySessions]:
    """Key -> its sessions, one per results file that holds samples of it (in the order given);
    UsageError when two files disagree on a key's unit or direction."""
    found: dict[str, KeySessions] = {}
    for path in paths:
        rs = ResultSet.load(path)
        for r in rs.results:
            if not r.samples:
                continue
            ks = found.setdefault(r.key, KeySessions(r.key, r.unit, r.higher_is_better))
            if (ks.unit, ks.higher_is_better) != (r.unit, r.higher_is_better):
                raise UsageError(f"{path}: {r.key} is in {r.unit} (higher is better: {r.higher_is_better}), "
                                 f"but in {ks.unit} ({ks.higher_is_better}) in {ks.labels[0]}")
            ks.sessions.append(MachineSession(r.samples, run_machine(rs.machine, rs.commit, rs.created)))
            ks.labels.append(str(path))
            ks.yardsticks.append(rs.machine.get("yardstick"))
            ks.machine_classes.append(rs.machine_class)
    return found


__all__ = ["KeySessions", "baseline_sessions", "recorded_label", "results_sessions"]
