"""The speculation gate on a dead draft, end to end on CPU: `pytest -m perf` against reference servers.

The speculative server's model is ``ref-tiny-poor``: its early-exit draft accepts none of the workload's drafts
(accept length 1.00 by every source). Its rounds alone read it about 0.5x plain decoding with a wide spread
(an "unsure" skip on a shared 2-core machine); the gate must fail, and say the draft is dead before any
throughput.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from perfrun import pair_profile, run_perf

#: the gate's message is guarded in the default run by tests/unit/test_draft_alive.py; this repeats it end to end
pytestmark = pytest.mark.nightly


def test_the_speculation_gate_says_the_draft_is_dead_first(tmp_path: Path) -> None:
    out = run_perf(tmp_path, pair_profile("ref-tiny-poor", "alternate_rounds = 3"),
                   ["test_gates.py::test_speculation_beats_baseline"], "--specwatch-runs=3", "--specwatch-warmup=1")
    said = [ln for ln in out.stdout.splitlines() if ln.startswith("E ")]
    assert out.returncode == 1, out.stdout[-4000:] + out.stderr[-2000:]
    first = next((ln for ln in said if "AssertionError" in ln), "")
    assert "AssertionError: [draft alive on eagle3: FAILED] the draft accepted 0 of " in first, "\n".join(said[:20])
    assert "proposed tokens: accept length 1.00 over the workload, every source agreeing" in first
    assert "wrong algorithm EAGLE vs EAGLE3, wrong draft weights, a broken hidden-state input" in first
    text = "\n".join(said)
    assert text.index("draft alive on eagle3") < text.index("throughput: speculative"), text
    assert "FAILED tests/perf/test_gates.py::test_speculation_beats_baseline" in out.stdout, out.stdout[-4000:]
