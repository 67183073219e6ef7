"""The checks each boot ran beside its numbers: read from pytest's own JUnit file, laid out per version.

The JUnit file is pytest's real output (a small suite run in a subprocess here: a pass, a failure, a skip, a fixture
error); the ladder's boots are stand-ins whose results are the real 0.5.16 -> 0.5.17 run (as in test_ab_ladder).
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_ab_ladder import HISTORY, _chain, _ladder, _measure

from specwatch.revisions import ab, ladder, outcomes, rounds
from specwatch.revisions.memo import Memo, RevisionRun
from specwatch.revisions.step import MeasureConfig, classify, junit_outcomes

SUITE = '''
import pytest

@pytest.fixture
def broken():
    raise RuntimeError("the server did not boot")

def test_graphed():
    pass

def test_reconciled():
    assert 1.95 == 2.0, "accept length 1.95 from /metrics, 2.00 from the decode lines"

def test_switch():
    pytest.skip("no draft extend phase")

def test_booted(broken):
    pass
'''


@pytest.fixture(scope="module")
def junit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("suite")
    (folder / "test_checks.py").write_text(SUITE)
    path = folder / "junit.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                    f"--junitxml={path}", str(folder / "test_checks.py")], cwd=folder, capture_output=True,
                   timeout=120, check=False)
    return path


def test_pytests_junit_file_reads_as_one_outcome_a_test(junit: Path) -> None:
    got = junit_outcomes(junit)
    assert got["test_checks::test_graphed"] == "passed"
    assert got["test_checks::test_reconciled"].startswith("failed: AssertionError: accept length 1.95 from /metrics")
    assert got["test_checks::test_switch"] == "skipped: no draft extend phase"
    assert got["test_checks::test_booted"].startswith("error: ") and "did not boot" in got["test_checks::test_booted"]
    assert classify(1, True, *outcomes_counts(got)) == ("bad", "1 failed gate(s)")


def outcomes_counts(got: dict[str, str]) -> tuple[int, int, int, int]:
    kinds = [outcomes.kind_of(o) for o in got.values()]
    return kinds.count("failed"), kinds.count("error"), kinds.count("skipped"), len(kinds)


def test_a_missing_or_broken_junit_file_reads_as_nothing(tmp_path: Path) -> None:
    assert junit_outcomes(tmp_path / "none.xml") == {}
    (tmp_path / "cut.xml").write_text("<testsuites><testsuite><testcase name='x'")
    assert junit_outcomes(tmp_path / "cut.xml") == {}


def test_a_version_whose_boots_disagree_says_which_round_failed() -> None:
    boots = [{"t": "passed"}, {"t": "failed: draft extend NOT captured"}]
    assert outcomes.merged(boots, "t") == "failed in round 2: draft extend NOT captured; passed in round 1"
    assert outcomes.merged([{"t": "skipped: cpu"}, {"t": "skipped: cpu"}], "t") == "skipped: cpu"
    assert outcomes.merged([{}, {}], "t") is None


def test_tests_skipped_everywhere_are_left_out_and_a_split_is_a_finding() -> None:
    versions = [[{"a": "passed", "b": "skipped: no baseline", "c": "passed"}],
                [{"a": "failed: leaked 3 tokens past the stop", "b": "skipped: no baseline", "c": "passed"}],
                [{"c": "passed"}]]
    said = outcomes.lines(versions, ["0.5.12", "0.5.13", "0.5.14"], "[x]")
    assert said[0] == ("[x] checks beside the numbers, per version (2 test(s) not skipped everywhere; 1 differ "
                       "between versions: a finding each):")
    assert said[1] == ("[x]   a: DIFFERS between versions: 0.5.12 pass | 0.5.13 FAIL (leaked 3 tokens past the stop)"
                       " | 0.5.14 -")
    assert said[2] == "[x]   c: 0.5.12 pass | 0.5.13 pass | 0.5.14 pass"
    assert outcomes.lines([[{"b": "skipped: x"}]], ["v"], "[x]") == []  # nothing beside the numbers: no lines


def _with_outcomes(source, calls: list[str], failing: str):  # type: ignore[no-untyped-def]
    """The ladder's stand-in boot, recording a phase-graph check that fails on the ``failing`` version."""
    inner = _measure(source, calls)

    def measure(checkout: Path, cfg: MeasureConfig, memo: Memo, ident: str, label: str, **kw) -> RevisionRun:  # type: ignore[no-untyped-def]
        entry = inner(checkout, cfg, memo, ident, label, **kw)
        bad = Path(label).stem == failing
        entry.outcomes = {"test_phase_graphs::test_every_speculative_phase_is_graphed":
                          "failed: draft extend NOT captured as a graph" if bad else "passed",
                          "test_throughput::test_no_drift_against_baseline[decode_tok_s]": "skipped: no baseline"}
        memo.put(entry)
        return entry

    return measure


def test_the_ladder_lays_each_versions_checks_beside_its_verdicts(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    profiles, source = _chain(tmp_path)
    calls: list[str] = []
    monkeypatch.setattr(ladder, "measure", _with_outcomes(source, calls, "v17"))
    done, _said = _ladder(tmp_path, profiles, start="last")
    out = io.StringIO()
    ladder.report(done, out)
    text = out.getvalue()
    assert ("[ladder]   test_phase_graphs::test_every_speculative_phase_is_graphed: DIFFERS between versions: v16 "
            "pass | v17 FAIL (draft extend NOT captured as a graph) | slow pass") in text
    assert "no baseline" not in text  # skipped on every version: left out
    # the memo keeps them: a resumed ladder reports the outcomes of boots made by an earlier call
    (memo_dir,) = (tmp_path / "memo").iterdir()
    assert all(m.outcomes for m in Memo(memo_dir).entries())


def test_ab_prints_the_checks_of_base_and_head(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    profiles, source = _chain(tmp_path)
    calls: list[str] = []
    monkeypatch.setattr(rounds, "measure", _with_outcomes(source, calls, "v17"))
    code = ab.command(pytest_args=["-q"], base_profile=str(profiles[0]), head_profile=str(profiles[1]),
                      rounds=2, max_rounds=2, round_history=str(Path(__file__).resolve().parents[2] / "docs" /
                                                                "validation" / "sglang" / "baselines"),
                      memo=str(tmp_path / "abmemo"), out=(out := io.StringIO()), json_path=tmp_path / "ab.json")
    assert code == 0, out.getvalue()
    data = json.loads((tmp_path / "ab.json").read_text())
    assert (data["command"], data["verdict"], data["exit_code"]) == ("ab", "no_regression", 0)
    (pair,) = data["pairs"]
    assert (Path(pair["base"]).stem, Path(pair["head"]).stem) == ("v16", "v17")
    assert {k["verdict"] for k in pair["keys"]} == {"no_regression"}
    assert data["checks"][0]["outcomes"]["head"].startswith("failed: ")
    assert ("[ab]   test_phase_graphs::test_every_speculative_phase_is_graphed: DIFFERS between versions: base pass "
            "| head FAIL (draft extend NOT captured as a graph)") in out.getvalue()


def test_the_ladders_verdict_file_says_what_its_report_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--json: versioned; each pair's keys with change, interval and verdict as the report prints them; the checks;
    the exit code; written only once there is a verdict."""
    profiles, source = _chain(tmp_path)
    monkeypatch.setattr(ladder, "measure", _with_outcomes(source, [], "v17"))
    path = tmp_path / "verdict.json"
    out = io.StringIO()
    args = dict(profiles=[str(p) for p in profiles], pytest_args=["-q"], memo=str(tmp_path / "memo"),
                round_history=HISTORY, max_rounds=2, start="last", out=out, json_path=str(path))
    assert ladder.command(**args, stop_after=1) == 3 and not path.exists()  # stopped: no verdict, no file
    assert ladder.command(**{**args, "memo": str(tmp_path / "memo2")}) == 1
    data = json.loads(path.read_text())
    assert (data["version"], data["command"], data["verdict"], data["exit_code"]) == (1, "ab-ladder", "regression", 1)
    assert data["chain"] == ["v16", "v17", "slow"] and data["dropped"] == {} and data["boots"] == 6
    first, second = data["pairs"]
    assert (first["base"], first["head"], first["verdict"]) == ("v16", "v17", "no_regression")
    decode = next(k for k in first["keys"] if k["key"].endswith("decode_tok_s"))
    assert [round(r * 100 - 100, 1) for r in decode["round_ratios"]] == [0.5, 0.4]  # as the real ab printed
    assert decode["low"] <= decode["change"] <= decode["high"] and decode["tolerance"] > 0
    assert f"{decode['change'] * 100:+.1f}%" in out.getvalue()  # the number the report prints
    assert second["verdict"] == "regression"
    (check,) = data["checks"]
    assert check["differs"] and check["outcomes"]["v17"].startswith("failed: draft extend NOT captured")
    # the validation page's tables of the release ladder, from this file
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docs" / "validation"))
    import claims  # noqa: F401  (first: it registers its claim modules in the page's order)
    import claims_sglang_releases

    tables = claims_sglang_releases.ladder_tables(data)
    assert f"| v16 -> v17 | decode_tok_s | {decode['change'] * 100:+.1f}% [" in tables
    assert "| regression | -10." in tables and "| +0.5% +0.4% |" in tables
    assert ("| test_phase_graphs::test_every_speculative_phase_is_graphed (differs) | passed | failed | passed |"
            in tables)


def test_a_verdict_file_in_a_folder_that_does_not_exist_is_refused_before_any_boot(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    profiles, source = _chain(tmp_path)
    calls: list[str] = []
    monkeypatch.setattr(ladder, "measure", _measure(source, calls))
    monkeypatch.setattr(rounds, "measure", _measure(source, calls))
    for command in (lambda **kw: ladder.command(profiles=[str(p) for p in profiles], **kw),
                    lambda **kw: ab.command(base_profile=str(profiles[0]), head_profile=str(profiles[1]), **kw)):
        assert command(pytest_args=["-q"], memo=str(tmp_path / "m"), json_path=str(tmp_path / "no" / "v.json")) == 2
        err = capsys.readouterr().err.strip()
        assert "--json" in err and "no folder" in err and "\n" not in err
        assert command(pytest_args=["-q"], memo=str(tmp_path / "m"), json_path=str(tmp_path)) == 2
        assert "a folder, not a file" in capsys.readouterr().err
    assert calls == []
