"""The hardware's machine term pooled over baselines (judge.machineterm, store.machineterm) and what the drift
gate does with it on a new machine (judge.variance.term_choice: the pooled term when it has more degrees of
freedom than the baseline's own, and the note says which)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from specwatch.errors import UsageError
from specwatch.judge import compare, machineterm, variance
from specwatch.judge.variance import MachineSession, PooledTerm
from specwatch.store import machineterm as store_term
from specwatch.store.baseline import BaselineStore
from specwatch.store.result import Result, ResultSet

ROOT = Path(__file__).resolve().parents[2]


def world(rng: np.random.Generator, machines: int, sessions: int, sigma_m: float, sigma_w: float,
          centre: float = 200.0, prefix: str = "m") -> list[MachineSession]:
    """Sessions of ``machines`` machines (machine term ``sigma_m``, boot-to-boot ``sigma_w``), 8 samples each."""
    out = []
    for i in range(machines):
        offset = rng.normal(0, sigma_m)
        for _ in range(sessions):
            boot = offset + rng.normal(0, sigma_w)
            out.append(MachineSession(centre * np.exp(boot + rng.normal(0, 0.005, 8)), f"{prefix}{i}"))
    return out


def test_a_tight_dataset_adds_its_degrees_of_freedom_and_a_noisy_one_almost_none() -> None:
    rng = np.random.default_rng(7)
    tight = variance.components(world(rng, 6, 12, 0.02, 0.01))
    noisy = variance.components(world(rng, 2, 2, 0.02, 0.10, prefix="n"))
    got = machineterm.pool({"tight": tight, "noisy": noisy})
    assert got is not None
    shares = {d.name: d for d in got.datasets}
    assert 3.5 < shares["tight"].df <= 5.0  # most of its g - 1 = 5
    assert shares["noisy"].df < 0.2
    assert got.term.df == pytest.approx(shares["tight"].df + shares["noisy"].df)
    assert 0.008 < got.term.sigma < 0.04  # the simulated 2%, from 5 degrees of freedom


def test_datasets_of_one_machine_or_one_session_per_machine_measure_no_term() -> None:
    rng = np.random.default_rng(1)
    one = variance.components(world(rng, 1, 5, 0.02, 0.01))
    singles = variance.components(world(rng, 4, 1, 0.02, 0.01))
    assert not machineterm.usable(one) and not machineterm.usable(singles)
    assert machineterm.pool({"one": one, "singles": singles}) is None


def test_a_new_machine_is_judged_with_the_pooled_term_when_it_rests_on_more_degrees_of_freedom() -> None:
    rng = np.random.default_rng(3)
    comp = variance.components(world(rng, 3, 10, 0.02, 0.01))
    own = variance.predict(comp, machine="elsewhere")
    term = PooledTerm(0.02**2, 12.0, "5 dataset(s) of the NVIDIA H200")
    pooled = variance.predict(comp, machine="elsewhere", term=term)
    assert pooled.new_machine and own.new_machine
    assert pooled.tolerance < own.tolerance / 2  # 2 degrees of freedom against 12
    assert "machine term pooled over the hardware: 2.0% on 12.0 effective degrees of freedom" in pooled.note
    assert "in place of this baseline's own" in pooled.note
    few = variance.predict(comp, machine="elsewhere", term=PooledTerm(0.02**2, 1.5, "x"))
    assert few.tolerance == pytest.approx(own.tolerance)
    assert "this baseline's own, 2 degree(s) of freedom, over the hardware's pooled" in few.note
    known = variance.predict(comp, machine="m0", term=term, min_sessions=3)
    assert not known.new_machine and known.tolerance < pooled.tolerance  # a known machine: its own sessions


def test_sessions_of_one_other_machine_get_the_pooled_term_instead_of_none() -> None:
    rng = np.random.default_rng(5)
    comp = variance.components(world(rng, 1, 8, 0.0, 0.01))
    without = variance.predict(comp, machine="elsewhere")
    assert not without.new_machine and "without a machine term" in without.note
    got = variance.predict(comp, machine="elsewhere", term=PooledTerm(0.02**2, 10.0, "x"))
    assert got.new_machine and got.tolerance > without.tolerance
    assert "none of them was recorded on this machine (elsewhere)" in got.note


def test_the_drift_verdict_passes_the_term_through() -> None:
    rng = np.random.default_rng(11)
    sessions = world(rng, 3, 10, 0.02, 0.01)
    current = [x * 0.88 for x in sessions[0]]
    pooled = [x for s in sessions for x in s]
    term = PooledTerm(0.02**2, 20.0, "test")
    before, b0 = compare.drift(current, pooled, sessions=sessions, machine="new", n_resamples=200)
    after, b1 = compare.drift(current, pooled, sessions=sessions, machine="new", machine_term=term, n_resamples=200)
    assert b1.tolerance < b0.tolerance
    assert "pooled over the hardware" in b1.note and "pooled over the hardware" not in b0.note
    # 9% below the machines' centre: inside the interval of 2 degrees of freedom, outside that of 20
    assert before.verdict is not compare.DriftVerdict.REGRESSION
    assert after.verdict is compare.DriftVerdict.REGRESSION


def _record(store: BaselineStore, cls: str, profile: str, host: str, centre: float, i: int, gpu: str) -> None:
    rng = np.random.default_rng(i)
    fp = {"machine_class": cls, "gpu_model": gpu, "host_id": host}
    samples = list(centre * np.exp(rng.normal(0, 0.004, 8)))
    rs = ResultSet([Result.make(profile, "single-stream", "decode_tok_s", unit="tok/s", higher_is_better=True,
                                samples=samples)], machine=fp, commit="c")
    store.record(cls, profile, fp, "c", rs, recorded=f"2026-12-0{1 + i // 10}T00:{i % 60:02d}:00+00:00")


def test_the_file_pools_every_class_of_the_same_gpu_and_the_gate_reads_it(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    i = 0
    for cls, profile, hosts in (("x1", "big", {"a": 100, "b": 104, "c": 98}), ("x2", "small", {"d": 50, "e": 51.5}),
                                ("cpu", "big", {"f": 10, "g": 20})):
        for host, centre in hosts.items():
            for _ in range(4):
                _record(store, cls, profile, host, centre, i, "NVIDIA H200" if cls != "cpu" else "")
                i += 1
    path = store_term.write(tmp_path, "x1", classes=("x2",), command="test")
    assert path == tmp_path / "x1" / "machine-term.json"
    assert store.available() == [("cpu", "big"), ("x1", "big"), ("x2", "small")]  # not a baseline
    terms = store_term.load(tmp_path, "x2")
    assert set(terms) == {"decode_tok_s"}
    term = terms["decode_tok_s"]
    assert "2 dataset(s) of the NVIDIA H200" in term.source  # the CPU class is other hardware
    assert 2.0 < term.df <= 3.0 and 0.01 < term.sigma < 0.05
    assert store_term.load(tmp_path, "cpu") == {}
    (tmp_path / "x2" / "machine-term.json").write_text('{"version": 1, "metrics": {"decode_tok_s": {}}}')
    with pytest.raises(UsageError, match="not a machine-term file"):
        store_term.load(tmp_path, "x2")


def test_the_command_writes_the_file_and_compare_judges_a_new_machine_with_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from specwatch.cli import main

    store = BaselineStore(tmp_path)
    for i, (host, centre) in enumerate([(h, c) for h, c in {"a": 100, "b": 104, "c": 98}.items() for _ in range(4)]):
        _record(store, "x1", "big", host, centre, i, "NVIDIA H200")
    assert main(["baseline", "machine-term", "x1", "--baseline-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "decode_tok_s: machine term" in out and f"specwatch wrote {tmp_path / 'x1' / 'machine-term.json'}" in out
    assert "decode_tok_s" in store_term.load(tmp_path, "x1")
    fp = {"machine_class": "x1", "gpu_model": "NVIDIA H200", "host_id": "new"}
    rs = ResultSet([Result.make("big", "single-stream", "decode_tok_s", unit="tok/s", higher_is_better=True,
                                samples=[100.0 + 0.1 * k for k in range(8)])], machine=fp, commit="c")
    current = tmp_path / "current.json"
    rs.save(current)
    main(["compare", str(tmp_path / "x1" / "big.json"), str(current)])
    said = capsys.readouterr().out
    assert "judged as a new machine" in said
    assert "machine term: this baseline's own, 2 degree(s) of freedom" in said  # its own 3 machines are the pool


def test_the_shipped_h200_term_rests_on_more_than_the_shipped_ref_large_baselines_own() -> None:
    terms = store_term.load(ROOT / "baselines", "h200x1")
    assert terms == store_term.load(ROOT / "baselines", "h200x2-nvlink")
    decode = terms["decode_tok_s"]
    assert decode.df > 2.0  # the shipped ref-large baseline's own: 3 leases
    assert math.isclose(decode.sigma, 0.0186, abs_tol=0.002)
