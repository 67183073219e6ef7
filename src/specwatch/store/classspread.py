"""The session spread a baseline of too few sessions is judged with: its machine class's, per engine.

A drift gate judges a baseline of ``MIN_SESSIONS`` or more sessions by their own spread. With fewer, the
class's spread sets a floor, so that a healthy server's boot-to-boot wander is not called a regression:
the largest spread among the class's baselines of the same engine with enough sessions, else the engine's
boot-to-boot spread from the class's round spread (:func:`specwatch.store.roundspread.boot_floor`). The engine
matters: on one H200 the reference server's boots agree within a few percent, real SGLang 0.5.16's with a tiny
model wander by tens (docs/validation/data/2026-12-03-sglang-perf-x1-2).
"""

from __future__ import annotations

from specwatch.errors import SpecwatchError
from specwatch.store.baseline import BaselineStore
from specwatch.store.roundspread import boot_floor


def class_spread(store: BaselineStore, machine_class: str, workload: str, metric: str,
                 engine: str = "") -> tuple[float, str] | None:
    """The largest session-to-session spread of ``workload/metric`` among this machine class's baselines with
    enough sessions, and where it was measured (None: none has enough): the largest, so that no healthy server is
    failed by a spread the class has shown. With ``engine`` named, baselines of another engine are left out."""
    from specwatch.judge import stats
    from specwatch.judge.compare import MIN_SESSIONS

    found: list[tuple[float, str]] = []
    for mc, profile in store.available():
        if mc != machine_class:
            continue
        try:
            base = store.load(mc, profile)
        except SpecwatchError:
            continue  # a broken neighbour is reported when it is itself used
        if base is None or (engine and base.machine.get("engine") not in (None, "", engine)):
            continue
        entry = base.get(workload, metric)
        sessions = [s["samples"] for s in (entry.sessions if entry else []) if s.get("samples")]
        if len(sessions) >= MIN_SESSIONS:
            found.append((stats.session_spread(sessions), f"{profile}: {len(sessions)} sessions"))
    return max(found) if found else None


def session_floor(store: BaselineStore, machine_class: str, server: str, workload: str, metric: str,
                  engine: str = "") -> tuple[float, str] | None:
    """The session spread a baseline of too few sessions is judged with (the one owner of this choice): the
    class's, from baselines of ``engine`` (:func:`class_spread`), else ``engine``'s boot-to-boot spread from the
    class's round spread (:func:`specwatch.store.roundspread.boot_floor`); None: neither is recorded."""
    return (class_spread(store, machine_class, workload, metric, engine)
            or boot_floor(store.root, machine_class, server, workload, metric, engine))


__all__ = ["class_spread", "session_floor"]
