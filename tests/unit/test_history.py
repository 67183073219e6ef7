"""The history, in both stores (SQLite file, PostgreSQL database): schema and migrations, append
(each run once), ordered series, plots with change points, the ``specwatch history`` commands.

Tests taking ``history_target`` run once per store (see ``pgfixture.py``).
"""

from __future__ import annotations

import json
import sqlite3
import sys
from typing import Any

import pytest

from specwatch.errors import EXIT_OK, EXIT_USAGE, UsageError
from specwatch.report import plot as plot_mod
from specwatch.report.plot import plot_series
from specwatch.store import history as history_mod
from specwatch.store.history import History, open_history
from specwatch.store.history_base import SCHEMA_V1, SCHEMA_VERSION, run_uid
from specwatch.store.result import Result, ResultSet

#: the fixtures history_target, pg_url and postgres_server (a real PostgreSQL server)
pytest_plugins = ("pgfixture",)
SERIES = [89.0, 89.3, 88.8, 89.1, 82.1, 82.2, 83.0, 82.4, 82.3, 82.7, 82.5, 82.1]
KEYS = ["baseline/single-stream/output_tok_s", "baseline/single-stream/ttft_ms"]


def run(value: float, i: int, machine_class: str = "cpu-2core") -> ResultSet:
    return ResultSet(
        [
            Result.make("baseline", "single-stream", "output_tok_s", unit="tok/s", higher_is_better=True,
                        samples=[value - 0.1, value, value + 0.1]),
            Result.make("baseline", "single-stream", "ttft_ms", unit="ms", higher_is_better=False,
                        samples=[12.0]),
        ],
        machine={"machine_class": machine_class},
        commit=f"c{i:03d}",
        created=f"2026-11-{1 + i:02d}T10:00:00+00:00",
    )  # fmt: skip


def raw(target: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    """Run SQL on the store behind ``target`` directly (not through specwatch); the rows, if any."""
    if target.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(target, autocommit=True) as conn:
            cur = conn.execute(sql.replace("?", "%s"), args or None)
            return cur.fetchall() if cur.description else []
    con = sqlite3.connect(target)
    try:
        rows = con.execute(sql, args).fetchall()
        con.commit()
        return rows
    finally:
        con.close()


def test_default_path_and_schema_version(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with History() as h:
        assert h.path == history_mod.DEFAULT_PATH
        assert h.schema_version == SCHEMA_VERSION == 2
    assert (tmp_path / ".specwatch" / "history.sqlite").exists()
    with open_history() as h:  # the factory's default is the same file
        assert isinstance(h, History) and h.path == history_mod.DEFAULT_PATH


def test_append_and_series_ordered_by_time(history_target):
    with open_history(history_target) as h:
        # Inserted out of order: the series comes back in time order.
        for i in reversed(range(len(SERIES))):
            h.append(run(SERIES[i], i))
        h.append(run(50.0, 0, machine_class="other"))
        pts = h.series("baseline/single-stream/output_tok_s", machine_class="cpu-2core")
        assert [p.median for p in pts] == pytest.approx(SERIES)
        assert [p.commit for p in pts] == [f"c{i:03d}" for i in range(len(SERIES))]
        assert pts[0].samples == pytest.approx((88.9, 89.0, 89.1))
        assert pts[0].unit == "tok/s"
        assert pts[0].higher_is_better is True
        assert len(h.series("baseline/single-stream/output_tok_s")) == len(SERIES) + 1
        assert h.keys() == KEYS
        assert h.keys("nope") == []
        assert h.machine_classes() == ["cpu-2core", "other"]
        assert h.run_count() == len(SERIES) + 1
    # Persisted: a new connection sees the same data.
    with open_history(history_target, readonly=True) as h2:
        assert len(h2.series("baseline/single-stream/ttft_ms", machine_class="cpu-2core")) == len(SERIES)


def test_the_same_run_written_twice_is_stored_once(history_target):
    with open_history(history_target) as h:
        first = h.add_run(run(89.0, 0))
        assert first[1] is True
        assert h.add_run(run(89.0, 0)) == (first[0], False)  # same document: the same run
        assert h.append(run(89.0, 0)) == first[0]
        other = h.add_run(run(89.0, 0), commit="another")  # stored under another commit: another run
        assert other[1] is True and other[0] != first[0]
        assert h.run_count() == 2
        assert len(h.series(KEYS[0])) == 2
    uids = raw(history_target, "SELECT run_uid FROM runs ORDER BY id")
    assert [u[0] for u in uids] == [run_uid(run(89.0, 0), "2026-11-01T10:00:00+00:00", "c000"),
                                    run_uid(run(89.0, 0), "2026-11-01T10:00:00+00:00", "another")]


def test_stored_runs_give_back_the_results_documents(history_target):
    original = run(89.0, 3)
    original.machine.update({"host_id": "abc", "engine": "sglang", "engine_version": "0.5.23"})
    original.results[0].extra["partial"] = "interrupted"
    with open_history(history_target) as h:
        h.append(original)
        h.append(run(70.0, 4, machine_class="other"))
        stored = h.stored_runs()
        assert [s.machine_class for s in stored] == ["cpu-2core", "other"]
        assert stored[0].results.to_dict() == original.to_dict()
        assert stored[0].uid == run_uid(original, original.created, original.commit)
        assert stored[0].machine["engine_version"] == "0.5.23"
        assert [s.machine_class for s in h.stored_runs("other")] == ["other"]
        assert h.series(KEYS[0])[0].partial == "interrupted"
        assert h.machines()[stored[0].run_id]["host_id"] == "abc"


def test_newer_schema_refused(history_target):
    open_history(history_target).close()
    raw(history_target, "UPDATE schema_version SET version = 9")
    for readonly in (False, True):
        with pytest.raises(UsageError, match="schema version 9, newer than this specwatch reads"):
            open_history(history_target, readonly=readonly)


def _v1_store(target: str, dialect: str) -> None:
    """A version-1 history as the first specwatch wrote it (no run identity), holding run 0 twice."""
    for stmt in SCHEMA_V1[dialect]:
        raw(target, stmt)
    raw(target, "INSERT INTO schema_version (version) VALUES (1)")
    for rs in (run(89.0, 0), run(88.0, 1), run(89.0, 0)):
        rid = raw(target, "INSERT INTO runs (time, commit_id, machine_class, fingerprint) VALUES (?, ?, ?, ?)"
                  " RETURNING id", rs.created, rs.commit, rs.machine_class, json.dumps(rs.machine))[0][0]
        for r in rs.results:
            raw(target, "INSERT INTO results (run_id, key, profile, workload, metric, unit, higher_is_better, "
                "samples, extra, median) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rid, r.key, r.profile, r.workload,
                r.metric, r.unit, int(r.higher_is_better), json.dumps(r.samples), json.dumps(r.extra), r.samples[0])


def test_an_older_schema_is_migrated_by_a_writer_only(history_target, capsys):
    if sqlite3.sqlite_version_info < (3, 35) and not history_target.startswith("postgresql"):
        pytest.skip("the test writes its version-1 store with RETURNING (SQLite 3.35+)")
    _v1_store(history_target, "postgresql" if history_target.startswith("postgresql") else "sqlite")
    with pytest.raises(UsageError, match=r"schema version 1, older than this specwatch reads \(2\); "
                                         r"`specwatch history import --history .*` migrates it"):
        open_history(history_target, readonly=True)
    code, out, _ = _cli(["history", "import", "--history", history_target], capsys)  # what the message says
    assert code == EXIT_OK and out.endswith("schema version 2, 3 run(s)\n")
    with open_history(history_target, readonly=True) as h:
        assert h.schema_version == 2
        assert h.run_count() == 3  # nothing dropped: the run stored twice under version 1 stays twice
        uids = [u for (u,) in raw(history_target, "SELECT run_uid FROM runs ORDER BY id")]
        first = run_uid(run(89.0, 0), "2026-11-01T10:00:00+00:00", "c000")
        assert uids[0] == first and uids[2] == f"{first}#3" and len(set(uids)) == 3
    with open_history(history_target) as h:
        assert h.add_run(run(89.0, 0)) == (1, False)  # importing the file again finds the migrated run
        assert h.add_run(run(88.0, 1)) == (2, False)
    with pytest.raises(Exception, match=r"(?i)unique"):  # the identity is UNIQUE in the store itself
        raw(history_target, "UPDATE runs SET run_uid = ? WHERE id = 2", first)


def test_plot_series_one_png_per_metric_with_change_point(tmp_path, monkeypatch, history_target):
    pytest.importorskip("matplotlib")
    marked = []
    real = plot_mod.changepoint.detect

    def spy(series, **kw):
        out = real(series, **kw)
        marked.append([c.index for c in out])
        return out

    monkeypatch.setattr(plot_mod.changepoint, "detect", spy)
    with open_history(history_target) as h:
        for i, v in enumerate(SERIES):
            h.append(run(v, i))
        paths = plot_series(h, tmp_path / "plots")
    names = sorted(p.name for p in paths)
    assert names == [
        "cpu-2core__baseline__single-stream__output_tok_s.png",
        "cpu-2core__baseline__single-stream__ttft_ms.png",
    ]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [4] in marked  # the 89 → 82 step was found and drawn


def test_reading_a_missing_history_creates_nothing(tmp_path):
    db = tmp_path / "sub" / "h.sqlite"
    with pytest.raises(UsageError, match="history file not found"):
        History(db, readonly=True)
    assert not db.exists() and not db.parent.exists()
    with History(db) as h:  # the writer (pytest run, history import) still creates it
        h.append(run(89.0, 0))
    with History(db, readonly=True) as h:
        assert h.keys() == KEYS
        with pytest.raises(UsageError, match="read-only"):
            h.append(run(88.0, 1))


def test_reading_an_empty_database_creates_nothing(pg_url):
    with pytest.raises(UsageError, match="no schema_version table"):
        open_history(pg_url, readonly=True)
    assert raw(pg_url, "SELECT COUNT(*) FROM pg_tables WHERE schemaname = 'public'") == [(0,)]


def test_files_that_are_not_a_history_are_refused_untouched(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not a database, " * 10)
    for readonly in (True, False):
        with pytest.raises(UsageError, match=r"notes\.txt is not a specwatch history \(SQLite\) database"):
            History(text, readonly=readonly)
    assert text.read_text() == "not a database, " * 10
    with pytest.raises(UsageError, match="is a directory"):
        History(tmp_path, readonly=True)


def test_a_database_of_other_tables_is_refused_untouched(history_target):
    raw(history_target, "CREATE TABLE t (x INTEGER)")
    for readonly in (True, False):
        with pytest.raises(UsageError, match=r"not a specwatch history database.*no schema_version table"):
            open_history(history_target, readonly=readonly)
    if history_target.startswith("postgresql"):
        names = raw(history_target, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    else:
        names = raw(history_target, "SELECT name FROM sqlite_master")
    assert [r[0] for r in names] == ["t"]  # nothing added


def test_plot_without_matplotlib_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    with History(tmp_path / "h.sqlite") as h:
        h.append(run(89.0, 0))
        with pytest.raises(UsageError, match=r"need matplotlib.*pip install matplotlib"):
            plot_series(h, tmp_path / "plots")


def _cli(argv, capsys):
    from specwatch.cli import main

    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 1, err
    return code, out, err.strip()


def test_cli_history_errors_are_one_line(tmp_path, capsys, monkeypatch):
    notdb = tmp_path / "results.json"
    notdb.write_text('{"version": 1, "results": []}')
    code, _, err = _cli(["history", "show", "--history", str(notdb)], capsys)
    assert code == EXIT_USAGE and str(notdb) in err and "not a specwatch history" in err

    code, _, err = _cli(["history", "changes", "--alpha", "5"], capsys)
    assert code == EXIT_USAGE and "--alpha" in err and "between 0 and 1" in err

    missing = tmp_path / "missing.sqlite"
    for sub in ("show", "changes", "plot"):
        code, _, err = _cli(["history", sub, "--history", str(missing)], capsys)
        assert code == EXIT_USAGE and f"history file not found: {missing}" in err
    code, _, err = _cli(["history", "export", "--history", str(missing), "--to", tmp_path / "b.sqlite"], capsys)
    assert code == EXIT_USAGE and f"history file not found: {missing}" in err
    assert not missing.exists() and not (tmp_path / "b.sqlite").exists()

    db = tmp_path / "h.sqlite"
    with History(db) as h:
        for i, v in enumerate(SERIES):
            h.append(run(v, i))
    assert _cli(["history", "show", "--history", str(db), "--machine-class", "nope"], capsys) == (
        EXIT_OK, f"no runs in {db} on machine class nope\n", "")
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code, _, err = _cli(["history", "plot", "--history", str(db), "--out", str(tmp_path / "plots")], capsys)
    assert code == EXIT_USAGE and "pip install" in err and "matplotlib" in err

    for argv, text in ((["import", "--history", db, "--from", db], "is --history itself"),
                       (["export", "--history", db, "--to", db], "is --history itself"),
                       (["show", "--history", "mysql://u@h/db"], "scheme mysql:// is not supported")):
        code, _, err = _cli(["history", *argv], capsys)
        assert code == EXIT_USAGE and text in err, err


def test_change_points_skip_runs_without_samples(history_target, capsys):
    with open_history(history_target) as h:
        for i, v in enumerate(SERIES):
            h.append(run(v, i))
        empty = run(0.0, 99)
        empty.results[0].samples.clear()
        h.append(empty)
    code, out, _ = _cli(["history", "changes", "--history", history_target, KEYS[0]], capsys)
    assert code == EXIT_OK and "change at run 5 " in out and "commit c004" in out


def test_partial_runs_are_shown_as_such_and_left_out_of_change_points(history_target: str,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from specwatch.cli import main

    with open_history(history_target) as hist:
        for i in range(12):
            partial = "interrupted" if i == 11 else ""
            level = 100.0 if i < 11 else 50.0  # the only drop is the interrupted run
            r = Result.make("p", "w", "decode_tok_s", unit="tok/s", higher_is_better=True,
                            samples=[level + 0.1 * j for j in range(5)], extra={"partial": partial} if partial else {})
            hist.append(ResultSet(results=[r], machine={"machine_class": "c"}), time=f"2026-01-{i + 1:02d}T00:00:00")
    assert main(["history", "show", "--history", history_target]) == 0
    out = capsys.readouterr().out
    assert out.count("(partial: interrupted)") == 1
    assert main(["history", "changes", "--history", history_target]) == 0
    assert "no change points found" in capsys.readouterr().out


def test_import_twice_then_export_and_import_between_stores(tmp_path, history_target, capsys):
    """Results files -> the history under test -> a SQLite file (export) -> a third one (import --from):
    every copy holds the same runs, and copying again adds nothing."""
    files = []
    for i, v in enumerate(SERIES[:6]):
        files.append(run(v, i, machine_class="cpu-2core" if i % 2 else "gpu").save(tmp_path / f"r{i}.json"))
    code, out, _ = _cli(["history", "import", "--history", history_target, *files], capsys)
    assert code == EXIT_OK and out.count("imported ") == 6
    code, out, _ = _cli(["history", "import", "--history", history_target, files[0], files[1]], capsys)
    assert code == EXIT_OK and out.count("is already in the history as run") == 2 and "imported" not in out

    exported = tmp_path / "exported.sqlite"
    code, out, _ = _cli(["history", "export", "--history", history_target, "--to", exported], capsys)
    assert code == EXIT_OK and "copied 6 run(s)" in out
    code, out, _ = _cli(["history", "export", "--history", history_target, "--to", exported], capsys)
    assert code == EXIT_OK and "copied 0 run(s)" in out and "(6 already there)" in out

    gpu_only = tmp_path / "gpu.sqlite"
    code, out, _ = _cli(["history", "import", "--history", gpu_only, "--from", exported,
                         "--machine-class", "gpu"], capsys)
    assert code == EXIT_OK and "copied 3 run(s)" in out

    with open_history(history_target, readonly=True) as a, open_history(exported, readonly=True) as b, \
            open_history(gpu_only, readonly=True) as c:
        docs = [r.results.to_dict() for r in a.stored_runs()]
        assert docs == [r.results.to_dict() for r in b.stored_runs()]
        assert [r.uid for r in a.stored_runs()] == [r.uid for r in b.stored_runs()]
        assert [r.results.to_dict() for r in c.stored_runs()] == [d for d in docs
                                                                  if d["machine"]["machine_class"] == "gpu"]
        assert a.series(KEYS[0]) == b.series(KEYS[0])
