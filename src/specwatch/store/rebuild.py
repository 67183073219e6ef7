"""A machine class's baselines rebuilt from the history of its hosts (``specwatch baseline update
--from-history``): each run that measured a profile becomes one recording session of its baseline."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from specwatch.errors import UsageError
from specwatch.store.baseline import Baseline, BaselineMetric, BaselineStore
from specwatch.store.history_base import StoredRun

__all__ = ["baselines_from_history"]


def baselines_from_history(store: BaselineStore, runs: Sequence[StoredRun], machine_class: str, *,
                           profiles: Sequence[str] = (), metrics: Sequence[str] = (),
                           last: int | None = None) -> list[tuple[Path, Baseline, int, int]]:
    """One baseline per profile of ``runs`` (time order): every run that measured the profile becomes one
    recording session (its time, commit and host), the last ``last`` of them kept; partial runs and
    results without samples are left out. ``(path, baseline, sessions, machines)`` each; nothing written.
    """
    usable = [[r for r in run.results.results if r.samples and not r.extra.get("partial")
               and (not metrics or r.metric in metrics)] for run in runs]
    found = sorted({r.profile for results in usable for r in results})
    if not found:
        raise UsageError(f"the history has no complete run on machine class {machine_class} with samples"
                         + (f" of metric {', '.join(metrics)}" if metrics else ""))
    missing = sorted(set(profiles) - set(found))
    if missing:
        raise UsageError(f"the history has no complete run of profile {', '.join(missing)} on machine class "
                         f"{machine_class}" + (f" (it has {', '.join(found)})" if found else ""))
    out = []
    for profile in profiles or found:
        sessions = [(run, [r for r in results if r.profile == profile]) for run, results in zip(runs, usable,
                                                                                               strict=True)]
        sessions = [(run, results) for run, results in sessions if results][-(last or len(sessions)):]
        built: dict[str, BaselineMetric] = {}
        for run, results in sessions:
            for r in results:
                before = built.get(f"{r.workload}/{r.metric}")
                built[f"{r.workload}/{r.metric}"] = BaselineMetric.from_result(
                    r, recorded=run.time, commit=run.commit, earlier=before.sessions if before else None,
                    keep_sessions=len(sessions), host=run.machine.get("host_id"),
                    gpu_identity=run.machine.get("gpu_identity"))
        latest = sessions[-1][0]
        base = Baseline(machine_class=machine_class, profile=profile,
                        machine={**latest.machine, "machine_class": machine_class}, commit=latest.commit,
                        recorded=latest.time, metrics=dict(sorted(built.items())))
        hosts = {run.machine.get("host_id") for run, _ in sessions if run.machine.get("host_id")}
        out.append((store.path_for(machine_class, profile), base, len(sessions), len(hosts)))
    return out
