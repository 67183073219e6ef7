"""Baseline files ``baselines/<machine-class>/<profile>.json``, reviewed in git.

One file per machine class and profile holds, per ``<workload>/<metric>``, the raw samples, unit,
direction and a summary (median, bootstrap CI, CV, n), plus the machine fingerprint, the commit of
the server under test and the date. A baseline may keep the samples of its last few recording
sessions (``sessions``, version 2): a machine drifts between sessions by about as much as the
regressions worth catching (docs/validation/README.md), and a baseline that spans sessions carries
that drift in its spread instead of hiding it. ``samples`` is then the pool of the kept sessions.
Baselines change only through ``record`` (called by ``--update-baselines`` or ``specwatch baseline
update``), so a reviewer sees the diff.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specwatch.engines.registry import bundled
from specwatch.errors import UsageError
from specwatch.judge import stats
from specwatch.judge.variance import MachineSession
from specwatch.store.atomic import write_text_atomic
from specwatch.store.machine import diff_fingerprints, run_machine, session_machine
from specwatch.store.result import (
    Migration,
    Result,
    ResultSet,
    dumps,
    finite_samples,
    is_finite_number,
    make_key,
    migrate,
    read_json,
    show_value,
    utc_now,
)

BASELINE_VERSION = 2


#: files beside the baselines that are not baselines: ab's round spread, the hardware's pooled machine term
NOT_BASELINES = ("round-spread.json", "machine-term.json")

def _v1_to_v2(data: dict) -> dict:
    """Version 1 had one session per baseline: it becomes the only entry of ``sessions``."""
    metrics = data.get("metrics")
    for m in metrics.values() if isinstance(metrics, dict) else ():
        if isinstance(m, dict):  # anything malformed is left for from_dict to name
            samples = m.get("samples")
            m.setdefault("sessions", [{"recorded": data.get("recorded"), "commit": data.get("commit"),
                                       "samples": list(samples) if isinstance(samples, list) else []}])
    return data


BASELINE_MIGRATIONS: dict[int, Migration] = {1: _v1_to_v2}
RECORD_HOW = "`pytest -m perf --update-baselines` or `specwatch baseline update RESULTS.json`"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
# Fingerprint fields that never make two machines different for a baseline's purpose.
_VOLATILE = frozenset({"os", "host_id", "yardstick", "gpu_identity"})
# The engine's identity: judged by engine_change, not listed as machine differences.
_ENGINE_KEYS = frozenset({"engine_version", "engine_commit"})


def _engine_text(fp: Mapping[str, Any]) -> str:
    version = fp.get("engine_version") or "version not recorded"
    commit = f" (commit {str(fp['engine_commit'])[:12]})" if fp.get("engine_commit") else ""
    return f"{fp.get('engine') or 'engine'} {version}{commit}"


def engine_change(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> str | None:
    """``"sglang 0.5.22 (commit …) → sglang 0.5.23 (commit …)"`` when the engine's version changed
    since ``recorded``, or its source checkout's commit did (not for the reference server, whose
    commit is specwatch's own); None when the same, or when this run does not know its version."""
    (now_v, then_v), (now_c, then_c) = ((current.get(k), recorded.get(k)) for k in ("engine_version", "engine_commit"))
    moved = bool(now_c and then_c and now_c != then_c and not bundled(current.get("engine")))
    if now_v is None or (now_v == then_v and not moved):
        return None
    return f"{_engine_text(recorded)} → {_engine_text(current)}"


@dataclass
class BaselineMetric:
    """One metric of one workload in a baseline."""

    workload: str
    metric: str
    unit: str
    higher_is_better: bool
    samples: list[float]
    summary: stats.Summary
    extra: dict[str, Any] = field(default_factory=dict)
    # oldest first: recorded, commit, samples and, since session 3, host (machine.host_id); since the
    # machine yardstick, yardstick (machine.yardstick, specwatch.load.yardstick), when the run measured one
    sessions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def name(self) -> str:
        """'<workload>/<metric>'."""
        return f"{self.workload}/{self.metric}"

    def to_dict(self) -> dict[str, Any]:
        """On-disk form."""
        return {
            "workload": self.workload, "metric": self.metric, "unit": self.unit,
            "higher_is_better": self.higher_is_better, "samples": list(self.samples),
            "summary": self.summary.to_dict(), "extra": dict(self.extra), "sessions": list(self.sessions),
        }  # fmt: skip

    def reference_for(self, host: str | None, min_sessions: int, *, same_class: bool | None = True,
                      machine: str | None = None) -> tuple[list[float], list[MachineSession], str]:
        """The samples, the per-session samples and a note, for a comparison made on a machine: ``machine``,
        the run's label (:func:`specwatch.store.machine.run_machine`), else that of a run whose ``host`` is known.

        With at least ``min_sessions`` sessions recorded on this very machine (:func:`session_machine`
        names the same), only those count: a per-machine baseline, because machines of one class differ
        by a few percent (leases of the lent H200s by 5%, docs/validation/README.md section 7). Otherwise
        every session counts, each naming its machine, so the drift gate judges the run as one on a new
        machine; the note says when none of them is known to come from here. ``same_class``: whether that
        machine is of the baseline's class (False: of another class, None: unknown); the note never
        claims more about the sessions' machines than the baseline records.
        """
        kept = [s for s in self.sessions if s.get("samples")]
        if not kept:
            return list(self.samples), [], ""
        every = [MachineSession(s["samples"], session_machine(s)) for s in kept]
        chosen = self.chosen_sessions(host, min_sessions, same_class=same_class, machine=machine)
        hosts = {s["host"] for s in kept if s.get("host")}
        unnamed = sum(1 for s in kept if not s.get("host"))
        if same_class is False:
            return list(self.samples), every, (
                f"its {len(kept)} session(s) were recorded on another machine class than this machine's "
                f"({_origin(hosts, unnamed)}): the comparison measures the machines as much as the server")
        if len(chosen) < len(kept):
            pooled = [float(x) for s in chosen for x in s["samples"]]
            return pooled, [MachineSession(s["samples"], session_machine(s)) for s in chosen], (
                f"judged against the {len(chosen)} of its {len(kept)} sessions recorded on this machine")
        note = ""
        label = _label(host, machine)
        if label and hosts and label not in {m.machine for m in every}:
            of_class = " of the class" if same_class else ""
            if unnamed:
                head = (f"none of its {len(kept)} sessions is known to come from this machine "
                        f"({len(kept) - unnamed} come from {len(hosts)} other machine(s){of_class}, {unnamed} "
                        f"from a machine the baseline did not record)")
            else:
                head = (f"none of its {len(kept)} sessions was recorded on this machine (they come from "
                        f"{len(hosts)} other machine(s){of_class})")
            note = (f"{head}; machines of one class can differ by a few percent, which the sessions' spread "
                    f"covers only when they span several machines")
        return list(self.samples), every, note

    def chosen_sessions(self, host: str | None, min_sessions: int, *, same_class: bool | None = True,
                        machine: str | None = None) -> list[dict[str, Any]]:
        """The recorded sessions (with samples) that :meth:`reference_for` judges against, in its order:
        those of the run's machine (``machine``, else ``host``) when it has at least ``min_sessions``, else all."""
        kept = [s for s in self.sessions if s.get("samples")]
        label = _label(host, machine)
        mine = [s for s in kept if label and session_machine(s) == label]
        return mine if same_class is not False and min_sessions <= len(mine) < len(kept) else kept

    @classmethod
    def from_result(cls, r: Result, *, recorded: str = "", commit: str | None = None,
                    earlier: list[dict[str, Any]] | None = None, keep_sessions: int | None = None,
                    host: str | None = None, yardstick: Mapping[str, Any] | None = None,
                    gpu_identity: Mapping[str, Any] | None = None) -> BaselineMetric:
        """From one result, after the ``earlier`` sessions (all of them, or the last ``keep_sessions``
        with this one; summary computed with a fixed seed); ``yardstick`` and ``gpu_identity``: the
        recording machine's (:func:`specwatch.store.machine.gpu_identity`), kept with the session."""
        if not r.samples:
            raise UsageError(f"{r.key}: no samples to record as a baseline")
        finite_samples(r.samples, f"{r.key}: cannot record as a baseline", positive=True)
        session: dict[str, Any] = {"recorded": recorded, "commit": commit, "samples": list(r.samples)}
        if host:
            session["host"] = host
        if yardstick:
            session["yardstick"] = dict(yardstick)
        if gpu_identity:
            session["gpu_identity"] = dict(gpu_identity)
        sessions = [*(earlier or []), session]
        sessions = sessions[-max(1, keep_sessions):] if keep_sessions else sessions
        pooled = [float(x) for sess in sessions for x in sess["samples"]]
        return cls(r.workload, r.metric, r.unit, r.higher_is_better, pooled,
                   stats.summarize(pooled), dict(r.extra), sessions)  # fmt: skip


def unrecordable(r: Result) -> str:
    """Why a result's samples cannot be a baseline session ("" when they can): none (every run left out), or one
    that is not finite and positive (a baseline is divided by and logged). The recording keeps that key's earlier
    sessions and records the rest of the run (:meth:`BaselineStore.record_all`'s ``said``)."""
    if not r.samples:
        return "has no samples in this run (every run was left out)"
    try:
        finite_samples(r.samples, r.key, positive=True)
    except UsageError as exc:
        return f"has a sample no baseline can hold ({str(exc).removeprefix(r.key + ': ')})"
    return ""


def _label(host: str | None, machine: str | None) -> str | None:
    """The run's machine label: ``machine`` as given, else that of a run known by its host id alone."""
    return machine or (run_machine({"host_id": host}) if host else None)


def _origin(hosts: set[str], unnamed: int) -> str:
    """Which machines sessions come from, as far as they record it."""
    if not hosts:
        return "no session records its machine"
    named = f"{len(hosts)} machine(s)"
    return f"on {named}" if not unnamed else f"{named} named, {unnamed} session(s) without a recorded machine"


def _check_sessions(sessions: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(sessions, list) or not all(isinstance(x, dict) for x in sessions):
        raise UsageError(f"{where}: field 'sessions' must be a list of objects")
    for i, sess in enumerate(sessions):
        finite_samples(sess.get("samples", []), f"{where}: session {i}", positive=True)
        if not isinstance(sess.get("host") or "", str):
            raise UsageError(f"{where}: session {i}: field 'host' must be a string")
        for name in ("yardstick", "gpu_identity"):
            if not isinstance(sess.get(name) or {}, dict):
                raise UsageError(f"{where}: session {i}: field {name!r} must be an object")
    return sessions


def _summary(raw: Any, samples: list[float], where: str) -> stats.Summary:
    if raw is None:
        return stats.summarize(samples)
    if not isinstance(raw, dict):
        raise UsageError(f"{where}: field 'summary' must be an object")
    for name in stats.Summary.__dataclass_fields__:
        v = raw.get(name)
        if name == "confidence" and v is None:
            continue
        if not is_finite_number(v):
            raise UsageError(f"{where}: field 'summary.{name}' must be a finite number, got {show_value(v)}; re-record "
                             "the baseline (or delete its summary to have it recomputed)")
    return stats.Summary.from_dict(raw)


@dataclass
class Baseline:
    """A loaded baseline file."""

    machine_class: str
    profile: str
    machine: dict[str, Any]
    commit: str | None
    recorded: str
    metrics: dict[str, BaselineMetric]
    path: Path | None = None

    def get(self, workload: str, metric: str) -> BaselineMetric | None:
        """The metric '<workload>/<metric>', or None."""
        return self.metrics.get(f"{workload}/{metric}")

    def added(self) -> str:
        """What its last session added (a baseline update says it): its number, its machine (:func:`session_machine`),
        that machine's sessions and all, and the keys it added (keys it did not measure keep theirs)."""
        new = [m for m in self.metrics.values() if m.sessions and m.sessions[-1].get("recorded") == self.recorded]
        kept = max((m.sessions for m in new or self.metrics.values()), key=len, default=[]) or [{}]
        machine, others = session_machine(kept[-1]), len(self.metrics) - len(new)
        mine = sum(1 for s in kept if session_machine(s) == machine)
        return (f"added session {len(kept)} ({machine}; {mine} session(s) of that machine, {len(kept)} in all), "
                f"{len(new or self.metrics)} key(s)" + (f"; {others} other key(s) kept as they were" if new and others
                                                          else ""))

    def reference(self, result: Result) -> BaselineMetric | None:
        """The stored metric matching a current result (same workload and metric)."""
        return self.get(result.workload, result.metric)

    def as_results(self) -> list[Result]:
        """The stored samples as Results (for comparisons and history imports)."""
        return [
            Result(make_key(self.profile, m.workload, m.metric), self.profile, m.workload, m.metric,
                   m.unit, m.higher_is_better, list(m.samples), dict(m.extra))
            for _, m in sorted(self.metrics.items())
        ]  # fmt: skip

    def fingerprint_warning(self, current: Mapping[str, Any]) -> str | None:
        """Warning text: the engine version the baseline was recorded on when it is another (first),
        then how the current machine differs from the baseline's; None when neither."""
        diffs = [
            d for d in diff_fingerprints(self.machine, current) if d.split(":", 1)[0] not in _VOLATILE | _ENGINE_KEYS
        ]
        engine = engine_change(self.machine, current)
        if not diffs and engine is None:
            return None
        where = f" ({self.path})" if self.path else ""
        out = []
        if engine is not None:
            out.append(f"baseline {self.machine_class}/{self.profile}{where} was recorded on another engine "
                       f"version: {engine}; a difference may be the engine's (re-record the baseline on this one)")
        if diffs:
            lines = "\n".join(f"  - {d}" for d in diffs)
            out.append(f"baseline {self.machine_class}/{self.profile}{where} was recorded on a different "
                       f"machine or stack; numbers may not be comparable:\n{lines}")
        return "\n".join(out)

    def resolution_notes(self, requested: float, alpha: float = 0.01) -> list[str]:
        """A line per throughput metric whose sessions are too spread for the ``requested`` tolerance, each
        session labelled with its machine as the drift gate labels them, judged for a run on the machine of
        the latest session (the one just recorded): on it when it holds enough sessions, else on a new one."""
        from specwatch.judge.compare import MIN_SESSIONS, drift_basis

        notes = []
        for name, m in sorted(self.metrics.items()):
            sessions = [MachineSession(s["samples"], session_machine(s)) for s in m.sessions if s.get("samples")]
            if not name.endswith("tok_s") or len(sessions) < MIN_SESSIONS:
                continue
            basis = drift_basis(requested, sessions, None, alpha, machine=sessions[-1].machine)
            if basis.tolerance > requested:
                notes.append(f"baseline {self.profile} {name} is too noisy for the requested {requested:.1%} "
                             f"tolerance: {basis.note}")
        return notes

    def to_dict(self) -> dict[str, Any]:
        """On-disk form."""
        return {
            "version": BASELINE_VERSION,
            "machine_class": self.machine_class,
            "profile": self.profile,
            "machine": dict(self.machine),
            "commit": self.commit,
            "recorded": self.recorded,
            "metrics": {k: m.to_dict() for k, m in sorted(self.metrics.items())},
        }

    @classmethod
    def from_dict(cls, data: Any, path: Path | None = None) -> Baseline:
        """Build from the on-disk form of any version this specwatch reads (older ones migrated
        first); UsageError names the bad field."""
        where = str(path or "baseline")
        data = migrate(copy.deepcopy(data), "baseline", BASELINE_VERSION, BASELINE_MIGRATIONS, where)
        for name in ("machine_class", "profile"):
            if not isinstance(data.get(name), str):
                raise UsageError(f"{where}: field {name!r} must be a string")
        machine = data.get("machine") or {}
        if not isinstance(machine, dict):
            raise UsageError(f"{where}: field 'machine' must be an object")
        metrics_raw = data.get("metrics")
        if not isinstance(metrics_raw, dict):
            raise UsageError(f"{where}: field 'metrics' must be an object")
        metrics: dict[str, BaselineMetric] = {}
        for name, m in metrics_raw.items():
            if not isinstance(m, dict):
                raise UsageError(f"{where}: metric {name!r} must be an object")
            try:
                r = Result.from_dict({**m, "key": name, "profile": data["profile"]})
            except UsageError as exc:
                raise UsageError(f"{where}: metric {exc}") from None
            if not r.samples:
                raise UsageError(f"{where}: metric {name!r} has no samples")
            finite_samples(r.samples, f"{where}: metric {name!r}", positive=True)
            sessions = _check_sessions(m.get("sessions"), f"{where}: metric {name!r}")
            metrics[name] = BaselineMetric(
                r.workload, r.metric, r.unit, r.higher_is_better, r.samples,
                _summary(m.get("summary"), r.samples, f"{where}: metric {name!r}"), r.extra, sessions,
            )  # fmt: skip
        commit = data.get("commit")
        return cls(
            machine_class=data["machine_class"],
            profile=data["profile"],
            machine=dict(machine),
            commit=str(commit) if commit is not None else None,
            recorded=str(data.get("recorded") or ""),
            metrics=metrics,
            path=path,
        )


def load_baseline(path: str | os.PathLike[str]) -> Baseline:
    """Read one baseline file: the single reader, so every caller gets older versions migrated."""
    p = Path(path)
    return Baseline.from_dict(read_json(p, "baseline"), p)


def _check_name(value: str, what: str) -> str:
    if not isinstance(value, str) or not _NAME.match(value) or ".." in value:
        raise UsageError(
            f"{what} {value!r} cannot name a baseline file (letters, digits, '.', '_', '+', '-')"
        )
    return value


class BaselineStore:
    """The folder of baselines: ``<root>/<machine-class>/<profile>.json``."""

    def __init__(self, root: str | os.PathLike[str] = "baselines") -> None:
        self.root = Path(root)

    def path_for(self, machine_class: str, profile: str) -> Path:
        """Where the baseline of this machine class and profile lives."""
        return self.root / _check_name(machine_class, "machine class") / f"{_check_name(profile, 'profile')}.json"

    def load(self, machine_class: str, profile: str) -> Baseline | None:
        """The baseline, or None when none was recorded."""
        path = self.path_for(machine_class, profile)
        if not path.exists():
            return None
        return load_baseline(path)

    def missing_message(self, machine_class: str, profile: str) -> str:
        """What to say when there is no baseline, including how to record one."""
        return (
            f"no baseline for profile {profile!r} on machine class {machine_class!r} "
            f"(expected {self.path_for(machine_class, profile)}); record one with {RECORD_HOW}"
        )

    def require(self, machine_class: str, profile: str) -> Baseline:
        """The baseline, or UsageError saying how to record one."""
        found = self.load(machine_class, profile)
        if found is None:
            raise UsageError(self.missing_message(machine_class, profile))
        return found

    def available(self) -> list[tuple[str, str]]:
        """(machine_class, profile) pairs that have a baseline, sorted."""
        if not self.root.is_dir():
            return []
        return sorted((p.parent.name, p.stem) for p in self.root.glob("*/*.json") if p.name not in NOT_BASELINES)

    def _build(self, machine_class: str, profile: str, fingerprint: Mapping[str, Any], commit: str | None,
               items: list[Result], *, recorded: str, keep_sessions: int | None, replace: bool,
               said: list[str] | None) -> tuple[Path, Baseline]:
        """The new baseline of one profile and its path; nothing written. The existing file, when
        there is one, must load (a broken or newer one stops the update) and gives the earlier sessions,
        unless ``replace``; ``said`` gets one line when earlier sessions are dropped."""
        mine = [r for r in items if r.profile == profile]
        if not mine:
            raise UsageError(f"no results for profile {profile!r} to record as a baseline")
        path = self.path_for(machine_class, profile)
        try:
            old = self.load(machine_class, profile)
        except UsageError as exc:
            raise UsageError(f"{exc}; nothing was written: repair or delete {path}, then record again") from None
        metrics: dict[str, BaselineMetric] = {}
        dropped = 0
        for r in mine:
            before = old.get(r.workload, r.metric) if old and not replace else None
            unusable = unrecordable(r)
            if unusable:  # every run left out (bursts), or a sample no baseline can hold: nothing added, said
                if said is None and r.samples:  # a caller that hears nothing is told by an error
                    raise UsageError(f"{r.key}: cannot record as a baseline: {unusable}")
                metrics.update({before.name: before} if before else {})
                kept = f"its {len(before.sessions)} earlier session(s) kept" if before else "not recorded"
                if said is not None:
                    said.append(f"{path}: {r.key} {unusable}: {kept}")
                continue
            m = BaselineMetric.from_result(r, recorded=recorded, commit=commit, keep_sessions=keep_sessions,
                                           earlier=before.sessions if before else None,
                                           host=fingerprint.get("host_id"), yardstick=fingerprint.get("yardstick"),
                                           gpu_identity=fingerprint.get("gpu_identity"))
            if m.name in metrics:
                raise UsageError(f"duplicate metric {m.name!r} for profile {profile!r}")
            metrics[m.name] = m
            had = old.get(r.workload, r.metric) if old else None
            dropped = max(dropped, (len(had.sessions) if had else 0) + 1 - len(m.sessions))
        for name, unmeasured in (old.metrics.items() if old and not replace else ()):  # nothing lost
            metrics.setdefault(name, unmeasured)
        if said is not None and dropped:
            said.append(f"replaced {path}: its {dropped} earlier session(s) dropped (asked for)" if replace else
                        f"{path}: kept the last {keep_sessions} session(s), dropped the {dropped} oldest (asked for)")
        return path, Baseline(machine_class=machine_class, profile=profile,
                              machine={**dict(fingerprint), "machine_class": machine_class}, commit=commit,
                              recorded=recorded, metrics=metrics)

    def record(self, machine_class: str, profile: str, fingerprint: Mapping[str, Any], commit: str | None,
               results: ResultSet | Iterable[Result], *, recorded: str | None = None,
               keep_sessions: int | None = None, replace: bool = False, said: list[str] | None = None) -> Path:
        """Write the baseline of one profile from its results, atomically (the file's mode kept): the session added
        to the earlier ones, or only the last ``keep_sessions`` kept, or every earlier one dropped (``replace``)."""
        items = results.results if isinstance(results, ResultSet) else list(results)
        path, base = self._build(machine_class, profile, fingerprint, commit, items, recorded=recorded or utc_now(),
                                 keep_sessions=keep_sessions, replace=replace, said=said)
        return write_text_atomic(path, dumps(base.to_dict()))

    def record_all(self, results: ResultSet, *, machine_class: str | None = None, keep_sessions: int | None = None,
                   replace: bool = False, said: list[str] | None = None) -> list[Path]:
        """Record one baseline per profile of a results file, as :meth:`record`; all or nothing: every new document
        is built before the first file is written, so a broken baseline leaves every file as it was."""
        mc = machine_class or results.machine_class
        if not mc:
            raise UsageError("the results file has no machine.machine_class; pass the machine class")
        recorded = results.created or utc_now()
        texts = []
        for prof in results.profiles():
            path, base = self._build(mc, prof, results.machine, results.commit, results.for_profile(prof),
                                     recorded=recorded, keep_sessions=keep_sessions, replace=replace, said=said)
            texts.append((path, dumps(base.to_dict())))
        return [write_text_atomic(path, text) for path, text in texts]
