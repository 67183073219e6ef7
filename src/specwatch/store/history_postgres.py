"""The fleet's history store: a PostgreSQL database many hosts write to at once.

``postgresql://user@host:5432/db`` (or ``postgres://``; any libpq URI, e.g.
``postgresql://ci@/specwatch?host=/run/postgresql`` for a unix socket). Put the password in
``PGPASSWORD`` or ``~/.pgpass`` rather than in the URL; messages never show it. The tables live in
the connection's current schema (``?options=-csearch_path%3Dspecwatch`` picks another one, which
must exist).

Every write is one transaction. A run is inserted with ``ON CONFLICT (run_uid) DO NOTHING``, so two
hosts writing the same run store it once and two different runs never block each other for long;
creating or migrating the schema holds a transaction-scoped advisory lock, so hosts opening a new
database together create it once. Needs psycopg 3 (``pip install 'specwatch[postgres]'``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from specwatch.errors import UsageError
from specwatch.store.history_base import HistoryStore

#: what to run when the driver is missing
POSTGRES_INSTALL = "pip install 'specwatch[postgres]' (or pip install 'psycopg[binary]')"
#: the advisory lock key that serialises schema creation and migration (any constant works)
SCHEMA_LOCK = 0x5EC_0A7C
CONNECT_TIMEOUT_S = 10


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        parts = urlsplit(url)
        if parts.password is None and "@" not in parts.netloc:
            return url
        host = parts.netloc.rsplit("@", 1)[-1]
        user = parts.username or ""
        return urlunsplit(parts._replace(netloc=f"{user}@{host}" if user else host))
    except ValueError:
        return url.split("@", 1)[-1]


def _one_line(exc: BaseException) -> str:
    return " ".join(line.strip() for line in str(exc).splitlines() if line.strip()) or type(exc).__name__


class PostgresHistory(HistoryStore):
    """The history in a PostgreSQL database."""

    dialect = "postgresql"

    def __init__(self, url: str, *, readonly: bool = False) -> None:
        self.url = url
        self.where = redact(url)
        self.readonly = readonly
        try:
            import psycopg
        except ImportError:
            raise UsageError(f"history {self.where}: PostgreSQL needs psycopg, which is not installed: "
                             f"{POSTGRES_INSTALL}") from None
        self._errors: type[BaseException] = psycopg.Error
        try:
            self.conn = psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S,
                                        application_name="specwatch")
        except psycopg.Error as exc:
            raise UsageError(f"history {self.where}: cannot connect: {_one_line(exc)}") from None
        try:
            if readonly:
                self._execute("SET default_transaction_read_only = on")
            self._ensure_schema()
        except BaseException:
            self.conn.close()
            raise

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()

    @contextmanager
    def _guard(self) -> Iterator[None]:
        try:
            yield
        except self._errors as exc:
            raise UsageError(f"history {self.where}: {_one_line(exc)}") from None

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._guard():
            return self.conn.execute(sql.replace("?", "%s"), tuple(args) or None).fetchall()

    def _execute(self, sql: str, args: Sequence[Any] = ()) -> None:
        with self._guard():
            self.conn.execute(sql.replace("?", "%s"), tuple(args) or None)

    def _executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with self._guard(), self.conn.cursor() as cur:
            cur.executemany(sql.replace("?", "%s"), [tuple(r) for r in rows])

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[None]:
        with self._guard(), self.conn.transaction():
            yield

    def _lock_schema(self) -> None:
        self._execute("SELECT pg_advisory_xact_lock(?)", (SCHEMA_LOCK,))

    def _tables(self) -> set[str]:
        rows = self._query("SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                           " WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v', 'm', 'f')")
        return {r[0] for r in rows}

    def _insert_run(self, row: Sequence[Any]) -> int | None:
        found = self._query("INSERT INTO runs (run_uid, time, commit_id, machine_class, fingerprint)"
                            " VALUES (?, ?, ?, ?, ?) ON CONFLICT (run_uid) DO NOTHING RETURNING id", row)
        return int(found[0][0]) if found else None
