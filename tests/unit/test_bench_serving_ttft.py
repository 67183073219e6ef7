"""docs/validation/bench_serving_ttft.py on the recorded run it explains: real SGLang 0.5.16 + EAGLE-3 at the 8B shape
on an H100, specwatch and bench_serving on one live server (docs/validation/data/2026-12-05-sglang-8b-bench-serving-x1).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "validation"))
import bench_serving_ttft  # noqa: E402 (docs/validation is not a package)

RUN = ROOT / "docs/validation/data/2026-12-05-sglang-8b-bench-serving-x1/bench-serving"
pytest.importorskip("transformers")


def test_printable_is_sglangs_find_printable_text_without_cjk() -> None:
    assert bench_serving_ttft._printable("ab cd\ufffd") == "ab "
    assert bench_serving_ttft._printable("abcd\ufffd") == ""
    assert bench_serving_ttft._printable("ab\n") == "ab\n"


def test_the_recorded_ttft_gap_is_predicted_from_the_prompts_first_printable_chunk() -> None:
    p = bench_serving_ttft.predict(RUN)
    # a prompt whose first output token has text alone streams it at once; the others wait one or two cycles
    assert p.first_text_chunk == [2, 0, 1, 0, 0, 2, 1, 2]
    assert 0 < p.d1_ms < p.d2_ms  # the second chunk comes before a whole verify cycle has passed
    assert p.predicted_ms["median"] == pytest.approx(p.bench_ms["median"], rel=1e-6)  # the one fitted number
    for stat in ("p90", "p99", "mean"):  # predictions, not fits
        assert p.predicted_ms[stat] == pytest.approx(p.bench_ms[stat], rel=0.02), stat
    # and without the model the two tools differ far beyond that: the gap is what is explained
    assert p.bench_ms["p90"] / p.specwatch_ms["p90"] - 1 > 0.3
