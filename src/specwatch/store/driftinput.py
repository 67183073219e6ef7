"""Everything a drift tolerance of one baseline key is built from, each with where it came from: the one builder.

The drift gate (:func:`specwatch.run.reference.reference_samples`), ``specwatch compare``, ``specwatch baseline
explain`` and the validation replays all ask :func:`drift_input` (or :func:`for_key`), so each judges with the
same inputs:

1. the sessions judged against (those of the run's machine when it recorded ``MIN_SESSIONS`` of them, else all,
   each naming its machine: :meth:`specwatch.store.baseline.BaselineMetric.reference_for`);
2. the hardware's machine term (``<class>/machine-term.json``, :mod:`specwatch.store.machineterm`);
3. the floor a baseline of too few sessions is judged with (:func:`specwatch.store.classspread.session_floor`:
   the class's spread of what the key served, else the boot-to-boot spread of earlier A/B rounds) and the prior
   that floor came from (which served identity, how many degrees of freedom, used or set aside and why).

:meth:`DriftInput.basis` is the tolerance from them (:func:`specwatch.judge.compare.drift_basis`, the function the
gate's verdict calls) and :meth:`DriftInput.lines` the chain in the order it is applied.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specwatch.errors import UsageError
from specwatch.judge import compare
from specwatch.judge.variance import MachineSession, PooledTerm, term_choice
from specwatch.served import Served
from specwatch.store import classspread, machineterm
from specwatch.store.baseline import Baseline, BaselineStore
from specwatch.store.result import make_key
from specwatch.store.roundspread import FILE_NAME, boot_prior
from specwatch.store.sessions import recorded_label


@dataclass(frozen=True)
class Prior:
    """The round spread of earlier A/B runs a boot floor would come from, and whether the floor used it."""

    served: Served | None  # the identity it was matched with (None: the baseline records none)
    metric: str  # the metric whose rounds gave it (the key's, or its BOOT_PROXY)
    spread: float | None  # the round spread (None: no run of the key or its twins)
    df: int  # its degrees of freedom (0: none)
    source: str  # which runs, from which file
    used: bool  # whether it set the floor
    why: str  # why it is used or set aside

    def line(self) -> str:
        """'prior: round spread 1.3% over 39 df of decode_tok_s rounds, 17 earlier A/B run(s) ...; served: ...;
        used: ...'."""
        served = f"served: {self.served.text()}" if self.served else "served: none recorded, matched by key"
        if self.spread is None:
            return f"prior: none; {served}; {self.why}"
        return (f"prior: round spread {self.spread:.1%} over {self.df} df of {self.metric} rounds, {self.source}; "
                f"{served}; {'used' if self.used else 'set aside'}: {self.why}")


@dataclass(frozen=True)
class DriftInput:
    """What a drift gate's tolerance for one key is built from (:func:`drift_input`)."""

    key: str
    source: str  # "baseline <path> (<recorded>)"
    path: Path | None
    unit: str
    higher_is_better: bool
    samples: list[float]  # the pooled samples of the sessions judged against
    sessions: list[MachineSession]  # the sessions judged against, each naming its machine
    recorded: int  # sessions recorded with samples
    labels: tuple[str, ...]  # when and where each judged session was recorded
    note: str  # which sessions count, or that none was recorded on the run's machine
    yardsticks: tuple[Any, ...]  # each judged session's machine yardstick (None: none recorded)
    machine: str | None  # the run's machine, labelled as the sessions are (None: not known)
    machine_term: PooledTerm | None  # the hardware's pooled machine term of this metric
    term_file: str  # where it was read, or why there is none
    floor: tuple[float, str] | None  # the session spread a baseline of too few sessions is judged with
    floor_kind: str  # "class": the class's baselines' own spread; "boot": the round spread's; "": none
    prior: Prior
    engine: str
    served: Served | None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def metric(self) -> str:
        return self.key.rsplit("/", 1)[-1]

    def runs(self) -> int:
        """The runs of one recorded session (the median of the judged ones'): what a run of the key is taken to
        have when none is given."""
        return int(statistics.median([len(s) for s in self.sessions])) if self.sessions else len(self.samples)

    def basis(self, requested: float, alpha: float, n_current: int | None = None) -> compare.DriftBasis:
        """The tolerance these inputs give a run of ``n_current`` runs (:func:`specwatch.judge.compare.drift_basis`,
        the function the gate's verdict calls with them; no yardstick normalisation)."""
        return compare.drift_basis(requested, self.sessions or None, self.floor, alpha, n_current=n_current,
                                   machine=self.machine, term=self.machine_term,
                                   higher_is_better=self.higher_is_better)

    def lines(self, requested: float, alpha: float, n_current: int | None = None) -> list[str]:
        """The chain that makes the tolerance, in the order it is applied: sessions and machines, the
        within-session spread, the machine term, the floor and its prior, the tolerance and the smallest change
        it detects."""
        basis = self.basis(requested, alpha, n_current)
        pred = basis.prediction
        n = len(self.sessions)
        machines = Counter(s.machine or "?" for s in self.sessions)
        named = ", ".join(f"{m} ×{c}" for m, c in machines.most_common(4)) + (
            f" and {len(machines) - 4} more" if len(machines) > 4 else "")
        out = [f"{self.key}: {self.source}"]
        out.append(f"1 sessions: {n} judged of {self.recorded} recorded, on {len(machines)} machine(s) ({named}); "
                   f"the run's machine: {self.machine or 'not given'}" + (f"; {self.note}" if self.note else ""))
        if pred is not None:
            c = pred.components
            out.append(f"2 within-session spread: run noise {c.sigma_run:.2%} over {c.samples_per_session:.0f} runs a "
                       f"session; session to session {c.sigma_within:.2%} (boot-to-boot {c.sigma_boot:.2%}) on "
                       f"{c.df_within} df")
        elif n >= 2:
            sd = [math.log(statistics.median(s)) for s in self.sessions]
            out.append(f"2 within-session spread: session to session {statistics.stdev(sd):.2%} over {n} sessions, "
                       f"fewer than the {compare.MIN_SESSIONS} that set a tolerance of their own")
        else:
            out.append(f"2 within-session spread: not measured ({n} session(s); {compare.MIN_SESSIONS} set their own)")
        term_line = (f"the hardware's {self.machine_term.sigma:.2%} on {self.machine_term.df:.1f} effective df "
                     f"({self.term_file})" if self.machine_term else f"none pooled ({self.term_file})")
        if pred is not None:
            c = pred.components
            own = (f"this baseline's own {c.sigma_machine:.2%} over {c.machines} machines" if c.machines > 1
                   else "this baseline's sessions come from one machine: they measure none")
            used = pred.term or (term_choice(c, self.machine_term)[1] if pred.new_machine else "")
            judged = "a new machine" if pred.new_machine else "the sessions' own machine"
            out.append(f"3 machine term: {own}; {term_line}; the run is judged as one on {judged}"
                       + (f" ({used})" if used else ""))
        else:
            out.append(f"3 machine term: {term_line}; not applied (no interval from fewer than "
                       f"{compare.MIN_SESSIONS} sessions)")
        if self.floor is None:
            floor = "none measured for this key on this class"
        else:
            kind = {"class": "the class's baselines that served the same",
                    "boot": "the boot-to-boot spread of earlier A/B rounds"}[self.floor_kind]
            floor = f"{self.floor[0]:.2%} from {kind} ({self.floor[1]})"
        applies = ("applies" if n < compare.MIN_SESSIONS else
                   f"not applied: {n} sessions set their own")
        out.append(f"4 floor: {floor}; {applies}")
        out.append(f"  {self.prior.line()}")
        detects = (pred.detects if pred is not None else
                   _floor_detects(self.floor, n, alpha) if basis.floor and self.floor else None)
        out.append(f"5 tolerance: {basis.tolerance:.2%} (requested {requested:.1%}, alpha {alpha:g}, a run of "
                   f"{n_current or self.runs()} runs)" + (f"; the smallest slowdown flagged in 19 of 20 runs: "
                                                           f"{detects:.2%}" if detects is not None else
                                                           "; the smallest change it detects: the tolerance itself "
                                                           "(no spread measured)"))
        out.append(f"  {basis.note}")
        return out


def _floor_detects(floor: tuple[float, str], sessions: int, alpha: float) -> float:
    """The 19-in-20 slowdown of a floor's tolerance (:func:`specwatch.judge.stats.drift_tolerance`)."""
    from specwatch.judge import stats

    return stats.drift_tolerance(floor[0], sessions, alpha, known=False).detects


def _prior(store: BaselineStore, machine_class: str, server: str, workload: str, metric: str, engine: str,
           served: Served | None, floor_kind: str, sessions: int) -> Prior:
    """The round spread a boot floor of this key comes from (:func:`specwatch.store.roundspread.boot_prior`), and
    whether the floor used it."""
    found = boot_prior(store.root, machine_class, server, workload, metric, engine, served)
    if found is None:
        return Prior(served, metric, None, 0, "", False, f"no earlier A/B run of this key or of a twin that served "
                     f"the same on {machine_class} ({store.root / machine_class / FILE_NAME}, if it reads)")
    if sessions >= compare.MIN_SESSIONS:
        why = f"the baseline's {sessions} sessions set their own tolerance; no floor applies"
    elif floor_kind == "class":
        why = "the class's baselines that served the same measured a session spread, which comes first"
    else:
        why = (f"its spread over sqrt(2) is one boot's, the floor of a baseline of {sessions} session(s)"
               + (f" (of {found.metric}, for {metric})" if found.metric != metric else ""))
    used = floor_kind == "boot" and sessions < compare.MIN_SESSIONS
    return Prior(served, found.metric, found.prior.spread, found.prior.df, found.source, used, why)


def drift_input(store: BaselineStore, base: Baseline, workload: str, metric: str, *, machine: str | None = None,
                engine: str = "", same_class: bool | None = True, machine_class: str | None = None,
                profile: str | None = None) -> DriftInput | str:
    """The drift inputs of ``base``'s ``workload/metric`` in ``store`` (the folder its class lies in), for a run
    on ``machine`` (labelled as :func:`specwatch.store.machine.run_machine` labels it) of ``engine``; or why there
    are none. ``same_class``: whether the run is of the baseline's class (False: no class floor or machine term
    of it applies; None: unknown); ``machine_class``, ``profile``: the folder and file the baseline was read
    from (default: those it names)."""
    mc, profile = machine_class or base.machine_class, profile or base.profile
    entry = base.get(workload, metric)
    path = base.path if base.path is not None else store.path_for(mc, profile) if mc else None
    if entry is None:
        return f"baseline {path} has no {workload}/{metric}; re-record it"
    try:
        served = Served.of(entry.extra.get("served") or None)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"baseline {path}: {workload}/{metric}: {exc}") from None
    samples, sessions, note = entry.reference_for(None, compare.MIN_SESSIONS, same_class=same_class, machine=machine)
    chosen = entry.chosen_sessions(None, compare.MIN_SESSIONS, same_class=same_class, machine=machine)
    recorded = sum(1 for s in entry.sessions if s.get("samples"))
    term, term_file, floor, kind = None, "no machine class", None, ""
    prior = Prior(served, metric, None, 0, "", False, "no machine class, so no round spread of one")
    if mc and same_class is not False:
        term = machineterm.load(store.root, mc).get(metric)
        where = store.root / mc / machineterm.FILE_NAME
        term_file = str(where) if term else f"{where} holds none of {metric}" if where.exists() else f"no {where}"
        floor, kind = classspread.floor_of(store, mc, profile, workload, metric, engine, served)
        prior = _prior(store, mc, profile, workload, metric, engine, served, kind, len(sessions))
    return DriftInput(make_key(profile, workload, metric), f"baseline {path} ({base.recorded})", path,
                      entry.unit, entry.higher_is_better, samples, sessions, recorded,
                      tuple(recorded_label(s) for s in chosen), note, tuple(s.get("yardstick") for s in chosen),
                      machine, term, term_file, floor, kind, prior, engine, served, dict(entry.extra))


def for_key(store: BaselineStore, machine_class: str, profile: str, workload: str, metric: str, *,
            machine: str | None = None, engine: str = "") -> tuple[Baseline, DriftInput] | str:
    """:func:`drift_input` of ``profile``'s baseline in ``machine_class``, loaded from ``store``; or why there is
    none (no baseline: :meth:`BaselineStore.missing_message`)."""
    base = store.load(machine_class, profile)
    if base is None:
        return store.missing_message(machine_class, profile)
    found = drift_input(store, base, workload, metric, machine=machine, engine=engine, machine_class=machine_class,
                        profile=profile)
    return found if isinstance(found, str) else (base, found)


def of_baseline(base: Baseline, workload: str, metric: str) -> DriftInput | None:
    """:func:`drift_input` of a baseline file read on its own (a replay's), from the folder it lies in
    (``<folder>/<class>/<profile>.json``), for a run of the engine it recorded; None: it has no such key."""
    root = Path(base.path).resolve().parent.parent if base.path is not None else Path(".")
    found = drift_input(BaselineStore(root), base, workload, metric, engine=str(base.machine.get("engine") or ""))
    return None if isinstance(found, str) else found


__all__ = ["DriftInput", "Prior", "drift_input", "for_key", "of_baseline"]
