"""``specwatch ab-ladder``: a chain of versions judged pair by pair, each version booted once a round.

The measurements are stand-ins for boots: each rung's round is a results file of a real run, ab of SGLang 0.5.16
(base) against 0.5.17 (head) at the 8B shape on one H200 (docs/validation/data/2026-12-04-sglang-8b-versions-x1/memo,
two rounds a side), or those samples scaled where a test needs a slower version. Judged under the round history
that run was judged under (docs/validation/sglang/baselines).
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from specwatch.errors import EXIT_USAGE
from specwatch.revisions import ab, ladder, rounds
from specwatch.revisions.memo import GOOD, SKIP, Memo, RevisionRun, ab_round_ident, stopped_ladders, stopped_runs
from specwatch.revisions.step import MeasureConfig
from specwatch.store.result import ResultSet

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "docs" / "validation" / "data" / "2026-12-04-sglang-8b-versions-x1" / "memo"
V16 = {n: REAL / f"base-base-eagle3-8b-base-e1c84e81f90b-r{n}.results.json" for n in (1, 2)}
V17 = {n: REAL / f"head-head-eagle3-8b-0.5.17-e1c84e81f90b-r{n}.results.json" for n in (1, 2)}
HISTORY = str(ROOT / "docs" / "validation" / "sglang" / "baselines")
DECODE = "sgl8b-eagle3/single-stream/decode_tok_s"


def _scaled(src: Path, dest: Path, factor: float) -> Path:
    """``src``'s results with every throughput sample times ``factor`` (a version that much faster or slower)."""
    data = ResultSet.load(src)
    for r in data.results:
        if r.key.endswith("_tok_s"):
            r.samples = [x * factor for x in r.samples]
    data.save(dest)
    return dest


#: a profile file each version of a chain could be: one server, named alike in all (each key is one server's)
PROFILE = """# {name}
version = 1
[[server]]
name = "sgl8b-eagle3"
engine = "reference"
"""


def _profiles(tmp_path: Path, names: list[str]) -> list[Path]:
    out = []
    for name in names:
        p = tmp_path / f"{name}.toml"
        p.write_text(PROFILE.format(name=name))
        out.append(p)
    return out


Source = Callable[[str, int], Path]  # (profile stem, round) -> the results file its measurement reads


def _measure(source: Source, calls: list[str], fail: set[str] | None = None) -> Any:
    """A stand-in for step.measure: the results file ``source`` names for the side's profile and round."""

    def measure(checkout: Path, cfg: MeasureConfig, memo: Memo, ident: str, label: str, *,
                reference: Path | None, commit: str, session: str) -> RevisionRun:
        stem, n = Path(label).stem, int(ident.rsplit("-r", 1)[1])
        calls.append(f"{stem}-r{n}")
        if fail and f"{stem}-r{n}" in fail:
            entry = RevisionRun(ident, label, SKIP, "server did not boot", 1, None, 1.0, "now", session)
        else:
            results = memo.results_path(ident)
            results.write_bytes(source(stem, n).read_bytes())
            entry = RevisionRun(ident, label, GOOD, "ok", 0, str(results), 80.0, "2026-12-04T14:54:48+00:00",
                                session)
        memo.put(entry)
        return entry

    return measure


def _chain(tmp_path: Path) -> tuple[list[Path], Source]:
    """0.5.16 < 0.5.17 < a version 10% slower than 0.5.16 (derived from its real rounds)."""
    profiles = _profiles(tmp_path, ["v16", "v17", "slow"])
    slow = {n: _scaled(V16[n], tmp_path / f"slow-r{n}.json", 0.9) for n in (1, 2)}
    files = {"v16": V16, "v17": V17, "slow": slow}
    return profiles, lambda stem, n: files[stem][n]


def _ladder(tmp_path: Path, profiles: list[Path], **kw: Any) -> tuple[ladder.Ladder, str]:
    out = io.StringIO()
    settings = ab.settings_of(2, kw.pop("max_rounds", 2), kw.pop("tolerance", None), None, round_history=HISTORY)
    done = ladder.run_ladder(profiles, pytest_args=["-q"], memo_root=tmp_path / "memo", settings=settings, out=out,
                             **kw)
    return done, out.getvalue()


@pytest.mark.parametrize(("size", "start"), list(itertools.product(range(2, 8), ladder.STARTS)))
def test_every_pair_is_booted_back_to_back_and_in_the_other_order_the_next_round(size: int, start: str) -> None:
    order = [ladder.walk(range(size), n, start) for n in range(1, 5)]
    assert all(sorted(o) == list(range(size)) for o in order)  # every version once a round
    for i in range(size - 1):
        at = [(o.index(i), o.index(i + 1)) for o in order]
        assert all(abs(b - h) == 1 for b, h in at)  # consecutive boots
        firsts = ["base" if b < h else "head" for b, h in at]
        assert firsts == ["base", "head", "base", "head"] if start == "first" else ["head", "base", "head", "base"]


def test_each_pair_gets_the_verdict_ab_gives_on_the_same_boots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profiles, source = _chain(tmp_path)
    calls: list[str] = []
    monkeypatch.setattr(ladder, "measure", _measure(source, calls))
    done, _said = _ladder(tmp_path, profiles, start="last")
    assert calls == ["slow-r1", "v17-r1", "v16-r1", "v16-r2", "v17-r2", "slow-r2"]  # 6 boots; two abs take 8
    first, second = done.pairs[0], done.pairs[1]
    assert first.verdict == rounds.NO_REGRESSION and second.verdict == rounds.REGRESSION
    decode = next(k for k in first.keys if k.key == DECODE)
    assert [round((r - 1) * 100, 1) for r in decode.round_ratios] == [0.5, 0.4]  # as the real ab printed
    for i, (base, head) in enumerate([("v16", "v17"), ("v17", "slow")]):
        again: list[str] = []
        monkeypatch.setattr(rounds, "measure", _measure(source, again))
        b = rounds.Side("base", str(profiles[i]), tmp_path, "", base)
        h = rounds.Side("head", str(profiles[i + 1]), tmp_path, "", head)
        alone = ab.run_ab(b, h, pytest_args=["-q"], memo_root=tmp_path / f"ab{i}", rounds=2, max_rounds=2,
                          round_history=HISTORY, out=io.StringIO())
        mine = {k.key: (k.verdict, k.round_ratios, k.tolerance, k.message) for k in done.pairs[i].keys}
        assert mine == {k.key: (k.verdict, k.round_ratios, k.tolerance, k.message) for k in alone.keys}
    out = io.StringIO()
    assert ladder.report(done, out) == 1  # a regression in any pair
    text = out.getvalue()
    assert "[ladder] v16 -> v17: no regression after 2 round(s)" in text
    assert "[ladder] v17 -> slow: regression after 2 round(s)" in text and "-10.4%" in text
    assert "(base sglang 0.5.16, head sglang 0.5.17)" in text  # each pair's table names its releases
    assert "not independent" in text and "round 1 0 s" in text


def test_a_ladder_stopped_call_by_call_ends_as_one_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As a lent machine takes it: one boot, then two, then the rest, each call resuming the one before."""
    profiles, source = _chain(tmp_path)
    calls: list[str] = []
    monkeypatch.setattr(ladder, "measure", _measure(source, calls))
    done, said = _ladder(tmp_path, profiles, start="last", stop_after=1, resume=True)
    assert done.stopped and calls == ["slow-r1"] and not done.pairs
    assert "starting afresh" in said and "continues with round 1 of v17" in said
    (memo_dir,) = (tmp_path / "memo").iterdir()
    assert [n for _, n in stopped_ladders(Memo(memo_dir))] == [1] and stopped_runs(Memo(memo_dir)) == []
    done, said = _ladder(tmp_path, profiles, start="last", stop_after=3, resume=True)
    assert done.stopped and calls == ["slow-r1", "v17-r1", "v16-r1"] and "1 measurement(s) kept" in said
    done, said = _ladder(tmp_path, profiles, start="last", resume=True)
    assert calls == ["slow-r1", "v17-r1", "v16-r1", "v16-r2", "v17-r2", "slow-r2"]  # nothing measured twice
    assert not done.stopped and done.made == 6 and said.count("kept from the stopped ladder") == 3
    assert [done.pairs[i].verdict for i in (0, 1)] == [rounds.NO_REGRESSION, rounds.REGRESSION]
    assert stopped_ladders(Memo(memo_dir)) == []  # ended with its verdicts: never resumed again
    _again, said = _ladder(tmp_path, profiles, start="last", resume=True)
    assert "no stopped ladder" in said and len(calls) == 12


def test_another_start_or_an_edited_profile_is_another_ladder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profiles, source = _chain(tmp_path)
    monkeypatch.setattr(ladder, "measure", _measure(source, []))
    _ladder(tmp_path, profiles, start="last", stop_after=1)
    _ladder(tmp_path, profiles, start="first", stop_after=1)  # the order would no longer alternate
    profiles[1].write_text(PROFILE.format(name="v17, edited"))
    _ladder(tmp_path, profiles, start="last", stop_after=1)
    assert len(list((tmp_path / "memo").iterdir())) == 3


def test_a_later_round_boots_only_the_versions_of_open_pairs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pair 1 (0.5.16 against itself) settles at round 2; pair 2 reads +4% then -4% and stays open at a 2%
    tolerance: round 3 boots the two versions of pair 2 alone, back to back."""
    profiles = _profiles(tmp_path, ["a", "b", "c"])
    wobble = {1: _scaled(V16[1], tmp_path / "c1.json", 1.04), 2: _scaled(V16[2], tmp_path / "c2.json", 0.96),
              3: V16[1]}
    calls: list[str] = []
    monkeypatch.setattr(ladder, "measure", _measure(lambda s, n: wobble[n] if s == "c" else V16[min(n, 2)], calls))
    done, said = _ladder(tmp_path, profiles, max_rounds=3, tolerance=0.02)
    assert calls[:6] == ["a-r1", "b-r1", "c-r1", "c-r2", "b-r2", "a-r2"] and calls[6:] == ["b-r3", "c-r3"]
    assert "still open after 2 rounds (b -> c): one more round of b, c" in said
    assert done.pairs[0].verdict == rounds.NO_REGRESSION and done.pairs[0].rounds == 2
    assert done.pairs[1].rounds == 3


def test_a_version_that_cannot_be_measured_stops_the_ladder_and_resume_retries_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    profiles, source = _chain(tmp_path)
    calls: list[str] = []
    monkeypatch.setattr(ladder, "measure", _measure(source, calls, fail={"v16-r1"}))
    args = dict(profiles=[str(p) for p in profiles], pytest_args=["-q"], memo=str(tmp_path / "memo"),
                round_history=HISTORY, max_rounds=2, start="last", resume=True, out=io.StringIO())
    assert ladder.command(**args) == 3
    err = capsys.readouterr().err
    assert "round 1: v16 (" in err and "server did not boot" in err and "keeps the 2 measurement(s)" in err
    monkeypatch.setattr(ladder, "measure", _measure(source, calls))
    assert ladder.command(**args) == 1
    assert calls == ["slow-r1", "v17-r1", "v16-r1", "v16-r1", "v16-r2", "v17-r2", "slow-r2"]



def _four(tmp_path: Path) -> tuple[list[Path], Source]:
    """0.5.16 < a version that never boots < 0.5.17 < a version 10% slower than 0.5.16."""
    profiles = _profiles(tmp_path, ["v16", "broken", "v17", "slow"])
    slow = {n: _scaled(V16[n], tmp_path / f"slow-r{n}.json", 0.9) for n in (1, 2)}
    files = {"v16": V16, "broken": V16, "v17": V17, "slow": slow}
    return profiles, lambda stem, n: files[stem][n]


def test_a_version_that_cannot_be_measured_is_dropped_and_its_neighbours_become_a_pair(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profiles, source = _four(tmp_path)
    calls: list[str] = []
    monkeypatch.setattr(ladder, "measure", _measure(source, calls, fail={"broken-r1"}))
    done, said = _ladder(tmp_path, profiles, start="last", drop_unmeasured=True)
    assert calls == ["slow-r1", "v17-r1", "broken-r1", "v16-r1", "v16-r2", "v17-r2", "slow-r2"]  # never again
    assert done.dropped == {1: "round 1: server did not boot"} and done.heads == {0: 2, 2: 3}
    assert ("[ladder] round 1 broken: could not be measured (server did not boot): dropped from the ladder, as "
            "--drop-unmeasured asks; v16 -> v17 is a pair now") in said
    # v16 -> v17 gets the verdict the pair gets in a ladder without the broken version
    (tmp_path / "alone").mkdir()
    alone, _ = _ladder(tmp_path / "alone", _chain(tmp_path / "alone")[0], start="last")
    assert {k.key: k.round_ratios for k in done.pairs[0].keys} == {k.key: k.round_ratios for k in alone.pairs[0].keys}
    out = io.StringIO()
    assert ladder.report(done, out) == 1  # v17 -> slow is a regression
    text = out.getvalue()
    assert "[ladder] v16 -> v17: no regression after 2 round(s)" in text
    assert "[ladder] broken: DROPPED, not judged (round 1: server did not boot; its log is in" in text


def test_a_dropped_version_makes_a_clean_ladder_unsure_and_resume_does_not_boot_it_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profiles, source = _four(tmp_path)
    profiles = profiles[:3]  # v16 < broken < v17: no regression anywhere it is judged
    calls: list[str] = []
    monkeypatch.setattr(ladder, "measure", _measure(source, calls, fail={"broken-r1"}))
    done, _ = _ladder(tmp_path, profiles, start="last", stop_after=2, resume=True, drop_unmeasured=True)
    assert done.stopped and calls == ["v17-r1", "broken-r1"]
    monkeypatch.setattr(ladder, "measure", _measure(source, calls))  # it would boot now: it must not be asked
    done, said = _ladder(tmp_path, profiles, start="last", resume=True, drop_unmeasured=True)
    assert calls == ["v17-r1", "broken-r1", "v16-r1", "v16-r2", "v17-r2"] and 1 in done.dropped
    assert "round 1 broken: could not be measured (server did not boot): dropped" in said
    assert done.verdict() == rounds.UNSURE and ladder.report(done, io.StringIO()) == 3


def test_without_the_flag_or_with_two_versions_left_a_version_that_cannot_be_measured_stops_the_ladder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profiles, source = _chain(tmp_path)
    monkeypatch.setattr(ladder, "measure", _measure(source, [], fail={"v17-r1"}))
    done, _ = _ladder(tmp_path, profiles, start="last")
    assert done.failed_rung == 1 and not done.dropped
    (tmp_path / "two").mkdir()
    two = _profiles(tmp_path / "two", ["a", "b"])
    monkeypatch.setattr(ladder, "measure", _measure(lambda s, n: V16[n], [], fail={"a-r1"}))
    done, _ = _ladder(tmp_path / "two", two, drop_unmeasured=True)
    assert done.failed_rung == 0 and not done.dropped  # one version left is no ladder: stop, as before


def test_resume_only_stops_at_once_on_a_memo_with_no_stopped_ladder_and_continues_one_that_has(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A later call of a ladder on a machine that lost the earlier calls' boots must not start it afresh."""
    profiles, source = _chain(tmp_path)
    calls: list[str] = []
    monkeypatch.setattr(ladder, "measure", _measure(source, calls))
    args = dict(profiles=[str(p) for p in profiles], pytest_args=["-q"], memo=str(tmp_path / "memo"),
                round_history=HISTORY, max_rounds=2, start="last", out=io.StringIO())
    assert ladder.command(**args, resume_only=True) == 3 and calls == []
    err = capsys.readouterr().err.strip()
    assert "--resume-only: no stopped ladder in" in err and "\n" not in err
    assert ladder.command(**args, resume=True, stop_after=2) == 3 and calls == ["slow-r1", "v17-r1"]
    assert ladder.command(**args, resume_only=True) == 1  # continued to its verdicts: a regression
    assert calls == ["slow-r1", "v17-r1", "v16-r1", "v16-r2", "v17-r2", "slow-r2"]

def test_an_ab_memo_and_a_ladder_memo_do_not_mix(tmp_path: Path) -> None:
    memo = Memo(tmp_path)
    for ident in (ab_round_ident("base", "x", "0123456789ab", 1), "ladder-0-v16-0123456789ab-r1"):
        memo.results_path(ident).write_bytes(V16[1].read_bytes())
        memo.put(RevisionRun(ident, "x", GOOD, "ok", 0, str(memo.results_path(ident)), 1.0, "now", "0123456789ab"))
    assert stopped_ladders(memo) == [("0123456789ab", 1)]
    assert stopped_runs(memo) == []  # ab's run has no head: no whole round


@pytest.mark.parametrize(("argv", "fragment"), [
    (["ab-ladder", "--profile", "{a}", "--", "-q"], "at least two --profile"),
    (["ab-ladder", "--profile", "{a}", "--profile", "missing.toml", "--", "-q"], "missing.toml: no such file"),
    (["ab-ladder", "--profile", "{a}", "--profile", "{a}", "--stop-after", "0", "--", "-q"], "--stop-after must"),
    (["ab-ladder", "--profile", "{a}", "--profile", "{a}", "--rounds", "1", "--round-history", "none", "--", "-q"],
     "--rounds must be at least 2"),
    (["ab-ladder", "--profile", "{a}", "--profile", "{a}", "-q"], "after --"),
])
def test_ab_ladder_usage_errors_are_one_line(argv: list[str], fragment: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from specwatch.cli import main

    (a,) = _profiles(tmp_path, ["a"])
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(ladder, "measure", _measure(lambda s, n: V16[1], []))
    assert main([x.replace("{a}", str(a)) for x in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert fragment in err and "\n" not in err


def test_the_command_line_takes_the_ladders_options() -> None:
    from specwatch.cli import build_parser

    args = build_parser().parse_args(["ab-ladder", "--profile", "a.toml", "--profile", "b.toml", "--start", "last",
                                      "--stop-after", "3", "--resume", "--max-rounds", "2", "--", "-q"])
    assert (args.profile, args.start, args.stop_after, args.resume, args.max_rounds) == (
        ["a.toml", "b.toml"], "last", 3, True, 2)


def test_a_broken_or_unmatched_profile_is_one_line_before_any_boot(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A chain member that is not valid TOML, or one that serves no server its neighbour serves (no key to judge),
    is a usage error naming the file before anything is measured."""
    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("measured")

    monkeypatch.setattr(ladder, "measure", never)
    good, other = _profiles(tmp_path, ["v16", "v17"])
    broken = tmp_path / "broken.toml"
    broken.write_text("garbage[\n")
    plain = tmp_path / "plain.toml"
    plain.write_text(PROFILE.format(name="plain").replace("sgl8b-eagle3", "sgl8b-plain"))
    for chain, said in (([good, broken], "--profile: " + str(broken)), ([good, plain, other], "no server in common")):
        code = ladder.command(profiles=[str(p) for p in chain], pytest_args=["-q"], memo=str(tmp_path / "memo"))
        err = capsys.readouterr().err
        assert code == EXIT_USAGE and said in err and err.count("\n") == 1, err
