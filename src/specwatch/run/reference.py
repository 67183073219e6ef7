"""What a drift gate compares against: a ``--specwatch-reference`` results file, else the stored baseline's
sessions, each naming its machine, with the run's own machine named by the rule that names theirs
(:func:`specwatch.store.machine.run_machine`), so the gate judges the run against that machine's sessions
when it has enough of them, and as one on a new machine when not; with the machine term of the class's hardware
pooled over every baseline of it (``baselines/<class>/machine-term.json``, :mod:`specwatch.store.machineterm`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specwatch.run.session import Session


@dataclass(frozen=True)
class Reference:
    """What a drift gate compares against."""

    samples: list[float]
    source: str
    sessions: Sequence[Sequence[float]]  # per recording session, when the baseline kept several
    extra: dict[str, Any]  # as recorded: runs, max_new_tokens, concurrency, ...
    note: str = ""  # which sessions count, or that none was recorded on this machine
    yardsticks: tuple[Any, ...] = ()  # each session's machine yardstick (None: none recorded)
    machine: str | None = None  # this run's machine, labelled as the sessions are (None: a reference file)
    machine_term: Any = None  # the class's hardware machine term of this metric (store.machineterm), when recorded


def reference_samples(session: Session, profile: str, workload: str, metric: str) -> Reference | str:
    """Samples to compare against (``--specwatch-reference`` file, else the stored baseline), with their
    source, sessions, recorded workload and this run's machine; or, when there are none, a message saying
    how to record them. The baseline's fingerprint warning is said once per run, not once per drift test."""
    from specwatch.judge.compare import MIN_SESSIONS
    from specwatch.store import machineterm
    from specwatch.store.baseline import BaselineStore
    from specwatch.store.machine import run_machine
    from specwatch.store.result import ResultSet, make_key

    cfg = session.config
    if cfg.reference:
        rs = ResultSet.load(cfg.path(cfg.reference))
        found = rs.get(make_key(profile, workload, metric))
        if found is None:
            return f"the reference file {cfg.reference} has no result {make_key(profile, workload, metric)}"
        return Reference(list(found.samples), f"reference {cfg.reference}", [], dict(found.extra))
    store = BaselineStore(cfg.path(cfg.baseline_dir))
    mc = session.machine_class()
    base = store.load(mc, profile)
    if base is None:
        return store.missing_message(mc, profile)
    entry = base.get(workload, metric)
    if entry is None:
        return f"baseline {store.path_for(mc, profile)} has no {workload}/{metric}; re-record it"
    fp = session.fingerprint()
    warning = base.fingerprint_warning(fp)
    if warning and warning not in session._warned:
        session._warned.add(warning)
        session.progress(warning)
    machine = run_machine(fp, session.commit())
    samples, sessions, note = entry.reference_for(None, MIN_SESSIONS, machine=machine)
    yardsticks = tuple(s.get("yardstick") for s in entry.chosen_sessions(None, MIN_SESSIONS, machine=machine))
    term = machineterm.load(store.root, mc).get(metric)
    return Reference(samples, f"baseline {store.path_for(mc, profile)} ({base.recorded})", sessions,
                     dict(entry.extra), note, yardsticks, machine, term)


__all__ = ["Reference", "reference_samples"]
