"""The embedded history store: one SQLite file, by default ``.specwatch/history.sqlite``.

Opened for reading (``readonly=True``, the ``specwatch history`` commands that only look), a
missing file is an error rather than a new empty database. Writes take SQLite's write lock at the
start of their transaction (``BEGIN IMMEDIATE``) and wait up to 30 s for another writer, so
several processes on one host may share a file.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from specwatch.errors import UsageError
from specwatch.paths import DEFAULT_HISTORY
from specwatch.store.history_base import HistoryStore

DEFAULT_PATH = Path(DEFAULT_HISTORY)
#: how long a writer waits for another one's lock, in seconds
BUSY_TIMEOUT_S = 30.0


class SQLiteHistory(HistoryStore):
    """The history in a SQLite file."""

    dialect = "sqlite"

    def __init__(self, path: str | os.PathLike[str] = DEFAULT_PATH, *, readonly: bool = False) -> None:
        self.path = Path(path)
        self.where = str(self.path)
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
            # isolation_level=None: no implicit transactions; _transaction opens and closes every one
            self.conn = sqlite3.connect(target, uri=uri, timeout=BUSY_TIMEOUT_S, isolation_level=None)
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

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()

    def _run(self, sql: str, args: Sequence[Any]) -> sqlite3.Cursor:
        try:
            return self.conn.execute(sql, tuple(args))
        except sqlite3.OperationalError as exc:  # locked past the timeout, disk full, read-only file
            raise UsageError(f"history {self.path}: {exc}") from None

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._run(sql, args).fetchall()

    def _execute(self, sql: str, args: Sequence[Any] = ()) -> None:
        self._run(sql, args)

    def _executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        try:
            self.conn.executemany(sql, rows)
        except sqlite3.OperationalError as exc:
            raise UsageError(f"history {self.path}: {exc}") from None

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[None]:
        if self.conn.in_transaction:  # nested: part of the outer one
            yield
            return
        self._execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            yield
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise
        self._execute("COMMIT")

    def _tables(self) -> set[str]:
        return {r[0] for r in self._query("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")
                if not r[0].startswith("sqlite_")}

    def _insert_run(self, row: Sequence[Any]) -> int | None:
        cur = self._run("INSERT OR IGNORE INTO runs (run_uid, time, commit_id, machine_class, fingerprint)"
                        " VALUES (?, ?, ?, ?, ?)", row)
        return int(cur.lastrowid or 0) if cur.rowcount == 1 else None
