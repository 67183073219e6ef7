"""``specwatch ab-power``: simulated A/B verdicts of ab's own design at a recorded round spread."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specwatch.cli import main
from specwatch.errors import EXIT_OK, EXIT_USAGE
from specwatch.judge import paired
from specwatch.revisions.plan import KeyPlan
from specwatch.revisions.power import Operating, simulate
from specwatch.revisions.rounds import RoundSettings

PRIOR = paired.RoundPrior(0.008, 20)


def _plan(tolerance: float) -> KeyPlan:
    return KeyPlan(PRIOR, "test", tolerance, None, None, True)


@pytest.mark.parametrize("rounds", [2, 4])
def test_the_simulation_agrees_with_the_closed_form_at_a_fixed_number_of_rounds(rounds: int) -> None:
    """A design of one look spends all of alpha there: at the closed form's 19-in-20 size, about 95 % are flagged."""
    settings = RoundSettings(rounds, rounds, 0.005)
    size = paired.detectable(PRIOR, rounds, 0.01, 0.005)
    found = simulate(settings, _plan(0.005), size, PRIOR.spread, trials=4000, seed=3)
    assert 0.93 <= found.regression <= 0.97, found
    assert found.mean_rounds == rounds


def test_healthy_heads_are_rarely_flagged_and_big_slowdowns_always() -> None:
    settings = RoundSettings(2, 4, 0.005)
    healthy = simulate(settings, _plan(0.005), 0.0, PRIOR.spread, trials=3000, seed=1)
    slow = simulate(settings, _plan(0.005), 0.05, PRIOR.spread, trials=500, seed=1)
    assert healthy.regression <= 0.01  # alpha 0.01 spent across the three looks
    assert abs(healthy.regression + healthy.unsure + healthy.no_regression - 1) < 1e-9
    assert 2 <= healthy.mean_rounds <= 4 and healthy.mean_rounds > slow.mean_rounds
    assert slow.regression == 1.0 and slow.mean_rounds == 2.0 and slow.first_look == 1.0


def test_a_prior_that_understates_the_spread_raises_false_alarms() -> None:
    """What the simulation is for: rounds twice as noisy as the recorded spread say they are."""
    settings = RoundSettings(2, 4, 0.005)
    honest = simulate(settings, _plan(0.005), 0.0, PRIOR.spread, trials=4000, seed=2)
    noisier = simulate(settings, _plan(0.005), 0.0, 2 * PRIOR.spread, trials=4000, seed=2)
    assert noisier.regression > 3 * honest.regression


def test_the_same_seed_gives_the_same_table() -> None:
    settings = RoundSettings(2, 4, 0.005)
    plan = _plan(0.005)
    assert simulate(settings, plan, 0.02, 0.01, 300, seed=9) == simulate(settings, plan, 0.02, 0.01, 300, seed=9)


def test_twenty_repetitions_are_binomial() -> None:
    op = Operating(0.02, 100, 0.95, 0.05, 0.0, 2.0)
    assert op.at_least(19) == pytest.approx(0.95**20 + 20 * 0.95**19 * 0.05)
    assert Operating(0.02, 100, 1.0, 0.0, 0.0, 2.0).at_least(19) == 1.0


def _history(tmp_path: Path, ratios: list[list[float]]) -> Path:
    folder = tmp_path / "baselines" / "h200x1"
    folder.mkdir(parents=True)
    runs = [{"metric": "decode_tok_s", "ratios": r, "recorded": "2026-12-01T00:00:00+00:00", "label": f"run {i}"}
            for i, r in enumerate(ratios)]
    (folder / "round-spread.json").write_text(json.dumps({"version": 1, "machine_class": "h200x1", "runs": runs}))
    return tmp_path / "baselines"


def test_cli_prints_each_changes_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    history = _history(tmp_path, [[1.0, 1.01, 0.99], [0.98, 0.99, 0.985]])
    code = main(["ab-power", "--machine-class", "h200x1", "--round-history", str(history), "--rounds", "2",
                 "--max-rounds", "3", "--tolerance", "0.005", "--change", "0", "--change", "0.05", "--trials", "200",
                 "--seconds-per-round", "60"])
    out = capsys.readouterr().out
    assert code == EXIT_OK, out
    assert "over 4 df from 2 earlier A/B run(s) of decode_tok_s on h200x1" in out
    assert "tolerance 0.5% (given)" in out and "would have been caught 19 times in 20" in out
    assert "Lan-DeMets Pocock-type spending of alpha 0.01" in out
    rows = [line.split() for line in out.splitlines() if line.strip().startswith(("+0.0%", "-5.0%"))]
    assert [r[0] for r in rows] == ["+0.0%", "-5.0%"]
    assert rows[1][1] == "100.00%" and rows[1][-2] == "120"  # flagged every time, in 2 rounds of 60 s


def test_without_a_round_history_it_simulates_the_default_spread(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A class without round history is judged at the documented conservative default, by ab and here."""
    code = main(["ab-power", "--machine-class", "nowhere", "--round-history", str(tmp_path), "--change", "0",
                 "--change", "0.5", "--trials", "500"])
    out = capsys.readouterr().out
    assert code == EXIT_OK, out
    assert "the conservative default round spread 15% worth 3 rounds" in out
    assert "lognormal at a round spread of 15.00%" in out
    halved = next(line.split() for line in out.splitlines() if line.strip().startswith("-50.0%"))
    assert float(halved[2].rstrip("%")) > 90  # a 2x slower head is flagged at the first look (round 2)


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--machine-class", "nowhere", "--replay"], "--replay needs recorded rounds of decode_tok_s on nowhere"),
        (["--machine-class", "h200x1", "--replay", "--true-spread", "0.01"], "give it or --true-spread, not both"),
        (["--machine-class", "h200x1", "--change", "1.5"], "--change must be in [0, 1)"),
        (["--machine-class", "h200x1", "--rounds", "3", "--max-rounds", "2"], "--max-rounds must be at least"),
        (["--machine-class", "nowhere", "--rounds", "1", "--true-spread", "0.01"], "--rounds 1 needs a round spread"),
        (["--machine-class", "h200x1", "--true-spread", "nan"], "--true-spread must be a positive fraction"),
        (["--machine-class", "h200x1", "--true-spread", "700"], "--true-spread must be a positive fraction up to 1"),
        (["--machine-class", "h200x1", "--trials", "0"], "--trials must be 1-100000"),
        (["--machine-class", "h200x1", "--trials", "1000000000000"], "--trials must be 1-100000"),
        (["--machine-class", "h200x1", "--rounds", "1000000000000"], "--max-rounds must be at most 64"),
        (["--machine-class", "h200x1", "--seed=-1"], "--seed must be 0 or more"),
        (["--machine-class", "h200x1", "--alpha", "0.7"], "--alpha must be in (0, 0.5)"),
        (["--machine-class", "h200x1", "--seconds-per-round", "-3"], "--seconds-per-round must be positive"),
        (["--machine-class", "broken"], "round-spread file"),
    ],
)
def test_bad_input_is_one_line(argv: list[str], fragment: str, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    history = _history(tmp_path, [[1.0, 1.01, 0.99]])
    (history / "flat").mkdir()
    (history / "flat" / "round-spread.json").write_text(
        '{"version": 1, "runs": [{"metric": "decode_tok_s", "ratios": [1.0, 1.0, 1.0]}]}')
    (history / "broken").mkdir()
    (history / "broken" / "round-spread.json").write_text('{"version": 1, "runs": [{"metric": "decode_tok_s"}]}')
    code = main(["ab-power", "--round-history", str(history), "--trials", "20", *argv])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE
    assert fragment in err and len(err.strip().splitlines()) == 1, err
    assert "ab-power: ab-power" not in err
