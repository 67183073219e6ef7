"""What a drift gate compares against: a ``--specwatch-reference`` results file, else the stored baseline's
sessions, each naming its machine, with the run's own machine named by the rule that names theirs
(:func:`specwatch.store.machine.run_machine`), so the gate judges the run against that machine's sessions
when it has enough of them, and as one on a new machine when not; with the machine term of the class's hardware
pooled over every baseline of it (``baselines/<class>/machine-term.json``, :mod:`specwatch.store.machineterm`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from specwatch.run.evidence import Reference
from specwatch.run.options import Config


class RunFacts(Protocol):
    """What the reference needs of the run (the Session gives it): its configuration, its machine (class,
    fingerprint, the commit under test), and a way to say a warning once per run."""

    @property
    def config(self) -> Config: ...

    def machine_class(self) -> str: ...

    def fingerprint(self) -> dict[str, Any]: ...

    def commit(self) -> str | None: ...

    def warn_once(self, text: str) -> None: ...

    def engine_of(self, server: str) -> str: ...


def reference_samples(run: RunFacts, profile: str, workload: str, metric: str) -> Reference | str:
    """Samples to compare against (``--specwatch-reference`` file, else the stored baseline), with their
    source, sessions, recorded workload, this run's machine and yardstick and the machine class's spread of the
    key; or, when there are none, a message saying how to record them. The baseline's fingerprint warning is
    said once per run (:meth:`RunFacts.warn_once`), not once per drift test."""
    from specwatch.store.baseline import BaselineStore
    from specwatch.store.driftinput import drift_input
    from specwatch.store.machine import run_machine
    from specwatch.store.result import ResultSet, make_key

    cfg = run.config
    if cfg.reference:
        rs = ResultSet.load(cfg.path(cfg.reference))
        found = rs.get(make_key(profile, workload, metric))
        if found is None:
            return f"the reference file {cfg.reference} has no result {make_key(profile, workload, metric)}"
        return Reference(list(found.samples), f"reference {cfg.reference}{shared_note(found.extra)}", [],
                         dict(found.extra))
    store = BaselineStore(cfg.path(cfg.baseline_dir))
    mc = run.machine_class()
    base = store.load(mc, profile)
    if base is None:
        return store.missing_message(mc, profile)
    fp = run.fingerprint()
    inputs = drift_input(store, base, workload, metric, machine=run_machine(fp, run.commit()),
                         engine=run.engine_of(profile), machine_class=mc, profile=profile)
    if isinstance(inputs, str):
        return inputs
    warning = base.fingerprint_warning(fp)
    if warning:
        run.warn_once(warning)
    return Reference(inputs.samples, f"{inputs.source}{shared_note(inputs.extra)}", inputs.sessions,
                     dict(inputs.extra), inputs.note, inputs.yardsticks, inputs.machine, inputs.machine_term,
                     class_spread=inputs.floor, run_yardstick=fp.get("yardstick"), inputs=inputs)


def shared_note(extra: Mapping[str, Any]) -> str:
    """``; recorded while ... shared the host`` when a reference was measured beside other inference servers or GPU
    processes (its ``shared_with``, as the measurement recorded them): said in every verdict against it, since
    their load is in its numbers (a decode step recorded beside another server on the same GPU can read half again
    as long as alone, which a cycle-cost gate reads as a rising break-even). Other xdist workers alone are not named:
    a CPU baseline recorded under xdist is judged by runs under xdist."""
    others = [str(n) for n in extra.get("shared_with") or ()]
    if not extra.get("shared_host") or not others:
        return ""
    what = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
    return (f"; recorded while {what} shared the host: that load is in the reference (re-record on a quiet host, "
            f"--specwatch-replace-baselines)")


__all__ = ["RunFacts", "reference_samples", "shared_note"]
