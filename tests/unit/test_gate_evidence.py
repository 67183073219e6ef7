"""The gates judge evidence, not the Session: a measurement, the reference it is compared against and the
run's policy in, a Verdict with typed rows out; nothing of the session is needed or imported."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from specwatch.judge.verdict import ReportRow
from specwatch.load.measure import Measurement, RunSample
from specwatch.load.workload import Workload
from specwatch.profiles.profile import Gates
from specwatch.run import gates
from specwatch.run.evidence import Pair, Policy, Reference

RUN = Path(__file__).resolve().parents[2] / "src" / "specwatch" / "run"


def _measurement(profile: str, boots: list[list[float]]) -> Measurement:
    runs = [RunSample(output_tok_s=x, decode_tok_s=x, ttft_ms=5.0, mean_itl_ms=1.0, e2e_s=1.0, completion_tokens=32,
                      client_overhead=0.001) for boot in boots for x in boot]
    return Measurement(profile=profile, workload=Workload("single-stream", runs=len(runs)), runs=runs,
                       metrics_delta=None, metrics_after=None, server_info_before={}, server_info_after={},
                       log_records=[], wall_s=1.0, boots=tuple(len(b) for b in boots))


def _reference(samples: list[float], m: Measurement) -> Reference:
    wl = m.workload
    return Reference(samples, "baseline a.json", [], {"max_new_tokens": wl.max_new_tokens,
                                                      "concurrency": wl.concurrency})


NOW = [70.0, 70.5, 69.5, 70.2, 69.8, 70.1]
THEN = [100.0, 100.5, 99.5, 100.2, 99.8, 100.1]


def test_drift_judges_a_measurement_against_its_reference_under_a_policy() -> None:
    m = _measurement("a", [NOW])
    slower = gates.drift(m, _reference(THEN, m), Policy(alpha=0.05, tolerance=0.05), profile="a")
    assert slower.failed and slower.name == gates.DRIFT and slower.profile == "a"
    (row,) = slower.rows
    assert isinstance(row, ReportRow) and row.key == "a/single-stream/output_tok_s" and row.verdict == "regression"
    same = gates.drift(m, _reference(NOW, m), Policy(alpha=0.05, tolerance=0.05), profile="a")
    assert same.passed and same.rows[0].verdict != "regression"


def test_drift_says_a_regression_of_a_speculative_server_with_its_diagnosis() -> None:
    m = _measurement("spec", [NOW])
    said = gates.drift(m, _reference(THEN, m), Policy(alpha=0.05), profile="spec",
                       diagnosis=(None, ("[environment on spec: FAILED] NCCL_ALGO not in the workers",)))
    assert said.failed and said.message.endswith("[environment on spec: FAILED] NCCL_ALGO not in the workers")
    plain = gates.drift(m, _reference(THEN, m), Policy(alpha=0.05), profile="spec")
    assert "NCCL_ALGO" not in plain.message


def test_drift_without_a_reference_skips_or_fails_as_the_policy_says() -> None:
    m = _measurement("a", [NOW])
    why = "no baseline for a: record one with --update-baselines"
    assert gates.drift(m, why, Policy(alpha=0.05), profile="a").skipped
    required = gates.drift(m, why, Policy(alpha=0.05, require_baseline=True), profile="a")
    assert required.failed and required.reason.startswith(why) and "--specwatch-require-baseline" in required.message
    recording = gates.drift(m, _reference(THEN, m), Policy(alpha=0.05, update_baselines=True), profile="a")
    assert recording.skipped and "being recorded" in recording.message and recording.rows == []


def test_floor_and_relative_gates_take_their_evidence() -> None:
    m = _measurement("a", [NOW])
    assert gates.floor(m, 60.0, profile="a").passed and gates.floor(m, 80.0, profile="a").failed
    spec = _measurement("spec", [[x * 2 for x in NOW]] * 3)
    base = _measurement("base", [NOW] * 3)
    pair = Pair(spec, base, ("spec", "base"), findings=("[verify graphs on spec: ok] graphed",))
    beats = gates.speculation_beats_baseline(pair, Policy(alpha=0.05), margin=0.1)
    assert beats.passed and beats.rows[0].key == "spec vs base (single-stream, decode tok/s)"
    assert beats.message.endswith("[verify graphs on spec: ok] graphed")
    tuned = gates.tuned_vs_untuned(Pair(base, base, ("tuned", "untuned")), Gates(), Policy(alpha=0.05),
                                   unread="only NCCL variables differ, at one rank")
    assert tuned.skipped and tuned.rows[0].verdict == "unread"


@pytest.mark.parametrize("module", ["gates.py", "specgates.py", "evidence.py"])
def test_a_gate_module_imports_no_session(module: str) -> None:
    """Counting annotation-only imports: the gates never name the Session, the gatekeeper does."""
    tree = ast.parse((RUN / module).read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not {n for n in names if n.startswith(("specwatch.run.session", "specwatch.run.gatekeeper"))}


class _Run:
    """RunFacts of a run on the H200 lease that recorded the real-SGLang baselines."""

    def __init__(self, baseline_dir: Path, fingerprint: dict) -> None:
        from specwatch.run.options import Config

        self.config = Config(baseline_dir=str(baseline_dir))
        self._fp = fingerprint
        self.said: list[str] = []

    def machine_class(self) -> str:
        return "h200x1"

    def fingerprint(self) -> dict:
        return self._fp

    def commit(self) -> str | None:
        return None

    def warn_once(self, text: str) -> None:
        self.said.append(text)

    def engine_of(self, server: str) -> str:
        return "sglang"


def test_a_reference_recorded_beside_another_server_says_so_in_every_verdict() -> None:
    """The real-SGLang baselines of 2026-12-03 were recorded beside another lane's server on the same GPU: the
    plain step read 2.11 ms there and 1.37 ms alone, and the cycle-cost gate's break-even 'rose' 42 %. Every verdict
    against such a reference names what shared the host; a quiet reference says nothing."""
    from specwatch.run.reference import reference_samples, shared_note

    root = Path(__file__).resolve().parents[2] / "docs" / "validation" / "data" / "2026-12-03-sglang-x1" / "baselines"
    recorded = json.loads((root / "h200x1" / "sgl-plain.json").read_text())
    run = _Run(root, recorded["machine"])
    ref = reference_samples(run, "sgl-plain", "single-stream", "decode_step_ms")
    assert not isinstance(ref, str)
    assert "recorded while SGLang server (pid 609) shared the host: that load is in the reference" in ref.source
    assert shared_note({"shared_host": True, "shared_with": []}) == ""  # xdist siblings alone: judged alike
    assert shared_note({"shared_host": False}) == ""
    assert shared_note({"shared_host": True, "shared_with": ["a", "b", "c", "d"]}).startswith(
        "; recorded while a, b, c and 1 more shared the host")
