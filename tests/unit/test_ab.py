"""The A/B verdict: rounds are the independent pairs; unsure is never a regression."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specwatch.judge import paired, roundprior
from specwatch.revisions import rounds
from specwatch.revisions.plan import KeyPlan


def _rounds(values: list[float], key: str = "p/w/decode_tok_s") -> list[dict]:
    return [{key: ([v, v * 1.001, v * 0.999], "tok/s", True)} for v in values]


def _judge(base: list[dict], head: list[dict], tolerance: float | None = None, *,
           prior: paired.RoundPrior | None = None, source: str = "x", metrics: tuple[str, ...] = ("decode_tok_s",),
           first: int = 2, last: int = 4) -> list[rounds.KeyVerdict]:
    """rounds.judge at these settings; ``prior``: every key's recorded round spread (None: the default)."""
    settings = rounds.RoundSettings(first, last, tolerance, metrics)
    keys = set(base[0]) if base else set()
    plans = {k: KeyPlan(prior, source, tolerance or 0.05, None, None, True) for k in keys} if prior else None
    return rounds.judge(base, head, settings, plans)


def test_a_consistent_slowdown_is_a_regression() -> None:
    base = _rounds([200, 210, 205, 198])
    head = _rounds([150, 160, 152, 149])
    (k,) = _judge(base, head, 0.1)
    assert k.verdict == rounds.REGRESSION
    assert k.rounds.ratio == pytest.approx(0.75, abs=0.02)
    assert "worse than the 10.0% tolerance" in k.message
    assert "of the default" in k.message  # no round history: the documented default spread


def test_the_same_revision_is_no_regression_at_a_recorded_spread() -> None:
    base = _rounds([200, 202, 199, 201])
    head = _rounds([201, 200, 200, 202])
    (k,) = _judge(base, head, 0.02, prior=paired.RoundPrior(0.005, 14))
    assert k.verdict == rounds.NO_REGRESSION
    assert k.decided_at == 2, k.message  # settled at the first look: no more rounds needed
    (k,) = _judge(base, head, 0.02)  # the default spread (15 %) cannot rule out 2 %
    assert k.verdict == rounds.UNSURE


def test_rounds_that_disagree_beyond_the_tolerance_are_unsure_not_bad() -> None:
    base = _rounds([200, 200, 200, 200])
    head = _rounds([150, 250, 170, 230])
    (k,) = _judge(base, head, 0.05)
    assert k.verdict == rounds.UNSURE and k.decided_at is None
    assert "still open at the last look (round 4)" in k.message
    assert rounds.Rounds([k], 4).verdict == rounds.UNSURE


def test_lower_is_better_metrics_are_oriented() -> None:
    key = "p/w/e2e_s"
    base = [{key: ([1.0], "s", False)} for _ in range(4)]
    head = [{key: ([1.5 + 0.01 * i], "s", False)} for i in range(4)]
    (k,) = _judge(base, head, 0.1, metrics=("e2e_s",))
    assert k.verdict == rounds.REGRESSION
    assert k.rounds.ratio > 1 and k.rounds.low < k.rounds.ratio < k.rounds.high  # head/base, as measured
    (fast,) = _judge(base, [{key: ([0.6], "s", False)} for _ in range(4)], 0.1, metrics=("e2e_s",))
    assert fast.verdict == rounds.NO_REGRESSION  # faster is never a regression


def test_only_keys_in_every_round_of_both_sides_are_judged() -> None:
    base = _rounds([1, 1, 1])
    head = [*_rounds([1, 1]), {}]
    assert _judge(base, head) == []
    assert rounds.Rounds([], 3).verdict == rounds.UNSURE  # nothing judged is never a pass


@given(st.lists(st.floats(0.5, 2.0), min_size=2, max_size=12))
def test_paired_rounds_ci_contains_the_geometric_mean(ratios: list[float]) -> None:
    s = paired.paired_rounds(ratios)
    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    assert s.low <= geo * (1 + 1e-9) and geo <= s.high * (1 + 1e-9)
    assert s.ratio == pytest.approx(geo)
    assert 0 <= s.p <= 1


@pytest.mark.parametrize("argv", [
    ["ab", "--repo", ".", "--base", "HEAD", "--head", "HEAD", "--rounds", "1", "--round-history", "none", "--", "-q"],
    ["ab", "--repo", ".", "--base", "HEAD", "--head", "HEAD", "--tolerance", "2", "--", "-q"],
    ["ab", "--repo", ".", "--base", "HEAD", "--head", "HEAD", "--alpha", "0.7", "--", "-q"],
    ["ab", "--repo", ".", "--base", "HEAD", "--head", "HEAD", "--step-timeout", "nan", "--", "-q"],
    ["ab", "--repo", ".", "--base", "HEAD", "--head", "HEAD", "--step-timeout", "0", "--", "-q"],
    ["ab", "--repo", ".", "--base", "HEAD", "--head", "HEAD", "--python", "/nonexistent/python", "--", "-q"],
    ["ab", "--repo", ".", "--base", "HEAD", "--head", "HEAD", "--workdir", "/nonexistent", "--", "-q"],
    ["ab", "--repo", ".", "--base", "HEAD", "--head", "HEAD", "--memo", "a-file", "--", "-q"],
    ["ab", "--repo", ".", "--base", "HEAD", "--head", "HEAD", "-k", "x"],
    ["ab", "--base-profile", "a.toml", "--", "-q"],
    ["ab", "--base-profile", "missing-a.toml", "--head-profile", "missing-b.toml", "--", "-q"],
    ["ab", "--repo", ".", "--base", "HEAD", "--head", "HEAD", "-q"],
])
def test_ab_usage_errors_are_one_line_before_any_worktree(argv: list[str], capsys: pytest.CaptureFixture[str],
                                                          tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specwatch.cli import main

    monkeypatch.chdir(tmp_path)  # not a git repository: a worktree would fail differently
    (tmp_path / "a-file").write_text("")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "not a git repository" not in err, "refused only once a worktree was tried: " + err


def test_ab_rounds_1_is_taken_with_the_round_history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It used to be refused whatever --round-history said (the check never saw the folder)."""
    from specwatch.cli import main
    from specwatch.revisions import ab

    seen: dict = {}

    def fake_run_ab(base: object, head: object, **kwargs: object) -> rounds.Rounds:  # stands in for measuring
        seen.update(kwargs)
        return rounds.Rounds([], 0)

    monkeypatch.setattr(ab, "run_ab", fake_run_ab)
    monkeypatch.chdir(tmp_path)
    for name in ("a.toml", "b.toml"):
        (tmp_path / name).write_text('version = 1\n[[server]]\nname = "eagle3"\nengine = "reference"\n')
    main(["ab", "--base-profile", "a.toml", "--head-profile", "b.toml", "--rounds", "1", "--", "-q"])
    assert seen["rounds"] == 1 and seen["round_history"] == "baselines"


def test_ab_of_a_broken_or_unmatched_profile_is_one_line_before_any_boot(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str],
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A profile file that is not valid TOML, or two that name no server in common (no key to judge), fail as one
    usage line naming the file before anything is measured (they used to boot, then fail with pytest's exit 4)."""
    from specwatch.cli import main
    from specwatch.errors import EXIT_USAGE
    from specwatch.revisions import ab

    def never(*args: object, **kwargs: object) -> rounds.Rounds:
        raise AssertionError("measured")

    monkeypatch.setattr(ab, "run_ab", never)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "good.toml").write_text('version = 1\n[[server]]\nname = "eagle3"\nengine = "reference"\n')
    (tmp_path / "plain.toml").write_text('version = 1\n[[server]]\nname = "plain"\nengine = "reference"\n')
    (tmp_path / "broken.toml").write_text("garbage[\n")
    for head, said in (("broken.toml", "--head-profile: "), ("plain.toml", "no server in common")):
        code = main(["ab", "--base-profile", "good.toml", "--head-profile", head, "--", "-q"])
        err = capsys.readouterr().err
        assert code == EXIT_USAGE and said in err and err.count("\n") == 1, err


# --------------------------------------------------------------------------------------------
# the round spread of earlier A/B runs (a prior pooled with few rounds)


def test_round_prior_pools_each_runs_spread_around_its_own_mean() -> None:
    # a constant 5 % slowdown in one run does not inflate the spread: residuals are within-run
    prior = paired.round_prior([[1.0, 1.01, 0.99], [0.95, 0.96, 0.94], [1.2]])
    assert prior is not None and prior.df == 4
    assert prior.spread == pytest.approx(0.01, rel=0.05)
    assert paired.round_prior([[1.0], []]) is None


def test_a_prior_turns_two_rounds_of_a_2_percent_slowdown_into_a_regression() -> None:
    base = _rounds([200, 203])
    head = _rounds([196.5, 198.2])  # -1.8 %, -2.4 %
    (alone,) = _judge(base, head, 0.005, last=2)
    assert alone.verdict == rounds.UNSURE  # the default spread: 15 %
    (pooled,) = _judge(base, head, 0.005, prior=paired.RoundPrior(0.005, 14), source="14 df of earlier runs", last=2)
    assert pooled.verdict == rounds.REGRESSION
    assert pooled.rounds.df == 15 and pooled.rounds.pooled_spread is not None
    assert "pooled with 0.5% over 14 df of 14 df of earlier runs" in pooled.message


def test_a_prior_cannot_hide_a_run_whose_own_rounds_disagree() -> None:
    # the run's own spread is pooled in: rounds far apart widen the interval even with a tight prior
    base = _rounds([200, 200, 200, 200])
    head = _rounds([180, 220, 175, 226])
    (k,) = _judge(base, head, 0.01, prior=paired.RoundPrior(0.002, 6))
    assert k.verdict == rounds.UNSURE
    assert k.rounds.pooled_spread > 0.05


def test_rounds_noisier_than_the_record_are_said_to_be() -> None:
    """The pooled spread outweighs 2-4 rounds; when they wander far more than the record, the
    verdict says so: unsure is for a run noisier than its record."""
    prior = paired.RoundPrior(0.004, 20)
    (calm,) = _judge(_rounds([200, 200, 200]), _rounds([190, 191, 190]), 0.01, prior=prior)
    (noisy,) = _judge(_rounds([200, 200, 200]), _rounds([180, 198, 188]), 0.01, prior=prior, last=3)
    assert "wander more than the record" not in calm.message
    assert "these rounds wander more than the record (6.7% against 0.4%" in noisy.message, noisy.message
    assert "the run is noisier than its record" in noisy.message
    assert roundprior.noisier_p([1.0], paired.RoundPrior(0.01, 5)) == 1.0
    assert roundprior.noisier_p([0.995, 1.005], paired.RoundPrior(0.01, 5)) > 0.3  # calmer than the record


def test_round_prior_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        paired.RoundPrior(float("nan"), 3)
    with pytest.raises(ValueError):
        paired.RoundPrior(0.01, 0)


def test_round_spread_file_round_trips_and_keeps_runs_of_two_rounds(tmp_path: Path) -> None:
    from specwatch.store.roundspread import RoundSpread

    spread = RoundSpread.for_class(tmp_path, "h200x1")
    assert spread.prior("decode_tok_s") is None and not spread.path.exists()
    spread.add("decode_tok_s", [1.0, 1.01, 0.99], "a -> b", "p/single-stream/decode_tok_s")
    spread.add("decode_tok_s", [0.97], "one round says nothing of the spread")
    path = spread.save()
    assert path == tmp_path / "h200x1" / "round-spread.json"
    again = RoundSpread.for_class(tmp_path, "h200x1")
    assert [(r.ratios, r.key) for r in again.runs] == [((1.0, 1.01, 0.99), "p/single-stream/decode_tok_s")]
    assert again.prior("decode_tok_s") == paired.round_prior([[1.0, 1.01, 0.99]])
    assert again.prior("output_tok_s") is None


def test_a_key_is_judged_on_its_own_runs_and_never_on_another_keys(tmp_path: Path) -> None:
    """Every sweep level's key keeps its own round history, however few its runs; a key with none borrows no
    other level's (a prior belongs to the workload it was measured on, issue 36): it gets no prior (the rule's
    default)."""
    from specwatch.store.roundspread import RoundSpread

    spread = RoundSpread.for_class(tmp_path, "h200x1")
    spread.add("output_throughput", [1.0, 1.1, 0.9, 1.05, 0.95], "c64", "p/concurrency-64/output_throughput")
    spread.add("output_throughput", [1.0, 1.01, 0.99], "c1", "p/concurrency-1/output_throughput")
    spread.save()
    again = RoundSpread.for_class(tmp_path, "h200x1")
    own, source = again.prior_for("p/concurrency-64/output_throughput")
    assert own == paired.round_prior([[1.0, 1.1, 0.9, 1.05, 0.95]])
    assert "of this key" in source
    few, source = again.prior_for("p/concurrency-1/output_throughput")  # 2 df of its own: its own still
    assert few == paired.round_prior([[1.0, 1.01, 0.99]]) and "1 earlier A/B run(s) of this key" in source
    assert again.prior_for("p/concurrency-4/output_throughput") == (None, "")
    assert again.prior_for("p/single-stream/output_tok_s") == (None, "")
    residuals = again.residuals("p/concurrency-64/output_throughput")
    assert len(residuals) == 5 and abs(sum(residuals)) < 1e-9
    assert math.sqrt(sum(r * r for r in residuals) / 4) == pytest.approx(own.spread * math.sqrt(5 / 4), rel=1e-6)


@pytest.mark.parametrize(("text", "fragment"), [
    ('{"runs": []}', 'no "version" field'),
    ('{"version": 1, "runs": [{"metric": "m"}]}', "run 0 needs a metric and a list of ratios"),
    ('{"version": 1, "runs": [{"metric": "m", "ratios": ["x"]}]}', "run 0 needs"),
    ('{"version": 9, "runs": []}', "newer than this specwatch reads"),
    ("not json", "not readable JSON"),
    ('{"version": 1, "runs": null}', "runs: expected a list, got NoneType"),
    ('{"version": 1, "runs": 5}', "runs: expected a list, got int"),
    ('{"version": 1, "runs": [{"metric": "m", "ratios": [1, 1' + "0" * 400 + ']}]}', "between 0.001 and 1000"),
    ('{"version": 1, "runs": [{"metric": "m", "ratios": [1, 1e308]}]}', "run 0 needs"),
    ('{"version": 1, "runs": [{"metric": "m", "ratios": [1, 0]}]}', "run 0 needs"),
    ('{"version": 1, "runs": [{"metric": "m", "ratios": [1, NaN]}]}', "run 0 needs"),
    ('{"version": 1, "runs": [{"metric": "m", "ratios": [1, true]}]}', "run 0 needs"),
    ('{"version": 1, "runs": [{"metric": "m", "ratios": [1, "1.0"]}]}', "run 0 needs"),
])
def test_a_broken_round_spread_file_is_one_line(tmp_path: Path, text: str, fragment: str) -> None:
    from specwatch.errors import UsageError
    from specwatch.store.roundspread import RoundSpread

    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "round-spread.json").write_text(text)
    with pytest.raises(UsageError, match=fragment.replace("(", r"\(")) as info:
        RoundSpread.for_class(tmp_path, "c")
    assert "\n" not in str(info.value)


def test_one_round_leans_on_the_round_spread_of_earlier_runs() -> None:
    """A server too slow to boot often: one boot a side, the boot-to-boot term from earlier runs."""
    prior = paired.RoundPrior(0.005, 14)
    (slow,) = _judge(_rounds([200.0]), _rounds([190.0]), 0.01, prior=prior, first=1, last=1)
    assert slow.verdict == rounds.REGRESSION, slow.message  # -5 % is 10 spreads away
    assert slow.rounds.df == 14 and slow.rounds.spread == 0.0  # the spread is the record's alone
    (same,) = _judge(_rounds([200.0]), _rounds([200.4]), 0.03, prior=prior, first=1, last=1)
    assert same.verdict == rounds.NO_REGRESSION, same.message
    (small,) = _judge(_rounds([200.0]), _rounds([198.0]), 0.005, prior=prior, first=1, last=1)
    assert small.verdict == rounds.UNSURE, small.message  # -1 % is within 2.6 spreads of nothing


def test_one_round_needs_a_round_history(tmp_path: Path) -> None:
    from specwatch.errors import UsageError

    with pytest.raises(UsageError, match="or 1 with a --round-history"):
        rounds.RoundSettings.make(1, 2, 0.01)
    with pytest.raises(UsageError):
        rounds.RoundSettings.make(1, 2, 0.01, round_history="none")
    assert rounds.RoundSettings.make(1, 2, 0.01, round_history=tmp_path).round_history == str(tmp_path.resolve())


def test_the_power_analysis_of_a_round_spread() -> None:
    """What ab prints before it measures: the smallest slowdown its rounds flag 19 times in 20.
    Validation section 11: at 0.89% over 14 df, 2 rounds flag 2.6%; a real 2.5% was flagged 3 of 3."""
    prior = paired.RoundPrior(0.0089, 14)
    found = [paired.detectable(prior, n, 0.01, 0.005) for n in (1, 2, 3, 4, 8)]
    assert found == sorted(found, reverse=True) and found[-1] > 0.005
    assert found[1] == pytest.approx(0.0264, abs=0.0005) and found[3] == pytest.approx(0.0186, abs=0.0005)
    # no spread at all: only the tolerance stands in the way
    assert paired.detectable(paired.RoundPrior(0.0, 5), 2, 0.01, 0.02) == pytest.approx(0.02)
    with pytest.raises(ValueError):
        paired.detectable(prior, 0, 0.01, 0.01)


def _append_one(root: str, tag: str) -> None:
    from specwatch.store.roundspread import RoundSpread

    RoundSpread.append(root, "h200x1", [("decode_tok_s", [1.0, 1.01], tag)])


def _waits_for_a_flock(pid: int | None) -> bool:
    """``pid`` is blocked waiting for a flock (a ``->`` line of /proc/locks names it)."""
    lines = Path("/proc/locks").read_text().splitlines()
    return any("->" in ln and "FLOCK" in ln and str(pid) in ln.split() for ln in lines)


@pytest.mark.skipif(not Path("/proc/locks").is_file(), reason="needs Linux's /proc/locks to see a waiting flock")
def test_recording_waits_for_another_recorder(tmp_path: Path) -> None:
    """One A/B per GPU of a host, both with --record-rounds: each reads, adds and writes under an
    exclusive lock, so neither overwrites the other's run. While another recorder holds the lock,
    an append waits; then both runs are in the file."""
    import fcntl
    import multiprocessing
    import time

    from specwatch.store.roundspread import FILE_NAME, RoundSpread

    _append_one(str(tmp_path), "first")
    lock_path = tmp_path / "h200x1" / f".{FILE_NAME}.lock"
    ctx = multiprocessing.get_context("spawn")
    with open(lock_path, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        child = ctx.Process(target=_append_one, args=(str(tmp_path), "second"))
        child.start()
        # the kernel lists a process blocked on a flock as a waiter ("->") in /proc/locks: wait until the child
        # is one (it may take seconds to start under load), rather than sleeping and hoping it got there
        deadline = time.monotonic() + 120
        while not _waits_for_a_flock(child.pid) and child.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _waits_for_a_flock(child.pid), "the append did not wait for the lock"
        assert [r.label for r in RoundSpread.for_class(tmp_path, "h200x1").runs] == ["first"]
    child.join(30)
    assert child.exitcode == 0
    assert [r.label for r in RoundSpread.for_class(tmp_path, "h200x1").runs] == ["first", "second"]
