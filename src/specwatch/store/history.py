"""The history of results: one row per run and per metric, for trends, change points and reports.

Two stores behind one interface (:class:`~specwatch.store.history_base.HistoryStore`), with the same
schema and migrations (a ``schema_version`` table; a newer store is refused with a UsageError, an
older one is migrated in place by a writer):

- SQLite, the embedded default: a file, ``.specwatch/history.sqlite`` unless told otherwise
  (:class:`History`, an alias of :class:`~specwatch.store.history_sqlite.SQLiteHistory`);
- PostgreSQL, for a fleet: ``postgresql://user@host/db``
  (:class:`~specwatch.store.history_postgres.PostgresHistory`).

:func:`open_history` picks the store from a path or URL. Every run carries an identity (the hash
of its results document) under a UNIQUE index, so a run written twice is stored once.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable
from pathlib import Path

from specwatch.errors import UsageError
from specwatch.judge import changepoint
from specwatch.store.history_base import (
    SCHEMA_MIGRATIONS,
    SCHEMA_VERSION,
    HistoryStore,
    SeriesPoint,
    StoredRun,
)
from specwatch.store.history_sqlite import DEFAULT_PATH, SQLiteHistory

__all__ = ["DEFAULT_PATH", "PLOT_INSTALL", "SCHEMA_MIGRATIONS", "SCHEMA_VERSION", "History", "HistoryStore",
           "SeriesPoint", "StoredRun", "copy_runs", "is_url", "open_history", "plot_series"]

#: What to run when matplotlib is missing (it comes with the ``test`` extra).
PLOT_INSTALL = "pip install 'specwatch[plot]' (or pip install matplotlib)"
#: The SQLite store under its historical name: ``History(path, readonly=...)``.
History = SQLiteHistory
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
POSTGRES_SCHEMES = ("postgresql", "postgres")


def is_url(target: str | os.PathLike[str]) -> bool:
    """Whether a ``--history`` value is a database URL (``scheme://...``) rather than a file path."""
    return isinstance(target, str) and _SCHEME.match(target) is not None


def open_history(target: str | os.PathLike[str] = DEFAULT_PATH, *, readonly: bool = False) -> HistoryStore:
    """The history at ``target``: a ``postgresql://`` URL, else a SQLite file path.

    ``readonly``: only look (a missing SQLite file or an empty database is an error, nothing is
    created or migrated). UsageError, one line, for an unknown scheme, a store that cannot be
    reached or one that is not a specwatch history.
    """
    if isinstance(target, str) and (m := _SCHEME.match(target)):
        scheme = m.group(1).lower()
        if scheme in POSTGRES_SCHEMES:
            from specwatch.store.history_postgres import PostgresHistory

            return PostgresHistory(target, readonly=readonly)
        raise UsageError(f"history URL scheme {scheme}:// is not supported: give postgresql://user@host/db "
                         "or the path of a SQLite file")
    return SQLiteHistory(target, readonly=readonly)


def same_store(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two ``--history`` values name the same store (same URL, or the same file)."""
    if is_url(a) or is_url(b):
        return str(a) == str(b)
    return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()


def copy_runs(source: HistoryStore, target: HistoryStore, *, machine_class: str | None = None) -> tuple[int, int]:
    """Copy every run of ``source`` (one machine class's when given) into ``target``, each in its own
    transaction and under its own identity; ``(copied, already there)``. Running it again copies
    only what is new, so an interrupted copy is finished by running it again."""
    copied = present = 0
    for run in source.stored_runs(machine_class):
        _, new = target.add_run(run.results, time=run.time, commit=run.commit, uid=run.uid or None)
        copied += new
        present += not new
    return copied, present


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", text).strip("_") or "x"


def plot_series(
    history: HistoryStore,
    out_dir: str | os.PathLike[str],
    *,
    keys: Iterable[str] | None = None,
    machine_class: str | None = None,
    alpha: float = 0.01,
    min_size: int = 3,
) -> list[Path]:
    """One PNG per metric key (profile/workload/metric) and machine class, change points marked.

    Each run is a dot per sample and a line through the medians; a dashed vertical line marks
    each change point found in the medians, labelled with its relative size.
    """
    try:
        import matplotlib
    except ImportError:
        raise UsageError(f"plots need matplotlib, which is not installed: {PLOT_INSTALL}") from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"plot folder {out}: {exc.strerror or exc}") from None
    classes = [machine_class] if machine_class is not None else history.machine_classes()
    written: list[Path] = []
    for mc in classes:
        for key in sorted(keys) if keys is not None else history.keys(mc):
            pts = [p for p in history.series(key, machine_class=mc) if p.machine_class == mc]
            if not pts:
                continue
            meds = [p.median for p in pts]
            # change points among the runs with a median (as `history changes`), placed at their runs
            known = [i for i, m in enumerate(meds) if math.isfinite(m)]
            cps = (changepoint.detect([meds[i] for i in known], alpha=alpha, min_size=min_size)
                   if len(known) >= 2 * min_size else [])
            fig, ax = plt.subplots(figsize=(9, 4))
            for i, p in enumerate(pts):
                ax.scatter([i] * len(p.samples), p.samples, s=8, alpha=0.35, color="tab:blue")
            ax.plot(range(len(meds)), meds, marker="o", color="tab:blue", label="median")
            for cp in cps:
                at = known[cp.index] - 0.5
                ax.axvline(at, color="tab:red", linestyle="--")
                ax.annotate(f"{cp.magnitude * 100:+.1f}% (p={cp.p:.2g})", (at, max(meds[i] for i in known)),
                            color="tab:red", fontsize=8, rotation=90, va="top", ha="right")  # fmt: skip
            direction = "higher is better" if pts[0].higher_is_better else "lower is better"
            ax.set_title(f"{key} on {mc or 'unknown machine'} ({direction})", fontsize=10)
            ax.set_xlabel("run (time order)")
            ax.set_ylabel(pts[0].unit)
            labels = [(p.commit or "")[:8] for p in pts]
            if any(labels) and len(labels) <= 40:
                ax.set_xticks(range(len(pts)), labels, rotation=60, fontsize=7)
            fig.tight_layout()
            path = out / f"{_slug(mc or 'unknown')}__{_slug(key.replace('/', '__'))}.png"
            fig.savefig(path, dpi=100)
            plt.close(fig)
            written.append(path)
    return written
