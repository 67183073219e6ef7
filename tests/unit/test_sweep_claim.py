"""docs/validation/claims_sweep.py reads the sweep scenario's concurrency-16 graph checks from pytest's own ``-rA``
summary: a real pytest run here (a pass and a failure under the checks' names, a skip, and a run cut before its
summary), not a hand-written transcript."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

VALIDATION = Path(__file__).resolve().parents[2] / "docs" / "validation"

SUITE = '''
import pytest

def test_batches_past_the_captured_sizes_fail_naming_the_capture_flag():
    pass

def test_batches_within_the_captured_sizes_pass_at_concurrency_16():
    assert False, "batches of 9-16 verified eagerly"

def test_eager_verify_fault_is_reported():
    pytest.skip("on CPU there are no CUDA graphs")
'''


def _claims_sweep():
    if str(VALIDATION) not in sys.path:
        sys.path.insert(0, str(VALIDATION))
    import claims  # noqa: F401  (first: it registers its claim modules in the page's order)
    import claims_sweep

    return claims_sweep


def test_each_graph_check_outcome_comes_from_the_summary_and_a_cut_run_has_none(tmp_path: Path) -> None:
    (tmp_path / "test_verify_graphs.py").write_text(SUITE)
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-rA",
                          "test_verify_graphs.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stdout
    sweep = _claims_sweep()
    past, within = sweep.GRAPH_CHECKS
    assert sweep.graph_outcomes(run.stdout) == {past: "passed", within: "failed"}
    # a step cut by its limit before pytest's summary: the failure's traceback names the check, but gives no outcome
    cut = run.stdout.split("short test summary info", 1)[0]
    assert within in cut
    assert set(sweep.graph_outcomes(cut).values()) == {"no result line (cut, or skipped)"}
    # the committed sweep of 2026-12-05: its graph step was cut at 200 s, before either check
    committed = (VALIDATION / "data" / sweep.SWEEP / "sgl8b-graphs-exact.txt").read_text()
    assert set(sweep.graph_outcomes(committed).values()) == {"no result line (cut, or skipped)"}
