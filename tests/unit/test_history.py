"""SQLite history: schema, append, ordered series, plots with change points."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest

from specwatch.errors import UsageError
from specwatch.store import history as history_mod
from specwatch.store.history import History, plot_series
from specwatch.store.result import Result, ResultSet

SERIES = [89.0, 89.3, 88.8, 89.1, 82.1, 82.2, 83.0, 82.4, 82.3, 82.7, 82.5, 82.1]


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


def test_default_path_and_schema_version(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with History() as h:
        assert h.path == history_mod.DEFAULT_PATH
        assert h.schema_version == 1
    assert (tmp_path / ".specwatch" / "history.sqlite").exists()


def test_append_and_series_ordered_by_time(tmp_path):
    db = tmp_path / "h.sqlite"
    with History(db) as h:
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
        assert h.keys() == ["baseline/single-stream/output_tok_s", "baseline/single-stream/ttft_ms"]
        assert h.machine_classes() == ["cpu-2core", "other"]
    # Persisted: a new connection sees the same data.
    with History(db) as h2:
        assert len(h2.series("baseline/single-stream/ttft_ms", machine_class="cpu-2core")) == len(SERIES)


def test_newer_schema_refused(tmp_path):
    db = tmp_path / "h.sqlite"
    History(db).close()
    con = sqlite3.connect(db)
    con.execute("UPDATE schema_version SET version = 9")
    con.commit()
    con.close()
    with pytest.raises(UsageError, match="newer"):
        History(db)


def test_plot_series_one_png_per_metric_with_change_point(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    marked = []
    real = history_mod.changepoint.detect

    def spy(series, **kw):
        out = real(series, **kw)
        marked.append([c.index for c in out])
        return out

    monkeypatch.setattr(history_mod.changepoint, "detect", spy)
    with History(tmp_path / "h.sqlite") as h:
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
        assert h.keys() == ["baseline/single-stream/output_tok_s", "baseline/single-stream/ttft_ms"]


def test_files_that_are_not_a_history_are_refused_untouched(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not a database, " * 10)
    for readonly in (True, False):
        with pytest.raises(UsageError, match=r"notes\.txt is not a specwatch history \(SQLite\) database"):
            History(text, readonly=readonly)
    assert text.read_text() == "not a database, " * 10
    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    for readonly in (True, False):
        with pytest.raises(UsageError, match="no schema_version table"):
            History(other, readonly=readonly)
    con = sqlite3.connect(other)
    assert [r[0] for r in con.execute("SELECT name FROM sqlite_master")] == ["t"]  # nothing added
    con.close()
    with pytest.raises(UsageError, match="is a directory"):
        History(tmp_path, readonly=True)


def test_plot_without_matplotlib_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    with History(tmp_path / "h.sqlite") as h:
        h.append(run(89.0, 0))
        with pytest.raises(UsageError, match=r"need matplotlib.*pip install matplotlib"):
            plot_series(h, tmp_path / "plots")


def _cli(argv, capsys):
    from specwatch.cli import main

    code = main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 1, err
    return code, out, err.strip()


def test_cli_history_errors_are_one_line(tmp_path, capsys, monkeypatch):
    from specwatch.errors import EXIT_OK, EXIT_USAGE

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
    assert not missing.exists()

    db = tmp_path / "h.sqlite"
    with History(db) as h:
        for i, v in enumerate(SERIES):
            h.append(run(v, i))
    assert _cli(["history", "show", "--history", str(db), "--machine-class", "nope"], capsys) == (
        EXIT_OK, f"no runs in {db} on machine class nope\n", "")
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code, _, err = _cli(["history", "plot", "--history", str(db), "--out", str(tmp_path / "plots")], capsys)
    assert code == EXIT_USAGE and "pip install" in err and "matplotlib" in err


def test_change_points_skip_runs_without_samples(tmp_path, capsys):
    from specwatch.errors import EXIT_OK

    db = tmp_path / "h.sqlite"
    with History(db) as h:
        for i, v in enumerate(SERIES):
            h.append(run(v, i))
        empty = run(0.0, 99)
        empty.results[0].samples.clear()
        h.append(empty)
    code, out, _ = _cli(["history", "changes", "--history", str(db), "baseline/single-stream/output_tok_s"], capsys)
    assert code == EXIT_OK and "change at run" in out


def test_partial_runs_are_shown_as_such_and_left_out_of_change_points(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from specwatch.cli import main
    from specwatch.store.history import History
    from specwatch.store.result import Result, ResultSet

    path = tmp_path / "h.sqlite"
    with History(path) as hist:
        for i in range(12):
            partial = "interrupted" if i == 11 else ""
            level = 100.0 if i < 11 else 50.0  # the only drop is the interrupted run
            r = Result.make("p", "w", "decode_tok_s", unit="tok/s", higher_is_better=True,
                            samples=[level + 0.1 * j for j in range(5)], extra={"partial": partial} if partial else {})
            hist.append(ResultSet(results=[r], machine={"machine_class": "c"}), time=f"2026-01-{i + 1:02d}T00:00:00")
    assert main(["history", "show", "--history", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.count("(partial: interrupted)") == 1
    assert main(["history", "changes", "--history", str(path)]) == 0
    assert "no change points found" in capsys.readouterr().out
