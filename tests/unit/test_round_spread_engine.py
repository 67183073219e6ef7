"""A key borrows the round spread of its own engine only (store/roundspread.py).

Found on real SGLang 0.5.16 + EAGLE-3 on one H200 (docs/validation/data/2026-12-03-sglang-ab-same-x1): an A/A
``specwatch ab`` of one server against itself read -15.2 % and -18.1 % in two rounds (its boots: 481.6, 408.5,
490.6 and 598.8 decode tok/s) and, judged at the reference server's recorded spread on that class (4.45 %, the
only history there was), ended REGRESSION. Boot-to-boot luck is the engine's, not the machine's.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

from specwatch.revisions import rounds
from specwatch.revisions.plan import plan_key
from specwatch.store.result import Result, ResultSet
from specwatch.store.roundspread import RoundRun, RoundSpread

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "validation" / "data"
AA = DATA / "2026-12-03-sglang-ab-same-x1" / "sgl-ab-same.txt"
SLOW = DATA / "2026-12-03-sglang-ab-x1" / "sgl-ab-slow.txt"
sys.path.insert(0, str(ROOT / "docs" / "validation"))
from seed_round_spread import ab_log as _ab_log  # noqa: E402  (the one reader of an ab log's rounds)


def _spread(runs: list[RoundRun]) -> RoundSpread:
    return RoundSpread(Path("unused.json"), "h200x1", runs)


def test_a_key_without_runs_of_its_own_borrows_only_from_twins_that_served_the_same() -> None:
    """Issue 36: a prior belongs to the workload it was measured on. A key borrows no other key's spread, of its
    engine or not, unless that key's runs served the same model, settings and workload (a twin whose profile
    differs in name or environment alone)."""
    tiny = "sglang model=/tmp/sgl/models/target tp=1 spec=EAGLE3/d/2/1/3 | single-stream c1 128 tok"
    big = "sglang model=/tmp/sgl/models8b/target tp=1 spec=EAGLE3/d/2/1/3 | single-stream c1 256 tok"
    tight = RoundRun("decode_tok_s", (1.0, 1.01, 0.99, 1.0), "", "ref", "large/single-stream/decode_tok_s", "reference")
    wide = RoundRun("decode_tok_s", (0.85, 1.1, 0.95), "", "sgl", "sgl/single-stream/decode_tok_s", "sglang", tiny)
    spread = _spread([tight, wide])
    key = "new-server/single-stream/decode_tok_s"
    for engine in ("reference", "sglang", "vllm", ""):
        assert spread.prior_for(key, engine) == (None, ""), engine  # no "any key" fallback
    assert spread.prior_for(key, "sglang", big) == (None, "")  # the 8B shape never borrows the tiny model's
    twin, source = spread.prior_for("sgl-untuned/single-stream/decode_tok_s", "sglang", tiny)
    assert twin is not None and twin.df == 2 and "of sgl/single-stream/decode_tok_s, which served the same" in source
    assert spread.prior_for("sgl/single-stream/decode_tok_s", "sglang", big) == (None, "")  # same name, other model
    assert spread.prior_for("sgl/single-stream/decode_tok_s", "sglang")[0] is not None  # served not known: by key
    assert len(spread.residuals("sgl-untuned/single-stream/decode_tok_s", "sglang", tiny)) == 3


def test_a_keys_own_runs_count_unless_they_name_another_engine() -> None:
    key = "eagle3/single-stream/decode_tok_s"
    old = RoundRun("decode_tok_s", (1.0, 1.02, 0.98), "", "before engines were kept", key)
    other = RoundRun("decode_tok_s", (1.0, 1.3, 0.7), "", "same server name, other engine", key, "reference")
    mine = RoundRun("decode_tok_s", (1.0, 1.01, 0.99), "", "mine", key, "sglang")
    prior, source = _spread([old, other, mine]).prior_for(key, "sglang")
    assert prior is not None and prior.df == 4 and "of this key" in source
    assert prior.spread < 0.03


def test_the_engine_is_written_and_read_back(tmp_path: Path) -> None:
    path = RoundSpread.append(tmp_path, "h200x1", [("decode_tok_s", [0.9, 1.1], "ab", "k/single-stream/decode_tok_s")],
                              engine="sglang")
    RoundSpread.append(tmp_path, "h200x1", [("decode_tok_s", [1.0, 1.01], "old ab")])
    runs = json.loads(path.read_text())["runs"]
    assert runs[0]["engine"] == "sglang" and "engine" not in runs[1]
    assert [r.engine for r in RoundSpread.for_class(tmp_path, "h200x1").runs] == ["sglang", ""]


def test_a_results_files_engine_is_what_ab_plans_with(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    ResultSet(results=[Result.make("p", "w", "decode_tok_s", unit="tok/s", higher_is_better=True, samples=[1.0])],
              machine={"engine": "sglang", "machine_class": "h200x1"}).save(path)
    assert rounds.engine_of(str(path)) == "sglang"
    assert rounds.engine_of(str(tmp_path / "missing.json")) == ""
    assert rounds.engine_of(None) == ""


def test_the_real_sglang_aa_run_is_no_regression_at_its_own_engines_spread() -> None:
    """The recorded A/A, judged with the shipped h200x1 history less its own run: at the other SGLang run's
    spread it is no regression; at the reference server's spread (the rule before engines were kept) it was."""
    key, ratios = _ab_log(AA)
    assert key == "sgl-eagle3/single-stream/decode_tok_s" and [round(r, 3) for r in ratios] == [0.848, 0.819]
    full = RoundSpread.for_class(ROOT / "baselines", "h200x1")
    others = _spread([r for r in full.runs if AA.name not in r.label])
    design = rounds.RoundSettings.make(2, 2, None).design
    _, verdict, why, _ = rounds.judge_key(ratios, True, plan_key(key, others, design, None, "sglang"), design)
    assert verdict != rounds.REGRESSION, why
    # the rule before engines were kept: the reference server's runs, borrowed as if they were this key's
    reference_only = _spread([replace(r, key=key) for r in full.runs if r.engine == "reference"])
    _, before, _, _ = rounds.judge_key(ratios, True, plan_key(key, reference_only, design, None), design)
    assert before == rounds.REGRESSION  # the false alarm the device printed (exit 1)


def test_the_real_sglang_slowdown_is_never_cleared_beyond_what_the_rounds_can_see() -> None:
    """The server slowed from outside its code (-31 %, -16 % in two rounds). At its own engine's spread (real
    SGLang's boots of this tiny model wander tens of percent: 26 % per round with the 0.5.16/0.5.17 rounds and the
    twin boots of 2026-12-03) it is shown slower or left open; or, where cleared, only at a tolerance the plan
    says, with a slowdown it would catch 19 times in 20 that is larger than this one: never a claim of power the
    rounds lack."""
    key, ratios = _ab_log(SLOW)
    full = RoundSpread.for_class(ROOT / "baselines", "h200x1")
    others = _spread([r for r in full.runs if SLOW.name not in r.label])
    design = rounds.RoundSettings.make(2, 3, None).design
    plan = plan_key(key, others, design, None, "sglang")
    _, verdict, why, _ = rounds.judge_key(ratios, True, plan, design)
    measured = 1 - (ratios[0] * ratios[1]) ** 0.5
    if verdict == rounds.NO_REGRESSION:
        assert plan.tolerance > measured and plan.detectable is not None and plan.detectable > measured, why
        assert f"beyond {plan.tolerance:.1%}" in why


def test_the_ab_table_names_the_engine_and_version_of_each_side(tmp_path: Path) -> None:
    from specwatch.revisions import ab
    from specwatch.revisions.memo import GOOD, RevisionRun

    def side(name: str, version: str | None) -> RevisionRun:
        path = tmp_path / f"{name}.json"
        ResultSet(results=[Result.make("p", "w", "decode_tok_s", unit="tok/s", higher_is_better=True, samples=[1.0])],
                  machine={"engine": "sglang", "engine_version": version}).save(path)
        return RevisionRun(name, name, GOOD, "ok", 0, str(path), 1.0, "now", "s")

    same = rounds.Rounds(keys=[], rounds=2, last={"base": side("b", "0.5.16"), "head": side("h", "0.5.16")})
    assert ab._engines(same) == " (sglang 0.5.16)"
    upgrade = rounds.Rounds(keys=[], rounds=2, last={"base": side("b2", "0.5.16"), "head": side("h2", "0.5.17")})
    assert ab._engines(upgrade) == " (base sglang 0.5.16, head sglang 0.5.17)"
    assert ab._engines(rounds.Rounds(keys=[], rounds=0)) == ""


def test_ab_says_when_rounds_ran_beside_other_servers(tmp_path: Path) -> None:
    from specwatch.revisions import ab
    from specwatch.revisions.memo import GOOD, RevisionRun

    def run(name: str, shared_with: list[str]) -> RevisionRun:
        path = tmp_path / f"{name}.json"
        ResultSet(results=[Result.make("p", "w", "decode_tok_s", unit="tok/s", higher_is_better=True, samples=[1.0],
                                       extra={"shared_host": bool(shared_with), "shared_with": shared_with})],
                  machine={"engine": "reference"}).save(path)
        return RevisionRun(name, name, GOOD, "ok", 0, str(path), 1.0, "now", "s")

    quiet = rounds.Rounds(keys=[], rounds=1, measurements=[run("b1", []), run("h1", [])])
    assert ab._shared_rounds(quiet) == ""
    loud = rounds.Rounds(keys=[], rounds=1, measurements=[run("b2", []), run("h2", ["reference server (pid 7)"])])
    note = ab._shared_rounds(loud)
    assert note.startswith("1 of 2 measurement(s) ran while reference server (pid 7) shared the host")
    assert "a neighbour's need not" in note
