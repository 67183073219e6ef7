"""The PostgreSQL history store: many writers at once lose nothing and store each run once; a bad
URL, an unreachable server or a missing driver is one line, never a traceback, and never shows the
password. The store's behaviour shared with SQLite is tested in ``test_history.py`` for both."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from specwatch.errors import EXIT_USAGE, UsageError
from specwatch.store.history import open_history
from specwatch.store.history_postgres import redact
from specwatch.store.result import ResultSet

#: the fixtures history_target, pg_url and postgres_server (a real PostgreSQL server)
pytest_plugins = ("pgfixture",)

WRITER = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from specwatch.store.history import open_history
    from specwatch.store.result import Result, ResultSet

    target, me, go, n = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])

    def one(name, i, value):
        r = Result.make("p", "w", "decode_tok_s", unit="tok/s", higher_is_better=True, samples=[value, value + 1])
        return ResultSet([r], machine={"machine_class": "fleet", "host_id": name}, commit=f"{name}-{i}",
                         created=f"2026-11-30T{i // 60:02d}:{i % 60:02d}:00+00:00")

    (go.parent / f"ready-{me}").touch()
    while not go.exists():  # both writers start together, the schema not yet created
        time.sleep(0.002)
    start = time.time()
    ids = []
    with open_history(target) as h:
        for i in range(n):
            ids.append(h.append(one(me, i, 100.0 + i)))      # this host's own run
            ids.append(h.append(one("shared", i, 50.0 + i)))  # the same run, written by both hosts
            if i == 0:  # a barrier, not a stopwatch: neither goes on before both have written once
                (go.parent / f"first-{me}").touch()
                deadline = time.monotonic() + 120
                while len(list(go.parent.glob("first-*"))) < 2 and time.monotonic() < deadline:
                    time.sleep(0.002)
            time.sleep(0.005)
    print(json.dumps({"start": start, "end": time.time(), "ids": ids}))
""")


def test_two_processes_writing_at_once_lose_nothing_and_store_each_run_once(history_target: str,
                                                                             tmp_path: Path) -> None:
    n = 40
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, history_target, name, str(go), str(n)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name in ("a", "b")]
    deadline = time.monotonic() + 120  # both interpreters up and waiting (a hang guard, not a sleep)
    while len(list(tmp_path.glob("ready-*"))) < 2 and time.monotonic() < deadline:
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
        time.sleep(0.02)
    go.touch()
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-2000:]
    a, b = (json.loads(out) for out, _ in outs)
    assert a["start"] < b["end"] and b["start"] < a["end"], "the two writers did not overlap"  # sure, by the barrier
    with open_history(history_target, readonly=True) as h:
        runs = h.stored_runs()
        assert h.run_count() == len(runs) == 3 * n  # n of a's, n of b's, n shared ones stored once
        commits = sorted(r.commit or "" for r in runs)
        assert commits == sorted(f"{who}-{i}" for who in ("a", "b", "shared") for i in range(n))
        assert len({r.uid for r in runs}) == 3 * n
        for r in runs:  # each run whole: its one result with its own samples
            value = r.results.results[0].samples[0]
            who, i = (r.commit or "").split("-")
            assert value == (50.0 if who == "shared" else 100.0) + int(i)
        assert len(h.series("p/w/decode_tok_s")) == 3 * n
    # both writers were told the same id for each shared run
    assert a["ids"][1::2] == b["ids"][1::2]


def test_the_schema_is_postgres_own_and_the_identity_unique(pg_url: str) -> None:
    import psycopg

    with open_history(pg_url) as h:
        assert h.schema_version == 2
    with psycopg.connect(pg_url) as conn:
        cols = dict(conn.execute("SELECT column_name, data_type FROM information_schema.columns "
                                 "WHERE table_name = 'runs'").fetchall())
        index = conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'runs_run_uid'").fetchone()
    assert cols["id"] == "bigint" and cols["run_uid"] == "text"
    assert index is not None and "UNIQUE" in index[0]


def test_a_read_only_history_cannot_write_even_behind_specwatch_s_back(pg_url: str) -> None:
    open_history(pg_url).close()
    with open_history(pg_url, readonly=True) as h:
        with pytest.raises(UsageError, match="read-only"):
            h.append(ResultSet())
        with pytest.raises(UsageError, match="read-only transaction"):  # the server refuses too
            h._execute("DELETE FROM runs")


@pytest.mark.parametrize(("url", "message"), [
    ("postgresql://nobody:s3cret@/nodb?host=/nonexistent-socket-dir", "cannot connect"),
    ("postgresql://nobody:s3cret@/nodb?host=/nonexistent-socket-dir&nosuchoption=1", "invalid URI query parameter"),
    ("postgres://nobody:s3cret@/nodb?host=/nonexistent-socket-dir", "cannot connect"),
])
def test_unreachable_or_bad_urls_are_one_line_without_the_password(url: str, message: str,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("psycopg")
    from specwatch.cli import main

    with pytest.raises(UsageError, match=message) as info:
        open_history(url)
    assert "s3cret" not in str(info.value) and "nobody@" in str(info.value)
    assert len(str(info.value).splitlines()) == 1
    assert main(["history", "show", "--history", url]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("specwatch: history postgres") and len(err.strip().splitlines()) == 1
    assert "s3cret" not in err and "Traceback" not in err


def test_a_database_that_does_not_exist_is_named(pg_url: str) -> None:
    missing = pg_url.replace("/specwatch_", "/nosuchdb_", 1)
    with pytest.raises(UsageError, match=r'cannot connect: .*database "nosuchdb_\w+" does not exist'):
        open_history(missing)


def test_without_psycopg_the_message_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg now raises ImportError
    with pytest.raises(UsageError, match=r"needs psycopg.*pip install 'specwatch\[postgres\]'"):
        open_history("postgresql://u:pw@db.example/specwatch")


def test_redact_keeps_everything_but_the_password() -> None:
    assert redact("postgresql://u:pw@db:5432/h?sslmode=require") == "postgresql://u@db:5432/h?sslmode=require"
    assert redact("postgresql://postgres:@/postgres?host=/tmp/x") == "postgresql://postgres@/postgres?host=/tmp/x"
    assert redact("postgresql://db/h") == "postgresql://db/h"
    assert redact("postgresql://:pw@db/h") == "postgresql://db/h"


def test_a_perf_run_appends_to_a_postgres_history_given_as_a_url(pg_url: str, tmp_path: Path) -> None:
    """``--specwatch-history postgresql://...``: the run's persist step writes there (once, however often)
    and names the database, without its password, instead of listing it among the files written."""
    from specwatch.run.options import Config
    from specwatch.run.record import RunRecord
    from specwatch.run.summary import persist
    from specwatch.store.result import Result

    rs = ResultSet([Result.make("p", "w", "decode_tok_s", unit="tok/s", higher_is_better=True, samples=[1.0, 2.0])],
                   machine={"machine_class": "ci-cpu"}, commit="abc", created="2026-11-30T00:00:00+00:00")
    said: list[str] = []
    cfg = Config(history=pg_url, report_dir="reports", rootdir=tmp_path)
    for _ in range(2):
        written = persist(RunRecord(results=rs, perf_tests=1), cfg, perf_run=True, machine_class=lambda: "ci-cpu",
                          tolerance_for=lambda _p: 0.05, progress=said.append)
        assert all(isinstance(p, Path) and p.exists() for p in written)
        assert not any("postgres" in str(p) for p in written)
    assert said == [f"specwatch wrote this run to the history {redact(pg_url)}"] * 2
    with open_history(pg_url, readonly=True) as h:
        assert h.run_count() == 1 and h.series("p/w/decode_tok_s")[0].commit == "abc"
