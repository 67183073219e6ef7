"""A real PostgreSQL server for the history tests, from the pip-installable ``pgserver`` package.

Wiring: a test module imports the fixtures it uses (``from pgfixture import history_target, pg_url``);
``tests/unit`` is on ``sys.path`` while pytest collects the modules in it (rootdir-relative
"prepend" imports, no ``__init__.py``), so no conftest is involved.

``postgres_server`` (session scope) starts one server in a temporary folder and stops it at the
end; ``pg_url`` gives each test a fresh, empty database on it; ``history_target`` parametrizes a
test over both history stores (a SQLite file path, then a PostgreSQL URL). Where the server cannot
start (pgserver or psycopg not installed, or PostgreSQL refused to run), the PostgreSQL cases skip
with the reason as the skip message. ``SPECWATCH_REQUIRE_POSTGRES=1`` turns that skip into a
failure, for a CI that must run them. As root, pgserver runs PostgreSQL as a system user
``pgserver`` it creates (``useradd``) and opens the folders above its data folder to it (o+rx).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

REQUIRE_ENV = "SPECWATCH_REQUIRE_POSTGRES"


def _unavailable(reason: str) -> NoReturn:
    """Skip (or fail, when PostgreSQL is required) with ``reason``."""
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Any]:
    """A PostgreSQL server started by pgserver in a temporary folder, stopped (and the folder removed) at the end."""
    try:
        with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
            warnings.simplefilter("ignore")
            import pgserver
    except ImportError:
        _unavailable("PostgreSQL tests need pgserver, which is not installed (pip install -e '.[test]')")
    try:
        import psycopg
    except ImportError:
        _unavailable("PostgreSQL tests need psycopg, which is not installed (pip install 'psycopg[binary]')")
    from importlib.metadata import version

    # Not under pytest's basetemp: every pytest that starts (a test's own pytest subprocess included)
    # chmods /tmp/pytest-of-<user> back to 0700, which locks the server's user out of its data.
    data = Path(tempfile.mkdtemp(prefix="specwatch-pgdata-"))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = pgserver.get_server(data, cleanup_mode="stop")
    except Exception as exc:  # initdb or pg_ctl failed: say why, never pass silently
        log = data / "log"
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
        shutil.rmtree(data, ignore_errors=True)
        _unavailable(f"pgserver {version('pgserver')} could not start PostgreSQL here: {_one_line(exc)}"
                     + (f" (log: {tail[0]})" if tail else ""))
    import psycopg

    with psycopg.connect(server.get_uri(), autocommit=True) as conn:  # a test server: durability not needed
        for setting in ("fsync", "synchronous_commit", "full_page_writes"):
            conn.execute(f"ALTER SYSTEM SET {setting} = off")
        conn.execute("SELECT pg_reload_conf()")
    try:
        yield server
    finally:
        server.cleanup()
        shutil.rmtree(data, ignore_errors=True)


@pytest.fixture
def pg_url(postgres_server: Any) -> Iterator[str]:
    """The URL of a new, empty database on the session's server (dropped afterwards)."""
    import psycopg

    name = f"specwatch_{uuid.uuid4().hex[:12]}"
    admin = postgres_server.get_uri()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield postgres_server.get_uri(name)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def history_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a history goes, once per store: a SQLite file path, then a PostgreSQL URL."""
    if request.param == "sqlite":
        return str(tmp_path / "h.sqlite")
    return str(request.getfixturevalue("pg_url"))
