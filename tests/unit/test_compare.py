"""Verdicts of specwatch.judge.compare, anchored on the case study's numbers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specwatch.errors import UsageError
from specwatch.judge import compare as compare_mod
from specwatch.judge import stats
from specwatch.judge.compare import DriftVerdict, GateVerdict, compare, relative_gate

# Case study: baseline ~89 tok/s measured earlier the same day, retest ~82 tok/s.
BASE_89 = [89.0, 89.3, 88.8, 89.1, 89.2, 88.9, 89.0, 89.4, 88.7, 89.1]
RETEST_82 = [82.1, 82.2, 83.0, 82.4, 82.3, 82.6, 82.0, 82.5, 82.8, 82.2]
# Case study: five EAGLE-3 runs spreading 52.8–68.1 tok/s.
SPREAD = [52.8, 68.1, 61.0, 59.5, 64.0]


def noisy(center: float, cv: float, n: int, seed: int) -> np.ndarray:
    return center * (1.0 + cv * np.random.default_rng(seed).standard_normal(n))


def test_baseline_drift_89_to_82_is_a_regression():
    c = compare(RETEST_82, BASE_89, higher_is_better=True)
    assert c.verdict is DriftVerdict.REGRESSION
    assert c.is_regression
    assert c.change == pytest.approx(82.35 / 89.05 - 1)
    assert c.ci_high < 0.95
    assert c.p < 0.01
    assert c.n_current == c.n_reference == 10
    assert "regression" in c.message
    assert "-7.5%" in c.message


def test_drift_with_generated_samples_and_improvement_mirror():
    ref = noisy(89.0, 0.01, 10, 1)
    cur = noisy(82.0, 0.01, 10, 2)
    assert compare(cur, ref).verdict is DriftVerdict.REGRESSION
    assert compare(ref, cur).verdict is DriftVerdict.IMPROVEMENT
    # For latency (lower is better) the same numbers mean the opposite.
    assert compare(cur, ref, higher_is_better=False).verdict is DriftVerdict.IMPROVEMENT


def test_wide_spread_with_unchanged_mean_is_not_a_regression():
    ref = noisy(float(np.mean(SPREAD)), 0.01, 10, 3)
    c = compare(SPREAD, ref)
    assert c.verdict is DriftVerdict.NOISY
    assert not c.is_regression
    assert c.cv_current > 0.08
    assert c.mde > 0.05
    assert c.runs_needed > 20
    assert f"need {c.runs_needed} runs" in c.message
    assert "noise" in c.message


def test_spread_vs_spread_is_noisy_not_a_win():
    # 94 vs 89 "win" read from runs that spread ±12%: no significant difference.
    a = [94.0 * x / np.mean(SPREAD) for x in SPREAD]
    b = [89.0 * x / np.mean(SPREAD) for x in reversed(SPREAD)]
    c = compare(a, b)
    assert c.verdict is DriftVerdict.NOISY
    g = relative_gate(a, b, names=("eagle3", "baseline"))
    assert g.verdict is GateVerdict.NO_EFFECT
    assert not g.passed
    assert "runs per side to see 5%" in g.message
    # the advice is sized for the effect the caller cares about (the tuned gate's tuning_min_effect)
    g2 = relative_gate(a, b, names=("eagle3", "baseline"), effect=0.02)
    assert "runs per side to see 2%" in g2.message and g2.verdict is GateVerdict.NO_EFFECT
    need = [int(m.split("need ~")[1].split()[0]) for m in (g.message, g2.message)]
    assert need[1] > need[0]


@pytest.mark.parametrize("seed", range(5))
def test_identical_distributions_no_change(seed):
    ref = noisy(89.0, 0.01, 10, 100 + seed)
    cur = noisy(89.0, 0.01, 10, 200 + seed)
    c = compare(cur, ref)
    assert c.verdict is DriftVerdict.NO_CHANGE
    assert compare(ref, ref).verdict is DriftVerdict.NO_CHANGE


def test_tiny_n_says_it_cannot_reach_alpha():
    c = compare(RETEST_82[:3], BASE_89[:3])
    assert c.verdict is DriftVerdict.INCONCLUSIVE
    assert "n=3/3 cannot reach p<0.01" in c.message
    assert "need ≥ 5 runs" in c.message
    assert c.runs_needed >= 5


def test_low_power_quiet_enough_is_inconclusive_not_no_change():
    # 4% noise, 6 runs each: MDE well above 5%, noise below the NOISY line.
    ref = noisy(100.0, 0.04, 6, 11)
    cur = noisy(97.0, 0.04, 6, 12)
    c = compare(cur, ref, noisy_cv=0.10)
    assert c.verdict is DriftVerdict.INCONCLUSIVE
    assert c.mde > 0.05
    assert "need" in c.message


def test_significant_but_within_tolerance_is_no_change():
    ref = noisy(100.0, 0.002, 20, 21)
    cur = noisy(98.0, 0.002, 20, 22)
    c = compare(cur, ref)
    assert c.p < 0.01
    assert c.verdict is DriftVerdict.NO_CHANGE
    assert compare(cur, ref, tolerance=0.01).verdict is DriftVerdict.REGRESSION


def test_overrides_alpha():
    c = compare(RETEST_82[:4], BASE_89[:4], alpha=0.05)  # 2/70 < 0.05
    assert c.verdict is DriftVerdict.REGRESSION


def test_to_dict_carries_every_number():
    d = compare(RETEST_82, BASE_89).to_dict()
    for k in ("ratio", "ci_low", "ci_high", "p", "cv_current", "cv_reference", "mde", "n_current",
              "n_reference", "message"):  # fmt: skip
        assert k in d
    assert d["verdict"] == "regression"


def test_bad_input_is_a_usage_error():
    with pytest.raises(UsageError):
        compare([], BASE_89)
    with pytest.raises(UsageError):
        compare([0.0, 1.0], BASE_89)
    with pytest.raises(UsageError):
        compare(BASE_89, BASE_89, tolerance=0)


values = st.lists(st.floats(min_value=10.0, max_value=200.0, allow_nan=False), min_size=2, max_size=12)


@settings(max_examples=30, deadline=None)
@given(values, values, st.sampled_from([0.25, 0.5, 4.0, 1024.0]), st.booleans())
def test_verdict_and_p_invariant_to_scaling(cur, ref, c, hib):
    a = compare(cur, ref, higher_is_better=hib, n_resamples=500)
    b = compare([c * x for x in cur], [c * x for x in ref], higher_is_better=hib, n_resamples=500)
    assert a.verdict is b.verdict
    assert a.p == b.p
    assert a.ratio == b.ratio
    assert (a.ci_low, a.ci_high) == (b.ci_low, b.ci_high)


@settings(max_examples=30, deadline=None)
@given(values, values)
def test_swapping_mirrors_the_verdict(cur, ref):
    a = compare(cur, ref, n_resamples=500)
    b = compare(ref, cur, n_resamples=500)
    mirror = {DriftVerdict.REGRESSION: DriftVerdict.IMPROVEMENT, DriftVerdict.IMPROVEMENT: DriftVerdict.REGRESSION}
    if a.verdict in mirror:
        assert b.verdict is mirror[a.verdict]
    assert 0.0 <= a.p <= 1.0
    assert a.p == pytest.approx(b.p)
    assert a.ci_low <= a.ratio * (1 + 1e-12)
    assert a.ratio <= a.ci_high * (1 + 1e-12)


# ------------------------------------------------------------------ relative gate


def test_gate_speculative_beats_baseline_by_margin():
    base = noisy(89.0, 0.01, 8, 31)
    spec = noisy(100.0, 0.01, 8, 32)
    g = relative_gate(spec, base, margin=0.05, names=("eagle3", "baseline"))
    assert g.verdict is GateVerdict.PASS
    assert g.passed
    assert g.gain == pytest.approx(np.median(spec) / np.median(base) - 1)
    assert "eagle3 ≥ baseline×1.05" in g.message


def test_gate_speculative_slower_fails():
    spec = [59.0, 60.0, 61.0, 60.5, 59.8]
    g = relative_gate(spec, RETEST_82[:5], margin=0.05, names=("eagle3", "baseline"))
    assert g.verdict is GateVerdict.FAIL
    assert not g.passed


def test_gate_small_real_gain_below_margin_fails_or_inconclusive():
    base = noisy(89.0, 0.005, 10, 41)
    spec = noisy(91.0, 0.005, 10, 42)  # +2% real, 5% asked
    g = relative_gate(spec, base, margin=0.05)
    assert g.verdict is GateVerdict.FAIL


def test_tuned_vs_untuned_without_effect_is_no_measurable_effect():
    untuned = noisy(82.0, 0.01, 10, 51)
    tuned = noisy(82.0, 0.01, 10, 52)
    g = relative_gate(tuned, untuned, names=("tuned", "untuned"))
    assert g.verdict is GateVerdict.NO_EFFECT
    assert g.message.startswith("no measurable effect")
    assert not g.passed


def test_gate_lower_is_better_and_tiny_n():
    fast = [10.0, 10.1, 9.9, 10.05, 9.95, 10.0]
    slow = [12.0, 12.1, 11.9, 12.05, 11.95, 12.0]
    assert relative_gate(fast, slow, margin=0.1, higher_is_better=False).verdict is GateVerdict.PASS
    assert relative_gate(slow, fast, margin=0.1, higher_is_better=False).verdict is GateVerdict.FAIL
    g = relative_gate(fast[:3], slow[:3], higher_is_better=False)
    assert g.verdict is GateVerdict.INCONCLUSIVE
    assert "cannot reach" in g.message


def test_negative_margin_is_a_bound_not_a_win():
    """spec_margin = -0.2: speculation may be at most 20% slower (the CPU smoke set's bound)."""
    base = [100.0 + i * 0.3 for i in range(8)]
    slightly_slower = [92.0 + i * 0.3 for i in range(8)]
    much_slower = [60.0 + i * 0.3 for i in range(8)]  # the case study's 60 against 82 is 0.73x
    assert relative_gate(slightly_slower, base, margin=-0.2).passed
    assert relative_gate(much_slower, base, margin=-0.2).verdict.value == "fail"


def test_tuning_effect_needs_significance_and_size():
    from specwatch.run.gates import tuning_effect

    rng = np.random.default_rng(11)
    untuned = list(826 * (1 + 0.01 * rng.standard_normal(21)))
    small = relative_gate(list(844.6 * (1 + 0.01 * rng.standard_normal(21))), untuned)  # NVLink, +2.3%
    assert small.passed
    text, verdict = tuning_effect(small, 0.05)
    assert verdict == "no_effect" and text.startswith("no meaningful effect") and "5%" in text
    big = relative_gate(list(826 * 1.11 * (1 + 0.01 * rng.standard_normal(21))), untuned)  # sockets, ~11%
    assert tuning_effect(big, 0.05)[1] == "pass"
    same = relative_gate(list(826 * (1 + 0.05 * rng.standard_normal(21))), untuned)
    assert tuning_effect(same, 0.05)[1] in ("no_effect", "inconclusive")
    worse = relative_gate(list(826 * 0.9 * (1 + 0.01 * rng.standard_normal(21))), untuned)
    text, verdict = tuning_effect(worse, 0.05)
    assert verdict == "fail" and text.startswith("tuning makes it worse: -10."), text


def test_a_verdict_on_runs_alone_says_so_and_a_multi_session_one_does_not() -> None:
    """The committed h200x1 eagle3-tuned baseline holds 19 sessions of decode tok/s but one of e2e time:
    a regression called from one session says why it could not account for the machine's drift."""
    rng = np.random.default_rng(5)
    sessions = [list(100 * (1 + 0.01 * k) * (1 + 0.01 * rng.standard_normal(10))) for k in range(3)]
    slowed = list(80 * (1 + 0.01 * rng.standard_normal(10)))
    one = compare(slowed, sessions[0], reference_sessions=sessions[:1])
    assert one.verdict is DriftVerdict.REGRESSION
    assert "judged on runs alone: the reference holds 1 recording session(s)" in one.message
    assert "judged on runs alone" in compare(slowed, sessions[0]).message  # a plain results file: one run
    many = compare(slowed, [x for s in sessions for x in s], reference_sessions=sessions)
    assert many.verdict is DriftVerdict.REGRESSION and "judged on runs alone" not in many.message
    healthy = compare(sessions[0], sessions[1], reference_sessions=sessions[1:2])
    assert "judged on runs alone" not in healthy.message  # said only beside a flagged change


# ------------------------------------------------------------------------------------------------
# specwatch compare: both sides must come from one machine class.


def _side(path, machine_class, tok_s, host=None):
    from specwatch.store.result import Result, ResultSet

    machine = {"machine_class": machine_class} if machine_class else {}
    if host:
        machine["host_id"] = host
    rs = ResultSet(machine=machine, commit="c")
    rs.add(Result.make("eagle3-tuned", "single-stream", "decode_tok_s", unit="tok/s", higher_is_better=True,
                       samples=tok_s))
    rs.save(path)
    return str(path)


def test_compare_refuses_sides_of_different_machine_classes(tmp_path, capsys):
    from specwatch.cli import main
    from specwatch.errors import EXIT_USAGE

    base = _side(tmp_path / "h200.json", "h200x1", list(noisy(1157, 0.01, 10, 1)))
    cur = _side(tmp_path / "cpu.json", "cpu-2core", list(noisy(553, 0.01, 10, 2)))
    assert main(["compare", base, cur]) == EXIT_USAGE
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "'h200x1'" in err and "'cpu-2core'" in err and "--allow-other-class" in err


def test_allow_other_class_compares_with_a_warning_and_an_accurate_note(tmp_path, capsys):
    from specwatch.cli import main
    from specwatch.errors import EXIT_REGRESSION
    from specwatch.store.baseline import BaselineStore
    from specwatch.store.result import ResultSet

    store = BaselineStore(tmp_path / "b")
    store.record_all(ResultSet.load(_side(tmp_path / "rec.json", "h200x1", list(noisy(1157, 0.01, 10, 1)),
                                          host="gpuhost")))
    baseline = str(store.path_for("h200x1", "eagle3-tuned"))
    cur = _side(tmp_path / "cpu.json", "cpu-2core", list(noisy(553, 0.01, 10, 2)), host="cpuhost")
    assert main(["compare", baseline, cur, "--allow-other-class"]) == EXIT_REGRESSION
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.startswith("WARNING: machine classes differ") and "'h200x1'" in first and "'cpu-2core'" in first
    assert "of the class" not in out and "other machine(s)" not in out
    assert "baseline: its 1 session(s) were recorded on another machine class than this machine's" in out


def test_compare_warns_when_a_side_has_no_machine_class(tmp_path, capsys):
    from specwatch.cli import main
    from specwatch.errors import EXIT_OK

    base = _side(tmp_path / "a.json", None, list(noisy(100, 0.01, 10, 1)))
    cur = _side(tmp_path / "b.json", "h200x1", list(noisy(100, 0.01, 10, 2)))
    assert main(["compare", base, cur]) == EXIT_OK
    out = capsys.readouterr().out
    assert out.startswith(f"warning: {base} records no machine class")


# -- the drift tolerance from data (compare_mod.drift_basis, stats.drift_tolerance) ---------------------


def test_tolerance_from_a_tight_baseline_is_below_the_flat_five_percent() -> None:
    sessions = [[100.0 * (1 + 0.005 * ((i % 3) - 1))] * 5 for i in range(12)]  # sessions within ±0.5%
    basis = compare_mod.drift_basis(0.05, sessions, None, alpha=0.01)
    assert basis.tolerance < 0.02
    assert "from the baseline's 12 sessions" in basis.note and "19 of 20" in basis.note


def test_a_noisy_baseline_says_the_requested_tolerance_is_out_of_reach() -> None:
    sessions = [[v] * 5 for v in (100, 106, 95, 103, 97, 108)]
    basis = compare_mod.drift_basis(0.05, sessions, None, alpha=0.01)
    assert basis.tolerance > 0.05
    assert "below what these sessions can resolve" in basis.note


def test_few_sessions_take_the_machine_class_spread_so_a_healthy_boot_never_fails() -> None:
    """gpu-ref-small on a fresh H200: eagle3-untuned's one-session baseline called its boot-to-boot
    wander (-16.7%) a regression; the class's 19-session spread (6%) now sets the tolerance."""
    one_session = [[1029.0, 1031.0, 1027.0, 1030.0, 1028.0]]
    healthy = [857.0, 858.0, 856.0, 859.0, 857.5]  # -16.7%, significant on runs alone
    cmp, basis = compare_mod.drift(healthy, one_session[0], requested=0.05, sessions=one_session,
                               class_spread=(0.06, "eagle3-tuned: 19 sessions"))
    assert cmp.verdict is not DriftVerdict.REGRESSION
    assert basis.tolerance > 0.167 and "record 2 more session(s)" in basis.note
    # every session is kept by default: the advice is to record, not to set how many are kept
    assert "each --update-baselines adds one" in basis.note and "--specwatch-baseline-sessions" not in basis.note
    cmp, _ = compare_mod.drift([x * 0.7 for x in healthy], one_session[0], requested=0.05, sessions=one_session,
                           class_spread=(0.06, "eagle3-tuned: 19 sessions"))
    assert cmp.verdict is DriftVerdict.REGRESSION  # a 42% slowdown still is one


def test_without_any_spread_the_requested_tolerance_is_used_and_said() -> None:
    basis = compare_mod.drift_basis(0.5, [[1.0, 2.0]], None)
    assert basis.tolerance == 0.5 and "no session spread measured" in basis.note


def test_detects_is_beyond_the_tolerance_and_shrinks_with_spread() -> None:
    a, b = stats.drift_tolerance(0.02, 40), stats.drift_tolerance(0.01, 40)
    assert a.detects > a.tolerance > b.tolerance and a.detects > b.detects
    # the committed ref-large baseline: spread 2.4% over 45 sessions -> a 4% slowdown is out of reach
    large = stats.drift_tolerance(0.0238, 45)
    assert large.detects > 0.09


def test_a_run_named_on_a_machine_the_sessions_know_is_judged_on_it_and_an_unnamed_one_on_a_new_one() -> None:
    """Sessions of two machines 4% apart: a run 8% below machine a's mean is a regression judged as a run on
    a (its within-machine interval, Student t); unnamed, it is one on a new machine, whose interval the
    machine term on 1 degree of freedom makes wide: not flagged, and the note says why. A machine with fewer
    than MIN_SESSIONS sessions of its own is judged as a new one, and the note says how many more to record."""
    from specwatch.judge.variance import MachineSession

    rng = np.random.default_rng(4)
    sessions = [MachineSession(list(c * (1 + 0.01 * rng.standard_normal()) * (1 + 0.005 * rng.standard_normal(10))),
                               name) for name, c in (("a", 100.0), ("b", 104.0)) for _ in range(5)]
    pooled = [x for s in sessions for x in s]
    slowed = list(92.0 * (1 + 0.005 * rng.standard_normal(10)))
    on_a, basis_a = compare_mod.drift(slowed, pooled, sessions=sessions, machine="a")
    assert on_a.verdict is DriftVerdict.REGRESSION and not basis_a.prediction.new_machine
    assert basis_a.tolerance < 0.05 and "this run's machine (a) has 5 of them: judged as a run on it" in basis_a.note
    new, basis_new = compare_mod.drift(slowed, pooled, sessions=sessions)
    assert new.verdict is not DriftVerdict.REGRESSION and basis_new.prediction.new_machine
    assert basis_new.tolerance > 0.2 and "rests on 2 machines, 1 degree(s) of freedom" in basis_new.note
    assert "is judged against the prediction interval for a new machine" in basis_new.note  # it named none
    unknown, basis_c = compare_mod.drift(slowed, pooled, sessions=sessions, machine="c")  # not theirs: a new machine
    assert unknown.verdict is new.verdict and unknown.session_mde == new.session_mde
    assert "none of them was recorded on this machine (c): judged as a new machine" in basis_c.note
    # machine a with MIN_SESSIONS - 1 sessions of its own: too few to judge it by them, and the note says so
    few = sessions[: compare_mod.MIN_SESSIONS - 1] + sessions[5:]
    on_few, basis_few = compare_mod.drift(slowed, [x for s in few for x in s], sessions=few, machine="a")
    assert on_few.verdict is not DriftVerdict.REGRESSION and basis_few.prediction.new_machine
    assert (f"this machine (a) has {compare_mod.MIN_SESSIONS - 1} session(s) in the baseline; judged as a new "
            "machine: record 1 more session(s) here to judge it against its own") in basis_few.note, basis_few.note
    enough = sessions[: compare_mod.MIN_SESSIONS] + sessions[5:]
    on_enough, _ = compare_mod.drift(slowed, [x for s in enough for x in s], sessions=enough, machine="a")
    assert on_enough.verdict is DriftVerdict.REGRESSION


def test_compare_names_the_results_machine_by_the_rule_that_names_the_baseline_sessions(tmp_path, capsys):
    """``specwatch compare`` on the committed data: the 45 sessions of baselines/h200x1/large-eagle3-tuned.json
    name their lease by the commit it measured, and so does a results file of session 3's third lease
    (commit 40a7dc0, no host recorded). Its 8% slowdown is judged against that lease's 14 sessions and flagged;
    named as a run on a host none of them ran on, the same samples are judged against the interval of a new
    machine over 3 leases, which is too wide to flag them."""
    import json
    from pathlib import Path

    from specwatch.cli import main
    from specwatch.errors import EXIT_OK, EXIT_REGRESSION

    root = Path(__file__).resolve().parents[2]
    baseline = str(root / "baselines" / "h200x1" / "large-eagle3-tuned.json")
    slowed = root / "docs" / "validation" / "data" / "session3" / "pytest-call3" / "g0-slow8-1.json"
    key = "large-eagle3-tuned/single-stream/decode_tok_s"
    assert main(["compare", baseline, str(slowed)]) == EXIT_REGRESSION
    out = capsys.readouterr().out
    assert f"{key}: regression" in out and "judged against the 14 of its 45 sessions recorded on this machine" in out
    assert "all of them come from this run's machine (commit:40a7dc0): judged as a run on it" in out, out
    doc = json.loads(slowed.read_text())
    doc["machine"]["host_id"] = "0123456789ab"  # the same run, on a host the baseline never saw
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(doc))
    assert main(["compare", baseline, str(elsewhere)]) == EXIT_OK
    out = capsys.readouterr().out
    assert "none of them was recorded on this machine (host:0123456789ab): judged as a new machine" in out, out
    assert "over 3 machines (45 sessions)" in out
