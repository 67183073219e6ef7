"""The relative gates judge their rounds (each a fresh boot of both servers), as ``specwatch ab`` does.

The runs of one boot share its luck: on a loaded 2-core machine four runs of the same tuned and
untuned SGLang servers read -39%, +7%, -62% (called a failure at p = 0.004 by a test of the runs
within one boot each) and +33% (issue 24). Judged per boot, such a pair is not judged (one round,
no recorded round spread) or unsure, never a failure; and a pair that differs only in NCCL
variables at TP=1, which the server never reads, is said to be so and not gated.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from specwatch.judge import compare, tuning
from specwatch.judge.paired import RoundPrior
from specwatch.judge.verdict import Status
from specwatch.load.measure import Measurement, RunSample, merge
from specwatch.load.workload import Workload
from specwatch.profiles.loading import parse_profiles
from specwatch.profiles.profile import TUNED_NCCL
from specwatch.run import gatekeeper

# -- the pure rule ------------------------------------------------------------------------------------


def test_one_round_without_a_recorded_spread_is_not_judged_however_far_apart() -> None:
    judged = tuning.tuning_rounds([0.38], tolerance=0.02, min_effect=0.05, alpha=0.01)
    assert judged.verdict == tuning.NOT_JUDGED and not judged.judged and judged.p is None
    assert "-62.0% in its one round" in judged.sentence and "alternate_rounds = 3" in judged.sentence
    assert "cannot tell a change from boot-to-boot drift" in judged.design


def test_the_issues_four_runs_as_rounds_are_unsure_not_a_failure() -> None:
    judged = tuning.tuning_rounds([0.61, 1.07, 0.38, 1.33], tolerance=0.02, min_effect=0.05, alpha=0.01)
    assert judged.verdict == tuning.UNSURE, judged.message
    assert judged.rounds == 4 and judged.low < 1 < judged.high
    assert "0.610, 1.070, 0.380, 1.330" in judged.design and "of these rounds alone (3 df)" in judged.design


def test_a_steady_slowdown_over_rounds_fails_and_a_steady_gain_helps() -> None:
    worse = tuning.tuning_rounds([0.80, 0.82, 0.79], tolerance=0.05, min_effect=0.05, alpha=0.01)
    assert worse.verdict == "fail" and worse.p < 0.01 and "tuning makes it worse: -19.7%" in worse.sentence
    better = tuning.tuning_rounds([1.20, 1.22, 1.19], tolerance=0.05, min_effect=0.05, alpha=0.01)
    assert better.verdict == "pass" and "tuning helps: +20." in better.sentence
    small = tuning.tuning_rounds([1.020, 1.021, 1.019], tolerance=0.05, min_effect=0.05, alpha=0.01)
    assert small.verdict == "no_effect" and "no meaningful effect" in small.sentence
    flat = tuning.tuning_rounds([0.99, 1.01, 1.00, 1.00], tolerance=0.05, min_effect=0.05, alpha=0.01)
    assert flat.verdict == "no_effect" and "rules out harm beyond the 5% tolerance" in flat.sentence


def test_a_recorded_round_spread_lets_one_round_be_judged_and_is_named() -> None:
    prior = RoundPrior(0.02, 14)
    judged = tuning.tuning_rounds([0.70], tolerance=0.05, min_effect=0.05, alpha=0.01, prior=prior,
                                  source="6 earlier A/B run(s) on h200x1")
    assert judged.verdict == "fail" and "pooled with 2.0% over 14 df of 6 earlier A/B run(s) on h200x1" in judged.design
    # the same one round against a spread of 40 %: one boot cannot tell -30% from luck
    wide = tuning.tuning_rounds([0.70], tolerance=0.05, min_effect=0.05, alpha=0.01, prior=RoundPrior(0.4, 6))
    assert wide.verdict == tuning.UNSURE


def test_speculation_must_beat_the_margin_over_rounds() -> None:
    fast = tuning.beats([1.55, 1.60, 1.52], margin=0.3, alpha=0.01, names=("spec", "base"))
    assert fast.verdict == "pass" and fast.low > 1.3 and "spec ≥ base×1.3" in fast.sentence
    slow = tuning.beats([0.72, 0.74, 0.73], margin=0.3, alpha=0.01, names=("spec", "base"))
    assert slow.verdict == "fail" and slow.high < 1.3 and "falls short" in slow.sentence
    wobbly = tuning.beats([0.9, 1.8], margin=0.3, alpha=0.01)
    assert wobbly.verdict == tuning.UNSURE and "more rounds would decide" in wobbly.sentence
    assert tuning.beats([1.6], margin=0.3, alpha=0.01).verdict == tuning.NOT_JUDGED


def test_round_ratios_pair_rounds_in_order() -> None:
    assert tuning.round_ratios([[10, 12, 11], [20, 20]], [[10, 10, 10], [10, 10]]) == [1.1, 2.0]
    assert tuning.round_ratios([[10], []], [[5], [5]]) == [2.0]  # a round one side lacks is left out


def test_only_nccl_variables_at_one_rank_are_unread() -> None:
    why = tuning.unread_difference(TUNED_NCCL, {}, ranks=1)
    assert why is not None and "NCCL_ALGO" in why and "TP=1" in why and "never initialised" in why
    assert tuning.unread_difference(TUNED_NCCL, {}, ranks=2) is None  # TP=2 all-reduces: NCCL reads them
    assert tuning.unread_difference({**TUNED_NCCL, "OMP_NUM_THREADS": "1"}, {}, ranks=1) is None
    assert tuning.unread_difference({}, {}, ranks=1) is None  # nothing differs: nothing to explain


# -- the gates, on measurements of several boots ---------------------------------------------------------


def _measurement(profile: str, boots: list[list[float]]) -> Measurement:
    runs = [RunSample(output_tok_s=x, decode_tok_s=x, ttft_ms=5.0, mean_itl_ms=1.0, e2e_s=1.0, completion_tokens=32,
                      client_overhead=0.001) for boot in boots for x in boot]
    return Measurement(profile=profile, workload=Workload("single-stream", runs=len(runs)), runs=runs,
                       metrics_delta=None, metrics_after=None, server_info_before={}, server_info_after={},
                       log_records=[], wall_s=1.0, boots=tuple(len(b) for b in boots))


def _session(tmp_path: Path, servers: list[dict[str, Any]], speeds: dict[str, list[list[float]]],
             gate_table: dict[str, Any] | None = None, fixtures: dict[str, str] | None = None) -> SimpleNamespace:
    profiles = parse_profiles({"server": servers, "fixtures": fixtures or {"tuned": "tuned", "untuned": "untuned"},
                               "gates": gate_table or {}}, "p.toml")
    config = SimpleNamespace(alpha=0.01, baseline_dir=str(tmp_path / "baselines"), path=Path)
    session = SimpleNamespace(profiles=profiles, config=config, verdict_rows=[], machine_class=lambda: "ci-cpu",
                              findings_for=lambda name: [],
                              fingerprint=lambda: {"engine": "reference", "engine_version": "0.0-test"})
    session.measure_pair = lambda a, b, workload: (_measurement(a, speeds[a]), _measurement(b, speeds[b]))
    session.engine_of = lambda server: profiles.servers[server].engine if server in profiles.servers else ""
    return session


TP2 = [{"name": "tuned", "env": "tuned", "tp": 2}, {"name": "untuned", "env": "untuned", "tp": 2}]
TP1 = [{"name": "tuned", "env": "tuned"}, {"name": "untuned", "env": "untuned"}]


def test_one_boot_each_is_not_judged_even_when_its_runs_differ_significantly(tmp_path: Path) -> None:
    speeds = {"tuned": [[61.0, 62.0, 60.5, 61.5, 60.0, 62.5]], "untuned": [[100.0, 101.0, 99.0, 100.5, 99.5, 101.5]]}
    within = compare.compare(speeds["tuned"][0], speeds["untuned"][0], tolerance=0.02, alpha=0.01)
    assert within.is_regression  # what the old gate judged on: the runs of one boot as samples
    verdict = gatekeeper.tuned_vs_untuned(_session(tmp_path, TP2, speeds))
    assert verdict.status is Status.SKIP, verdict.message
    assert "not judged (-38.9% in its one round)" in verdict.message
    (row,) = verdict.rows
    assert row.verdict == tuning.NOT_JUDGED and row.n == 6 and row.extra["rounds"] == 1


def test_rounds_that_agree_on_a_slowdown_fail_the_tuned_gate(tmp_path: Path) -> None:
    speeds = {"tuned": [[80.0, 81.0], [78.0, 79.0], [82.0, 80.0]], "untuned": [[100.0, 101.0], [98.0, 97.0],
                                                                              [101.0, 102.0]]}
    verdict = gatekeeper.tuned_vs_untuned(_session(tmp_path, TP2, speeds, {"tuned_tolerance": 0.05}))
    assert verdict.failed and verdict.message.startswith("tuning made things worse:"), verdict.message
    assert "over 3 round(s)" in verdict.message and verdict.rows[0].verdict == "fail"


def test_nccl_variables_at_tp1_are_said_to_be_unread_and_never_fail(tmp_path: Path) -> None:
    speeds = {"tuned": [[80.0, 81.0], [78.0, 79.0], [82.0, 80.0]], "untuned": [[100.0, 101.0], [98.0, 97.0],
                                                                              [101.0, 102.0]]}
    verdict = gatekeeper.tuned_vs_untuned(_session(tmp_path, TP1, speeds, {"tuned_tolerance": 0.05}))
    assert verdict.skipped, verdict.message
    assert verdict.reason.startswith("nothing to gate: the two servers differ only in NCCL_ALGO, NCCL_BUFFSIZE")
    assert "what was measured is boot-to-boot luck" in verdict.reason
    assert "tuning makes it worse" in verdict.message  # the rounds' own verdict is still shown
    assert verdict.rows[0].verdict == "unread"
    # no advice that cannot help a setting the server never reads: not more rounds, not a round spread
    one = gatekeeper.tuned_vs_untuned(_session(tmp_path, TP1, {"tuned": [[80.0, 81.0]], "untuned": [[100.0, 99.0]]}))
    assert one.skipped and "not judged (-19.1% in its one round)" in one.message, one.message
    for said in (verdict.message, one.message, one.rows[0].message, verdict.rows[0].message):
        assert "alternate_rounds" not in said and "record-rounds" not in said
    wobbly = {"tuned": [[90.0], [110.0]], "untuned": [[100.0], [100.0]]}
    unsure = gatekeeper.tuned_vs_untuned(_session(tmp_path, TP1, wobbly))
    assert "unsure" in unsure.message and "more rounds" not in unsure.message, unsure.message
    # anything else that differs may be read: then the rounds decide
    other = [TP1[0], {**TP1[1], "extra_args": ["--disable-custom-all-reduce"]}]
    assert gatekeeper.tuned_vs_untuned(_session(tmp_path, other, speeds, {"tuned_tolerance": 0.05})).failed


def test_the_machine_class_round_spread_is_pooled_in(tmp_path: Path) -> None:
    folder = tmp_path / "baselines" / "ci-cpu"
    folder.mkdir(parents=True)
    runs = [{"metric": "decode_tok_s", "ratios": [1.0, 1.02, 0.98, 1.01], "recorded": "", "label": f"run {i}",
             "key": "tuned/single-stream/decode_tok_s"} for i in range(4)]
    # never borrowed: a run of no key, and one of another key that served something else (another model)
    runs += [{"metric": "decode_tok_s", "ratios": [1.0, 1.5, 0.6], "recorded": "", "label": "keyless"},
             {"metric": "decode_tok_s", "ratios": [1.0, 1.5, 0.6], "recorded": "", "label": "tiny",
              "key": "tiny/single-stream/decode_tok_s",
              "served": "reference model=ref-other tp=2 | single-stream c1 32 tok"}]
    (folder / "round-spread.json").write_text(json.dumps({"version": 1, "machine_class": "ci-cpu", "runs": runs}))
    speeds = {"tuned": [[61.0, 62.0, 60.5]], "untuned": [[100.0, 101.0, 99.0]]}
    verdict = gatekeeper.tuned_vs_untuned(_session(tmp_path, TP2, speeds))
    assert verdict.failed, verdict.message  # one round, judged against the recorded 1.7% spread
    assert "4 earlier A/B run(s) of this key on ci-cpu" in verdict.message
    assert verdict.message.endswith("engine: reference 0.0-test")  # the engine it judged, in every verdict
    assert "over 12 df" in verdict.message


def test_a_server_with_round_history_of_its_own_is_judged_by_it(tmp_path: Path) -> None:
    """As ab does (RoundSpread.prior_for): the tuned server's own key, not every decode_tok_s run pooled."""
    folder = tmp_path / "baselines" / "ci-cpu"
    folder.mkdir(parents=True)
    steady = [{"metric": "decode_tok_s", "key": "other/single-stream/decode_tok_s", "ratios": [1.0, 1.01, 0.99, 1.0],
               "recorded": "", "label": f"steady {i}"} for i in range(4)]
    wild = [{"metric": "decode_tok_s", "key": "tuned/single-stream/decode_tok_s", "ratios": [1.0, 1.6, 0.6, 1.3],
             "recorded": "", "label": f"wild {i}"} for i in range(4)]
    (folder / "round-spread.json").write_text(json.dumps({"version": 1, "machine_class": "ci-cpu",
                                                          "runs": steady + wild}))
    speeds = {"tuned": [[61.0, 62.0, 60.5]], "untuned": [[100.0, 101.0, 99.0]]}
    verdict = gatekeeper.tuned_vs_untuned(_session(tmp_path, TP2, speeds))
    assert "4 earlier A/B run(s) of this key on ci-cpu" in verdict.message, verdict.message
    assert not verdict.failed, verdict.message  # -39% in one round is within that key's recorded spread


def test_speculation_gate_skips_when_its_rounds_cannot_decide(tmp_path: Path) -> None:
    servers = [{"name": "base"}, {"name": "spec", "speculative": {"algorithm": "EAGLE3"}}]
    fixtures = {"baseline": "base", "spec": "spec"}
    wobbly = {"spec": [[90.0, 91.0], [180.0, 181.0]], "base": [[100.0, 100.0], [100.0, 101.0]]}
    verdict = gatekeeper.speculation_beats_baseline(_session(tmp_path, servers, wobbly, {"spec_margin": 0.3}, fixtures))
    assert verdict.skipped and verdict.reason.startswith("unsure:"), verdict.message
    steady = {"spec": [[150.0, 151.0], [155.0, 154.0], [152.0, 150.0]], "base": [[100.0, 100.0], [101.0, 100.0],
                                                                                [99.0, 100.0]]}
    verdict = gatekeeper.speculation_beats_baseline(_session(tmp_path, servers, steady, {"spec_margin": 0.3}, fixtures))
    assert verdict.passed and verdict.rows[0].verdict == "pass", verdict.message
    slow = {"spec": [[70.0, 71.0], [72.0, 70.0], [71.0, 71.0]], "base": [[100.0, 100.0], [101.0, 100.0],
                                                                         [99.0, 100.0]]}
    verdict = gatekeeper.speculation_beats_baseline(_session(tmp_path, servers, slow, {"spec_margin": 0.3}, fixtures))
    assert verdict.failed and "throughput: speculative 71.0" in verdict.message  # with the diagnosis


# -- boots survive pooling --------------------------------------------------------------------------------


def test_merge_keeps_which_runs_came_from_which_boot() -> None:
    a, b, c = (_measurement("s", [[float(x) for x in xs]]) for xs in ([1, 2, 3], [4, 5], [6]))
    merged = merge(merge(a, b), c)
    assert merged.boots == (3, 2, 1) and merged.by_boot("decode_tok_s") == [[1, 2, 3], [4, 5], [6]]
    plain = _measurement("s", [[1.0, 2.0]])
    assert plain.by_boot("decode_tok_s") == [[1.0, 2.0]]
    assert math.isclose(merged.samples("decode_tok_s")[-1], 6.0)


@pytest.mark.parametrize("rounds", [1, 2])
def test_the_gate_row_counts_every_pooled_run(tmp_path: Path, rounds: int) -> None:
    speeds = {"tuned": [[100.0, 101.0, 99.0]] * rounds, "untuned": [[100.0, 100.5, 99.5]] * rounds}
    verdict = gatekeeper.tuned_vs_untuned(_session(tmp_path, TP2, speeds))
    assert verdict.rows[0].n == 3 * rounds and verdict.rows[0].extra["rounds"] == rounds
