"""Sessions as the unit of a drift verdict: the pure statistic, and its replay on H200 data.

The replayed data are the drift experiment of docs/validation/README.md (one H200, eagle3-tuned
on ref-small, 17 boots; every repetition measured 0%, 5% and 8% slowdowns in a shuffled order).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specwatch.judge import stats
from specwatch.judge.compare import MIN_SESSIONS, DriftVerdict, compare

DATA = Path(__file__).parent / "data" / "gpu" / "drift-seq-h200.json"


def _sessions(rng: np.random.Generator, k: int, spread: float, n: int = 11, center: float = 1180.0,
              ) -> list[list[float]]:
    return [list(center * (1 + spread * rng.standard_normal()) * (1 + 0.03 * rng.standard_normal(n)))
            for _ in range(k)]


def test_session_drift_numbers_and_mde() -> None:
    sess = [[100.0] * 5, [104.0] * 5, [96.0] * 5, [100.0] * 5]
    d = stats.session_drift([100.0] * 5, sess)
    assert d.sessions == 4 and d.change == pytest.approx(0.0, abs=1e-3) and d.p > 0.9
    far = stats.session_drift([70.0] * 5, sess)
    assert far.change == pytest.approx(-0.30, abs=0.01) and far.p < 0.01
    assert far.mde == pytest.approx(d.mde) and 0.10 < d.mde < 0.25  # t(0.995, 3) × 3.3% × 1.118
    with pytest.raises(ValueError, match="at least 2"):
        stats.session_drift([1.0], [[1.0]])
    assert stats.session_drift([100.0], [[100.0], [100.0]]).p == 1.0  # no spread, no change
    assert stats.session_drift([90.0], [[100.0], [100.0]]).p == 0.0  # no spread, a change


@settings(max_examples=60, deadline=None)
@given(st.floats(0.01, 1000.0), st.integers(0, 2**31 - 1))
def test_session_drift_is_scale_invariant_and_symmetric(c: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    sess = _sessions(rng, 5, 0.05)
    cur = list(1100 * (1 + 0.03 * rng.standard_normal(11)))  # odd n: median(1/x) = 1/median(x)
    a = stats.session_drift(cur, sess)
    b = stats.session_drift([c * x for x in cur], [[c * x for x in s] for s in sess])
    assert b.p == pytest.approx(a.p, rel=1e-6, abs=1e-12) and b.change == pytest.approx(a.change, rel=1e-6, abs=1e-9)
    mirrored = stats.session_drift([1 / x for x in cur], [[1 / x for x in s] for s in sess])
    assert mirrored.p == pytest.approx(a.p, rel=1e-6, abs=1e-12)


def test_session_drift_p_is_calibrated_under_the_null() -> None:
    """Same machine, new session: p < 0.05 about 5% of the time (t prediction interval)."""
    rng = np.random.default_rng(7)
    ps = [stats.session_drift(_sessions(rng, 1, 0.06)[0], _sessions(rng, 6, 0.06)).p for _ in range(2000)]
    rate = float(np.mean(np.array(ps) < 0.05))
    assert 0.03 < rate < 0.08, rate


def test_compare_calls_drift_within_the_sessions_spread_noisy_and_a_big_slowdown_a_regression() -> None:
    rng = np.random.default_rng(3)
    sess = _sessions(rng, 8, 0.06)
    pooled = [x for s in sess for x in s]
    drifted = list(np.median(pooled) * 0.91 * (1 + 0.02 * rng.standard_normal(20)))
    run_level = compare(drifted, pooled)
    assert run_level.verdict is DriftVerdict.REGRESSION  # runs alone call the machine's drift a regression
    c = compare(drifted, pooled, reference_sessions=sess)
    assert c.verdict is DriftVerdict.NOISY and c.sessions == 8 and c.session_spread is not None
    assert "session-to-session drift" in c.message and "can be flagged" in c.message
    big = compare(list(np.median(pooled) * 0.6 * (1 + 0.02 * rng.standard_normal(20))), pooled, reference_sessions=sess)
    assert big.verdict is DriftVerdict.REGRESSION and big.session_p is not None and big.session_p < 0.01
    few = compare(drifted, pooled, reference_sessions=sess[: MIN_SESSIONS - 1])
    assert few.verdict is run_level.verdict and few.session_p is None


def _replay() -> tuple[list[dict[str, list[float]]], list[dict[str, list[float]]]]:
    doc = json.loads(DATA.read_text())
    base = [b["levels"] for b in doc["boots"] if b["kind"] == "baseline"]
    reps = [b["levels"] for b in doc["boots"] if b["kind"] == "rep"]
    return base, reps


def test_replay_h200_run_level_rule_false_alarms_on_healthy_boots() -> None:
    """Runs alone, against the experiment's two baseline boots: healthy boots get verdicts."""
    base, reps = _replay()
    pooled = [x for b in base for x in b["0"]]
    healthy = [compare(r["0"], pooled).verdict for r in reps]
    false = [v for v in healthy if v in (DriftVerdict.REGRESSION, DriftVerdict.IMPROVEMENT)]
    assert len(false) >= 5, healthy  # measured: 7 improvements and 1 regression of 15


def test_replay_h200_session_rule_never_flags_a_healthy_boot() -> None:
    """Leave-one-out: every other boot's healthy level is a session of the baseline."""
    base, reps = _replay()
    boots = base + reps
    verdicts = []
    for i, r in enumerate(reps):
        others = [b["0"] for j, b in enumerate(boots) if j != len(base) + i]
        pooled = [x for s in others for x in s]
        verdicts.append(compare(r["0"], pooled, reference_sessions=others).verdict)
    assert DriftVerdict.REGRESSION not in verdicts and DriftVerdict.IMPROVEMENT not in verdicts, verdicts


ROOT = Path(__file__).resolve().parents[2]
SESSION2 = ROOT / "docs" / "validation" / "data" / "session2"


@pytest.mark.parametrize("run", ["healthy", "slow8"])
def test_h200_pytest_runs_against_one_session_and_against_the_18_session_baseline(
        run: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Session 2 on the H200: the healthy rerun and the 8% slowdown measured the same (1091 vs 1089).

    Against the one-session baseline recorded just before, runs alone call both a regression (the
    healthy one falsely); against the 18-session baseline committed then (kept in data/session2;
    session 4 added a session to the live one) the tolerance comes from those sessions' components, and
    both are within it. The 18 sessions name two machines (17 of the lease's commit b8e33ce, one whose
    results carry efbb05c, the device copy's stale git metadata: docs/validation/runs.toml), so the run
    is one on a new machine against two, whose machine term rests on 1 degree of freedom: the calibrated
    interval is wide, and the note says why.
    """
    from specwatch.cli import main
    from specwatch.errors import EXIT_OK, EXIT_REGRESSION

    results = str(SESSION2 / f"results-{run}.json")
    assert main(["compare", str(SESSION2 / "baseline-one-session-eagle3-tuned.json"), results]) == EXIT_REGRESSION
    assert "eagle3-tuned/single-stream/decode_tok_s: regression" in capsys.readouterr().out
    committed = SESSION2 / "baseline-18-sessions-eagle3-tuned.json"
    assert main(["compare", str(committed), results]) == EXIT_OK
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("eagle3-tuned/single-stream/decode_tok_s"))
    assert row.split()[-1] == "change" and "no change" in row, out  # "no change": within the data's tolerance
    assert "from the baseline's 18 sessions" in out and "over 2 machines (18 sessions)" in out, out
    assert "the machine term rests on 2 machines, 1 degree(s) of freedom, which widens the interval" in out, out
    doc = json.loads(committed.read_text())["metrics"]["single-stream/decode_tok_s"]
    assert len(doc["sessions"]) == 18


SESSION3 = ROOT / "docs" / "validation" / "data" / "session3" / "pytest-call3"


@pytest.mark.parametrize("gpu", [0, 1])
@pytest.mark.parametrize("i", [1, 2, 3])
def test_h200_ref_large_slowdown_flagged_and_healthy_rerun_not_against_a_baseline_of_this_machine(
        gpu: int, i: int, capsys: pytest.CaptureFixture[str]) -> None:
    """Session 3 on the H200 (issue 5's check): ref-large, 8 sessions recorded through pytest on
    this machine (4 per GPU), then 8% slowdown / healthy rerun pairs on both GPUs. Every slowed run
    is a decode-throughput regression beyond the sessions' spread; no healthy rerun is flagged.
    """
    from specwatch.cli import main
    from specwatch.errors import EXIT_OK, EXIT_REGRESSION

    baseline = str(SESSION3 / "baseline-8-sessions.json")
    key = "large-eagle3-tuned/single-stream/decode_tok_s"
    assert main(["compare", baseline, str(SESSION3 / f"g{gpu}-slow8-{i}.json")]) == EXIT_REGRESSION
    out = capsys.readouterr().out
    assert f"{key}: regression" in out and "8 baseline sessions of 1 machine(s) predict" in out, out
    assert main(["compare", baseline, str(SESSION3 / f"g{gpu}-healthy-{i}.json")]) == EXIT_OK
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith(key))
    assert row.split()[-1] == "change" and "no" in row.split()[-2:], row


SESSION4 = ROOT / "docs" / "validation" / "data" / "session4"


def test_h200_ref_large_ten_percent_flagged_in_every_repetition_without_a_false_alarm() -> None:
    """Session 4 on the H200 (issue 7's 19-of-20 row): ref-large, 22 boots on two GPUs in one lease,
    each measuring 0% and 10% slowdowns in a shuffled order. Leave-one-out: every other boot's
    healthy level is a session of the baseline (the analysis ``specwatch sensitivity`` now runs).
    """
    boots = [{lv: rec["decode_tok_s"] for lv, rec in b["levels"].items()}
             for f in ("drift-large-gpu0-c.json", "drift-large-gpu1-c.json")
             for b in json.loads((SESSION4 / f).read_text())["boots"] if b["kind"] == "rep"]
    assert len(boots) == 22
    slowed, healthy = [], []
    for i, b in enumerate(boots):
        others = [o["0"] for j, o in enumerate(boots) if j != i]
        pooled = [x for s in others for x in s]
        slowed.append(compare(b["10"], pooled, reference_sessions=others))
        healthy.append(compare(b["0"], pooled, reference_sessions=others).verdict)
    assert all(c.verdict is DriftVerdict.REGRESSION for c in slowed), [c.verdict for c in slowed]
    assert all(-0.11 < c.change < -0.07 for c in slowed)  # measured -9.0% median
    assert DriftVerdict.REGRESSION not in healthy and DriftVerdict.IMPROVEMENT not in healthy, healthy


@pytest.mark.parametrize(("profile", "factor", "verdict"), [
    ("eagle3-tuned", 0.88, "regression"),
    ("baseline-tuned", 0.88, "no change"),  # its sessions spread 2.9%: tolerance 13.6% from that spread
    ("baseline-tuned", 0.75, "regression"),
])
def test_h200x2_ref_small_baseline_passes_a_healthy_session_and_judges_it_slowed(
        profile: str, factor: float, verdict: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Session 4, TP=2 on the NVLink pair: five sessions recorded through pytest make the baseline;
    the sixth healthy session is no change. Slowed, it is a regression when the slowdown exceeds
    what the five sessions' own spread explains (the tolerance from data), and no change when not.
    """
    from specwatch.cli import main
    from specwatch.errors import EXIT_OK, EXIT_REGRESSION

    for i in range(1, 6):
        assert main(["baseline", "update", str(SESSION4 / f"results-x2-s{i}.json"),
                     "--baseline-dir", str(tmp_path / "b"), "--keep-sessions", "20"]) == EXIT_OK
    baseline = str(tmp_path / "b" / "h200x2-nvlink" / f"{profile}.json")
    key = f"{profile}/single-stream/decode_tok_s"
    sixth = json.loads((SESSION4 / "results-x2-all.json").read_text())
    assert main(["compare", baseline, str(SESSION4 / "results-x2-all.json")]) == EXIT_OK
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(key))
    assert row.split()[-2:] == ["no", "change"], row
    for r in sixth["results"]:
        if r["metric"] == "decode_tok_s":
            r["samples"] = [x * factor for x in r["samples"]]
    slowed = tmp_path / "slowed.json"
    slowed.write_text(json.dumps(sixth))
    code = main(["compare", baseline, str(slowed)])
    out = capsys.readouterr().out
    assert code == (EXIT_REGRESSION if verdict == "regression" else EXIT_OK)
    row = next(line for line in out.splitlines() if line.startswith(key))
    assert row.lower().endswith(verdict), out
    assert verdict != "regression" or "5 baseline sessions of 1 machine(s) predict" in out, out


SESSION5 = ROOT / "docs" / "validation" / "data" / "session5"


def test_h200x2_seven_sessions_across_two_leases_leave_one_out() -> None:
    """Session 5, TP=2 on the NVLink pair: seven recorded sessions of eagle3-tuned (six from one
    lease, one from a later lease on another host, 3.3% slower). Each session against the other
    six, with sessions as the unit: healthy never a regression, 10% always, when the sessions are judged
    as one machine's; 8% exactly when it leaves that machine's t interval. With their hosts named, a
    held-out session of the first host is judged as one on a new machine against two machines (5 + 1
    sessions): the machine term rests on 1 degree of freedom, so the calibrated interval is far wider than
    10% and nothing is flagged. Judged on its own host (the machine the sessions know), 8% is flagged
    in every session."""
    from specwatch.judge.variance import MachineSession, components, predict

    doc = json.loads((SESSION5 / "baseline-x2-7-sessions-eagle3-tuned.json").read_text())
    recorded = doc["metrics"]["single-stream/decode_tok_s"]["sessions"]
    assert len(recorded) == 7 and len({s["host"] for s in recorded}) == 2

    def judged(factor: float, hosts: bool = False, own: bool = False) -> list:
        sessions = [MachineSession(s["samples"], s["host"] if hosts else None) for s in recorded]
        out = []
        for i, cur in enumerate(sessions):
            others = [s for j, s in enumerate(sessions) if j != i]
            pred = predict(components(others), machine=cur.machine) if own else None
            out.append(compare([x * factor for x in cur], [x for s in others for x in s],
                               reference_sessions=others, prediction=pred))
        return out

    def verdicts(factor: float, hosts: bool = False, own: bool = False) -> list[DriftVerdict]:
        return [c.verdict for c in judged(factor, hosts, own)]

    for hosts in (False, True):
        assert verdicts(1.0, hosts) == [DriftVerdict.NO_CHANGE] * 7
    assert verdicts(0.90) == [DriftVerdict.REGRESSION] * 7
    eight = judged(0.92)
    assert [c.verdict is DriftVerdict.REGRESSION for c in eight] == [c.change < -c.session_mde for c in eight]
    assert sum(c.verdict is DriftVerdict.REGRESSION for c in eight) >= 5
    for factor in (0.92, 0.90):
        new = judged(factor, hosts=True)
        assert new[6].verdict is DriftVerdict.REGRESSION  # the other host's session: the six left are one machine
        assert all(c.verdict is not DriftVerdict.REGRESSION and c.session_mde > 0.5 for c in new[:6]), new
    assert verdicts(0.92, hosts=True, own=True) == [DriftVerdict.REGRESSION] * 7
    assert DriftVerdict.REGRESSION not in verdicts(1.0, hosts=True, own=True)


def _gate_session(tmp_path: Path, recorded: list[tuple[str | None, list[str] | None, float]], run_gpus: list[str],
                  run: list[float]) -> tuple[object, object]:
    """A Session whose baseline holds ``recorded`` sessions, each (host, GPU UUIDs, centre) as the run that
    recorded it fingerprinted its machine, and whose drift gate measured ``run`` on the GPUs ``run_gpus``;
    the gate's verdict and the reference it judged against."""
    from specwatch.load.measure import Measurement, RunSample
    from specwatch.load.workload import Workload
    from specwatch.profiles.loading import parse_profiles
    from specwatch.run import gatekeeper
    from specwatch.run.options import Config
    from specwatch.run.session import Session
    from specwatch.store.baseline import BaselineStore
    from specwatch.store.machine import gpu_identity, host_id
    from specwatch.store.result import Result, ResultSet

    rng = np.random.default_rng(11)
    store = BaselineStore(tmp_path / "b")
    extra = {"max_new_tokens": 64, "concurrency": 1}
    for i, (host, gpus, centre) in enumerate(recorded):
        fp: dict = {"machine_class": "h200x1", "gpu_model": "NVIDIA H200"}
        if host:  # recorded since session 3: the hash of the GPUs' UUIDs
            fp["host_id"] = host
        if gpus:  # recorded since issue 23
            fp["gpu_identity"] = gpu_identity(gpus, [(None, None)] * len(gpus), gpus=len(gpus))
        boot = centre * (1 + 0.004 * rng.standard_normal())
        samples = list(boot * (1 + 0.003 * rng.standard_normal(10)))
        rs = ResultSet([Result.make("a", "single-stream", "decode_tok_s", unit="tok/s", higher_is_better=True,
                                    samples=samples, extra=extra)],
                       machine=fp, commit=f"c{i}", created=f"2026-12-01T10:{i:02d}:00+00:00")
        store.record_all(rs)
    session = Session(Config(baseline_dir=str(tmp_path / "b"), commit="c-run"), progress=lambda m: None,
                      _profiles=parse_profiles({"server": [{"name": "a"}]}))
    session._fingerprint = {"machine_class": "h200x1", "gpu_model": "NVIDIA H200", "host_id": host_id(run_gpus),
                            "gpu_identity": gpu_identity(run_gpus, [(None, None)] * len(run_gpus), gpus=len(run_gpus))}
    runs = [RunSample(output_tok_s=x, decode_tok_s=x, ttft_ms=10.0, mean_itl_ms=5.0, e2e_s=0.1, completion_tokens=64,
                      client_overhead=0.0) for x in run]
    session.measurements[("a", "single-stream")] = Measurement(
        profile="a", workload=Workload("single-stream", runs=len(run), max_new_tokens=64), runs=runs,
        metrics_delta=None, metrics_after=None, server_info_before={}, server_info_after={}, log_records=[],
        wall_s=1.0)
    return gatekeeper.drift(session, "a", metric="decode_tok_s"), session.reference_samples("a", "single-stream",
                                                                                         "decode_tok_s")


def test_the_live_drift_gate_judges_a_run_against_the_sessions_of_its_own_gpus(tmp_path: Path) -> None:
    """A baseline of two machines 5% apart (A near 200 tok/s, B near 210), each with 4 sessions; two of A's
    were recorded before the GPU identity (host only), two after. A run whose GPUs are A's is named by the rule
    that names the sessions (one label for all four of A's), judged against A's sessions: 8% slower is a
    regression, healthy is not, and the note names the machine. Judged as a run on a new machine (what the
    gate did before it named the run's machine) the 8% is not flagged."""
    from specwatch.store.machine import host_id

    a, b = ["GPU-aaaa"], ["GPU-bbbb"]
    ha, hb = host_id(a), host_id(b)
    recorded = [(ha, None, 200.0), (hb, b, 210.0), (ha, None, 200.0), (hb, b, 210.0),
                (ha, a, 200.0), (hb, b, 210.0), (ha, a, 200.0), (hb, b, 210.0)]
    rng = np.random.default_rng(5)
    slowed, ref = _gate_session(tmp_path, recorded, a, list(184.0 * (1 + 0.003 * rng.standard_normal(10))))
    assert ref.machine == f"host:{ha}" and len(ref.sessions) == 4, ref
    assert {s.machine for s in ref.sessions} == {f"host:{ha}"}  # before and after the GPU identity: one machine
    assert slowed.failed and "regression" in slowed.message, slowed.message
    assert f"all of them come from this run's machine (host:{ha}): judged as a run on it" in slowed.message
    assert "judged against the 4 of its 8 sessions recorded on this machine" in slowed.message
    healthy, _ = _gate_session(tmp_path / "h", recorded, a, list(200.0 * (1 + 0.003 * rng.standard_normal(10))))
    assert healthy.passed, healthy.message
    # the same run on GPUs none of the sessions ran on: a new machine, whose interval two machines make wide
    elsewhere, ref_c = _gate_session(tmp_path / "c", recorded, ["GPU-cccc"], list(184.0 * np.ones(10)))
    assert not elsewhere.failed and len(ref_c.sessions) == 8, elsewhere.message
    assert f"none of them was recorded on this machine (host:{host_id(['GPU-cccc'])}): judged as a new machine" in (
        elsewhere.message)


def test_the_live_drift_gate_judges_a_machine_with_too_few_sessions_as_a_new_one_and_says_so(tmp_path: Path) -> None:
    """The run's GPUs have 1 session in a baseline whose other 5 come from another machine: judged as a new
    machine (8% slower is not flagged against the wide interval of two machines), and the note says why and how
    many more sessions to record there."""
    from specwatch.judge.compare import MIN_SESSIONS
    from specwatch.store.machine import host_id

    a, b = ["GPU-aaaa"], ["GPU-bbbb"]
    recorded = [(host_id(b), b, 210.0)] * 5 + [(host_id(a), a, 200.0)]
    verdict, ref = _gate_session(tmp_path, recorded, a, list(184.0 * np.ones(10)))
    assert ref.machine == f"host:{host_id(a)}" and len(ref.sessions) == 6
    assert not verdict.failed, verdict.message
    assert (f"this machine (host:{host_id(a)}) has 1 session(s) in the baseline; judged as a new machine: record "
            f"{MIN_SESSIONS - 1} more session(s) here to judge it against its own") in verdict.message, verdict.message
