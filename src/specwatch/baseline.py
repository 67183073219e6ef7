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

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specwatch import stats
from specwatch.errors import UsageError
from specwatch.machine import diff_fingerprints
from specwatch.result import (
    Migration,
    Result,
    ResultSet,
    atomic_write_json,
    load_versioned,
    make_key,
    utc_now,
)

BASELINE_VERSION = 2


def _v1_to_v2(data: dict) -> dict:
    """Version 1 had one session per baseline: it becomes the only entry of ``sessions``."""
    for m in (data.get("metrics") or {}).values():
        if isinstance(m, dict):
            m.setdefault("sessions", [{"recorded": data.get("recorded"), "commit": data.get("commit"),
                                       "samples": list(m.get("samples") or [])}])
    return data


BASELINE_MIGRATIONS: dict[int, Migration] = {1: _v1_to_v2}
RECORD_HOW = "`pytest -m perf --update-baselines` or `specwatch baseline update RESULTS.json`"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
# Fingerprint fields that never make two machines different for a baseline's purpose.
_VOLATILE = frozenset({"os", "host_id"})


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
    # oldest first: recorded, commit, samples and, since session 3, host (machine.host_id)
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

    def reference_for(self, host: str | None, min_sessions: int) -> tuple[list[float], list[list[float]], str]:
        """The samples, the per-session samples and a note, for a comparison made on machine ``host``.

        With at least ``min_sessions`` sessions recorded on this very machine, only those count: a
        per-machine baseline, because machines of one class differ by a few percent (leases of the
        lent H200s by 5%, docs/validation/README.md section 7). Otherwise every session counts, and
        the note says when none of them was recorded here.
        """
        kept = [s for s in self.sessions if s.get("samples")]
        if not kept:
            return list(self.samples), [], ""
        mine = [s for s in kept if host and s.get("host") == host]
        if min_sessions <= len(mine) < len(kept):
            pooled = [float(x) for s in mine for x in s["samples"]]
            return pooled, [list(s["samples"]) for s in mine], (
                f"judged against the {len(mine)} of its {len(kept)} sessions recorded on this machine")
        hosts = {s["host"] for s in kept if s.get("host")}
        note = ""
        if host and hosts and host not in hosts:
            note = (f"none of its {len(kept)} sessions was recorded on this machine (they come from "
                    f"{len(hosts)} other machine(s) of the class); machines of one class can differ by a few "
                    f"percent, which the sessions' spread covers only when they span several machines")
        return list(self.samples), [list(s["samples"]) for s in kept], note

    @classmethod
    def from_result(cls, r: Result, *, recorded: str = "", commit: str | None = None,
                    earlier: list[dict[str, Any]] | None = None, keep_sessions: int = 1,
                    host: str | None = None) -> BaselineMetric:
        """From one result, after the kept ``earlier`` sessions (summary computed with a fixed seed)."""
        if not r.samples:
            raise UsageError(f"{r.key}: no samples to record as a baseline")
        session = {"recorded": recorded, "commit": commit, "samples": list(r.samples)}
        if host:
            session["host"] = host
        sessions = [*(earlier or []), session][-max(1, keep_sessions):]
        pooled = [float(x) for sess in sessions for x in sess["samples"]]
        return cls(r.workload, r.metric, r.unit, r.higher_is_better, pooled,
                   stats.summarize(pooled), dict(r.extra), sessions)  # fmt: skip


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
        """Warning text listing how the current machine differs from the baseline's, or None."""
        diffs = [
            d for d in diff_fingerprints(self.machine, current) if d.split(":", 1)[0] not in _VOLATILE
        ]
        if not diffs:
            return None
        where = f" ({self.path})" if self.path else ""
        lines = "\n".join(f"  - {d}" for d in diffs)
        return (
            f"baseline {self.machine_class}/{self.profile}{where} was recorded on a different "
            f"machine or stack; numbers may not be comparable:\n{lines}"
        )

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
    def from_dict(cls, data: Mapping[str, Any], path: Path | None = None) -> Baseline:
        """Build from the on-disk form; UsageError names the bad field."""
        where = str(path or "baseline")
        metrics_raw = data.get("metrics")
        if not isinstance(metrics_raw, dict):
            raise UsageError(f"{where}: field 'metrics' must be an object")
        metrics: dict[str, BaselineMetric] = {}
        for name, m in metrics_raw.items():
            if not isinstance(m, dict):
                raise UsageError(f"{where}: metric {name!r} must be an object")
            r = Result.from_dict({**m, "key": name, "profile": str(data.get("profile", ""))})
            summary = m.get("summary")
            sessions = m.get("sessions")
            if not isinstance(sessions, list) or not all(isinstance(x, dict) for x in sessions):
                raise UsageError(f"{where}: metric {name!r}: field 'sessions' must be a list of objects")
            metrics[name] = BaselineMetric(
                r.workload, r.metric, r.unit, r.higher_is_better, r.samples,
                stats.Summary.from_dict(summary) if isinstance(summary, dict) else stats.summarize(r.samples),
                r.extra, sessions,
            )  # fmt: skip
        for name in ("machine_class", "profile"):
            if not isinstance(data.get(name), str):
                raise UsageError(f"{where}: field {name!r} must be a string")
        commit = data.get("commit")
        return cls(
            machine_class=data["machine_class"],
            profile=data["profile"],
            machine=dict(data.get("machine") or {}),
            commit=str(commit) if commit is not None else None,
            recorded=str(data.get("recorded") or ""),
            metrics=metrics,
            path=path,
        )


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
        data = load_versioned(path, "baseline", BASELINE_VERSION, BASELINE_MIGRATIONS)
        return Baseline.from_dict(data, path)

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
        return sorted((p.parent.name, p.stem) for p in self.root.glob("*/*.json"))

    def record(
        self,
        machine_class: str,
        profile: str,
        fingerprint: Mapping[str, Any],
        commit: str | None,
        results: ResultSet | Iterable[Result],
        *,
        recorded: str | None = None,
        keep_sessions: int = 1,
    ) -> Path:
        """Write the baseline of one profile from its results, atomically.

        ``keep_sessions`` > 1 keeps the samples of up to that many recording sessions (this one
        included, the oldest dropped first); 1 replaces the baseline.
        """
        items = results.results if isinstance(results, ResultSet) else list(results)
        mine = [r for r in items if r.profile == profile]
        if not mine:
            raise UsageError(f"no results for profile {profile!r} to record as a baseline")
        recorded = recorded or utc_now()
        old = self.load(machine_class, profile) if keep_sessions > 1 else None
        metrics: dict[str, BaselineMetric] = {}
        for r in mine:
            before = old.get(r.workload, r.metric) if old else None
            m = BaselineMetric.from_result(r, recorded=recorded, commit=commit, keep_sessions=keep_sessions,
                                           earlier=before.sessions if before else None,
                                           host=fingerprint.get("host_id"))
            if m.name in metrics:
                raise UsageError(f"duplicate metric {m.name!r} for profile {profile!r}")
            metrics[m.name] = m
        base = Baseline(
            machine_class=_check_name(machine_class, "machine class"),
            profile=_check_name(profile, "profile"),
            machine={**dict(fingerprint), "machine_class": machine_class},
            commit=commit,
            recorded=recorded,
            metrics=metrics,
        )
        return atomic_write_json(self.path_for(machine_class, profile), base.to_dict())

    def record_all(self, results: ResultSet, *, machine_class: str | None = None,
                   keep_sessions: int = 1) -> list[Path]:
        """Record one baseline per profile of a results file (its machine, commit and time)."""
        mc = machine_class or results.machine_class
        if not mc:
            raise UsageError("the results file has no machine.machine_class; pass the machine class")
        return [
            self.record(mc, prof, results.machine, results.commit, results.for_profile(prof),
                        recorded=results.created, keep_sessions=keep_sessions)
            for prof in results.profiles()
        ]
