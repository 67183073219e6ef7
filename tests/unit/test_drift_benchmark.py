"""Issue 23's detector benchmark on committed data: leave one lease out of the 45 ref-large sessions.

``python docs/validation/baseline_check.py baselines/h200x1/large-eagle3-tuned.json --leave-one-machine-out`` holds out
each lease (the sessions record no GPU identity: their commit names the lease) and judges each of its
sessions against the other two leases, as recorded and 2-8% slower. The targets (8% flagged in >= 90%
with <= 1 false alarm in 46) are out of reach on a new machine for these components: the tests assert
the false alarms that are met, the detections measured, and the limits that explain the gap (the best
rule with the components known, and the calibrated interval's width when they rest on two leases).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from specwatch.errors import EXIT_OK
from specwatch.judge import replay, variance
from specwatch.store.sessions import baseline_sessions

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "validation"))
import baseline_check  # noqa: E402 (docs/validation is not a package)
import peers  # noqa: E402

LARGE = ROOT / "baselines" / "h200x1" / "large-eagle3-tuned.json"


@pytest.fixture(scope="module")
def keys() -> dict[str, object]:
    _, found = baseline_sessions(LARGE)
    return {ks.metric: ks for ks in found}


def test_the_committed_sessions_fall_into_their_three_leases(keys: dict) -> None:
    ks = keys["decode_tok_s"]
    assert len(ks.sessions) == 45
    assert sorted(set(ks.machines)) == ["commit:1f61c74", "commit:40a7dc0", "commit:ab34110"]
    # lease 2: 13 boots + 3 pytest runs
    assert [ks.machines.count(m) for m in dict.fromkeys(ks.machines)] == [15, 16, 14]
    comp = variance.components(ks.sessions)
    # the reading: lease medians SD 2.4%, inside a lease 0.8-1.8%
    assert comp.machines == 3 and 0.022 < comp.sigma_machine < 0.026 and 0.010 < comp.sigma_within < 0.016


@pytest.mark.parametrize(("metric", "alarms", "eight", "limit"), [
    ("decode_tok_s", 0, 0, 0.75),  # measured 0/45 and 0/45 (the plug-in interval: 0/45, 18/45); limit 75%
    ("output_tok_s", 0, 0, 0.60),  # measured 0/45 and 0/45 (the plug-in interval: 1/45, 15/45); limit 60%
])
def test_leave_one_lease_out_the_gate_keeps_its_false_alarms_and_the_limit_explains_the_misses(
        keys: dict, metric: str, alarms: int, eight: int, limit: float) -> None:
    ks = keys[metric]
    judge = replay.Judge(ks.higher_is_better, 0.05, 0.01, None, n_resamples=100)
    gate, flat = replay.leave_one_machine_out(
        [("gate", judge.flags), ("pytest-benchmark", peers.detector("pytest-benchmark", True))], ks.sessions)
    assert gate.judged == 45
    assert gate.false_alarms <= 1 and gate.false_alarms == alarms  # target met: <= 1 in 46
    assert gate.detected[0.92] == eight  # target (>= 90%) not met: the measured count
    assert list(gate.detected.values()) == sorted(gate.detected.values())  # a larger slowdown never flags less
    # pytest-benchmark's flat 5% flags more here, at more false alarms on output tok/s (4 of 45)
    assert (flat.false_alarms, flat.detected[0.92]) == ((1, 37) if metric == "decode_tok_s" else (4, 35))
    # why: on a new machine a session lands within +-3.1% (decode) of the machines' centre, and at 1 false
    # alarm in 46 no rule flags 8% in more than `limit` of such sessions on average
    pred = variance.predict(variance.components(ks.sessions))
    assert pred.new_machine
    best = variance.best_detection(pred.sd, 0.08, 1 / 46)
    assert best < 0.90 and best == pytest.approx(limit, abs=0.01)
    # and the calibrated interval of each fold: two leases leave the machine term 1 degree of freedom, so
    # a healthy session on a third may lie far off; the interval that keeps alpha/2 is wider than 8%
    for lease in dict.fromkeys(ks.machines):
        fold = variance.predict(variance.components([s for s, m in zip(ks.sessions, ks.machines, strict=True)
                                                     if m != lease]))
        assert fold.new_machine and fold.tolerance > 0.5 and fold.q > 15, (lease, fold.note)


def test_on_its_own_lease_the_gate_flags_eight_percent_every_time(keys: dict) -> None:
    """What recording the GPU identity buys: judged as a run on a machine the baseline knows (each session
    against the other sessions of its own lease), 8% is flagged in every session, healthy in none."""
    ks = keys["decode_tok_s"]
    judge = replay.Judge(True, 0.05, 0.01, None, n_resamples=100)
    alarms = eight = 0
    for lease in dict.fromkeys(ks.machines):
        mine = [s for s, m in zip(ks.sessions, ks.machines, strict=True) if m == lease]
        for i, cur in enumerate(mine):
            others = [s for j, s in enumerate(mine) if j != i]
            alarms += judge.flags(cur, others)
            eight += judge.flags([x * 0.92 for x in cur], others)
    assert (alarms, eight) == (0, 45)


def test_the_command_prints_the_table_with_the_peers(capsys: pytest.CaptureFixture[str]) -> None:
    code = baseline_check.main([str(LARGE), "--leave-one-machine-out", "--metric", "decode_tok_s",
                 "--peer", "pytest-benchmark", "--peer", "asv"])
    out = capsys.readouterr().out
    assert code == EXIT_OK
    assert "45 sessions on 3 machines (told apart by commit)" in out and "machine term 2.4%" in out
    gate = next(line for line in out.splitlines() if "specwatch drift gate" in line)
    assert gate.split()[-10:] == ["0/45", "(0%)"] * 5, gate
    flat = next(line for line in out.splitlines() if "pytest-benchmark mean:5%" in line)
    assert flat.split()[-2:] == ["37/45", "(82%)"], flat
    asv = next(line for line in out.splitlines() if line.strip().startswith("asv compare"))
    assert "not installed" in asv or asv.split()[-2:] == ["15/45", "(33%)"], asv
    assert "no rule flags 8% in more than 75%" in out


def test_otava_judges_through_its_own_code_when_installed(keys: dict) -> None:
    det = peers.detector("otava", True)
    if isinstance(det, str):
        pytest.skip(f"Apache Otava: {det}")
    ks = keys["decode_tok_s"]
    (rate,) = replay.leave_one_machine_out([("otava", det)], ks.sessions)
    assert (rate.false_alarms, rate.detected[0.92]) == (0, 43)  # measured with apache-otava 0.8.0
