"""A first run on a new host judges speculation against plain decoding in its one round (issue 31 item 1).

No recorded round spread: the one round's ratio is judged against a boot-to-boot term of
:data:`tuning.FIRST_ROUND_BOOT_FACTOR` times the runs' own spread (chosen on the shipped baselines'
sessions), plus the runs' standard error. A difference large against that noise decides; otherwise
one line says how many rounds would, or that none in reach would.
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from specwatch.judge import tuning

ROOT = Path(__file__).resolve().parents[2]


def _runs(center: float, spread: float, n: int = 8, seed: int = 0) -> list[float]:
    return list(center * np.exp(np.random.default_rng(seed).normal(0.0, spread, n)))


def _beats(spec: list[float], base: list[float], margin: float) -> tuning.RoundsVerdict:
    ratio = statistics.median(spec) / statistics.median(base)
    return tuning.beats([ratio], margin=margin, alpha=0.01, names=("spec", "plain"), runs=(spec, base))


def test_the_real_sglang_case_passes_at_once() -> None:
    """+26 % against a -90 % margin (real SGLang 0.5.23 on CPU), runs spreading 10 % and one burst run."""
    spec = [*_runs(126.0, 0.10, seed=1), 179318.0]  # a run whose tokens came in one burst
    verdict = _beats(spec, _runs(100.0, 0.10, seed=2), margin=-0.9)
    assert verdict.verdict == "pass" and verdict.judged and verdict.rounds == 1, verdict.message
    assert "no round spread recorded for this machine class, so a first-round boot-to-boot term" in verdict.design
    assert "cannot tell a change" not in verdict.message


def test_a_clear_speedup_on_a_quiet_host_passes_and_a_clear_loss_fails() -> None:
    """An H200-like host: runs within 3 %; speculation 1.6x passes at margin 0, 0.6x fails."""
    base = _runs(100.0, 0.03, seed=3)
    assert _beats(_runs(160.0, 0.03, seed=4), base, margin=0.0).verdict == "pass"
    failed = _beats(_runs(60.0, 0.03, seed=5), base, margin=0.0)
    assert failed.verdict == "fail" and failed.sentence.startswith("fail: not spec ≥ plain×1"), failed.sentence


def test_the_cpu_refserver_case_is_unsure_and_says_in_one_line_how_many_rounds_would_decide() -> None:
    """+5.7 % at margin 0 with runs spreading 3 %: not decided by one round; 3+ rounds would be."""
    verdict = _beats(_runs(105.7, 0.03, seed=6), _runs(100.0, 0.03, seed=7), margin=0.0)
    assert verdict.verdict == tuning.UNSURE, verdict.message
    assert "\n" not in verdict.sentence
    n = int(verdict.sentence.split("alternate_rounds = ")[1].split()[0])
    assert 2 <= n <= tuning.MAX_ADVISED_ROUNDS
    assert tuning.rounds_to_decide(math.log(verdict.ratio), tuning.first_round_spread(
        _runs(105.7, 0.03, seed=6), _runs(100.0, 0.03, seed=7))[0], 0.01) == n  # type: ignore[index]


def test_a_difference_within_the_noise_never_advises_rounds_that_cannot_help() -> None:
    verdict = _beats(_runs(100.5, 0.15, seed=8), _runs(100.0, 0.15, seed=9), margin=0.0)
    assert verdict.verdict == tuning.UNSURE
    assert "alternate_rounds" not in verdict.sentence
    assert f"no number of rounds up to {tuning.MAX_ADVISED_ROUNDS} would decide it" in verdict.sentence


def test_without_two_runs_a_side_one_round_stays_not_judged() -> None:
    verdict = tuning.beats([1.3], margin=0.0, alpha=0.01, runs=([130.0], [100.0, 101.0]))
    assert verdict.verdict == tuning.NOT_JUDGED


def test_the_boot_term_scales_with_the_runs_and_has_a_floor() -> None:
    total, boot, within = tuning.first_round_spread([100.0] * 4, [100.0] * 4)  # type: ignore[misc]
    assert boot == tuning.FIRST_ROUND_MIN_BOOT and within == 0 and total == boot
    _, boot, _ = tuning.first_round_spread(_runs(100, 0.1, 50, 1), _runs(100, 0.1, 50, 2))  # type: ignore[misc]
    assert boot == pytest.approx(tuning.FIRST_ROUND_BOOT_FACTOR * 0.1, rel=0.3)


def _sessions() -> dict[tuple[str, str], list[tuple[datetime, list[float]]]]:
    out = {}
    for f in sorted((ROOT / "baselines").glob("*/*.json")):
        if f.name == "round-spread.json":
            continue
        metric = json.loads(f.read_text())["metrics"].get("single-stream/decode_tok_s")
        if metric:
            out[(f.parent.name, f.stem)] = sorted((datetime.fromisoformat(s["recorded"]), s["samples"])
                                                  for s in metric["sessions"])
    return out


def test_recorded_boot_pairs_of_one_server_are_rarely_decided() -> None:
    """The data the factor was chosen on: two sessions of one profile within an hour are two boots of an
    A/A round. At margin 0 each direction may be decided at most alpha: together at most 2 x alpha."""
    decided = total = 0
    for pairs in _sessions().values():
        for (ta, a), (tb, b) in itertools.pairwise(pairs):
            if (tb - ta).total_seconds() > 3600:
                continue
            for x, y in ((a, b), (b, a)):
                total += 1
                decided += _beats(x, y, margin=0.0).verdict in ("pass", "fail")
    assert total >= 100
    assert decided / total <= 2 * 0.01 + 1e-9, (decided, total)


def test_recorded_spec_and_plain_sessions_of_the_h200x2_class_pass_at_once() -> None:
    """EAGLE3 against plain decoding on h200x2-nvlink (1.6-1.7x): every pairing of their sessions passes."""
    sessions = _sessions()
    spec, plain = sessions[("h200x2-nvlink", "eagle3-tuned")], sessions[("h200x2-nvlink", "baseline-tuned")]
    verdicts = [_beats(a, b, margin=0.0).verdict for (_, a), (_, b) in itertools.product(spec, plain)]
    assert verdicts and all(v == "pass" for v in verdicts), verdicts
