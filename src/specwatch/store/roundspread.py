"""The round-to-round spread of earlier A/B runs, per machine class: ``<baseline-dir>/<class>/round-spread.json``.

An A/B verdict judges per-round head/base ratios. With few rounds, the spread of this run's rounds
alone is a poor estimate (Student's t with 1-3 degrees of freedom is wide), so a verdict of a
2 % change would need many rounds, each a fresh boot of both sides. The spread between rounds is
a property of the machine class and the server (boot-to-boot luck), not of the change under test:
each earlier A/B run's log ratios around their own mean measure it. This file keeps them, and
:func:`specwatch.judge.stats.round_prior` pools them into the prior that ``specwatch ab`` combines
with its own rounds (a moderated t). Reviewed in git like the baselines beside it.

Each run names the result key it measured (``key``, e.g. ``large-eagle3-tuned/single-stream/decode_tok_s``;
empty in runs recorded before keys were kept), the engine its servers ran (``engine``, e.g. ``sglang``) and
what they served (``served``: engine, model, tensor parallelism, speculative settings and the workload's size,
a :class:`specwatch.served.Served` in its string form; empty in runs recorded before it was kept).

A prior belongs to the workload it was measured on (:meth:`RoundSpread.prior_for`): a key is judged on the runs
of the same key, and on those of other keys that served the same thing (twins whose profiles differ only in
name or environment), never on another model's, another speculative setting's or another workload's. Where
none exists the A/B rule's conservative default applies (:data:`specwatch.judge.sequential.DEFAULT_PRIOR`),
which the run's own rounds can overrule (:func:`specwatch.judge.sequential.look`). Why: how far a server's boots
wander depends on its size (a tiny launch-bound model's boots can spread tens of percent where a GPU-bound 8B model's
agree within 1 %), so a spread borrowed from another model hides or invents changes (the validation page's
boot-spread claim has the numbers).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from specwatch.errors import UsageError
from specwatch.judge.paired import RoundPrior, round_prior
from specwatch.served import Served
from specwatch.store.result import atomic_write_json, load_versioned

FORMAT_VERSION = 1
FILE_NAME = "round-spread.json"
#: the most recent runs kept per metric: a machine class's spread is a moving target
KEEP_RUNS = 200
#: a head/base ratio outside this range is no measurement of one server against another
RATIO_RANGE = (1e-3, 1e3)


def _ratio(value: Any) -> float:
    """One recorded ratio, checked: a real number (not a bool or text) within RATIO_RANGE."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(value)
    ratio = float(value)
    if not RATIO_RANGE[0] <= ratio <= RATIO_RANGE[1]:  # NaN fails too
        raise ValueError(value)
    return ratio


@dataclass(frozen=True)
class RoundRun:
    """One earlier A/B run's per-round ratios of one metric."""

    metric: str
    ratios: tuple[float, ...]
    recorded: str
    label: str
    key: str = ""  # the result key measured ("" in runs recorded before keys were kept)
    engine: str = ""  # the engine its servers ran ("" in runs recorded before engines were kept)
    #: what its servers served at the workload's size (None in runs recorded before it was kept); its string form
    #: is read (:meth:`Served.of`: a form that is no identity is a ValueError)
    served: Served | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "served", Served.of(self.served))

    def belongs_to(self, key: str, engine: str = "", served: Served | str | None = None) -> bool:
        """Whether this run's spread is a prior of ``key`` served as ``served`` by ``engine``: the same key, or
        another key of the same metric that served the same thing; never where either names another engine or
        another served identity. ``served``: a :class:`Served` or its string form (:meth:`Served.of`: a server's
        setup without its workload is a ValueError, never a silent mismatch)."""
        served = Served.of(served)
        if len(self.ratios) < 2 or (engine and self.engine and self.engine != engine):
            return False
        if self.key == key:
            return not (served and self.served and self.served != served)
        return bool(served) and self.served == served and self.metric == key.rsplit("/", 1)[-1]


class RoundSpread:
    """The round-spread file of one machine class (may not exist yet)."""

    def __init__(self, path: str | Path, machine_class: str, runs: Sequence[RoundRun] = ()) -> None:
        self.path = Path(path)
        self.machine_class = machine_class
        self.runs = list(runs)

    @classmethod
    def for_class(cls, baseline_dir: str | Path, machine_class: str) -> RoundSpread:
        """The file of ``machine_class`` under ``baseline_dir``, read when it exists (UsageError when broken)."""
        path = Path(baseline_dir) / machine_class / FILE_NAME
        if not path.exists():
            return cls(path, machine_class)
        data = load_versioned(path, "round-spread", FORMAT_VERSION, {})
        listed = data.get("runs", [])
        if not isinstance(listed, list):
            raise UsageError(f"round-spread file {path}: runs: expected a list, got {type(listed).__name__}")
        runs = []
        for i, run in enumerate(listed):
            try:
                ratios = tuple(_ratio(r) for r in run["ratios"])
                metric = str(run["metric"])
            except (KeyError, TypeError, ValueError, OverflowError):
                raise UsageError(f"round-spread file {path}: run {i} needs a metric and a list of ratios, each a "
                                 f"head/base ratio between {RATIO_RANGE[0]:g} and {RATIO_RANGE[1]:g}") from None
            try:
                served = Served.of(run.get("served") or None)
            except (TypeError, ValueError) as exc:
                raise UsageError(f"round-spread file {path}: run {i}: {exc}") from None
            runs.append(RoundRun(metric, ratios, str(run.get("recorded", "")), str(run.get("label", "")),
                                 str(run.get("key", "")), str(run.get("engine", "")), served))
        return cls(path, str(data.get("machine_class", machine_class)), runs)

    def prior(self, metric: str) -> RoundPrior | None:
        """The pooled round-to-round spread of ``metric`` (None when no earlier run has two rounds)."""
        return round_prior([r.ratios for r in self.runs if r.metric == metric])

    def describe(self, metric: str) -> str:
        """Where a prior comes from, for a verdict's message."""
        n = sum(1 for r in self.runs if r.metric == metric and len(r.ratios) >= 2)
        return f"{n} earlier A/B run(s) on {self.machine_class} ({self.path})"

    def _runs_for(self, key: str, engine: str = "", served: Served | str | None = None) -> tuple[list[RoundRun], str]:
        """The runs that give ``key``'s spread and what they are (:meth:`RoundRun.belongs_to`, see the module). A bare
        metric for ``key``: every key's runs of it (``specwatch ab-power``'s overview of a class, never a prior
        that a verdict borrows)."""
        if "/" not in key:
            runs = [r for r in self.runs if r.metric == key and len(r.ratios) >= 2
                    and not (engine and r.engine and r.engine != engine)]
            of = f"{key} of {engine}" if engine else key
            return runs, f"{len(runs)} earlier A/B run(s) of {of} on {self.machine_class}, every key ({self.path})"
        runs = [r for r in self.runs if r.belongs_to(key, engine, served)]
        twins = sorted({r.key for r in runs} - {key})
        also = f" and of {', '.join(twins)}, which served the same" if twins else ""
        return runs, f"{len(runs)} earlier A/B run(s) of this key{also} on {self.machine_class} ({self.path})"

    def prior_for(self, key: str, engine: str = "",
                  served: Served | str | None = None) -> tuple[RoundPrior | None, str]:
        """(round spread, where it comes from) of a result key served as ``served`` by ``engine``: the runs of
        the key and of its twins (:meth:`RoundRun.belongs_to`); (None, "") when there are none."""
        runs, source = self._runs_for(key, engine, served)
        found = round_prior([r.ratios for r in runs])
        return (found, source) if found is not None else (None, "")

    def boot_floor(self, key: str, engine: str = "", served: Served | str | None = None) -> tuple[float, str] | None:
        """A session spread for a baseline of too few sessions, from the round spread of ``key`` (:meth:`prior_for`):
        a round's ratio is one fresh boot against another, so its spread over sqrt(2) is one boot's, the spread
        of one session's median about the machine's (None: no runs)."""
        prior, source = self.prior_for(key, engine, served)
        if prior is None:
            return None
        of = f"{engine} " if engine else ""
        return (prior.spread / math.sqrt(2.0),
                f"the boot-to-boot spread of {of}servers on {self.machine_class}: round spread {prior.spread:.1%} "
                f"over {prior.df} df of {source}, over sqrt(2) for one boot")

    def residuals(self, key: str, engine: str = "", served: Served | str | None = None) -> list[float]:
        """The recorded rounds behind :meth:`prior_for`, as log ratios around their own run's mean,
        scaled by sqrt(n / (n - 1)) so that their spread is the round spread: what a replay draws."""
        runs, _ = self._runs_for(key, engine, served)
        out: list[float] = []
        for run in runs:
            logs = [math.log(r) for r in run.ratios]
            mean = sum(logs) / len(logs)
            scale = math.sqrt(len(logs) / (len(logs) - 1))
            out += [(x - mean) * scale for x in logs]
        return out

    def add(self, metric: str, ratios: Sequence[float], label: str, key: str = "", engine: str = "",
            served: Served | str | None = None) -> None:
        """Append one run's ratios (kept only with two rounds or more: one round says nothing of the spread)."""
        if len(ratios) >= 2:
            stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
            self.runs.append(RoundRun(metric, tuple(float(r) for r in ratios), stamp, label, key, engine,
                                      Served.of(served)))

    @classmethod
    def append(cls, baseline_dir: str | Path, machine_class: str,
               runs: Sequence[tuple[str, Sequence[float], str] | tuple[str, Sequence[float], str, str]
                              | tuple[str, Sequence[float], str, str, str]],
               engine: str = "") -> Path:
        """Add runs (metric, ratios, label[, key[, served]]) of ``engine`` to the class's file: read, add and write
        under an exclusive lock, so two A/B runs recording at once (one per GPU) both land."""
        import fcntl

        path = Path(baseline_dir) / machine_class / FILE_NAME
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_name(f".{FILE_NAME}.lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            spread = cls.for_class(baseline_dir, machine_class)
            for metric, ratios, label, *more in runs:
                spread.add(metric, ratios, label, more[0] if more else "", engine, more[1] if len(more) > 1 else "")
            return spread.save()

    def save(self) -> Path:
        """Write the file atomically, the most recent ``KEEP_RUNS`` runs of each key (of each metric, for
        runs without a key)."""
        kept: list[RoundRun] = []
        for group in dict.fromkeys((r.metric, r.key) for r in self.runs):
            kept += [r for r in self.runs if (r.metric, r.key) == group][-KEEP_RUNS:]
        data: dict[str, Any] = {
            "version": FORMAT_VERSION,
            "machine_class": self.machine_class,
            "runs": [{"metric": r.metric, "ratios": list(r.ratios), "recorded": r.recorded, "label": r.label,
                      **({"key": r.key} if r.key else {}), **({"engine": r.engine} if r.engine else {}),
                      **({"served": r.served.text()} if r.served else {})}
                     for r in kept],
        }
        return atomic_write_json(self.path, data)


__all__ = ["BOOT_PROXY", "FILE_NAME", "FORMAT_VERSION", "BootPrior", "RoundRun", "RoundSpread", "boot_floor",
           "boot_prior"]


#: the metric whose round spread stands for a key's boot-to-boot spread when its own has none: decode throughput
#: for the times of the same steps (a cycle's, a plain step's, their ratio, the time per token, a request's, its
#: first token's), as ab records decode tok/s alone. Accept length is no boot's luck: it keeps its own or none.
BOOT_PROXY = {metric: "decode_tok_s" for metric in ("output_tok_s", "cycle_ms", "cycle_ratio", "decode_step_ms",
                                                    "mean_itl_ms", "e2e_s", "ttft_ms")}


@dataclass(frozen=True)
class BootPrior:
    """The round spread a key's boot floor comes from: the prior, where it comes from, the metric whose rounds gave
    it (the key's, or its :data:`BOOT_PROXY`), and the floor (:meth:`RoundSpread.boot_floor`: spread, sentence)."""

    prior: RoundPrior
    source: str
    metric: str
    floor: tuple[float, str]


def boot_prior(baseline_dir: str | Path, machine_class: str, server: str, workload: str, metric: str,
               engine: str = "", served: Served | str | None = None) -> BootPrior | None:
    """The class's boot-to-boot spread of ``engine``, from the round spread of earlier A/B runs
    (:meth:`RoundSpread.boot_floor`), of ``metric`` or its :data:`BOOT_PROXY`
    (None: no runs of either). Two identical servers booted one after the other can read far apart (a boot is a
    sample of its own); without this floor a healthy boot judged against a one-session baseline can read as a
    regression."""
    try:
        spread = RoundSpread.for_class(baseline_dir, machine_class)
    except UsageError:
        return None  # a broken file is said by the gate that reads it for its own rounds
    for m in dict.fromkeys((metric, BOOT_PROXY.get(metric, metric))):
        key = f"{server}/{workload}/{m}"
        found = spread.boot_floor(key, engine, served)
        prior, source = spread.prior_for(key, engine, served)
        if found is not None and prior is not None:
            floor = found if m == metric else (found[0], f"{found[1]} (of {m}, for {metric})")
            return BootPrior(prior, source, m, floor)
    return None


def boot_floor(baseline_dir: str | Path, machine_class: str, server: str, workload: str, metric: str,
               engine: str = "", served: Served | str | None = None) -> tuple[float, str] | None:
    """The floor of :func:`boot_prior` (spread, where it comes from); None: no runs of the metric or its proxy."""
    found = boot_prior(baseline_dir, machine_class, server, workload, metric, engine, served)
    return found.floor if found is not None else None
