"""The specwatch console script: exit codes, parse-log, compare, baselines, history, profiles."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from specwatch.cli import main
from specwatch.errors import EXIT_OK, EXIT_REGRESSION, EXIT_USAGE
from specwatch.store.result import Result, ResultSet

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "sglang"


def _results(path: Path, tok_s: list[float], *, created: str | None = None, commit: str = "c0") -> Path:
    rs = ResultSet(machine={"machine_class": "h200x2-nvlink"}, commit=commit)
    if created:
        rs.created = created
    rs.add(Result.make("eagle3-tuned", "single-stream", "output_tok_s", unit="tok/s", higher_is_better=True,
                       samples=tok_s))
    rs.save(path)
    return path


def _noisy(center: float, n: int = 10, seed: int = 0) -> list[float]:
    return list(np.random.default_rng(seed).normal(center, center * 0.01, n))


def test_parse_log_prints_one_json_object_per_record(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse-log", str(FIXTURES / "real" / "log")]) == EXIT_OK
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    kinds = {r["type"] for r in records}
    assert {"decode", "prefill"} <= kinds
    decode = next(r for r in records if r["type"] == "decode")
    assert decode["graph_label"] == "cpu graph" and decode["graph"] is False


def test_parse_log_missing_file_is_a_usage_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["parse-log", str(tmp_path / "nope.log")]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("specwatch: ") and "Traceback" not in err


def test_compare_flags_the_89_to_82_drift(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = _results(tmp_path / "base.json", _noisy(89.0, seed=1))
    cur = _results(tmp_path / "cur.json", _noisy(82.0, seed=2))
    assert main(["compare", str(base), str(cur)]) == EXIT_REGRESSION
    out = capsys.readouterr().out
    assert "eagle3-tuned/single-stream/output_tok_s" in out and "regression" in out


def test_compare_same_distribution_passes(tmp_path: Path) -> None:
    base = _results(tmp_path / "base.json", _noisy(89.0, seed=1))
    cur = _results(tmp_path / "cur.json", _noisy(89.0, seed=3))
    assert main(["compare", str(base), str(cur)]) == EXIT_OK


def test_compare_accepts_a_stored_baseline_file(tmp_path: Path) -> None:
    res = _results(tmp_path / "base.json", _noisy(89.0, seed=1))
    assert main(["baseline", "update", str(res), "--baseline-dir", str(tmp_path / "b")]) == EXIT_OK
    stored = tmp_path / "b" / "h200x2-nvlink" / "eagle3-tuned.json"
    doc = json.loads(stored.read_text())
    assert doc["version"] >= 1 and "single-stream/output_tok_s" in doc["metrics"]
    cur = _results(tmp_path / "cur.json", _noisy(82.0, seed=2))
    assert main(["compare", str(stored), str(cur)]) == EXIT_REGRESSION


def test_compare_with_no_common_key_is_a_usage_error(tmp_path: Path) -> None:
    a = _results(tmp_path / "a.json", _noisy(89.0))
    rs = ResultSet(machine={"machine_class": "x"})
    rs.add(Result.make("other", "w", "output_tok_s", unit="tok/s", higher_is_better=True, samples=[1.0, 2.0]))
    b = rs.save(tmp_path / "b.json")
    assert main(["compare", str(a), str(b)]) == EXIT_USAGE


def test_history_changes_names_the_run_where_the_baseline_drifted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    series = [89.0, 89.3, 88.8, 89.1, 89.2, 82.1, 82.2, 83.0, 82.4, 82.6]
    files = [str(_results(tmp_path / f"r{i}.json", _noisy(v, n=5, seed=i), created=f"2026-11-{i + 1:02d}T00:00:00Z",
                          commit=f"commit{i}")) for i, v in enumerate(series)]
    hist = str(tmp_path / "h.sqlite")
    assert main(["history", "import", "--history", hist, *files]) == EXIT_OK
    capsys.readouterr()
    assert main(["history", "changes", "--history", hist]) == EXIT_OK
    out = capsys.readouterr().out
    assert "commit5" in out, out  # the first run at 82
    assert "-7." in out or "-8." in out  # the magnitude of 89 -> 82
    assert main(["history", "show", "--history", hist]) == EXIT_OK
    assert "10 runs" in capsys.readouterr().out


def test_profile_show_prints_sglang_command_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "p.toml"
    f.write_text('version = 1\n[[server]]\nname = "k2"\nengine = "sglang"\nmodel = "moonshotai/Kimi-K2.5"\ntp = 8\n'
                 'env = "tuned"\nspeculative = { num_steps = 2, draft_model = "lightseekorg/kimi-k2.5-eagle3" }\n')
    assert main(["profile", "show", str(f)]) == EXIT_OK
    out = capsys.readouterr().out
    assert "sglang serve --model-path moonshotai/Kimi-K2.5" in out and "--tp-size 8" in out
    assert "NCCL_PROTO=LL" in out


def test_broken_profile_file_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "p.toml"
    f.write_text('[[server]]\nname = "a"\nengine = "trt"\n')
    assert main(["profile", "show", str(f)]) == EXIT_USAGE
    assert "engine" in capsys.readouterr().err


def test_baseline_update_can_keep_earlier_sessions(tmp_path: Path) -> None:
    bdir = str(tmp_path / "b")
    for i, center in enumerate((89.0, 88.0, 82.0)):
        res = _results(tmp_path / f"r{i}.json", _noisy(center, n=4, seed=i), commit=f"c{i}")
        assert main(["baseline", "update", str(res), "--baseline-dir", bdir, "--keep-sessions", "2"]) == EXIT_OK
    doc = json.loads((tmp_path / "b" / "h200x2-nvlink" / "eagle3-tuned.json").read_text())
    metric = doc["metrics"]["single-stream/output_tok_s"]
    assert [s["commit"] for s in metric["sessions"]] == ["c1", "c2"] and len(metric["samples"]) == 8


def test_baseline_update_stamps_the_results_time_and_can_pick_metrics(tmp_path: Path) -> None:
    res = tmp_path / "r.json"
    rs = ResultSet(machine={"machine_class": "h200x1"}, commit="c1", created="2026-11-29T20:57:50+00:00")
    for metric, unit, higher in (("decode_tok_s", "tok/s", True), ("ttft_ms", "ms", False)):
        rs.add(Result.make("eagle3-tuned", "single-stream", metric, unit=unit, higher_is_better=higher,
                           samples=_noisy(100.0)))
    rs.save(res)
    bdir = str(tmp_path / "b")
    assert main(["baseline", "update", str(res), "--baseline-dir", bdir, "--metric", "no_such"]) == EXIT_USAGE
    assert main(["baseline", "update", str(res), "--baseline-dir", bdir, "--metric", "decode_tok_s"]) == EXIT_OK
    doc = json.loads((tmp_path / "b" / "h200x1" / "eagle3-tuned.json").read_text())
    assert list(doc["metrics"]) == ["single-stream/decode_tok_s"]
    assert doc["recorded"] == "2026-11-29T20:57:50+00:00"
    assert doc["metrics"]["single-stream/decode_tok_s"]["sessions"][0]["recorded"] == "2026-11-29T20:57:50+00:00"


# ------------------------------------------------------------------------------------------------
# Bad input: every user-facing error is one line on stderr with its exit code, never a traceback.

_RESULT = {"profile": "p", "workload": "w", "metric": "m", "unit": "u", "higher_is_better": True, "samples": [1.0]}
_METRIC = {"workload": "w", "metric": "m", "unit": "u", "higher_is_better": True, "samples": [1.0, 2.0],
           "sessions": []}
BAD_FILES: dict[str, str | bytes] = {
    "bad.json": "{not json",
    "truncated.json": '{"version": 1, "results": [{"profile": "p", ',
    "binary.json": b"\xff\xfe\x00",
    "list.json": "[]",
    "number.json": "5",
    "null.json": "null",
    "no-version.json": '{"results": []}',
    "v99.json": '{"version": 99, "results": []}',
    "v-string.json": '{"version": "1", "results": []}',
    "results-object.json": '{"version": 1, "results": {}}',
    "result-number.json": '{"version": 1, "results": [5]}',
    "result-list.json": '{"version": 1, "results": [[]]}',
    "result-missing.json": '{"version": 1, "results": [{"profile": "p"}]}',
    "result-key.json": json.dumps({"version": 1, "results": [{**_RESULT, "key": 5}]}),
    "machine-list.json": '{"version": 1, "results": [], "machine": [1]}',
    "machine-class.json": json.dumps({"version": 1, "machine": {"machine_class": 5}, "results": [_RESULT]}),
    "commit.json": '{"version": 1, "commit": {"a": 1}, "results": []}',
    "b-metrics-list.json": '{"version": 2, "profile": "p", "machine_class": "c", "metrics": []}',
    "b-metric-number.json": '{"version": 2, "profile": "p", "machine_class": "c", "metrics": {"w/m": 5}}',
    "b-metric-empty.json": '{"version": 2, "profile": "p", "machine_class": "c", "metrics": {"w/m": {}}}',
    "b-sessions.json": json.dumps({"version": 2, "profile": "p", "machine_class": "c",
                                   "metrics": {"w/m": {**_METRIC, "sessions": [{"samples": "x"}]}}}),
    "b-session-host.json": json.dumps({"version": 2, "profile": "p", "machine_class": "c",
                                       "metrics": {"w/m": {**_METRIC, "sessions": [{"samples": [1], "host": 5}]}}}),
    "b-summary.json": json.dumps({"version": 2, "profile": "p", "machine_class": "c",
                                  "metrics": {"w/m": {**_METRIC, "summary": {"n": 2}}}}),
    "b-no-samples.json": json.dumps({"version": 2, "profile": "p", "machine_class": "c",
                                     "metrics": {"w/m": {**_METRIC, "samples": []}}}),
    "b-machine.json": '{"version": 2, "profile": "p", "machine_class": "c", "machine": 5, "metrics": {}}',
    "b-profile.json": '{"version": 2, "profile": 5, "machine_class": "c", "metrics": {}}',
    "b-v1-samples.json": '{"version": 1, "profile": "p", "machine_class": "c", "metrics": {"w/m": {"samples": 5}}}',
    "b-v3.json": '{"version": 3, "profile": "p", "machine_class": "c", "metrics": {}}',
    "empty-results.json": '{"version": 1, "machine": {"machine_class": "c"}, "results": []}',
    "profile.toml": "version = 1\n",
}
# Files a results argument must refuse (every one above but the profile; a baseline is not a results file).
RESULTS_BAD = [f for f in BAD_FILES if f not in ("profile.toml", "empty-results.json")]
CASES: list[tuple[list[str], int]] = [
    *[(["compare", "{tmp}/" + f, "{good}"], EXIT_USAGE) for f in RESULTS_BAD],
    *[(["compare", "{good}", "{tmp}/" + f], EXIT_USAGE) for f in RESULTS_BAD],
    *[(["baseline", "update", "{tmp}/" + f, "--baseline-dir", "{tmp}/b"], EXIT_USAGE)
      for f in [*RESULTS_BAD, "empty-results.json"]],
    *[(["history", "import", "--history", "{tmp}/h.sqlite", "{tmp}/" + f], EXIT_USAGE)
      for f in [*RESULTS_BAD, "empty-results.json"]],
    *[([*cmd, "{tmp}/missing.json"], EXIT_USAGE) for cmd in (["compare", "{good}"], ["baseline", "update"],
                                                              ["history", "import"], ["parse-log"], ["allreduce"])],
    *[([*cmd, "{tmp}"], EXIT_USAGE) for cmd in (["compare", "{good}"], ["baseline", "update"],
                                                ["history", "import"], ["parse-log"], ["allreduce"])],
    (["compare", "{tmp}/empty-results.json", "{good}"], EXIT_USAGE),  # no common key
    *[(["compare", "{good}", "{good}", "--tolerance", v], EXIT_USAGE) for v in ("-1", "0", "nan", "inf", "x")],
    *[(["compare", "{good}", "{good}", "--alpha", v], EXIT_USAGE) for v in ("5", "0", "1", "-0.1", "nan")],
    *[(["history", sub, "--alpha", v, "--history", "{tmp}/h.sqlite"], EXIT_USAGE)
      for sub in ("show", "changes", "plot") for v in ("5", "nan")],
    *[(["history", sub, "--history", "{tmp}/" + f], EXIT_USAGE)
      for sub in ("show", "changes", "plot") for f in ("missing.sqlite", "", "bad.json", "binary.json")],
    (["history", "import", "--history", "{tmp}", "{good}"], EXIT_USAGE),
    (["history", "import", "--history", "{tmp}/bad.json", "{good}"], EXIT_USAGE),
    *[(["baseline", "update", "{good}", "--keep-sessions", v, "--baseline-dir", "{tmp}/b"], EXIT_USAGE)
      for v in ("0", "-1", "x")],
    (["baseline", "update", "{good}", "--baseline-dir", "{tmp}/bad.json"], EXIT_USAGE),
    (["baseline", "update", "{good}", "--machine-class", "../x", "--baseline-dir", "{tmp}/b"], EXIT_USAGE),
    (["baseline", "show", "--baseline-dir", "{tmp}/missing"], EXIT_USAGE),
    (["baseline", "show", "--baseline-dir", "{tmp}/bad.json"], EXIT_USAGE),
    (["allreduce", "{tmp}/bad.json"], EXIT_USAGE),
    *[(["allreduce", "{tmp}/profile.toml", opt, v], EXIT_USAGE)
      for opt in ("--rounds", "--calls", "--samples", "--timeout") for v in ("-1", "0", "nan")],
    *[(["allreduce", "{tmp}/profile.toml", "--sizes", v], EXIT_USAGE) for v in ("-5", "0", "", "1k")],
    ([], EXIT_USAGE), (["no-such-command"], EXIT_USAGE), (["compare"], EXIT_USAGE), (["compare", "{good}"], EXIT_USAGE),
    (["baseline"], EXIT_USAGE), (["history"], EXIT_USAGE), (["bisect"], EXIT_USAGE), (["bisect-patches"], EXIT_USAGE),
    (["compare", "{good}", "{good}", "--no-such-flag"], EXIT_USAGE),
]


@pytest.fixture
def bad_inputs(tmp_path: Path) -> dict[str, str]:
    for name, content in BAD_FILES.items():
        (tmp_path / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    good = _results(tmp_path / "good.json", [89.0, 89.5, 88.7, 89.2, 89.1])
    return {"tmp": str(tmp_path), "good": str(good)}


@pytest.mark.parametrize(("argv", "code"), CASES, ids=[" ".join(a).replace("{tmp}/", "") or "(none)" for a, _ in CASES])
def test_bad_input_is_one_line_on_stderr_never_a_traceback(
        argv: list[str], code: int, bad_inputs: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([a.format(**bad_inputs) for a in argv]) == code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("specwatch"), err


def test_a_baseline_where_a_results_file_belongs_is_named_as_such(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    res = _results(tmp_path / "r.json", _noisy(89.0))
    assert main(["baseline", "update", str(res), "--baseline-dir", str(tmp_path / "b")]) == EXIT_OK
    stored = tmp_path / "b" / "h200x2-nvlink" / "eagle3-tuned.json"
    capsys.readouterr()
    assert main(["history", "import", "--history", str(tmp_path / "h.sqlite"), str(stored)]) == EXIT_USAGE
    assert capsys.readouterr().err.strip() == f"specwatch: {stored} is a baseline file, not a results file"
    assert not (tmp_path / "h.sqlite").exists()


def test_option_errors_name_the_option_and_the_help(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = str(_results(tmp_path / "r.json", _noisy(89.0)))
    assert main(["compare", good, good, "--alpha", "5"]) == EXIT_USAGE
    assert capsys.readouterr().err == ("specwatch: compare: argument --alpha: must be between 0 and 1 (exclusive), "
                                       "got 5 (see `specwatch compare --help`)\n")
    assert main(["--version"]) == EXIT_OK
    assert main(["compare", "--help"]) == EXIT_OK
    assert "--allow-other-class" in capsys.readouterr().out


def test_compare_prints_each_regression_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = _results(tmp_path / "base.json", _noisy(89.0, seed=1))
    cur = _results(tmp_path / "cur.json", _noisy(82.0, seed=2))
    assert main(["compare", str(base), str(cur)]) == EXIT_REGRESSION
    out = capsys.readouterr().out
    assert out.count("eagle3-tuned/single-stream/output_tok_s: regression:") == 1, out


def test_history_import_is_all_or_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = _results(tmp_path / "good.json", _noisy(89.0))
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    hist = tmp_path / "h.sqlite"
    assert main(["history", "import", "--history", str(hist), str(good), str(bad)]) == EXIT_USAGE
    assert not hist.exists()  # the good file was not imported alone
    assert main(["history", "import", "--history", str(hist), str(good)]) == EXIT_OK
    assert "as run 1" in capsys.readouterr().out
