"""SQLite history: schema, append, ordered series, plots with change points."""

from __future__ import annotations

import sqlite3

import pytest

from specwatch import history as history_mod
from specwatch.errors import UsageError
from specwatch.history import History, plot_series
from specwatch.result import Result, ResultSet

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
