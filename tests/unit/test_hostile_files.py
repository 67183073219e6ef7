"""Hostile files: results, baselines, captures and histories written by hand or damaged, each read by
``specwatch`` (and by the replays of docs/validation, ``baseline_check.py`` and ``sensitivity.py``, which read
them through the same loaders) as one line on stderr naming the file and the field, exit 2, never a traceback
(the adversarial sweep of docs/robustness.md)."""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from specwatch.cli import main
from specwatch.errors import EXIT_OK, EXIT_USAGE
from specwatch.judge import changepoint, compare, stats
from specwatch.store.capture import MANIFEST
from specwatch.store.result import MAX_JSON_DEPTH, Result, ResultSet

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docs" / "validation"))
import baseline_check
import sensitivity

CAPTURE = Path(__file__).parent / "data" / "captures" / "sglang-eagle3-untuned-leak"
KEY = "base/single-stream/decode_tok_s"
DEEP = "[" * 100_000 + "]" * 100_000
BIG_INT = "1" + "0" * 400


def _samples(median: float, n: int = 10, step: float = 0.5) -> list[float]:
    return [median + step * (i - n // 2) for i in range(n)]


def results_file(path: Path, samples: list[float] | None = None, machine_class: str = "h200x1") -> Path:
    rs = ResultSet(results=[Result.make("base", "single-stream", "decode_tok_s", unit="tok/s", higher_is_better=True,
                                        samples=_samples(100.0) if samples is None else samples)],
                   machine={"machine_class": machine_class})
    rs.save(path)
    return path


def baseline_doc(sessions: list[list[float]], machine_class: str = "h200x1") -> dict[str, Any]:
    return {"version": 2, "machine_class": machine_class, "profile": "base",
            "machine": {"machine_class": machine_class}, "commit": None, "recorded": "2026-01-01T00:00:00+00:00",
            "metrics": {"single-stream/decode_tok_s": {
                "workload": "single-stream", "metric": "decode_tok_s", "unit": "tok/s", "higher_is_better": True,
                "samples": [x for s in sessions for x in s], "extra": {},
                "sessions": [{"recorded": f"2026-01-0{i + 1}T00:00:00+00:00", "samples": s}
                             for i, s in enumerate(sessions)]}}}


def baseline_file(path: Path, sessions: list[list[float]], machine_class: str = "h200x1") -> Path:
    path.write_text(json.dumps(baseline_doc(sessions, machine_class)))
    return path


def healthy_sessions() -> list[list[float]]:
    return [_samples(100.0 + d) for d in (-1.0, 0.0, 1.5, 0.5)]


def cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``specwatch ARGV``; ``baseline check ...`` and ``sensitivity ...`` are the scripts of docs/validation."""
    args = [str(a) for a in argv]
    if args[:2] == ["baseline", "check"]:
        code = baseline_check.main(args[2:])
    elif args[:1] == ["sensitivity"]:
        code = sensitivity.main(args[1:])
    else:
        code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str, *fragments: str) -> None:
    """stderr is one ``specwatch: ...`` line holding every fragment."""
    assert err.startswith("specwatch: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in err, err


def refused(argv: list[str], capsys: pytest.CaptureFixture[str], *fragments: str) -> str:
    code, out, err = cli(argv, capsys)
    assert code == EXIT_USAGE, (code, out, err)
    one_line(err, *fragments)
    return out


def capture_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "capture"
    shutil.copytree(CAPTURE, folder)
    return folder


def edit_manifest(folder: Path, change: Callable[[dict[str, Any]], object]) -> None:
    data = json.loads((folder / MANIFEST).read_text())
    change(data)
    (folder / MANIFEST).write_text(json.dumps(data))


# --------------------------------------------------------------------------------------------
# 1. JSON nested deeper than the parser's recursion: one line naming the file


def _deep_results(tmp: Path) -> tuple[list[Any], Path]:
    (tmp / "deep.json").write_text(DEEP)
    return ["compare", results_file(tmp / "good.json"), tmp / "deep.json"], tmp / "deep.json"


def _deep_import(tmp: Path) -> tuple[list[Any], Path]:
    (tmp / "deep.json").write_text('{"version": 1, "results": ' + DEEP + "}")
    return ["history", "import", "--history", tmp / "h.sqlite", tmp / "deep.json"], tmp / "deep.json"


def _deep_baseline(tmp: Path) -> tuple[list[Any], Path]:
    depth = MAX_JSON_DEPTH + 5  # parses, but nests past the limit
    (tmp / "deep.json").write_text('{"version": 2, "metrics": ' + "[" * depth + "]" * depth + "}")
    return ["baseline", "check", tmp / "deep.json"], tmp / "deep.json"


def _deep_manifest(tmp: Path) -> tuple[list[Any], Path]:
    folder = capture_copy(tmp)
    (folder / MANIFEST).write_text(DEEP)
    return ["inspect", folder], folder / MANIFEST


def _deep_server_info(tmp: Path) -> tuple[list[Any], Path]:
    folder = capture_copy(tmp)
    (folder / "server_info.json").write_text(DEEP)
    return ["inspect", folder], folder / "server_info.json"


@pytest.mark.parametrize("make", [_deep_results, _deep_import, _deep_baseline, _deep_manifest, _deep_server_info])
def test_deeply_nested_json_is_one_line_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         make: Callable[[Path], tuple[list[Any], Path]]) -> None:
    argv, file = make(tmp_path)
    refused(argv, capsys, str(file), f"nested more than {MAX_JSON_DEPTH} levels deep")


# --------------------------------------------------------------------------------------------
# 2-3. Samples too large to compute with: a 401-digit integer, 1e308


def _results_text(tmp: Path, sample: str) -> Path:
    text = (results_file(tmp / "r.json", samples=[123.25, *_samples(100.0)[1:]])).read_text()
    (tmp / "r.json").write_text(text.replace("123.25", sample, 1))
    return tmp / "r.json"


@pytest.mark.parametrize("sample", [BIG_INT, "-" + BIG_INT, "1e308", "1e-300"])
@pytest.mark.parametrize("command", ["compare", "sensitivity", "history import"])
def test_samples_out_of_range_are_refused_where_results_are_read(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                 sample: str, command: str) -> None:
    bad = _results_text(tmp_path, sample)
    good = results_file(tmp_path / "good.json")
    argv = {"compare": ["compare", good, bad], "sensitivity": ["sensitivity", good, bad],
            "history import": ["history", "import", "--history", tmp_path / "h.sqlite", bad]}[command]
    refused(argv, capsys, str(bad), KEY, "is out of range: samples must be finite, of magnitude 1e-150 to 1e+150")
    assert not (tmp_path / "h.sqlite").exists()  # history import checks every file before it opens the history


def _mark_session(metric: dict[str, Any]) -> None:
    metric["sessions"][0]["samples"][0] = 123.25


def _mark_pool(metric: dict[str, Any]) -> None:
    metric["samples"][0] = 123.25


def _mark_summary(metric: dict[str, Any]) -> None:
    metric["summary"] = {**dict.fromkeys(stats.Summary.__dataclass_fields__, 1.0), "median": 123.25}


@pytest.mark.parametrize(("mark", "says"), [
    (_mark_session, "metric 'single-stream/decode_tok_s': session 0: sample 10000000... (401 digits) is out of range"),
    (_mark_pool, "metric single-stream/decode_tok_s: sample 10000000... (401 digits) is out of range"),
    (_mark_summary, "field 'summary.median' must be a finite number, got 10000000... (401 digits)"),
])
def test_a_huge_integer_in_a_baseline_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  mark: Callable[[dict[str, Any]], None], says: str) -> None:
    doc = baseline_doc(healthy_sessions())
    mark(doc["metrics"]["single-stream/decode_tok_s"])
    (tmp_path / "b.json").write_text(json.dumps(doc).replace("123.25", BIG_INT))
    refused(["baseline", "check", tmp_path / "b.json"], capsys, str(tmp_path / "b.json"), says)


def test_the_statistics_do_not_crash_on_extreme_but_finite_noise() -> None:
    """runs_needed says None (unknown), the MDE inf, rather than a ValueError or OverflowError."""
    for noise in (1e200, float("inf"), float("nan")):
        assert stats.runs_needed(0.05, noise) is None
        assert stats.minimum_detectable_effect(noise, 10, 0.01, 10) == float("inf")
    assert stats.runs_needed(0.05, 0.03) == 10


def test_samples_at_the_edges_of_the_range_compare_without_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        big = compare.compare(_samples(1e150, step=1e147), _samples(0.9e150, step=1e147))
        tiny = compare.compare(_samples(1e-150, step=1e-153), _samples(1e-150, step=1e-153))
    assert big.verdict is compare.DriftVerdict.IMPROVEMENT and big.runs_needed is not None
    assert tiny.verdict is compare.DriftVerdict.NO_CHANGE


def test_change_points_of_extreme_values_are_those_of_the_scaled_series() -> None:
    series = [1.0] * 6 + [1.3] * 6
    plain = changepoint.detect(series)
    huge = changepoint.detect([x * 1e307 for x in series])
    assert [(c.index, c.p) for c in huge] == [(c.index, c.p) for c in plain] == [(6, plain[0].p)]
    assert huge[0].before_median == 1e307 and huge[0].magnitude == pytest.approx(0.3)


# --------------------------------------------------------------------------------------------
# 4. A baseline's samples are divided by and logged: 0 or below is refused by its loader


@pytest.mark.parametrize("value", [0.0, -1.0])
@pytest.mark.parametrize("command", ["compare", "baseline check"])
def test_baseline_sessions_must_be_positive(tmp_path: Path, capsys: pytest.CaptureFixture[str], value: float,
                                            command: str) -> None:
    sessions = healthy_sessions()
    sessions[1] = [value] * 10
    base = baseline_file(tmp_path / "b.json", sessions)
    # the pooled samples are fine: the sessions alone are checked here
    doc = json.loads(base.read_text())
    doc["metrics"]["single-stream/decode_tok_s"]["samples"] = sessions[0]
    base.write_text(json.dumps(doc))
    argv = (["compare", "--allow-other-class", base, results_file(tmp_path / "r.json", machine_class="h200x2")]
            if command == "compare" else ["baseline", "check", base])
    refused(argv, capsys, str(base), "'single-stream/decode_tok_s': session 1:",
            f"sample {value!r} is not positive: samples must be finite and positive")


def test_baseline_pooled_samples_must_be_positive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = baseline_file(tmp_path / "b.json", [[0.0] * 10])
    refused(["compare", base, results_file(tmp_path / "r.json")], capsys, str(base),
            "metric 'single-stream/decode_tok_s': sample 0.0 is not positive")


# --------------------------------------------------------------------------------------------
# 5. Sessions that all share one median: legal, degenerate, judged at the requested tolerance


def test_identical_sessions_fall_back_to_the_requested_tolerance_and_say_why(tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    base = baseline_file(tmp_path / "b.json", [_samples(100.0)] * 4)
    code, out, err = cli(["baseline", "check", base, "--metric", "decode_tok_s"], capsys)
    assert (code, err) == (EXIT_OK, ""), err
    assert "4 sessions all have the same median (spread 0, which measures no drift)" in out
    assert "the requested 5.0% tolerance" in out and "tolerance must be > 0" not in out
    code, out, err = cli(["compare", base, results_file(tmp_path / "r.json", samples=_samples(80.0))], capsys)
    assert (code, err) == (1, ""), err
    assert "REGRESSION" in out and "same median (spread 0" in out
    basis = compare.drift_basis(0.05, [_samples(100.0)] * 4, (0.03, "p: 5 sessions"))
    assert basis.tolerance > 0.05 and "the machine class's session spread 3.0%" in basis.note


# --------------------------------------------------------------------------------------------
# 6. capture.json fields of the wrong type


@pytest.mark.parametrize(("change", "says"), [
    (lambda m: m.update(missing=[1, 2]), "missing: expected an object of reasons (strings), got [1, 2]"),
    (lambda m: m.update(missing="ab"), 'missing: expected an object of reasons (strings), got "ab"'),
    (lambda m: m.update(missing={"log": 5}), 'missing: expected an object of reasons (strings), got {"log": 5}'),
    (lambda m: m.update(redaction=[[1]]), "redaction: expected an object (the redaction summary), got [[1]]"),
    (lambda m: m.update(redaction="xyz"), 'redaction: expected an object (the redaction summary), got "xyz"'),
    (lambda m: m.update(created=5), "created: expected a string, got 5"),
    (lambda m: m["processes"][0].update(start_time=10**400),
     "processes[0].start_time: expected seconds since the epoch or null, got 10000000... (401 digits)"),
    (lambda m: m["processes"][0].update(start_time=float("nan")),
     "processes[0].start_time: expected seconds since the epoch or null, got NaN"),
    (lambda m: m["processes"][0].update(name=[1]), "processes[0].name: expected a string, got [1]"),
])
def test_capture_fields_of_the_wrong_type_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       change: Callable[[dict[str, Any]], object], says: str) -> None:
    folder = capture_copy(tmp_path)
    edit_manifest(folder, change)
    refused(["inspect", folder], capsys, f"specwatch: {folder / MANIFEST}: {says}")


def test_a_capture_manifest_that_is_a_folder_is_a_capture_error(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    folder = capture_copy(tmp_path)
    (folder / MANIFEST).unlink()
    (folder / MANIFEST).mkdir()
    refused(["inspect", folder], capsys, f"specwatch: {folder / MANIFEST}: a folder, not the capture's manifest file")


# --------------------------------------------------------------------------------------------
# 7. A history edited by hand


def _history(tmp: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    db = tmp / "h.sqlite"
    code, _, err = cli(["history", "import", "--history", db, results_file(tmp / "r.json")], capsys)
    assert code == EXIT_OK, err
    return db


@pytest.mark.parametrize(("sql", "says"), [
    ("UPDATE schema_version SET version = 'abc'", "corrupt: schema_version.version is 'abc', not a whole number"),
    ("UPDATE results SET samples = 'not json'", f"corrupt: run 1 {KEY} samples is not JSON (Expecting value"),
    ("UPDATE results SET samples = '[\"a\"]'", f"corrupt: run 1 {KEY} samples: sample 'a' is not a finite number"),
    ("UPDATE results SET samples = '{\"a\": 1}'", f"corrupt: run 1 {KEY} samples: expected a JSON list"),
    ("UPDATE results SET samples = '[NaN]'", f"corrupt: run 1 {KEY} samples: sample nan is not a finite number"),
    ("UPDATE results SET median = 'x'", f"corrupt: run 1 {KEY} median is 'x', not a number"),
])
@pytest.mark.parametrize("command", ["show", "changes"])
def test_a_corrupt_history_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], sql: str, says: str,
                                       command: str) -> None:
    db = _history(tmp_path, capsys)
    with sqlite3.connect(db) as conn:
        conn.execute(sql)
    refused(["history", command, "--history", db], capsys, f"history {db}: {says}")


def test_a_corrupt_history_is_one_line_when_copied(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = _history(tmp_path, capsys)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET fingerprint = '[1]'")
    refused(["history", "export", "--history", db, "--to", tmp_path / "copy.sqlite"], capsys,
            f"history {db}: corrupt: run 1 fingerprint: expected a JSON object, got '[1]'")


# --------------------------------------------------------------------------------------------
# 8. sensitivity against a baseline of another machine class: refused as compare refuses it


def test_sensitivity_refuses_a_baseline_of_another_machine_class(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    base = baseline_file(tmp_path / "b.json", healthy_sessions(), machine_class="h200x1")
    runs = [results_file(tmp_path / f"r{i}.json", machine_class="h200x2-nvlink") for i in range(2)]
    refused(["sensitivity", *runs, "--baseline", base], capsys, "machine classes differ", f"{base} is 'h200x1'",
            f"{runs[0]} is 'h200x2-nvlink'", "--allow-other-class")
    refused(["compare", base, runs[0]], capsys, "machine classes differ", "--allow-other-class")  # the same rule
    code, out, err = cli(["sensitivity", *runs, "--baseline", base, "--allow-other-class"], capsys)
    assert (code, err) == (EXIT_OK, "")
    assert out.startswith("WARNING: machine classes differ (baseline ") and out.count("WARNING") == 2
    same = baseline_file(tmp_path / "x2.json", healthy_sessions(), machine_class="h200x2-nvlink")
    code, out, err = cli(["sensitivity", *runs[:1], "--baseline", same], capsys)
    assert (code, err) == (EXIT_OK, "") and "WARNING" not in out


# --------------------------------------------------------------------------------------------
# 9. compare --tolerance is a fraction, as in baseline check, sensitivity and ab


@pytest.mark.parametrize("tolerance", ["5", "1", "0", "-0.1"])
def test_compare_tolerance_is_a_fraction(tmp_path: Path, capsys: pytest.CaptureFixture[str], tolerance: str) -> None:
    r = results_file(tmp_path / "r.json")
    refused(["compare", r, r, "--tolerance", tolerance], capsys, "--tolerance: must be between 0 and 1")


# --------------------------------------------------------------------------------------------
# 10. history show/changes KEY of a key the history does not hold


@pytest.mark.parametrize("command", ["show", "changes"])
def test_an_unknown_history_key_is_one_line_naming_the_closest(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               command: str) -> None:
    db = _history(tmp_path, capsys)
    refused(["history", command, "--history", db, "base/single-stream/decode_toks"], capsys,
            f"history {db} has no runs of base/single-stream/decode_toks", f"the closest of its 1 key(s): {KEY}")
    code, out, _ = cli(["history", command, "--history", db, KEY], capsys)
    assert code == EXIT_OK and (KEY in out if command == "show" else "no change points" in out)


def test_a_key_of_a_history_without_runs_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No runs at all is not a typo: said on stdout, exit 0, as without a key."""
    db = tmp_path / "h.sqlite"
    assert cli(["history", "import", "--history", db], capsys)[0] == EXIT_OK
    code, out, err = cli(["history", "show", "--history", db, KEY], capsys)
    assert (code, err) == (EXIT_OK, "") and out.startswith(f"no runs in {db}")


def test_garbled_probe_records_are_skipped_not_raised(tmp_path: Path) -> None:
    """A probe record nested 100000 deep, or with a 400-digit time, is skipped like a half-written one."""
    from specwatch.signals.probe import read_records

    (tmp_path / "1.json").write_text("[" * 100000)
    (tmp_path / "2.json").write_text('{"pid": 2, "phase": "start", "time": 1' + "0" * 400 + "}")
    (tmp_path / "3.json").write_text('{"pid": 3, "phase": "start", "time": 1.0}')
    assert sorted(read_records(tmp_path)) == [3]
