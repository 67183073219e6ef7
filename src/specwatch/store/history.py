"""SQLite history of results: one row per run and per metric, for trends and change points.

Default file ``.specwatch/history.sqlite``. A ``schema_version`` table holds the schema version;
a newer file is refused with a UsageError, an older one is migrated in place. Opened for reading
(``History(path, readonly=True)``, the ``specwatch history`` commands that only look), a missing
file is an error rather than a new empty database.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

from specwatch.errors import UsageError
from specwatch.judge import changepoint
from specwatch.store.result import ResultSet, utc_now

DEFAULT_PATH = Path(".specwatch") / "history.sqlite"
SCHEMA_VERSION = 1
#: What to run when matplotlib is missing (it comes with the ``test`` extra).
PLOT_INSTALL = "pip install 'specwatch[plot]' (or pip install matplotlib)"
# from-version -> SQL statements that bring the schema to from-version + 1.
SCHEMA_MIGRATIONS: dict[int, Sequence[str]] = {}

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)",
    """CREATE TABLE IF NOT EXISTS runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        time TEXT NOT NULL,
        commit_id TEXT,
        machine_class TEXT,
        fingerprint TEXT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS results (
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        key TEXT NOT NULL,
        profile TEXT NOT NULL,
        workload TEXT NOT NULL,
        metric TEXT NOT NULL,
        unit TEXT NOT NULL,
        higher_is_better INTEGER NOT NULL,
        samples TEXT NOT NULL,
        extra TEXT NOT NULL,
        median REAL,
        PRIMARY KEY (run_id, key)
    )""",
    "CREATE INDEX IF NOT EXISTS results_key ON results (key)",
    "CREATE INDEX IF NOT EXISTS runs_time ON runs (time)",
)


@dataclass(frozen=True)
class SeriesPoint:
    """One run's value of one metric."""

    run_id: int
    time: str
    commit: str | None
    machine_class: str | None
    samples: tuple[float, ...]
    median: float
    unit: str
    higher_is_better: bool
    #: why the run was incomplete ("" for a complete run): interrupted, or tests that could not measure
    partial: str = ""


class History:
    """The history database. Use as a context manager or call ``close()``."""

    def __init__(self, path: str | os.PathLike[str] = DEFAULT_PATH, *, readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly
        if self.path.is_dir():
            raise UsageError(f"history {self.path} is a directory, not a history file")
        if readonly:
            if not self.path.exists():
                raise UsageError(f"history file not found: {self.path} (`pytest -m perf` writes one, see "
                                 "--specwatch-history; so does `specwatch history import`)")
            target, uri = f"{self.path.resolve().as_uri()}?mode=ro", True
        else:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise UsageError(f"history {self.path}: cannot create its folder: {exc.strerror or exc}") from None
            target, uri = str(self.path), False
        try:
            self.conn = sqlite3.connect(target, uri=uri)
        except sqlite3.Error as exc:
            raise UsageError(f"history {self.path}: cannot open: {exc}") from None
        try:
            self.conn.execute("PRAGMA foreign_keys = ON")
            self._ensure_schema()
        except sqlite3.DatabaseError as exc:
            self.conn.close()
            raise UsageError(f"history {self.path} is not a specwatch history (SQLite) database: {exc}") from None
        except BaseException:
            self.conn.close()
            raise

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()

    def _ensure_schema(self) -> None:
        with self.conn:
            has = self.conn.execute(
                "SELECT name FROM sqlite_master WHERE type='table' AND name='schema_version'"
            ).fetchone()
            if not has:
                others = self.conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0]
                if others or self.readonly:
                    raise UsageError(f"history {self.path} is not a specwatch history database "
                                     "(it has no schema_version table)")
                for stmt in _SCHEMA:
                    self.conn.execute(stmt)
                self.conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
                return
            row = self.conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
            version = int(row[0]) if row and row[0] is not None else 0
            if version > SCHEMA_VERSION:
                raise UsageError(
                    f"history {self.path} has schema version {version}, newer than this specwatch "
                    f"reads ({SCHEMA_VERSION}); upgrade specwatch or use another --history path"
                )
            if version < SCHEMA_VERSION and self.readonly:
                raise UsageError(f"history {self.path} has schema version {version}, older than this specwatch "
                                 f"reads ({SCHEMA_VERSION}); `specwatch history import` migrates it")
            while version < SCHEMA_VERSION:
                steps = SCHEMA_MIGRATIONS.get(version)
                if steps is None:
                    raise UsageError(
                        f"history {self.path} has schema version {version}, which cannot be migrated"
                    )
                for stmt in steps:
                    self.conn.execute(stmt)
                version += 1
                self.conn.execute("DELETE FROM schema_version")
                self.conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))

    @property
    def schema_version(self) -> int:
        """The schema version stored in the file."""
        return int(self.conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0])

    def append(
        self, results: ResultSet, *, time: str | None = None, commit: str | None = None
    ) -> int:
        """Store one run (defaults: the results file's time and commit); returns its run id."""
        fp = dict(results.machine)
        with self.conn:
            cur = self.conn.execute(
                "INSERT INTO runs (time, commit_id, machine_class, fingerprint) VALUES (?, ?, ?, ?)",
                (time or results.created or utc_now(), commit if commit is not None else results.commit,
                 results.machine_class, json.dumps(fp, sort_keys=True)),
            )  # fmt: skip
            run_id = int(cur.lastrowid or 0)
            self.conn.executemany(
                "INSERT INTO results (run_id, key, profile, workload, metric, unit, higher_is_better,"
                " samples, extra, median) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (run_id, r.key, r.profile, r.workload, r.metric, r.unit, int(r.higher_is_better),
                     json.dumps(r.samples), json.dumps(r.extra, sort_keys=True),
                     median(r.samples) if r.samples else None)
                    for r in results.results
                ],
            )  # fmt: skip
        return run_id

    def keys(self, machine_class: str | None = None) -> list[str]:
        """Metric keys with at least one point, sorted."""
        sql = "SELECT DISTINCT r.key FROM results r JOIN runs u ON u.id = r.run_id"
        args: tuple[Any, ...] = ()
        if machine_class is not None:
            sql += " WHERE u.machine_class = ?"
            args = (machine_class,)
        return sorted(row[0] for row in self.conn.execute(sql, args))

    def machine_classes(self) -> list[str | None]:
        """Machine classes with runs."""
        rows = self.conn.execute("SELECT DISTINCT machine_class FROM runs").fetchall()
        return sorted((r[0] for r in rows), key=lambda x: (x is None, x or ""))

    def series(self, key: str, *, machine_class: str | None = None) -> list[SeriesPoint]:
        """One metric's points ordered by time (then by insertion)."""
        sql = (
            "SELECT u.id, u.time, u.commit_id, u.machine_class, r.samples, r.median, r.unit,"
            " r.higher_is_better, r.extra FROM results r JOIN runs u ON u.id = r.run_id WHERE r.key = ?"
        )
        args: list[Any] = [key]
        if machine_class is not None:
            sql += " AND u.machine_class = ?"
            args.append(machine_class)
        sql += " ORDER BY u.time, u.id"
        out = []
        for rid, t, commit, mc, samples, med, unit, hib, extra in self.conn.execute(sql, args):
            xs = tuple(float(s) for s in json.loads(samples))
            try:
                partial = json.loads(extra).get("partial") or ""
            except (ValueError, AttributeError):
                partial = ""
            out.append(SeriesPoint(int(rid), t, commit, mc, xs, float(med) if med is not None
                                   else float("nan"), unit, bool(hib), str(partial)))  # fmt: skip
        return out


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", text).strip("_") or "x"


def plot_series(
    history: History,
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
            cps = changepoint.detect(meds, alpha=alpha, min_size=min_size) if len(meds) >= 2 * min_size else []
            fig, ax = plt.subplots(figsize=(9, 4))
            for i, p in enumerate(pts):
                ax.scatter([i] * len(p.samples), p.samples, s=8, alpha=0.35, color="tab:blue")
            ax.plot(range(len(meds)), meds, marker="o", color="tab:blue", label="median")
            for cp in cps:
                ax.axvline(cp.index - 0.5, color="tab:red", linestyle="--")
                ax.annotate(f"{cp.magnitude * 100:+.1f}% (p={cp.p:.2g})", (cp.index - 0.5, max(meds)),
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
