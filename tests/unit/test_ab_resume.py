"""``specwatch ab --resume``: a run stopped by Ctrl-C, ``kill`` or a call's time limit keeps its whole rounds.

On the lent H200, ab of SGLang 0.5.16 against 0.5.17 was cut twice by the 10-minute call limit, and the second
call measured every round again (docs/validation/data/2026-12-03-sglang-versions-x1{,-2}).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from specwatch.revisions import ab, rounds
from specwatch.revisions.memo import GOOD, Memo, RevisionRun, stopped_runs
from specwatch.revisions.step import MeasureConfig
from specwatch.store.result import Result, ResultSet

DECODE = {"base": [100.0, 101.0, 99.0, 100.0], "head": [50.0, 51.0, 49.0, 50.0]}  # a regression at round 2


def _measure(calls: list[str], stop_at: int | None = None) -> Any:
    def measure(checkout: Path, cfg: MeasureConfig, memo: Memo, ident: str, label: str, *,
                reference: Path | None, commit: str, session: str) -> RevisionRun:
        if stop_at is not None and len(calls) == stop_at:
            raise KeyboardInterrupt
        side, n = ident.split("-", 1)[0], int(ident.rsplit("-r", 1)[1])
        calls.append(ident)
        results = memo.results_path(ident)
        ResultSet(results=[Result.make("p", "w", "decode_tok_s", unit="tok/s", higher_is_better=True,
                                       samples=[DECODE[side][n - 1]] * 3)]).save(results)
        entry = RevisionRun(ident, label, GOOD, "ok", 0, str(results), 1.0, "now", session)
        memo.put(entry)
        return entry

    return measure


def _run(tmp_path: Path, resume: bool = False) -> tuple[rounds.Rounds, str]:
    out = io.StringIO()
    base = rounds.Side("base", "b1", tmp_path, "", "base")
    head = rounds.Side("head", "h1", tmp_path, "", "head")
    done = ab.run_ab(base, head, pytest_args=["-q"], memo_root=tmp_path / "memo", rounds=2, max_rounds=4,
                     tolerance=0.1, metrics=("decode_tok_s",), out=out, resume=resume)
    return done, out.getvalue()


def test_a_stopped_run_resumes_from_its_last_whole_round(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(rounds, "measure", _measure(calls, stop_at=3))  # round 1 whole, round 2 half measured
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path)
    (memo_dir,) = (tmp_path / "memo").iterdir()
    assert [n for _, n in stopped_runs(Memo(memo_dir))] == [1]

    again: list[str] = []
    monkeypatch.setattr(rounds, "measure", _measure(again))
    done, said = _run(tmp_path)  # without --resume: every round again, and a note that --resume would continue
    assert "stopped after 1 whole round(s); --resume continues it" in said and len(again) == 2 * done.rounds
    assert [n for _, n in stopped_runs(Memo(memo_dir))] == [1]  # the finished run is not offered

    resumed: list[str] = []
    monkeypatch.setattr(rounds, "measure", _measure(resumed))
    done, said = _run(tmp_path, resume=True)
    assert "resuming run" in said and "round(s) 1-1 kept from the memo" in said
    assert len(resumed) == 2 * (done.rounds - 1) and done.verdict == rounds.REGRESSION
    assert stopped_runs(Memo(memo_dir)) == []  # each run ended with a verdict


def test_resume_keeps_whole_rounds_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Round 2's base was measured before the stop, its head not: round 2 is measured again, both sides."""
    calls: list[str] = []
    monkeypatch.setattr(rounds, "measure", _measure(calls, stop_at=3))
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path)
    resumed: list[str] = []
    monkeypatch.setattr(rounds, "measure", _measure(resumed))
    done, said = _run(tmp_path, resume=True)
    assert "round(s) 1-1 kept from the memo" in said and "kept from the stopped run" in said
    assert sorted(i.split("-", 1)[0] + i.rsplit("-", 1)[1] for i in resumed) == ["baser2", "headr2"]
    assert all(calls[0].rsplit("-", 2)[1] in i for i in resumed)  # the same run (session) continued
    assert done.verdict == rounds.REGRESSION and done.rounds == 2


def test_a_truncated_results_file_is_measured_again_not_an_error(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Round 1 whole before the stop, then its head results file cut short (a disk filled, a kill during the
    write): the round is no longer whole, so resume measures it again instead of failing on the file."""
    calls: list[str] = []
    monkeypatch.setattr(rounds, "measure", _measure(calls, stop_at=3))
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path)
    (memo_dir,) = (tmp_path / "memo").iterdir()
    assert [n for _, n in stopped_runs(Memo(memo_dir))] == [1]
    head1 = Memo(memo_dir).results_path(next(i for i in calls if i.startswith("head") and i.endswith("-r1")))
    head1.write_text(head1.read_text()[:40])
    assert stopped_runs(Memo(memo_dir)) == []
    resumed: list[str] = []
    monkeypatch.setattr(rounds, "measure", _measure(resumed))
    done, said = _run(tmp_path, resume=True)
    assert "no stopped run" in said and "starting afresh" in said
    assert len(resumed) == 4 and done.verdict == rounds.REGRESSION


def test_resume_with_nothing_stopped_starts_afresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(rounds, "measure", _measure(calls))
    done, said = _run(tmp_path, resume=True)
    assert done.verdict == rounds.REGRESSION
    assert "no stopped run" in said and "starting afresh" in said and len(calls) == 4


def test_the_command_line_takes_resume() -> None:
    from specwatch.cli import build_parser

    args = build_parser().parse_args(["ab", "--base-profile", "a.toml", "--head-profile", "b.toml", "--resume", "--",
                                      "-q"])
    assert args.resume is True
