"""Rendering: table, Markdown + step summary, JUnit properties, pytest-benchmark JSON."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import pytest

from specwatch.report import table as report
from specwatch.report.table import ReportRow

SRC = str(Path(report.__file__).resolve().parents[1])

REGRESSED = ReportRow(
    key="eagle3-tuned/single-stream/output_tok_s", n=5, median=82.0, unit="tok/s", ci_low=81.5,
    ci_high=82.4, baseline_median=89.0, change=82.0 / 89.0 - 1, p=0.0004, verdict="regression",
    samples=(81.9, 82.3, 82.0, 81.5, 82.4), nodeid="tests/perf/test_throughput.py::test_single",
    message="-7.9% with p=4e-04, beyond the 5% tolerance",
)
STEADY = ReportRow(
    key="eagle3-tuned/single-stream/ttft_s", n=5, median=0.0213, unit="s", ci_low=0.0209, ci_high=0.0220,
    baseline_median=0.0212, change=0.005, p=0.61, verdict="no_change", higher_is_better=False,
    samples=(0.0213, 0.0209, 0.0220, 0.0211, 0.0215),
)
NEW = ReportRow(key="eagle3-tuned/single-stream/accept_length", n=3, median=1.92, unit="",
                samples=(1.92, 1.91, 1.93))
ROWS = [REGRESSED, STEADY, NEW]


def test_table_has_every_column_and_shouts_regressions() -> None:
    text = report.summary_table(ROWS)
    lines = text.splitlines()
    assert lines[0] == "specwatch results: 3 result(s), 1 regression(s)"
    for col in report.COLUMNS:
        assert col in lines[1]
    row = next(line for line in lines if line.startswith(REGRESSED.key))
    for cell in ("82.00 ± 0.50", "tok/s", "89.00", "-7.9%", "4.0e-04", "REGRESSION"):
        assert cell in row
    assert "no change" in next(line for line in lines if line.startswith(STEADY.key))
    new_row = next(line for line in lines if line.startswith(NEW.key))
    assert new_row.split()[-1] == "new"
    assert "beyond the 5% tolerance" in text  # the explanation of a regression follows the table
    assert report.summary_table([]) == "specwatch results: no results"


def test_markdown_and_step_summary(tmp_path: Path) -> None:
    md = report.markdown_summary(ROWS)
    lines = md.splitlines()
    assert lines[0] == "### specwatch results"
    assert "**1 regression(s)**" in md
    table = [line for line in lines if line.startswith("|")]
    assert len(table) == 2 + len(ROWS)
    assert all(line.count("|") == len(report.COLUMNS) + 1 for line in table)
    assert "**REGRESSION**" in table[2]
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    assert report.append_step_summary(md, env={"GITHUB_STEP_SUMMARY": str(summary)}) == summary
    assert summary.read_text() == "earlier step\n" + md
    assert report.append_step_summary(md, env={}) is None


def test_junit_properties_pairs_and_xml() -> None:
    props = dict(report.junit_properties(REGRESSED))
    base = f"specwatch.{REGRESSED.key}"
    assert props[f"{base}.verdict"] == "regression"
    assert float(props[f"{base}.median"]) == 82.0
    assert float(props[f"{base}.baseline_median"]) == 89.0
    assert props[f"{base}.higher_is_better"] == "true"
    assert f"{NEW.key}.baseline_median" not in " ".join(n for n, _ in report.junit_properties(NEW))
    el = ET.fromstring(report.properties_xml(ROWS))
    assert el.tag == "properties"
    names = [p.get("name") for p in el.iter("property")]
    assert len(names) == len(set(names)) == sum(len(report.junit_properties(r)) for r in ROWS)


def test_user_properties_reach_pytest_junit_xml(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text(
        "from specwatch.report.table import ReportRow, add_user_properties\n"
        "def test_x(request):\n"
        "    row = ReportRow(key='p/w/tok_s', n=2, median=80.0, unit='tok/s', verdict='no_change',"
        " samples=(79.0, 81.0))\n"
        "    add_user_properties(request.node, [row])\n"
        "    add_user_properties(request.node, [row])  # not duplicated\n"
    )
    junit = tmp_path / "junit.xml"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:specwatch", "test_x.py",
         f"--junitxml={junit}", "-o", "junit_family=xunit2"],
        cwd=tmp_path, env=env, capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    case = next(ET.parse(junit).getroot().iter("testcase"))
    got = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert got["specwatch.p/w/tok_s.verdict"] == "no_change"
    assert got["specwatch.p/w/tok_s.median"] == "80.0"
    assert len(list(case.iter("property"))) == len(got)


@pytest.mark.parametrize(("data", "hd15iqr", "ld15iqr"), [
    ([3.0], 3.0, 3.0),
    ([1, 2, 3, 4, 5, 6], 6, 1),
    # Q3 + 1.5 IQR = 13.5: 50 is an outlier, the highest datum inside the fence is 7 (the value
    # specwatch's own copy of these statistics got wrong: it said 50)
    ([1, 2, 3, 4, 50, 6, 7], 7, 1),
    ([10, 1, 2, 3, 4, 5, 6, 7, 8], 10, 1),
])
def test_stats_are_pytest_benchmarks(data: list[float], hd15iqr: float, ld15iqr: float) -> None:
    stats = report.benchmark_stats(data)
    assert stats["hd15iqr"] == hd15iqr
    assert stats["ld15iqr"] == ld15iqr
    assert stats["rounds"] == len(data)
    assert stats["data"] == [float(x) for x in data]
    assert stats["median"] == pytest.approx(sorted(data)[len(data) // 2] if len(data) % 2 else
                                            (sorted(data)[len(data) // 2 - 1] + sorted(data)[len(data) // 2]) / 2)


def test_units_become_seconds() -> None:
    secs, how = report.as_seconds([80.0, 100.0], "tok/s")
    assert how == "inverse-rate"
    assert secs == [1 / 80.0, 1 / 100.0]
    stats = report.benchmark_stats(secs)
    assert stats["ops"] == pytest.approx(2 / (1 / 80 + 1 / 100))  # harmonic-mean rate
    assert report.as_seconds([20.0], "ms") == ([0.02], "time")
    assert report.as_seconds([1.9], "") == ([1.9], "raw")


def test_benchmark_json_loads_in_pytest_benchmark(tmp_path: Path) -> None:
    pytest.importorskip("pytest_benchmark")
    from pytest_benchmark.logger import Logger
    from pytest_benchmark.storage.file import FileStorage

    path = report.write_benchmark_json(tmp_path / "runs" / "0001_specwatch.json", ROWS,
                                       commit_info={"id": "abc123", "dirty": False})
    doc = json.loads(path.read_text())
    assert set(doc) == {"machine_info", "commit_info", "benchmarks", "datetime", "version"}
    assert doc["benchmarks"][0]["extra_info"]["samples"] == list(REGRESSED.samples)
    storage = FileStorage(tmp_path / "runs", logger=Logger(Logger.QUIET))
    loaded = list(storage.load_benchmarks(str(path)))
    assert [b["name"] for b in loaded] == [r.key for r in ROWS]
    assert loaded[0]["median"] == pytest.approx(1 / 82.0)
    assert loaded[1]["min"] == pytest.approx(0.0209)
    # and pytest-benchmark's own compare command renders it
    out_csv = tmp_path / "cmp"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_benchmark", "compare", str(path), "--csv", str(out_csv),
         "--columns", "min,median,ops,rounds"],
        cwd=tmp_path, capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert REGRESSED.key in proc.stdout
    with next(tmp_path.glob("cmp*.csv")).open() as fh:
        names = [r[0] for r in csv.reader(fh)][1:]
    assert {name.rsplit("::", 1)[-1] for name in names} == {r.key for r in ROWS}


def test_rows_from_results_and_from_comparison() -> None:
    doc = {"version": 1, "commit": "deadbeef", "results": [
        {"key": "a/b/tok_s", "unit": "tok/s", "higher_is_better": True, "samples": [1.0, 3.0, 2.0],
         "extra": {"accept_length": 1.9}}]}
    (row,) = report.rows_from_results(doc)
    assert (row.n, row.median, row.extra["accept_length"]) == (3, 2.0, 1.9)
    assert report.commit_info_from_results(doc)["id"] == "deadbeef"
    cmp = SimpleNamespace(verdict=SimpleNamespace(value="regression"), n_current=3, median_current=2.0,
                          median_reference=2.2, ratio=2.0 / 2.2, p=0.001, higher_is_better=True,
                          message="slower")
    r = ReportRow.from_comparison("a/b/tok_s", cmp, unit="tok/s", samples=[1.0, 3.0, 2.0],
                                  median_ci=(1.5, 2.5))
    assert r.verdict == "regression"
    assert r.is_bad
    assert r.change == pytest.approx(2.0 / 2.2 - 1)
    assert report.fmt_median_ci(r) == "2.00 ± 0.50"


def test_from_a_real_comparison() -> None:
    compare = pytest.importorskip("specwatch.judge.compare")
    cmp = compare.compare([82.0, 82.3, 81.9, 82.1, 82.2, 81.8, 82.0, 82.4],
                          [89.0, 89.2, 88.9, 89.1, 88.8, 89.3, 89.0, 89.1], higher_is_better=True)
    row = ReportRow.from_comparison("k", cmp, unit="tok/s")
    assert row.verdict == cmp.verdict.value
    assert row.change == pytest.approx(cmp.ratio - 1)
    assert row.baseline_median == pytest.approx(cmp.median_reference)


def test_a_change_whose_medians_differ_in_sign_is_marked_and_named() -> None:
    """An A/A `ab` table printed "change +18.8%" beside medians 10% lower: the change is the paired rounds'."""
    aa = ReportRow(key="eagle3-tuned/single-stream/decode_tok_s", n=6, median=90.0, unit="tok/s", baseline_median=100.0,
                   change=0.188, p=0.4, verdict="no_regression", change_basis="the paired rounds'")
    table = report.summary_table([aa, REGRESSED])
    assert "+18.8%*" in table and "-7.9%*" not in table  # a change that agrees with its medians is unmarked
    assert "* eagle3-tuned/single-stream/decode_tok_s: change +18.8% is the paired rounds'; the medians shown " \
           "differ by -10.0%" in table
    assert "+18.8%" in report.markdown_summary([aa]) and "the medians shown differ by -10.0%" in \
        report.markdown_summary([aa])
    assert not ReportRow(key="k", n=1, median=100.04, baseline_median=100.0, change=-0.0001).change_disagrees


def test_a_row_its_gate_does_not_judge_is_never_a_regression() -> None:
    reported = ReportRow(key="sgl-standalone-untuned/single-stream/cycle_ms", n=5, median=25.4, unit="ms",
                         baseline_median=10.0, change=1.537, p=0.001, verdict="regression", higher_is_better=False,
                         gated=False, message="cycle time rose")
    assert not reported.is_bad
    table = report.summary_table([reported])
    assert "0 regression(s)" in table and "REGRESSION" not in table and "worse, not gated" in table
    assert "no regressions" in report.markdown_summary([reported])
    gated = ("specwatch.sgl-standalone-untuned/single-stream/cycle_ms.gated", "false")
    assert gated in report.junit_properties(reported)


def test_benchmark_json_keeps_a_row_with_an_untimed_sample_and_writes_strict_json(tmp_path: Path) -> None:
    """A check's row may hold a NaN (a level it could not time, e.g. a reply that came in one burst): pytest-benchmark's
    statistics raise on it, so its stats come from the finite samples; the raw ones stay, NaN as null; a row of
    none is left out. On a loaded CI host a context-length row did this to a whole run's benchmark.json."""
    rows = [ReportRow(key="eagle3 vs plain (context 512, decode_tok_s)", n=3, median=100.0, unit="tok/s",
                      higher_is_better=True, samples=(100.0, float("nan"), 110.0)),
            ReportRow(key="untimed", n=1, median=float("nan"), unit="tok/s", higher_is_better=True,
                      samples=(float("nan"),))]
    path = report.write_benchmark_json(tmp_path / "benchmark.json", rows, machine_info={}, commit_info={})
    doc = json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    (bench,) = doc["benchmarks"]
    assert bench["name"] == rows[0].key and bench["stats"]["rounds"] == 2
    assert bench["extra_info"]["samples"] == [100.0, None, 110.0]
