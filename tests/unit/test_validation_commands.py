"""docs/validation's replays, ``baseline_check.py`` and ``sensitivity.py``, on the committed data: the baselines under
baselines/ and the H200 pytest runs of docs/validation/data/session3 (8 recordings, 6 healthy reruns and
6 runs slowed by 8 % through --ref-fault-slowdown, on two GPUs of one lease).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from specwatch.errors import EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, UsageError
from specwatch.judge import replay
from specwatch.judge.compare import DriftVerdict, drift_basis
from specwatch.store.sessions import baseline_sessions, results_sessions

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "validation"))
import baseline_check  # noqa: E402 (docs/validation is not a package)
import sensitivity  # noqa: E402

H200X1 = ROOT / "baselines" / "h200x1"
X2 = ROOT / "baselines" / "h200x2-nvlink" / "eagle3-tuned.json"
CALL3 = ROOT / "docs" / "validation" / "data" / "session3" / "pytest-call3"
ROW = re.compile(r"^\s+(\d+)\s+.*\s(no change|noisy|regression|REGRESSION|improvement|inconclusive)\s+([\d.]+)%\s+"
                 r"(none up to 90%|[\d.]+%)$")


def run(script: ModuleType, argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """A script as ``python docs/validation/<script>.py ARGV`` runs it: its exit code, stdout and stderr."""
    code = script.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _slowdown(cell: str) -> float | None:
    return None if cell.startswith("none") else float(cell.rstrip("%")) / 100


def test_baseline_check_replays_every_session_of_the_h200_baseline(capsys: pytest.CaptureFixture[str]) -> None:
    """19 recorded sessions of eagle3-tuned on one H200: none is a false alarm against the other 18, and the
    slowdown each would have flagged agrees with the gate's own estimate for a run on its machine.

    18 sessions come from session 2's lease, which measured commit b8e33ce: the 17 boots of the drift
    experiment and the pytest recording made 9 minutes later (its results file read efbb05c, the device copy's
    stale git metadata; the baseline's label was corrected from the data: docs/validation/runs.toml and the
    commit that corrected it). Each is judged against the other 17 of its lease, as the gate judges a run on
    a machine with enough sessions of its own. The 19th (session 4, host 631fc92cbeb5) is the only one of its
    machine: against the 18 of one other machine, whose machine term one machine cannot measure, it is judged
    as a run on theirs (and the note says so), not against a new machine's interval."""
    code, out, _ = run(baseline_check, [str(H200X1 / "eagle3-tuned.json"), "--metric", "decode_tok_s"], capsys)
    assert code == EXIT_OK, out
    rows = [m.groups() for line in out.splitlines() if (m := ROW.match(line))]
    assert [int(r[0]) for r in rows] == list(range(1, 20)), out
    assert not any(r[1].lower() == "regression" for r in rows)
    assert "false alarms: 0 of 19" in out
    # the header says how the rows are judged before it gives the new-machine estimate
    assert ("each row is judged against the other sessions of its own machine where that machine has 3 or more "
            "(1 machine(s) here), else as a run on a new machine; a run on a new machine: ") in out, out[:600]
    flagged = [_slowdown(r[3]) for r in rows]
    assert all(f is not None and 0 < f < 0.3 for f in flagged), flagged
    # the gate says a slowdown of X or more is flagged in 19 of 20 runs on the lease; the replay agrees
    _, keys = baseline_sessions(H200X1 / "eagle3-tuned.json")
    (decode,) = [k for k in keys if k.metric == "decode_tok_s"]
    lease = "commit:b8e33ce28e654b42a6767b057c2011f11360cd92"
    assert decode.machines == [lease] * 18 + ["host:631fc92cbeb5"]
    note = drift_basis(0.05, decode.sessions, None, machine=lease).note
    assert "has 18 of them: judged as a run on it" in note, note
    estimate = float(re.search(r"a slowdown of ([\d.]+)% or more is flagged", note).group(1)) / 100
    assert sum(f <= estimate for f in flagged[:18] if f is not None) >= 17, (estimate, flagged)
    assert "output_tok_s" not in out  # only the metric asked for


def test_the_smallest_flagged_slowdown_is_the_verdicts_own() -> None:
    """Seven TP=2 sessions from two leases: each held-out session slowed by 20 % is a regression; slowed
    by its reported smallest slowdown it is one, and by 0.1 % less it is not. Each is judged as the gate
    judges a run on its machine: the six of host e21c0ffd6c1b against the other five of theirs, the one of
    host 4674178a6eaa against the six of the other host, as a run on theirs (one machine: no machine term)."""
    _, keys = baseline_sessions(X2)
    (decode,) = [k for k in keys if k.metric == "decode_tok_s"]
    judge = replay.Judge(decode.higher_is_better)
    held = replay.leave_one_out(judge, decode.sessions)
    assert len(held) == 7 and not any(h.false_alarm for h in held)
    assert decode.machines == ["host:e21c0ffd6c1b"] * 6 + ["host:4674178a6eaa"]
    assert all(judge.slowed(s, 0.1).machine == m for s, m in zip(decode.sessions, decode.machines, strict=True))
    for h in held[:6]:
        assert not h.basis.prediction.new_machine and "(host:e21c0ffd6c1b) has 5 of them: judged as a run on it" in (
            h.basis.note), h.basis.note
    assert "all of them come from one machine, not this run's (host:4674178a6eaa)" in held[6].basis.note
    for h in held:
        others = [s for j, s in enumerate(decode.sessions) if j != h.index]
        session = decode.sessions[h.index]

        def verdict(slowdown: float, session: list[float] = session,
                    others: list[list[float]] = others) -> DriftVerdict:
            return judge.verdict(judge.slowed(session, slowdown), others)[0].verdict

        assert h.detects is not None and 0 < h.detects < 0.2
        assert verdict(0.20) is DriftVerdict.REGRESSION
        assert verdict(h.detects) is DriftVerdict.REGRESSION
        assert verdict(h.detects - replay.STEP) is not DriftVerdict.REGRESSION


def test_a_baseline_that_would_fail_its_own_healthy_session_exits_1(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """One of the seven sessions recorded on a machine 30 % slower: held out, the drift verdict calls it
    a regression (a false alarm of this baseline), and the command says so with exit 1."""
    doc = json.loads(X2.read_text())
    metric = doc["metrics"]["single-stream/decode_tok_s"]
    metric["sessions"][2]["samples"] = [x * 0.7 for x in metric["sessions"][2]["samples"]]
    path = tmp_path / "h200x2-nvlink" / "eagle3-tuned.json"
    path.parent.mkdir()
    path.write_text(json.dumps(doc))
    code, out, _ = run(baseline_check, [str(path), "--metric", "decode_tok_s"], capsys)
    assert code == EXIT_REGRESSION, out
    rows = [m.groups() for line in out.splitlines() if (m := ROW.match(line))]
    assert [r[0] for r in rows if r[1].lower() == "regression"] == ["3"], out
    assert "false alarms: 1 of 7" in out


def test_baseline_check_needs_two_sessions_and_a_baseline_file(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(baseline_check, [str(H200X1 / "baseline-tuned.json")], capsys)
    assert code == EXIT_USAGE and len(err.strip().splitlines()) == 1, err
    assert "nothing to hold out" in out and "2 or more" in err
    code, _, err = run(baseline_check, [str(CALL3 / "g0-healthy-1.json")], capsys)
    assert code == EXIT_USAGE and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    code, _, err = run(baseline_check, [str(X2), "--metric", "no_such_metric"], capsys)
    assert code == EXIT_USAGE and "has no metric no_such_metric" in err


def test_sensitivity_against_a_baseline_counts_false_alarms_and_detections(capsys: pytest.CaptureFixture[str]) -> None:
    """The session-3 H200 runs against the baseline of its 8 recordings: no healthy rerun is a
    regression, every run slowed by 8 % is one, and so is every healthy run slowed by 20 %."""
    code, out, _ = run(sensitivity, [*map(str, sorted(CALL3.glob("g?-healthy-?.json"))),
                        "--slowed", *map(str, sorted(CALL3.glob("g?-slow8-?.json"))),
                        "--baseline", str(CALL3 / "baseline-8-sessions.json"), "--metric", "decode_tok_s",
                        "--slowdown", "0.2", "--tolerance", "0.03", "--tolerance", "0.08"], capsys)
    assert code == EXIT_OK, out
    table = _table(out)
    assert set(table) == {("3.0%", "healthy"), ("3.0%", "synthetic -20%"), ("3.0%", "slowed #1 (6 runs)"),
                          ("8.0%", "healthy"), ("8.0%", "synthetic -20%"), ("8.0%", "slowed #1 (6 runs)")}, out
    for tolerance in ("3.0%", "8.0%"):
        assert table[tolerance, "healthy"] == (6, 0)
        assert table[tolerance, "synthetic -20%"] == (6, 6)
        assert table[tolerance, "slowed #1 (6 runs)"] == (6, 6)
    assert "a baseline of 8 sessions sets the tolerance" in out  # so both tolerances agree, and it says why


def test_sensitivity_leave_one_out_on_healthy_runs_alone(capsys: pytest.CaptureFixture[str]) -> None:
    """Without a baseline: each of the 14 healthy runs against the other 13. A stricter alpha can only
    flag fewer runs."""
    healthy = [*sorted(CALL3.glob("g?-record-?.json")), *sorted(CALL3.glob("g?-healthy-?.json"))]
    code, out, _ = run(sensitivity, [*map(str, healthy), "--metric", "decode_tok_s", "--slowdown", "0.2",
                        "--slowdown", "0.02", "--alpha", "0.01", "--alpha", "0.2"], capsys)
    assert code == EXIT_OK, out
    rows = _rows(out)
    by = {(r[1], r[3]): (int(r[4]), int(r[5])) for r in rows}
    assert by["0.01", "healthy"] == (14, 0)
    assert by["0.01", "synthetic -20%"] == (14, 14)
    for group in ("healthy", "synthetic -2%", "synthetic -20%"):
        assert by["0.01", group][1] <= by["0.2", group][1]


def _rows(out: str) -> list[tuple[str, ...]]:
    """(requested, alpha, used, group, n, regressions) of every table row."""
    found = []
    for line in out.splitlines():
        m = re.match(r"^\s+([\d.]+%)\s+([\d.]+)\s+(\S+)\s+(.+?)\s+(\d+)\s+(\d+)\s+\d+%\s+\S+$", line)
        if m:
            found.append(m.groups())
    return found


def _table(out: str) -> dict[tuple[str, str], tuple[int, int]]:
    return {(r[0], r[3]): (int(r[4]), int(r[5])) for r in _rows(out)}


def test_sensitivity_usage_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(sensitivity, [str(CALL3 / "g0-healthy-1.json")], capsys)
    assert code == EXIT_USAGE and "at least 2 healthy results files" in err and len(err.strip().splitlines()) == 1
    code, _, err = run(sensitivity, [str(CALL3 / "g0-healthy-1.json"), "--baseline", str(X2)], capsys)
    assert code == EXIT_USAGE and "share no key" in err
    code, _, err = run(sensitivity, [str(CALL3 / "g0-healthy-1.json"), "--slowdown", "1.5"], capsys)
    assert code == EXIT_USAGE and len(err.strip().splitlines()) == 1


def test_results_files_must_agree_on_a_keys_unit(tmp_path: Path) -> None:
    doc = json.loads((CALL3 / "g0-healthy-1.json").read_text())
    for r in doc["results"]:
        r["unit"] = "tokens per second"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(doc))
    assert len(results_sessions([CALL3 / "g0-healthy-1.json", CALL3 / "g0-healthy-2.json"])) >= 2
    with pytest.raises(UsageError, match="is in tokens per second"):
        results_sessions([CALL3 / "g0-healthy-1.json", other])


def test_the_replays_are_scripts_of_docs_validation_not_specwatch_commands(capsys: pytest.CaptureFixture[str]) -> None:
    """Research tools left the product: ``specwatch`` no longer has them, and each script runs from the checkout
    as ``python docs/validation/<script>.py`` (its siblings machineout.py and peers.py found beside it)."""
    import subprocess

    from specwatch.cli import main

    assert main(["sensitivity", str(CALL3 / "g0-healthy-1.json")]) == EXIT_USAGE
    assert main(["baseline", "check", str(X2)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "invalid choice: 'sensitivity'" in err and "invalid choice: 'check'" in err
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "docs/validation/baseline_check.py", str(X2), "--metric", "decode_tok_s",
                          "--leave-one-machine-out", "--peer", "changepoint"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == EXIT_OK, out.stderr
    assert "7 sessions on 2 machines" in out.stdout and "judge/changepoint.py" in out.stdout, out.stdout
    out = subprocess.run([sys.executable, "docs/validation/sensitivity.py", str(CALL3 / "g0-healthy-1.json")], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == EXIT_USAGE and out.stderr.count("\n") == 1 and "at least 2 healthy" in out.stderr
