"""The A/B verdict: rounds are the independent pairs; unsure is never a regression."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specwatch.judge import stats
from specwatch.revisions import rounds


def _rounds(values: list[float], key: str = "p/w/decode_tok_s") -> list[dict]:
    return [{key: ([v, v * 1.001, v * 0.999], "tok/s", True)} for v in values]


def test_a_consistent_slowdown_is_a_regression() -> None:
    base = _rounds([200, 210, 205, 198])
    head = _rounds([150, 160, 152, 149])
    (k,) = rounds.judge(base, head, tolerance=0.1, alpha=0.01)
    assert k.verdict == rounds.REGRESSION
    assert k.rounds.ratio == pytest.approx(0.75, abs=0.02)
    assert "worse than the 10.0% tolerance" in k.message


def test_the_same_revision_is_no_regression() -> None:
    base = _rounds([200, 202, 199, 201])
    head = _rounds([201, 200, 200, 202])
    (k,) = rounds.judge(base, head, tolerance=0.02, alpha=0.01)
    assert k.verdict == rounds.NO_REGRESSION


def test_rounds_that_disagree_beyond_the_tolerance_are_unsure_not_bad() -> None:
    base = _rounds([200, 200, 200, 200])
    head = _rounds([150, 250, 170, 230])
    (k,) = rounds.judge(base, head, tolerance=0.05, alpha=0.01)
    assert k.verdict == rounds.UNSURE
    assert rounds.Rounds([k], 4).verdict == rounds.UNSURE


def test_lower_is_better_metrics_are_oriented() -> None:
    key = "p/w/e2e_s"
    base = [{key: ([1.0], "s", False)} for _ in range(4)]
    head = [{key: ([1.3 + 0.01 * i], "s", False)} for i in range(4)]
    (k,) = rounds.judge(base, head, metrics=("e2e_s",), tolerance=0.1)
    assert k.verdict == rounds.REGRESSION


def test_only_keys_in_every_round_of_both_sides_are_judged() -> None:
    base = _rounds([1, 1, 1])
    head = [*_rounds([1, 1]), {}]
    assert rounds.judge(base, head) == []
    assert rounds.Rounds([], 3).verdict == rounds.UNSURE  # nothing judged is never a pass


@given(st.lists(st.floats(0.5, 2.0), min_size=2, max_size=12))
def test_paired_rounds_ci_contains_the_geometric_mean(ratios: list[float]) -> None:
    s = stats.paired_rounds(ratios)
    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    assert s.low <= geo * (1 + 1e-9) and geo <= s.high * (1 + 1e-9)
    assert s.ratio == pytest.approx(geo)
    assert 0 <= s.p <= 1


@pytest.mark.parametrize("argv", [
    ["ab", "--repo", ".", "--base", "HEAD", "--head", "HEAD", "--rounds", "1", "--", "-q"],
    ["ab", "--repo", ".", "--base", "HEAD", "--head", "HEAD", "--tolerance", "2", "--", "-q"],
    ["ab", "--base-profile", "a.toml", "--", "-q"],
    ["ab", "--base-profile", "missing-a.toml", "--head-profile", "missing-b.toml", "--", "-q"],
    ["ab", "--repo", ".", "--base", "HEAD", "--head", "HEAD", "-q"],
])
def test_ab_usage_errors_are_one_line_before_any_worktree(argv: list[str], capsys: pytest.CaptureFixture[str],
                                                          tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specwatch.cli import main

    monkeypatch.chdir(tmp_path)  # not a git repository: a worktree would fail differently
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
