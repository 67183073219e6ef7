"""`specwatch ab` and `ab-ladder` name a change past the tolerance on the good side: "faster", a finding to explain.

The case: SGLang 0.5.13 -> 0.5.14 on an H200 at Llama-3.1-8B's sizes (the release ladder of 2026-12-06,
docs/validation/data/2026-12-06-sglang-8b-ladder-4-x1): decode tok/s +13.7% and +9.7% in two rounds against the
8B shape's recorded round spread, tolerance 2%. The verdict stays "no regression" (exit 0); the report and the
verdict file now say how much faster, as they say how much slower.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from specwatch import errors
from specwatch.revisions import ab, rounds, verdictfile
from specwatch.revisions.plan import plan_key
from specwatch.store.roundspread import RoundSpread

ROOT = Path(__file__).resolve().parents[2]
STORE = ROOT / "docs" / "validation" / "sglang" / "baselines"
LADDER = ROOT / "docs" / "validation" / "data" / "2026-12-06-sglang-8b-ladder-4-x1" / "sgl8b-ladder-eagle3.json"
KEY = "sgl8b-eagle3/single-stream/decode_tok_s"
SETTINGS = rounds.RoundSettings.make(1, 2, None, round_history=str(STORE))  # the ladder's looks: after rounds 1 and 2


def _pair(base: str) -> dict:
    return next(p for p in json.loads(LADDER.read_text())["pairs"] if p["base"] == base)


def _outcome(key: str, ratios: list[float], higher_is_better: bool) -> rounds.Rounds:
    plans = {key: plan_key(key, RoundSpread.for_class(STORE, "h200x1"), SETTINGS.design, None)}
    base = [{key: ([300.0] * 12, "tok/s", higher_is_better)} for _ in ratios]
    head = [{key: ([300.0 * r] * 12, "tok/s", higher_is_better)} for r in ratios]
    return rounds.Rounds(rounds.judge(base, head, SETTINGS, plans), len(ratios), plans=plans)


def test_the_release_pairs_rounds_are_faster_and_still_no_regression() -> None:
    recorded = next(k for k in _pair("eagle3-8b-0.5.13")["keys"] if k["key"] == KEY)
    outcome = _outcome(KEY, recorded["round_ratios"], True)
    (key,) = outcome.keys
    assert key.verdict == rounds.NO_REGRESSION and key.tolerance == pytest.approx(recorded["tolerance"])
    # the numbers the device printed for this pair: +13.7% [+11.7%, +17.0%] at ±2%
    assert key.faster == "faster by 13.7% [11.7%, 17.0%], beyond the 2.0% tolerance"
    out = io.StringIO()
    assert ab.report(outcome, out) == errors.EXIT_OK
    assert f"[ab] FASTER: {KEY}: faster by 13.7% [11.7%, 17.0%], beyond the 2.0% tolerance" in out.getvalue()
    assert verdictfile.key_json(key)["faster"] == key.faster


@pytest.mark.parametrize("base", ["eagle3-8b-0.5.12", "eagle3-8b-0.5.14", "eagle3-8b-0.5.15.post1"])
def test_the_other_release_pairs_within_a_percent_are_not_faster(base: str) -> None:
    recorded = next(k for k in _pair(base)["keys"] if k["key"] == KEY)
    outcome = _outcome(KEY, recorded["round_ratios"], True)
    assert outcome.keys[0].faster is None
    out = io.StringIO()
    assert ab.report(outcome, out) == errors.EXIT_OK and "FASTER" not in out.getvalue()


def test_a_lower_is_better_key_is_faster_when_it_falls_past_the_tolerance() -> None:
    """A cycle time 10% shorter in two rounds is faster; 10% longer is a regression, never faster."""
    summary = rounds.paired.PairedRounds(2, 0.90, 0.88, 0.92, 0.001, 0.01, None, 4)
    assert rounds.faster_by(summary, False, 0.02) == "faster by 10.0% [8.0%, 12.0%], beyond the 2.0% tolerance"
    assert rounds.faster_by(summary, False, 0.09) is None  # its near end (8%) is within a 9% tolerance
    longer = rounds.paired.PairedRounds(2, 1.10, 1.08, 1.12, 0.999, 0.01, None, 4)
    assert rounds.faster_by(longer, False, 0.02) is None and rounds.faster_by(longer, True, 0.02) is not None


def test_the_ladder_names_a_faster_pair_beside_its_verdicts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """0.5.16's two real rounds (2026-12-04), then a version 12% faster (the same samples scaled): the pair is no
    regression, and the ladder's summary names it faster, with the pair."""
    from test_ab_ladder import V16, _ladder, _measure, _profiles, _scaled

    from specwatch.revisions import ladder

    profiles = _profiles(tmp_path, ["v16", "fast"])
    fast = {n: _scaled(V16[n], tmp_path / f"fast-r{n}.json", 1.12) for n in (1, 2)}
    files = {"v16": V16, "fast": fast}
    monkeypatch.setattr(ladder, "measure", _measure(lambda stem, n: files[stem][n], []))
    done, _said = _ladder(tmp_path, profiles, start="first")
    out = io.StringIO()
    assert done.pairs[0].verdict == rounds.NO_REGRESSION and ladder.report(done, out) == 0
    line = next(x for x in out.getvalue().splitlines() if "faster beyond the tolerance" in x)
    assert "v16 -> fast: sgl8b-eagle3/single-stream/decode_tok_s faster by 12.0% [" in line, line


def test_the_validation_page_reads_faster_from_a_verdict_file_written_before_the_field() -> None:
    """The committed 2026-12-06 verdict file has no ``faster`` field; the page's rule on its change, interval and
    tolerance gives the words the report now prints for the same rounds."""
    import sys

    sys.path.insert(0, str(ROOT / "docs" / "validation"))
    import claims  # noqa: F401  (first: it registers its claim modules in the page's order)
    import claims_sglang_releases

    recorded = next(k for k in _pair("eagle3-8b-0.5.13")["keys"] if k["key"] == KEY)
    assert "faster" not in recorded
    (key,) = _outcome(KEY, recorded["round_ratios"], True).keys
    assert claims_sglang_releases.faster(recorded) == verdictfile.key_json(key)["faster"] == key.faster
    assert claims_sglang_releases.faster(next(k for k in _pair("eagle3-8b-0.5.12")["keys"] if k["key"] == KEY)) is None


def _memo_rounds(release: str) -> list:
    from specwatch.revisions.step import samples_of

    memo = LADDER.parent / "memo"
    return [samples_of(next(memo.glob(f"*/ladder-*-eagle3-8b-{release}-*-r{n}.results.json"))) for n in (1, 2)]


def test_a_pair_whose_sides_differ_in_noise_is_noted_from_the_boots_own_samples() -> None:
    """The ladder's real boots: 0.5.13's 12 requests spread 1.10% and 0.22% (MAD over median) in its two boots,
    0.5.14's 0.02% and 0.06%; the round history (0.7%, from 0.5.16 runs) understated that pair, whose round 2
    (+9.7%) fell outside its round-1 interval. Such a key is noted and not settled before round 2.
    0.5.14 -> 0.5.15.post1, both quiet, gets no note and settles after round 1, as on the device."""
    plans = {KEY: plan_key(KEY, RoundSpread.for_class(STORE, "h200x1"), SETTINGS.design, None)}
    base, head = _memo_rounds("0.5.13"), _memo_rounds("0.5.14")
    key = next(k for k in rounds.judge(base, head, SETTINGS, plans) if k.key == KEY)
    assert key.base_jitter == pytest.approx(0.0066, abs=0.0002) and key.head_jitter == pytest.approx(0.0004, abs=1e-4)
    assert key.uneven is not None and key.uneven.startswith("base varies 0.66% from sample to sample within a boot, "
                                                            "head 0.04%")
    out = io.StringIO()
    ab.report(rounds.Rounds([key], 2, plans=plans), out)
    assert f"[ab] note: {KEY}: base varies 0.66%" in out.getvalue()
    assert verdictfile.key_json(key)["uneven"] == key.uneven
    # not settled on the round history alone: round 1 leaves it open, round 2 settles it, and still faster
    assert key.decided_at == 2 and key.verdict == rounds.NO_REGRESSION and key.rounds.rounds == 2
    assert key.faster is not None and key.faster.startswith("faster by 11.7% [")  # +13.7% and +9.7%, pooled
    (first,) = [k for k in rounds.judge(base[:1], head[:1], SETTINGS, plans) if k.key == KEY]
    assert first.verdict == rounds.UNSURE and first.decided_at is None
    assert first.faster is None  # its round-1 interval lies past +2%, but an open key reports no FASTER
    assert "not settled before round 2: base varies 1.10% from sample to sample within a boot, head 0.02%" in \
        first.message, first.message
    quiet = rounds.judge(_memo_rounds("0.5.14"), _memo_rounds("0.5.15.post1"), SETTINGS, plans)
    assert all(k.uneven is None for k in quiet)
    assert next(k for k in quiet if k.key == KEY).decided_at == 1  # as the device settled it
