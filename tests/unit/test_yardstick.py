"""The machine yardstick: the CPU measurement and its runner, the normalisation rule, how runs and
baseline sessions record it, and the drift verdict read against it."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

from specwatch.errors import UsageError
from specwatch.judge import compare, yardstick
from specwatch.judge.compare import DriftVerdict, drift
from specwatch.load.yardstick import describe, measure_yardstick, run_yardstick, score_of, valid
from specwatch.store.baseline import BaselineStore, load_baseline
from specwatch.store.result import Result, ResultSet

#: one session's machine speed relative to the typical lease: the 2-5 % that leases differ by
MACHINE = [1.00, 1.03, 0.97, 1.02, 0.96, 1.01]


def _yardstick(scale: float, *, gpu: str = "NVIDIA H200", width: int = 4096) -> dict:
    return {"version": 1, "device": "cuda", "gpu": gpu, "width": width, "gemv_us": 30.0 / scale,
            "tiny_us": 90.0 / scale, "roundtrip_us": 25.0 / scale, "score": round(20.0 * scale, 6)}  # fmt: skip


def _runs(center: float, n: int = 10, noise: float = 0.004, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    return [float(center * (1 + noise * z)) for z in rng.standard_normal(n)]


def _baseline() -> tuple[list[list[float]], list[float]]:
    """Six sessions whose medians move with their machine, and yardstick scores that see the same move."""
    rng = np.random.default_rng(11)
    sessions = [_runs(200.0 * f, seed=i) for i, f in enumerate(MACHINE)]
    scores = [20.0 * f * (1 + 0.002 * rng.standard_normal()) for f in MACHINE]
    return sessions, scores


# -- the rule ---------------------------------------------------------------------------------


def test_the_rule_normalises_when_the_yardstick_shrinks_the_session_spread() -> None:
    sessions, scores = _baseline()
    medians = [float(np.median(s)) for s in sessions]
    d = yardstick.decide(medians, scores, 19.5)
    assert d.use_normalised and d.with_yardstick == d.sessions == 6
    assert d.raw_spread is not None and d.normalised_spread is not None
    assert d.raw_spread > 0.02 and d.normalised_spread < d.raw_spread / 4
    assert d.reason.startswith("normalised by the machine yardstick: session spread ")
    assert f"{d.raw_spread:.1%} -> {d.normalised_spread:.1%}" in d.reason
    assert d.machine_change == pytest.approx(19.5 / d.reference_score - 1)
    # a latency moves against the machine: it is normalised the other way, and shrinks as well
    latency = yardstick.decide([1e4 / m for m in medians], scores, 19.5, higher_is_better=False)
    assert latency.use_normalised and latency.normalised_spread == pytest.approx(d.normalised_spread, rel=0.2)


def test_the_rule_does_not_normalise_by_a_yardstick_that_does_not_move_with_the_server() -> None:
    sessions, _ = _baseline()
    medians = [float(np.median(s)) for s in sessions]
    unrelated = [20.0 * f for f in (0.97, 1.01, 1.04, 0.99, 1.03, 0.98)]
    d = yardstick.decide(medians, unrelated, 20.0)
    assert not d.use_normalised and d.normalised_spread is not None and d.raw_spread is not None
    assert d.normalised_spread >= d.raw_spread
    assert d.reason == (
        f"not normalised by the machine yardstick: it does not shrink the session spread by a quarter "
        f"({d.raw_spread:.1%} -> {d.normalised_spread:.1%})"
    )


def test_the_rule_needs_six_sessions_with_a_yardstick_and_one_on_the_run() -> None:
    medians = [200.0 * (1 + 0.01 * (i % 5 - 2)) for i in range(45)]
    one = [None] * 44 + [20.0]
    d = yardstick.decide(medians, one, 20.0)
    assert not d.use_normalised and not d.quiet
    assert d.reason == "not normalised: only 1 of 45 sessions carries a machine yardstick (needs 6)"
    five = yardstick.decide(medians[:5], [20.0 * m / 200.0 for m in medians[:5]], 20.0)  # a perfect co-mover
    assert not five.use_normalised and "only 5 of 5 sessions carry a machine yardstick (needs 6)" in five.reason
    old = yardstick.decide(medians, [None] * 45, 20.0)
    assert not old.use_normalised and old.quiet and old.raw_spread is None  # an old baseline: nothing to say
    sessions, scores = _baseline()
    no_run = yardstick.decide([float(np.median(s)) for s in sessions], scores, None)
    assert not no_run.use_normalised and "this run carries no machine yardstick" in no_run.reason
    with pytest.raises(ValueError, match="6 session medians but 5 scores"):
        yardstick.decide([1.0] * 6, [1.0] * 5, 1.0)


def test_the_rule_does_not_trade_many_raw_sessions_for_six_normalised_ones() -> None:
    """6 fresh sessions with a yardstick among 20 without: the yardstick halves their spread, but
    their t quantile (5 degrees of freedom) still gives a wider tolerance than all 20 raw sessions."""
    rng = np.random.default_rng(5)
    fresh = [206.0, 194.0, 200.0, 204.0, 196.0, 200.0]
    medians = [200.0 * (1 + 0.01 * z) for z in rng.standard_normal(14)] + fresh
    scores: list[float | None] = [None] * 14 + [20.0 * (m / 200.0) ** 0.5 for m in fresh]
    d = yardstick.decide(medians, scores, 20.0)
    assert not d.use_normalised and d.with_yardstick == 6
    assert d.normalised_spread is not None and d.raw_spread is not None
    assert d.normalised_spread < yardstick.SHRINK * d.raw_spread
    assert d.reason.startswith("not normalised: the 6 of 20 sessions with a machine yardstick give a wider tolerance")


def test_a_yardstick_that_moves_a_little_with_the_server_is_not_enough() -> None:
    """A chance resemblance: the normalised spread is smaller, but not by a quarter."""
    sessions, _ = _baseline()
    medians = [float(np.median(s)) for s in sessions]
    weak = [20.0 * (m / 200.0) ** 0.15 for m in medians]
    d = yardstick.decide(medians, weak, 20.0)
    assert d.normalised_spread is not None and d.raw_spread is not None
    assert yardstick.SHRINK * d.raw_spread <= d.normalised_spread < d.raw_spread
    assert not d.use_normalised and "does not shrink the session spread by a quarter" in d.reason


def test_scores_compare_only_between_yardsticks_of_one_kind() -> None:
    run = _yardstick(1.0)
    sessions = [
        _yardstick(1.02),
        None,
        _yardstick(1.0, gpu="NVIDIA H100"),
        _yardstick(0.99, width=8192),
        {"version": 1, "device": "cuda", "score": "fast"},
        {**_yardstick(1.0), "version": 2},
    ]
    run_score, scores = yardstick.scores_for(run, sessions)
    assert run_score == 20.0 and scores == [pytest.approx(20.4), None, None, None, None, None]
    # without a run yardstick (baseline check): the kind most sessions share, the latest on a tie
    _, scores = yardstick.scores_for(
        None, [_yardstick(1.0, gpu="A"), _yardstick(1.1, gpu="B"), _yardstick(1.2, gpu="B")]
    )
    assert scores == [None, pytest.approx(22.0), pytest.approx(24.0)]
    assert yardstick.MIN_SESSIONS >= compare.MIN_SESSIONS


# -- the instrument ---------------------------------------------------------------------------


def test_the_cpu_yardstick_times_the_three_shapes() -> None:
    found = measure_yardstick("cpu", width=256, seconds=0.3)
    assert {"version", "device", "gpu", "width", "gemv_us", "tiny_us", "roundtrip_us", "score"} <= set(found)
    assert found["device"] == "cpu" and found["gpu"] is None and found["width"] == 256 and found["version"] == 1
    for key in ("gemv_us", "tiny_us", "roundtrip_us", "score"):
        assert math.isfinite(found[key]) and found[key] > 0, key
    assert found["score"] == pytest.approx(score_of(found), rel=1e-3) and valid(found)
    assert describe(found).startswith("yardstick cpu ") and "width 256" in describe(found)
    assert measure_yardstick("cpu", seconds=0.05)["width"] == 1024  # the CPU's default width
    with pytest.raises(ValueError, match="device must be"):
        measure_yardstick("tpu", width=8, seconds=0.05)
    with pytest.raises(ValueError, match="width must be 1-16384"):  # 100000 would ask for 149 GiB
        measure_yardstick("cpu", width=100000, seconds=0.05)
    assert not valid({**found, "score": float("nan")}) and not valid({**found, "gemv_us": 0}) and not valid([])


def test_the_runner_measures_in_a_child_and_never_raises() -> None:
    found = run_yardstick(sys.executable, None, 128, 120, seconds=0.2)
    assert found is not None and valid(found) and found["device"] == "cpu" and found["width"] == 128
    said: list[str] = []
    assert run_yardstick(sys.executable, None, -1, 120, seconds=0.2, report=said.append) is None
    assert said == [
        "specwatch: no machine yardstick on the CPU: exit 1: yardstick: width must be 1-16384 (a model's hidden "
        "size) and seconds > 0, got -1, 0.2"
    ]
    assert run_yardstick("/nonexistent/python3", 0, 4096, 5, report=said.append) is None
    assert said[-1].startswith("specwatch: no machine yardstick on GPU 0: /nonexistent/python3: ")
    assert run_yardstick(sys.executable, None, 128, 0.01, seconds=5, report=said.append) is None
    assert said[-1].endswith("ran past 0.01 s")


def test_the_cli_prints_the_yardstick(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from specwatch.cli import main

    assert main(["yardstick", "--device", "cpu", "--width", "64", "--seconds", "0.1"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert valid(found) and found["width"] == 64
    assert main(["yardstick", "--device", "tpu", "--seconds", "0.1"]) == 2
    assert "device must be cpu, cuda, cuda:N or auto" in capsys.readouterr().err


# -- recording --------------------------------------------------------------------------------


def _record(store: BaselineStore, samples: list[float], i: int, ys: dict | None, keep: int = 10) -> Path:
    fp = {"machine_class": "h200x1", "gpu_model": "NVIDIA H200", "host_id": f"host{i % 2}"}
    if ys is not None:
        fp["yardstick"] = ys
    rs = ResultSet([Result.make("a", "single-stream", "decode_tok_s", unit="tok/s", higher_is_better=True,
                                samples=samples, extra={"max_new_tokens": 64, "concurrency": 1})],
                   machine=fp, commit="c0ffee", created=f"2026-12-0{i + 1}T10:00:00+00:00")  # fmt: skip
    return store.record_all(rs, keep_sessions=keep)[0]


def test_baseline_sessions_keep_their_yardstick_and_older_ones_load_without(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path / "b")
    _record(store, [100.0, 101.0], 0, None)  # recorded before the yardstick
    path = _record(store, [102.0, 103.0], 1, _yardstick(1.01))
    base = load_baseline(path)
    first, second = base.get("single-stream", "decode_tok_s").sessions
    assert "yardstick" not in first and second["yardstick"] == _yardstick(1.01)
    assert base.machine["yardstick"] == _yardstick(1.01)  # the results file's machine block, as recorded
    assert base.fingerprint_warning({**base.machine, "yardstick": _yardstick(0.9)}) is None  # not a machine change
    doc = base.to_dict()
    doc["metrics"]["single-stream/decode_tok_s"]["sessions"][1]["yardstick"] = "fast"
    with pytest.raises(UsageError, match="session 1: field 'yardstick' must be an object"):
        type(base).from_dict(doc)


def test_a_runs_fingerprint_carries_its_yardstick_measured_before_the_first_boot(monkeypatch) -> None:
    import specwatch.load.yardstick as instrument
    from specwatch.profiles.loading import parse_profiles
    from specwatch.run.machine_probe import yardstick_before_boot
    from specwatch.run.options import Config, resolve
    from specwatch.run.session import Session

    profiles = parse_profiles(
        {"server": [{"name": "cpu", "device": "cpu"}, {"name": "gpu", "device": "cuda", "python": "/opt/gpu/python"}]}
    )
    calls: list[tuple] = []
    monkeypatch.setattr(instrument, "run_yardstick", lambda *a, **k: calls.append(a) or _yardstick(1.0))
    said: list[str] = []
    assert yardstick_before_boot(Config(), profiles, (), said.append) is None and not calls  # auto: GPU runs only
    assert yardstick_before_boot(Config(yardstick="off"), profiles, (3,), said.append) is None and not calls
    assert yardstick_before_boot(Config(), profiles, (3, 4), said.append) == _yardstick(1.0)
    assert calls[-1][:2] == ("/opt/gpu/python", 3)  # the first GPU profile's Python, the worker's first GPU
    assert yardstick_before_boot(Config(yardstick="on"), profiles, (), said.append) == _yardstick(1.0)
    assert calls[-1][:2] == (sys.executable, None)
    assert said[-1].startswith("specwatch: yardstick cuda NVIDIA H200, width 4096")
    with pytest.raises(UsageError, match="must be auto, on or off"):
        resolve({"yardstick": "sometimes"}, {}, {})
    session = Session(Config(), progress=lambda m: None, _profiles=profiles)
    session._fingerprint = {"machine_class": "h200x1", "host_id": "h"}
    assert "yardstick" not in session.fingerprint()
    session._yardstick = _yardstick(1.0)
    assert session.fingerprint()["yardstick"] == _yardstick(1.0)


# -- the drift verdict --------------------------------------------------------------------------


def test_normalised_drift_forgives_the_machine_and_still_catches_the_server() -> None:
    """A machine 4% slower that the yardstick also sees is no change; a server 8% slower on a machine
    the yardstick calls unchanged is a regression, which the raw sessions' spread cannot resolve."""
    sessions, scores = _baseline()
    pooled = [x for s in sessions for x in s]
    ref = math.exp(np.mean(np.log(scores)))
    slow_machine = _runs(200.0 * 0.96, seed=99)
    c, basis = drift(slow_machine, pooled, sessions=sessions, session_scores=scores, run_score=ref * 0.96)
    assert c.verdict is DriftVerdict.NO_CHANGE, c.message
    assert "normalised by the machine yardstick: session spread" in c.message and "-4.0%" in c.message
    assert "normalised by the machine yardstick" in basis.note and basis.tolerance < 0.03
    slow_server = _runs(200.0 * 0.92, seed=98)
    c, basis = drift(slow_server, pooled, sessions=sessions, session_scores=scores, run_score=ref)
    assert c.verdict is DriftVerdict.REGRESSION, c.message
    raw, raw_basis = drift(slow_server, pooled, sessions=sessions)
    assert raw.verdict is not DriftVerdict.REGRESSION and raw_basis.tolerance > 0.08  # too blunt without it
    assert "yardstick" not in raw.message + raw_basis.note
    # a yardstick that does not move with the server changes nothing, and the note says why
    flat = [20.0 * f for f in (0.97, 1.01, 1.04, 0.99, 1.03, 0.98)]
    c, basis = drift(slow_server, pooled, sessions=sessions, session_scores=flat, run_score=20.0)
    assert (c.verdict, basis.tolerance) == (raw.verdict, raw_basis.tolerance)
    assert basis.note.endswith(")") and "does not shrink the session spread" in basis.note
    assert "yardstick" not in c.message
    # an old baseline (no session has one) is judged as before, without a word about it
    c, basis = drift(slow_server, pooled, sessions=sessions, session_scores=[None] * 6, run_score=20.0)
    assert c.message == raw.message and basis.note == raw_basis.note


def test_the_drift_gate_reads_the_run_and_the_baseline_sessions_yardsticks(tmp_path: Path) -> None:
    from specwatch.load.measure import Measurement, RunSample
    from specwatch.load.workload import Workload
    from specwatch.profiles.loading import parse_profiles
    from specwatch.run import gatekeeper
    from specwatch.run.options import Config
    from specwatch.run.session import Session

    store = BaselineStore(tmp_path / "b")
    sessions, scores = _baseline()
    for i, (samples, s) in enumerate(zip(sessions, scores, strict=True)):
        _record(store, samples, i, _yardstick(s / 20.0))
    session = Session(
        Config(baseline_dir=str(tmp_path / "b")),
        progress=lambda m: None,
        _profiles=parse_profiles({"server": [{"name": "a"}]}),
    )
    session._fingerprint = {"machine_class": "h200x1", "host_id": "elsewhere"}
    session._yardstick = _yardstick(float(np.exp(np.mean(np.log(scores)))) / 20.0 * 0.96)

    def measured(xs: list[float]) -> Measurement:
        runs = [
            RunSample(
                output_tok_s=x,
                decode_tok_s=x,
                ttft_ms=10.0,
                mean_itl_ms=5.0,
                e2e_s=0.1,
                completion_tokens=64,
                client_overhead=0.0,
            )
            for x in xs
        ]
        return Measurement(profile="a", workload=Workload("single-stream", runs=len(xs), max_new_tokens=64),
                           runs=runs, metrics_delta=None, metrics_after=None, server_info_before={},
                           server_info_after={}, log_records=[], wall_s=1.0)  # fmt: skip

    session.measurements[("a", "single-stream")] = measured(_runs(200.0 * 0.96, seed=99))
    verdict = gatekeeper.drift(session, "a", metric="decode_tok_s")
    assert verdict.passed and "normalised by the machine yardstick" in verdict.message, verdict.message
    session.measurements[("a", "single-stream")] = measured(_runs(200.0 * 0.92, seed=98))
    session._yardstick = _yardstick(float(np.exp(np.mean(np.log(scores)))) / 20.0)
    verdict = gatekeeper.drift(session, "a", metric="decode_tok_s")
    assert not verdict.passed and "regression" in verdict.message


def test_baseline_check_prints_the_raw_and_the_normalised_session_spread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docs" / "validation"))
    import baseline_check  # docs/validation is not a package

    store = BaselineStore(tmp_path / "b")
    sessions, scores = _baseline()
    path = None
    for i, (samples, s) in enumerate(zip(sessions, scores, strict=True)):
        path = _record(store, samples[:5], i, _yardstick(s / 20.0))
    baseline_check.main([str(path), "--metric", "decode_tok_s"])
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if "machine yardstick:" in ln)
    assert line.strip().startswith("machine yardstick: 6 of 6 sessions carry one; session spread raw ")
    assert "normalised" in line and "a run with a comparable yardstick is judged normalised" in line
    assert "false alarms: 0 of 6" in out


def test_specwatch_compare_normalises_a_results_file_by_its_yardstick(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from specwatch.cli import main

    store = BaselineStore(tmp_path / "b")
    sessions, scores = _baseline()
    for i, (samples, s) in enumerate(zip(sessions, scores, strict=True)):
        path = _record(store, samples, i, _yardstick(s / 20.0))
    ref = float(np.exp(np.mean(np.log(scores))))
    results = tmp_path / "r.json"
    for machine, center in ((ref * 0.96, 0.96), (ref, 0.92)):
        rs = ResultSet(
            [Result.make("a", "single-stream", "decode_tok_s", unit="tok/s", higher_is_better=True,
                         samples=_runs(200.0 * center, seed=7))],
            machine={"machine_class": "h200x1", "host_id": "elsewhere", "yardstick": _yardstick(machine / 20.0)},
        )  # fmt: skip
        rs.save(results)
        code = main(["compare", str(path), str(results)])
        out = capsys.readouterr().out
        assert "normalised by the machine yardstick: session spread" in out
        assert code == (0 if center == 0.96 else 1), out


def test_a_killed_run_takes_its_yardstick_child_with_it(tmp_path: Path) -> None:
    """kill -9 of the tester while the yardstick is timing: the child (on a GPU, a CUDA context)
    must not outlive it."""
    import os
    import signal
    import subprocess
    import time

    import psutil

    script = tmp_path / "parent.py"
    script.write_text("from specwatch.load.yardstick import run_yardstick\n"
                      "run_yardstick(__import__('sys').executable, None, 77, 120, seconds=60)\n")
    parent = subprocess.Popen([sys.executable, str(script)])
    try:
        deadline = time.monotonic() + 30
        child = None
        while child is None and time.monotonic() < deadline:
            kids = psutil.Process(parent.pid).children()
            child = next((k for k in kids if "specwatch.load.yardstick" in " ".join(k.cmdline())), None)
            time.sleep(0.1)
        assert child is not None, "the yardstick child never started"
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        gone, alive = psutil.wait_procs([child], timeout=10)
        assert child in gone and not alive
    finally:
        if parent.poll() is None:
            parent.kill()
