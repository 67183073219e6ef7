"""What every history store shares: the schema and its migrations, the queries, and the run identity.

A store (:mod:`~specwatch.store.history_sqlite`, :mod:`~specwatch.store.history_postgres`) only
supplies a connection: how to run a statement, how to open a transaction, which tables exist, and
how to insert a run unless its identity is already stored. Everything else is here, written once,
so both stores hold the same schema, migrate the same way and answer the same queries.

Each run carries ``run_uid``, the SHA-256 of its results document (with the time and commit it
was stored under), under a UNIQUE index: writing the same run twice, from one host or from many
at once, stores it once.
"""

from __future__ import annotations

import abc
import hashlib
import json
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from statistics import median
from typing import Any

from specwatch.errors import UsageError
from specwatch.store.result import Result, ResultSet, finite_samples, parse_json, utc_now

SCHEMA_VERSION = 2

#: Version 1's tables (the first SQLite history), per dialect. A new store is created at version 1
#: and brought up by the migrations below, so a fresh store and a migrated one are the same.
SCHEMA_V1: dict[str, Sequence[str]] = {
    "sqlite": (
        "CREATE TABLE schema_version (version INTEGER NOT NULL)",
        """CREATE TABLE runs (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            time TEXT NOT NULL,
            commit_id TEXT,
            machine_class TEXT,
            fingerprint TEXT NOT NULL
        )""",
        """CREATE TABLE results (
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
        "CREATE INDEX results_key ON results (key)",
        "CREATE INDEX runs_time ON runs (time)",
    ),
    # Text compares byte-wise (COLLATE "C"), as in SQLite, so both stores order series alike.
    "postgresql": (
        "CREATE TABLE schema_version (version INTEGER NOT NULL)",
        """CREATE TABLE runs (
            id BIGSERIAL PRIMARY KEY,
            time TEXT COLLATE "C" NOT NULL,
            commit_id TEXT,
            machine_class TEXT COLLATE "C",
            fingerprint TEXT NOT NULL
        )""",
        """CREATE TABLE results (
            run_id BIGINT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            key TEXT COLLATE "C" NOT NULL,
            profile TEXT NOT NULL,
            workload TEXT NOT NULL,
            metric TEXT NOT NULL,
            unit TEXT NOT NULL,
            higher_is_better INTEGER NOT NULL,
            samples TEXT NOT NULL,
            extra TEXT NOT NULL,
            median DOUBLE PRECISION,
            PRIMARY KEY (run_id, key)
        )""",
        "CREATE INDEX results_key ON results (key)",
        "CREATE INDEX runs_time ON runs (time)",
    ),
}
#: The tables a history holds; a store with other tables and no ``schema_version`` is not one.
TABLES = frozenset({"schema_version", "runs", "results"})


def run_uid(results: ResultSet, time: str, commit: str | None) -> str:
    """The identity of a run: SHA-256 of its results document as stored (time and commit included)."""
    doc = results.to_dict()
    doc["created"] = time
    doc["commit"] = commit
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


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


@dataclass
class StoredRun:
    """One stored run, whole: its identity, where it ran, and its results as a results file holds them."""

    run_id: int
    uid: str
    time: str
    commit: str | None
    machine_class: str | None
    results: ResultSet

    @property
    def machine(self) -> dict[str, Any]:
        """The machine fingerprint the run was recorded with."""
        return self.results.machine


def _partial_of(extra: str) -> str:
    try:
        return str(parse_json(extra).get("partial") or "")
    except (TypeError, ValueError, AttributeError):
        return ""


class HistoryStore(abc.ABC):
    """The history of results, whatever holds it. Use as a context manager or call ``close()``.

    ``where`` names the store in messages (a path, or a URL without its password).
    """

    dialect: str = ""
    where: str = ""
    readonly: bool = False

    # -- what a store supplies -------------------------------------------------------------
    @abc.abstractmethod
    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of a statement (``?`` placeholders)."""

    @abc.abstractmethod
    def _execute(self, sql: str, args: Sequence[Any] = ()) -> None:
        """Run a statement (``?`` placeholders)."""

    @abc.abstractmethod
    def _executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run a statement once per row."""

    @abc.abstractmethod
    def _transaction(self, *, write: bool) -> AbstractContextManager[None]:
        """A transaction: committed on success, rolled back on any error. ``write``: take the write lock
        (or the schema lock) at its start, so concurrent writers queue instead of failing."""

    @abc.abstractmethod
    def _tables(self) -> set[str]:
        """The names of the tables in the store's namespace."""

    @abc.abstractmethod
    def _insert_run(self, row: Sequence[Any]) -> int | None:
        """Insert ``(run_uid, time, commit_id, machine_class, fingerprint)`` into runs; its id, or None
        when a run with that uid is already stored (then nothing is inserted)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Close the connection."""

    def _lock_schema(self) -> None:  # noqa: B027 - a hook: SQLite's write transaction already locks the file
        """Hold the schema lock until the current transaction ends (where the write lock does not)."""

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema ------------------------------------------------------------------------------
    def _ensure_schema(self) -> None:
        """Create the schema in an empty store, migrate an older one, refuse a newer or foreign one.

        Runs in one write transaction (a read one when read-only), so two hosts opening a new store at
        once create it once.
        """
        with self._transaction(write=not self.readonly):
            if not self.readonly:
                self._lock_schema()
            tables = self._tables()
            if "schema_version" not in tables:
                if tables or self.readonly:
                    raise UsageError(f"history {self.where} is not a specwatch history database "
                                     "(it has no schema_version table)")
                for stmt in SCHEMA_V1[self.dialect]:
                    self._execute(stmt)
                self._execute("INSERT INTO schema_version (version) VALUES (?)", (1,))
                self._migrate(1)
                return
            row = self._query("SELECT MAX(version) FROM schema_version")
            version = self._version(row[0][0]) if row and row[0][0] is not None else 0
            if version > SCHEMA_VERSION:
                raise UsageError(
                    f"history {self.where} has schema version {version}, newer than this specwatch "
                    f"reads ({SCHEMA_VERSION}); upgrade specwatch or use another --history"
                )
            if version < SCHEMA_VERSION and self.readonly:
                raise UsageError(f"history {self.where} has schema version {version}, older than this specwatch "
                                 f"reads ({SCHEMA_VERSION}); `specwatch history import --history {self.where}` "
                                 "migrates it")
            self._migrate(version)

    def _migrate(self, version: int) -> None:
        while version < SCHEMA_VERSION:
            step = SCHEMA_MIGRATIONS.get(version)
            if step is None:
                raise UsageError(f"history {self.where} has schema version {version}, which cannot be migrated")
            step(self)
            version += 1
            self._execute("DELETE FROM schema_version")
            self._execute("INSERT INTO schema_version (version) VALUES (?)", (version,))

    @property
    def schema_version(self) -> int:
        """The schema version stored."""
        return self._version(self._query("SELECT MAX(version) FROM schema_version")[0][0])

    # -- what is stored, checked ----------------------------------------------------------------
    def corrupt(self, what: str) -> UsageError:
        """The error of a store whose content specwatch never wrote (edited by hand, or damaged)."""
        return UsageError(f"history {self.where}: corrupt: {what}")

    def _version(self, raw: Any) -> int:
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise self.corrupt(f"schema_version.version is {raw!r:.40}, not a whole number")
        return raw

    def _json(self, raw: Any, what: str, kind: type) -> Any:
        """A stored JSON column (``what`` names it in the message), which must parse to ``kind``."""
        try:
            data = parse_json(raw)
        except (TypeError, ValueError) as exc:
            raise self.corrupt(f"{what} is not JSON ({exc})") from None
        if not isinstance(data, kind):
            raise self.corrupt(f"{what}: expected a JSON {'list' if kind is list else 'object'}, got {raw!r:.40}")
        return data

    def _samples(self, raw: Any, run_id: Any, key: str) -> list[float]:
        """A stored row's samples: a JSON list of finite numbers, as the results file it came from held."""
        what = f"run {run_id} {key} samples"
        data = self._json(raw, what, list)
        try:
            return finite_samples(data, what)
        except UsageError as exc:
            raise self.corrupt(str(exc)) from None

    def _median(self, raw: Any, run_id: Any, key: str) -> float:
        if raw is None:
            return float("nan")
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise self.corrupt(f"run {run_id} {key} median is {raw!r:.40}, not a number")
        return float(raw)

    # -- writing -----------------------------------------------------------------------------
    def add_run(self, results: ResultSet, *, time: str | None = None, commit: str | None = None,
                uid: str | None = None) -> tuple[int, bool]:
        """Store one run unless it is stored already; ``(run id, whether it was new)``.

        Defaults: the results file's time and commit; ``uid`` (the run's identity) is computed from
        the document unless given (a copy between stores keeps the source's).
        """
        if self.readonly:
            raise UsageError(f"history {self.where} was opened read-only")
        when = time or results.created or utc_now()
        what = commit if commit is not None else results.commit
        ident = uid or run_uid(results, when, what)
        with self._transaction(write=True):
            run_id = self._insert_run((ident, when, what, results.machine_class,
                                       json.dumps(dict(results.machine), sort_keys=True)))
            if run_id is None:
                return int(self._query("SELECT id FROM runs WHERE run_uid = ?", (ident,))[0][0]), False
            self._executemany(
                "INSERT INTO results (run_id, key, profile, workload, metric, unit, higher_is_better,"
                " samples, extra, median) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (run_id, r.key, r.profile, r.workload, r.metric, r.unit, int(r.higher_is_better),
                     json.dumps(r.samples), json.dumps(r.extra, sort_keys=True),
                     median(r.samples) if r.samples else None)
                    for r in results.results
                ],
            )  # fmt: skip
        return run_id, True

    def append(self, results: ResultSet, *, time: str | None = None, commit: str | None = None) -> int:
        """Store one run (defaults: the results file's time and commit); returns its run id.

        The same run written twice is stored once: the second call returns the first one's id.
        """
        return self.add_run(results, time=time, commit=commit)[0]

    # -- reading -----------------------------------------------------------------------------
    def keys(self, machine_class: str | None = None) -> list[str]:
        """Metric keys with at least one point, sorted."""
        sql = "SELECT DISTINCT r.key FROM results r JOIN runs u ON u.id = r.run_id"
        args: tuple[Any, ...] = ()
        if machine_class is not None:
            sql += " WHERE u.machine_class = ?"
            args = (machine_class,)
        return sorted(row[0] for row in self._query(sql, args))

    def machine_classes(self) -> list[str | None]:
        """Machine classes with runs."""
        rows = self._query("SELECT DISTINCT machine_class FROM runs")
        return sorted((r[0] for r in rows), key=lambda x: (x is None, x or ""))

    def run_count(self) -> int:
        """How many runs are stored."""
        return int(self._query("SELECT COUNT(*) FROM runs")[0][0])

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
        for rid, t, commit, mc, samples, med, unit, hib, extra in self._query(sql, args):
            xs = tuple(self._samples(samples, rid, key))
            out.append(SeriesPoint(int(rid), t, commit, mc, xs, self._median(med, rid, key), unit, bool(hib),
                                   _partial_of(extra)))
        return out

    def machines(self) -> dict[int, dict[str, Any]]:
        """Each run's machine fingerprint, by run id."""
        out: dict[int, dict[str, Any]] = {}
        for rid, fp in self._query("SELECT id, fingerprint FROM runs"):
            try:
                data = parse_json(fp)
            except (TypeError, ValueError):
                data = {}
            out[int(rid)] = data if isinstance(data, dict) else {}
        return out

    def stored_runs(self, machine_class: str | None = None) -> list[StoredRun]:
        """Every run, whole, ordered by time (then by insertion); only one machine class's when given."""
        sql = "SELECT id, run_uid, time, commit_id, machine_class, fingerprint FROM runs"
        args: tuple[Any, ...] = ()
        if machine_class is not None:
            sql += " WHERE machine_class = ?"
            args = (machine_class,)
        runs = self._query(sql + " ORDER BY time, id", args)
        by_run: dict[int, list[Result]] = {int(r[0]): [] for r in runs}
        rsql = ("SELECT r.run_id, r.key, r.profile, r.workload, r.metric, r.unit, r.higher_is_better, r.samples,"
                " r.extra FROM results r JOIN runs u ON u.id = r.run_id")
        if machine_class is not None:
            rsql += " WHERE u.machine_class = ?"
        for rid, key, prof, wl, metric, unit, hib, samples, extra in self._query(rsql + " ORDER BY r.key", args):
            if int(rid) in by_run:
                by_run[int(rid)].append(self._result(rid, key, prof, wl, metric, unit, hib, samples, extra))
        return [
            StoredRun(int(rid), uid or "", t, commit, mc,
                      ResultSet(results=by_run[int(rid)], machine=self._json(fp, f"run {rid} fingerprint", dict),
                                commit=commit, created=t))
            for rid, uid, t, commit, mc, fp in runs
        ]  # fmt: skip

    def _result(self, rid: Any, key: str, prof: str, wl: str, metric: str, unit: str, hib: Any, samples: Any,
                extra: Any) -> Result:
        """One stored row of ``results`` as a Result, its JSON columns checked."""
        return Result(key, prof, wl, metric, unit, bool(hib), self._samples(samples, rid, key),
                      self._json(extra, f"run {rid} {key} extra", dict))


def _v1_to_v2(store: HistoryStore) -> None:
    """Version 2 gives each run its identity (``run_uid``, UNIQUE), computed for the runs already stored.

    A run stored twice under version 1 keeps both copies; the later ones get ``<uid>#<run id>``.
    """
    store._execute("ALTER TABLE runs ADD COLUMN run_uid TEXT")
    runs = [StoredRun(int(rid), "", t, commit, mc, ResultSet(machine=store._json(fp, f"run {rid} fingerprint", dict),
                                                             commit=commit, created=t))
            for rid, t, commit, mc, fp in store._query(
                "SELECT id, time, commit_id, machine_class, fingerprint FROM runs ORDER BY id")]
    rows: dict[int, list[Result]] = {}
    for row in store._query(
            "SELECT run_id, key, profile, workload, metric, unit, higher_is_better, samples, extra FROM results"):
        rows.setdefault(int(row[0]), []).append(store._result(*row))
    seen: set[str] = set()
    updates = []
    for run in runs:
        run.results.results = rows.get(run.run_id, [])
        uid = run_uid(run.results, run.time, run.commit)
        if uid in seen:
            uid = f"{uid}#{run.run_id}"
        seen.add(uid)
        updates.append((uid, run.run_id))
    if updates:
        store._executemany("UPDATE runs SET run_uid = ? WHERE id = ?", updates)
    store._execute("CREATE UNIQUE INDEX runs_run_uid ON runs (run_uid)")


# from-version -> the step that brings a store to from-version + 1 (run inside the schema transaction).
SCHEMA_MIGRATIONS: dict[int, Callable[[HistoryStore], None]] = {1: _v1_to_v2}
