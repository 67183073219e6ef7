"""The machine term of a machine class's hardware, pooled over every baseline measured on that hardware:
``<baseline-dir>/<class>/machine-term.json``.

A drift gate judges a run on a machine its baseline never saw against the spread between machines. One
baseline's sessions seldom span more than 3 machines (2 degrees of freedom), so that interval is wide. The
term belongs to the GPUs, not to one profile: this file pools it (:func:`specwatch.judge.machineterm.pool`)
over every profile and every machine class whose baselines name the same GPU model, plus any sessions
recorded elsewhere (:func:`write`'s ``extra``), per metric. :func:`load` gives the drift gate the term of a
run's class (``run.reference``); the gate uses it when it rests on more degrees of freedom than the
baseline's own, and its note says which it used. Reviewed in git like the baselines beside it; written by
``specwatch baseline machine-term CLASS`` (the baselines alone) or ``python docs/reference/machine_term.py``
(every recorded H200 lease).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from specwatch.errors import UsageError
from specwatch.judge import machineterm, variance
from specwatch.judge.variance import MachineSession, PooledTerm
from specwatch.store.baseline import NOT_BASELINES, load_baseline
from specwatch.store.result import atomic_write_json, load_versioned
from specwatch.store.sessions import baseline_sessions

FORMAT_VERSION = 1
FILE_NAME = "machine-term.json"
assert FILE_NAME in NOT_BASELINES

#: metric -> dataset name ("<class>/<profile>/<workload>") -> its sessions, each naming its machine
Datasets = dict[str, dict[str, list[MachineSession]]]


def baseline_files(root: Path) -> list[Path]:
    """Every baseline file under ``root`` (one folder per machine class)."""
    return sorted(p for p in root.glob("*/*.json") if p.name not in NOT_BASELINES)


def hardware_of(root: Path, machine_class: str) -> str | None:
    """The GPU model the class's baselines name (None: none names one)."""
    for path in baseline_files(root):
        model = load_baseline(path).machine.get("gpu_model") if path.parent.name == machine_class else None
        if model:
            return str(model)
    return None


def hardware_datasets(root: Path, gpu_model: str) -> Datasets:
    """The sessions of every baseline under ``root`` recorded on ``gpu_model``, per metric and dataset."""
    out: Datasets = {}
    for path in baseline_files(root):
        base, keys = baseline_sessions(path)
        if base.machine.get("gpu_model") != gpu_model:
            continue
        for ks in keys:
            workload = ks.key.split("/")[1]
            out.setdefault(ks.metric, {})[f"{path.parent.name}/{base.profile}/{workload}"] = list(ks.sessions)
    return out


def pooled(datasets: Datasets, hardware: str, without: str | None = None) -> dict[str, machineterm.Pool]:
    """Each metric's pooled term over ``datasets``; ``without``: a machine whose sessions are left out (a
    leave-one-machine-out replay)."""
    out: dict[str, machineterm.Pool] = {}
    for metric, named in datasets.items():
        comps = {}
        for name, sessions in named.items():
            keep = [s for s in sessions if variance.machine_of(s) != without] if without else sessions
            if len(keep) >= 2:
                comps[name] = variance.components(keep)
        got = machineterm.pool(comps)
        if got is not None:
            n = len(got.datasets)
            out[metric] = machineterm.Pool(PooledTerm(got.term.variance, got.term.df,
                                                      f"{n} dataset(s) of the {hardware}"), got.datasets)
    return out


def write(root: Path, machine_class: str, *, extra: Datasets | None = None, hardware: str | None = None,
          command: str = "", classes: Sequence[str] = ()) -> Path:
    """Pool the class's hardware term over every baseline of that hardware under ``root`` and ``extra``
    sessions (metric -> name -> sessions), and write it for ``machine_class`` (and each of ``classes``, which
    share the hardware); the path of the class's file."""
    model = hardware or hardware_of(root, machine_class)
    if model is None:
        raise UsageError(f"no baseline of {machine_class} under {root} names a GPU model: nothing to pool")
    data = hardware_datasets(root, model)
    for metric, named in (extra or {}).items():
        for name, sessions in named.items():  # more sessions of a dataset join it
            data.setdefault(metric, {}).setdefault(name, []).extend(sessions)
    pools = pooled(data, model)
    doc = {"version": FORMAT_VERSION, "hardware": model, "command": command,
           "recorded": datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
           "metrics": {m: _to_dict(p) for m, p in sorted(pools.items())}}
    first = None
    for cls in (machine_class, *classes):
        path = atomic_write_json(root / cls / FILE_NAME, {**doc, "machine_class": cls})
        first = first or path
    assert first is not None
    return first


def _to_dict(p: machineterm.Pool) -> dict[str, Any]:
    return {"variance": p.term.variance, "sigma": p.term.sigma, "df": p.term.df, "source": p.term.source,
            "datasets": [{"name": d.name, "machines": d.machines, "sessions": d.sessions, "sigma": d.sigma,
                          "estimate": d.estimate, "within": d.within, "df": d.df} for d in p.datasets]}


def load(root: Path, machine_class: str) -> dict[str, PooledTerm]:
    """The class's pooled machine term per metric ({} when the class has no file)."""
    path = root / machine_class / FILE_NAME
    if not path.exists():
        return {}
    data = load_versioned(path, "machine term", FORMAT_VERSION, {})
    try:
        metrics: Mapping[str, Any] = data["metrics"]
        return {m: PooledTerm(float(v["variance"]), float(v["df"]), str(v["source"])) for m, v in metrics.items()}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UsageError(f"{path}: not a machine-term file ({exc!r}); rewrite it") from None


__all__ = ["FILE_NAME", "FORMAT_VERSION", "NOT_BASELINES", "Datasets", "baseline_files", "hardware_datasets",
           "hardware_of", "load", "pooled", "write"]
