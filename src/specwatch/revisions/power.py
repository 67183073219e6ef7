"""``specwatch ab-power``: what ``specwatch ab`` can see on a machine class, before a GPU is spent on it.

It simulates many A/B verdicts of the exact design a run would use (the looks after ``--rounds``
.. ``--max-rounds``, the alpha spending across them, ``--tolerance`` or each key's own, the round
spread of earlier A/B runs pooled in, or the conservative default where none is recorded) and
judges each with the rule every A/B uses (:func:`specwatch.judge.sequential.run_paths` over
:func:`specwatch.judge.sequential.look`, the rule :func:`specwatch.revisions.rounds.judge_key`
replays). For each true change it prints how often a verdict is a regression (in all, and at the
first look), unsure or no regression, how many rounds it takes, and the chance that 20 repetitions
meet a "19 of 20 flagged" or "0 of 20 false alarms" target.

The rounds are lognormal at the recorded round spread (``--true-spread`` to ask "what if the
machine is noisier"), or, with ``--replay``, drawn with replacement from the recorded rounds
themselves (each run's log ratios around its own mean): the false-alarm rate and the power on the
machine's real round noise, heavy tails and all, rather than on a model of it.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

import numpy as np

from specwatch.errors import EXIT_OK, SpecwatchError, UsageError
from specwatch.judge import sequential
from specwatch.paths import DEFAULT_BASELINE_DIR
from specwatch.revisions.plan import KeyPlan, plan_key
from specwatch.revisions.rounds import DEFAULT_ALPHA, DEFAULT_MAX_ROUNDS, DEFAULT_ROUNDS, RoundSettings
from specwatch.store.roundspread import RoundSpread

#: true slowdowns simulated unless told otherwise: none (the false-alarm rate), then 1-5 %
DEFAULT_CHANGES = (0.0, 0.01, 0.02, 0.03, 0.05)
#: bounds of a simulation: a round spread beyond 100 % (of the log) is no machine
MAX_SPREAD, MAX_TRIALS = 1.0, 100_000


@dataclass(frozen=True)
class Operating:
    """How simulated A/B verdicts of one true change came out (fractions of ``trials``)."""

    change: float  # the true slowdown, a fraction (0.02: head 2 % slower)
    trials: int
    regression: float
    unsure: float
    no_regression: float
    mean_rounds: float
    first_look: float = 0.0  # flagged at the first look
    slower: float = 0.0  # shown slower at the last look, not beyond the tolerance

    def at_least(self, k: int, of: int = 20) -> float:
        """Chance that ``of`` repetitions give at least ``k`` regressions (binomial)."""
        return sum(math.comb(of, j) * self.regression**j * (1 - self.regression) ** (of - j) for j in range(k, of + 1))


def check_inputs(settings: RoundSettings, plan: KeyPlan, change: float, true_spread: float | None,
                 trials: int) -> None:
    """UsageError (one line) unless a simulation of these inputs is possible and bounded."""
    if not 0 <= change < 1:
        raise UsageError(f"--change must be in [0, 1) (a slowdown as a fraction), got {change:g}")
    if true_spread is not None and not 0 < true_spread <= MAX_SPREAD:  # NaN fails too
        raise UsageError(f"--true-spread must be a positive fraction up to {MAX_SPREAD:g}, got {true_spread:g}")
    if not 1 <= trials <= MAX_TRIALS:
        raise UsageError(f"--trials must be 1-{MAX_TRIALS}, got {trials}")
    if settings.rounds < 2 and not plan.recorded:
        raise UsageError("--rounds 1 needs a round spread of earlier A/B runs (none is recorded)")


def simulate(settings: RoundSettings, plan: KeyPlan, change: float, true_spread: float | None = None,
             trials: int = 2000, seed: int = 0, pool: list[float] | None = None) -> Operating:
    """Simulate ``trials`` A/B verdicts of a head ``change`` slower than base (higher is better).

    Each round's log head/base ratio is ``log(1 - change)`` plus noise: normal with SD
    ``true_spread`` (default: the plan's prior spread), or drawn from ``pool`` (recorded residuals).
    Every verdict is taken look after look as :func:`specwatch.revisions.rounds.alternate` does."""
    check_inputs(settings, plan, change, true_spread, trials)
    design = settings.design
    noise = sequential.draws(plan.prior, design.last, trials, seed, true_spread, pool)
    code, used = sequential.run_paths(noise + math.log1p(-change), plan.prior, plan.tolerance, design)
    flagged = code == sequential.REGRESSION
    return Operating(change, trials, float(flagged.mean()), float(np.mean(code == sequential.UNDECIDED)),
                     float(np.mean(code == sequential.NO_REGRESSION)), float(used.mean()),
                     float(np.mean(flagged & (used == design.first))), float(np.mean(code == sequential.SLOWER)))


def header(settings: RoundSettings, plan: KeyPlan, key: str, drawn: str, trials: int, out: TextIO,
           seconds_per_round: float | None = None) -> None:
    """The lines ``ab-power`` prints before its rows: the design, the plan, how rounds are drawn, the columns."""
    design = settings.design
    print(f"specwatch ab-power: {design.describe()}", file=out)
    print(f"  {plan.line(key, design, settings.tolerance is not None)}", file=out)
    print(f"  rounds drawn {drawn}; {trials} verdicts per row", file=out)
    wall = "  mean wall" if seconds_per_round else ""
    print(f"  {'true change':>11}  {'regression':>10}  {f'at round {design.first}':>10}  {'unsure':>7}  "
          f"{'slower':>7}  {'no regr.':>8}  {'rounds':>6}  {'P(>=19 of 20 flagged)':>21}  "
          f"{'P(0 of 20 false alarms)':>23}{wall}", file=out, flush=True)


def row(r: Operating, out: TextIO, seconds_per_round: float | None = None) -> None:
    """One simulated change's line of the table (printed as soon as it is simulated)."""
    flagged = f"{r.at_least(19):.3f}" if r.change > 0 else "-"
    quiet = f"{(1 - r.regression) ** 20:.3f}" if r.change == 0 else "-"
    extra = f"  {r.mean_rounds * seconds_per_round:7.0f} s" if seconds_per_round else ""
    print(f"  {(-r.change or 0.0):>+11.1%}  {r.regression:>10.2%}  {r.first_look:>10.2%}  {r.unsure:>7.1%}  "
          f"{r.slower:>7.1%}  {r.no_regression:>8.1%}  {r.mean_rounds:>6.2f}  {flagged:>21}  {quiet:>23}{extra}",
          file=out, flush=True)


def command(
    *,
    machine_class: str,
    round_history: str = DEFAULT_BASELINE_DIR,
    metric: str = "decode_tok_s",
    key: str | None = None,
    rounds: int = DEFAULT_ROUNDS,
    max_rounds: int | None = None,
    tolerance: float | None = None,
    alpha: float = DEFAULT_ALPHA,
    spending: str = sequential.POCOCK,
    changes: Sequence[float] | None = None,
    true_spread: float | None = None,
    replay: bool = False,
    trials: int = 4000,
    seed: int = 0,
    seconds_per_round: float | None = None,
    out: TextIO | None = None,
) -> int:
    """``specwatch ab-power``: the operating characteristic of ``specwatch ab`` on ``machine_class``, one row per
    true change (``changes``, default :data:`DEFAULT_CHANGES`) printed as soon as it is simulated; the exit
    code (0, or 2 with one line on stderr when an input is invalid). ``round_history`` 'none': the default
    round spread."""
    out = out or sys.stdout
    try:
        if seconds_per_round is not None and not seconds_per_round > 0:
            raise UsageError(f"--seconds-per-round must be positive, got {seconds_per_round:g}")
        if seed < 0:
            raise UsageError(f"--seed must be 0 or more, got {seed}")
        if replay and true_spread is not None:
            raise UsageError("--replay draws the recorded rounds: give it or --true-spread, not both")
        max_rounds = max(DEFAULT_MAX_ROUNDS, rounds) if max_rounds is None else max_rounds
        history = None if round_history == "none" else round_history
        settings = RoundSettings.make(rounds, max_rounds, tolerance, (metric,), alpha, history, spending)
        label = key or f"<any key>/{metric}"
        spread = RoundSpread.for_class(history, machine_class) if history is not None else None
        changes = tuple(changes or DEFAULT_CHANGES)
        for c in changes:  # cheap checks first: a plan costs a simulation
            if not 0 <= c < 1:
                raise UsageError(f"--change must be in [0, 1) (a slowdown as a fraction), got {c:g}")
        if true_spread is not None and not 0 < true_spread <= MAX_SPREAD:
            raise UsageError(f"--true-spread must be a positive fraction up to {MAX_SPREAD:g}, got {true_spread:g}")
        if not 1 <= trials <= MAX_TRIALS:
            raise UsageError(f"--trials must be 1-{MAX_TRIALS}, got {trials}")
        plan = plan_key(key or metric, spread, settings.design, settings.tolerance)
        pool = None
        if replay:
            pool = spread.residuals(key or metric) if spread is not None and plan.recorded else []
            if not pool:
                raise UsageError(f"--replay needs recorded rounds of {key or metric} on {machine_class}; none are "
                                 f"recorded")
            drawn = f"from {len(pool)} recorded rounds of {plan.source} (a replay)"
        else:
            at = true_spread if true_spread is not None else plan.prior.spread
            drawn = f"lognormal at a round spread of {at:.2%}"
        for c in changes:
            check_inputs(settings, plan, c, true_spread, trials)
    except SpecwatchError as exc:
        print(f"specwatch ab-power: {exc}", file=sys.stderr)
        return exc.exit_code
    header(settings, plan, label, drawn, trials, out, seconds_per_round)
    for c in changes:  # each row as soon as it is simulated
        row(simulate(settings, plan, c, true_spread, trials, seed, pool), out, seconds_per_round)
    return EXIT_OK


__all__ = ["DEFAULT_CHANGES", "MAX_SPREAD", "MAX_TRIALS", "Operating", "check_inputs", "command", "header", "row",
           "simulate"]
