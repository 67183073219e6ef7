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

import os
import re
from pathlib import Path

from specwatch.errors import UsageError
from specwatch.store.history_base import (
    SCHEMA_MIGRATIONS,
    SCHEMA_VERSION,
    HistoryStore,
    SeriesPoint,
    StoredRun,
)
from specwatch.store.history_sqlite import DEFAULT_PATH, SQLiteHistory

__all__ = ["DEFAULT_PATH", "SCHEMA_MIGRATIONS", "SCHEMA_VERSION", "History", "HistoryStore", "SeriesPoint",
           "StoredRun", "copy_runs", "is_url", "open_history"]

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
