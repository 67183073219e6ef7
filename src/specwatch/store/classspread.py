"""The session spread a baseline of too few sessions is judged with: that of what it served, never another's.

A drift gate judges a baseline of ``MIN_SESSIONS`` or more sessions by their own spread. With fewer, a spread
measured on the same machine class sets a floor, so that a healthy server's boot-to-boot wander is not called a
regression: the largest spread among the class's baselines of the same served identity (engine, model, tensor
parallelism, speculative settings and workload size, recorded in each result's ``extra.served``) with enough
sessions, else the boot-to-boot spread of its round history (:func:`specwatch.store.roundspread.boot_floor`).
A prior belongs to the workload it was measured on: a small launch-bound model's boots spread far wider than a
GPU-bound large model's, so a floor borrowed from another model would call a real slowdown of the large one
"noisy".
"""

from __future__ import annotations

from specwatch.errors import SpecwatchError
from specwatch.served import Served
from specwatch.store.baseline import BaselineStore
from specwatch.store.roundspread import boot_floor


def class_spread(store: BaselineStore, machine_class: str, workload: str, metric: str,
                 engine: str = "", served: Served | str | None = None) -> tuple[float, str] | None:
    """The largest session-to-session spread of ``workload/metric`` among this machine class's baselines with
    enough sessions that served ``served``, and where it was measured (None: none has enough, or ``served`` is
    not known): the largest, so that no healthy server is failed by a spread its twins have shown."""
    served = Served.of(served)
    if served is None:
        return None
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
        if entry is None or Served.read(entry.extra.get("served")) != served:
            continue
        sessions = [s["samples"] for s in (entry.sessions if entry else []) if s.get("samples")]
        if len(sessions) >= MIN_SESSIONS:
            found.append((stats.session_spread(sessions), f"{profile}: {len(sessions)} sessions"))
    return max(found) if found else None


def floor_of(store: BaselineStore, machine_class: str, server: str, workload: str, metric: str,
             engine: str = "", served: Served | str | None = None) -> tuple[tuple[float, str] | None, str]:
    """The session spread a baseline of too few sessions is judged with (the one owner of this choice), and which
    it is: that of the class's baselines that served ``served`` (:func:`class_spread`; ``"class"``), else the
    boot-to-boot spread of the key's round history and its twins' (:func:`specwatch.store.roundspread.boot_floor`;
    ``"boot"``); ``(None, "")``: neither is recorded."""
    found = class_spread(store, machine_class, workload, metric, engine, served)
    if found is not None:
        return found, "class"
    boot = boot_floor(store.root, machine_class, server, workload, metric, engine, served)
    return boot, "boot" if boot is not None else ""


def session_floor(store: BaselineStore, machine_class: str, server: str, workload: str, metric: str,
                  engine: str = "", served: Served | str | None = None) -> tuple[float, str] | None:
    """The floor of :func:`floor_of`, without which it is."""
    return floor_of(store, machine_class, server, workload, metric, engine, served)[0]


__all__ = ["class_spread", "floor_of", "session_floor"]
