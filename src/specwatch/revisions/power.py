"""``specwatch ab-power``: what ``specwatch ab`` can see on a machine class, before a GPU is spent on it.

It simulates many A/B verdicts of the exact design a run would use (``--rounds``, ``--max-rounds``
while unsure, ``--tolerance``, ``--alpha``, the round spread of earlier A/B runs pooled in) with
rounds drawn at the machine class's recorded round spread, and judges each with the rule every
A/B uses (:func:`specwatch.revisions.rounds.judge_ratios`). For each true change it prints how
often a verdict is a regression, unsure or no regression, how many rounds it takes, and the chance
that 20 repetitions meet a "19 of 20 flagged" or "0 of 20 false alarms" target.

A closed form (:func:`specwatch.judge.paired.detectable`) gives the 19-in-20 size for a fixed
number of rounds; the simulation adds what it leaves out: the extra rounds taken while unsure,
which both raise the power and add looks at the data (a false alarm can come at any of them).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from typing import TextIO

import numpy as np

from specwatch.errors import EXIT_OK, SpecwatchError, UsageError
from specwatch.judge import paired
from specwatch.paths import DEFAULT_BASELINE_DIR
from specwatch.revisions.rounds import NO_REGRESSION, REGRESSION, UNSURE, RoundSettings, judge_ratios
from specwatch.store.roundspread import RoundSpread

#: true slowdowns simulated unless told otherwise: none (the false-alarm rate), then 1-4 %
DEFAULT_CHANGES = (0.0, 0.01, 0.02, 0.03, 0.04)
#: bounds of a simulation: a round spread beyond 100 % (of the log) is no machine, and each
#: verdict costs up to max_rounds judgements
MAX_SPREAD, MAX_TRIALS, MAX_ROUNDS = 1.0, 100_000, 1000


@dataclass(frozen=True)
class Operating:
    """How simulated A/B verdicts of one true change came out (fractions of ``trials``)."""

    change: float  # the true slowdown, a fraction (0.02: head 2 % slower)
    trials: int
    regression: float
    unsure: float
    no_regression: float
    mean_rounds: float

    def at_least(self, k: int, of: int = 20) -> float:
        """Chance that ``of`` repetitions give at least ``k`` regressions (binomial)."""
        return sum(math.comb(of, j) * self.regression**j * (1 - self.regression) ** (of - j) for j in range(k, of + 1))


def check_inputs(settings: RoundSettings, prior: paired.RoundPrior | None, change: float, true_spread: float,
                 trials: int) -> None:
    """UsageError (one line) unless a simulation of these inputs is possible and bounded."""
    if not 0 <= change < 1:
        raise UsageError(f"--change must be in [0, 1) (a slowdown as a fraction), got {change:g}")
    if not 0 < true_spread <= MAX_SPREAD:  # NaN fails too
        raise UsageError(f"--true-spread must be a positive fraction up to {MAX_SPREAD:g}, got {true_spread:g}")
    if not 1 <= trials <= MAX_TRIALS:
        raise UsageError(f"--trials must be 1-{MAX_TRIALS}, got {trials}")
    if settings.max_rounds > MAX_ROUNDS:
        raise UsageError(f"--max-rounds must be at most {MAX_ROUNDS}, got {settings.max_rounds}")
    if settings.rounds < 2 and prior is None:
        raise UsageError("--rounds 1 needs a round spread of earlier A/B runs (none is recorded)")


def simulate(settings: RoundSettings, prior: paired.RoundPrior | None, change: float, true_spread: float,
             trials: int = 2000, seed: int = 0) -> Operating:
    """Simulate ``trials`` A/B verdicts of a head ``change`` slower than base (higher is better).

    Each round's head/base ratio is lognormal around ``1 - change`` with SD ``true_spread`` (of the
    log). As :func:`specwatch.revisions.rounds.alternate` does, a verdict is first taken after
    ``settings.rounds`` rounds, then after each further round while unsure, up to ``max_rounds``."""
    check_inputs(settings, prior, change, true_spread, trials)
    rng = np.random.default_rng(seed)
    counts = {REGRESSION: 0, UNSURE: 0, NO_REGRESSION: 0}
    total_rounds = 0
    for _ in range(trials):
        row = np.exp(rng.normal(math.log1p(-change), true_spread, size=settings.max_rounds))
        for n in range(settings.rounds, settings.max_rounds + 1):
            _, verdict, _ = judge_ratios(row[:n].tolist(), True, settings.tolerance, settings.alpha, prior)
            if verdict != UNSURE:
                break
        counts[verdict] += 1
        total_rounds += n
    return Operating(change, trials, counts[REGRESSION] / trials, counts[UNSURE] / trials,
                     counts[NO_REGRESSION] / trials, total_rounds / trials)


def header(settings: RoundSettings, prior: paired.RoundPrior | None, source: str, true_spread: float, trials: int,
           out: TextIO, seconds_per_round: float | None = None) -> None:
    """The lines ``ab-power`` prints before its rows: the design, the spread, the closed form, the columns."""
    print(f"specwatch ab-power: {settings.rounds} round(s), up to {settings.max_rounds} while unsure, tolerance "
          f"{settings.tolerance:.1%}, alpha {settings.alpha:g}", file=out)
    if prior is not None:
        print(f"  round spread of earlier A/B runs: {prior.spread:.2%} over {prior.df} df ({source}), pooled with "
              f"each verdict's rounds", file=out)
        first, most = (paired.detectable(prior, n, settings.alpha, settings.tolerance)
                       for n in (settings.rounds, settings.max_rounds))
        print(f"  closed form: {settings.rounds} round(s) flag {first:.1%} or more 19 times in 20, "
              f"{settings.max_rounds} rounds {most:.1%}", file=out)
    else:
        print(f"  no round spread of earlier A/B runs ({source}): each verdict judged on its own rounds", file=out)
    print(f"  rounds simulated at a true round spread of {true_spread:.2%}; {trials} verdicts per row", file=out)
    wall = "  mean wall" if seconds_per_round else ""
    print(f"  {'true change':>11}  {'regression':>10}  {'unsure':>7}  {'no regr.':>8}  {'rounds':>6}  "
          f"{'P(>=19 of 20 flagged)':>21}  {'P(0 of 20 false alarms)':>23}{wall}", file=out, flush=True)


def row(r: Operating, out: TextIO, seconds_per_round: float | None = None) -> None:
    """One simulated change's line of the table (printed as soon as it is simulated)."""
    flagged = f"{r.at_least(19):.3f}" if r.change > 0 else "-"
    quiet = f"{(1 - r.regression) ** 20:.3f}" if r.change == 0 else "-"
    extra = f"  {r.mean_rounds * seconds_per_round:7.0f} s" if seconds_per_round else ""
    print(f"  {(-r.change or 0.0):>+11.1%}  {r.regression:>10.1%}  {r.unsure:>7.1%}  {r.no_regression:>8.1%}  "
          f"{r.mean_rounds:>6.2f}  {flagged:>21}  {quiet:>23}{extra}", file=out, flush=True)


class ABPower:
    """``specwatch ab-power``: the operating characteristic of ``specwatch ab`` on a machine class."""

    name = "ab-power"
    help = ("simulate specwatch ab verdicts at a machine class's recorded round spread: how often a given "
            "slowdown is flagged, and how often a healthy head is")

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--machine-class", required=True, help="e.g. h200x1 (its round-spread.json is read)")
        parser.add_argument("--round-history", default=DEFAULT_BASELINE_DIR,
                            help="baseline folder holding <machine-class>/round-spread.json (default: %(default)s)")
        parser.add_argument("--metric", default="decode_tok_s", help="metric whose round spread is used "
                                                                     "(default: %(default)s)")
        parser.add_argument("--rounds", type=int, default=4, help="rounds before the first verdict (as ab)")
        parser.add_argument("--max-rounds", type=int, default=None, help="rounds allowed while unsure "
                                                                         "(default: twice --rounds, as ab)")
        parser.add_argument("--tolerance", type=float, default=0.01, help="as ab's (default 0.01)")
        parser.add_argument("--alpha", type=float, default=0.01, help="as ab's (default 0.01)")
        parser.add_argument("--change", type=float, action="append", default=None,
                            help="true slowdown to simulate, a fraction (repeatable; default 0, 0.01 ... 0.04)")
        parser.add_argument("--true-spread", type=float, default=None,
                            help="round spread the rounds are drawn at (default: the recorded one)")
        parser.add_argument("--trials", type=int, default=2000, help="verdicts simulated per change")
        parser.add_argument("--seed", type=int, default=0, help="of the simulation's random draws (>= 0)")
        parser.add_argument("--seconds-per-round", type=float, default=None,
                            help="wall time of one round (both sides), to print each verdict's mean wall time")

    @classmethod
    def run_from_args(cls, args: argparse.Namespace, out: TextIO | None = None) -> int:
        out = out or sys.stdout
        try:
            if args.seconds_per_round is not None and not args.seconds_per_round > 0:
                raise UsageError(f"--seconds-per-round must be positive, got {args.seconds_per_round:g}")
            max_rounds = 2 * args.rounds if args.max_rounds is None else args.max_rounds
            history = None if args.round_history == "none" else args.round_history
            settings = RoundSettings.make(args.rounds, max_rounds, args.tolerance, (args.metric,), args.alpha, history)
            prior, source = None, "--round-history none"
            if history is not None:
                spread = RoundSpread.for_class(history, args.machine_class)
                prior, source = spread.prior(args.metric), spread.describe(args.metric)
            if args.seed < 0:
                raise UsageError(f"--seed must be 0 or more, got {args.seed}")
            true_spread = args.true_spread if args.true_spread is not None else prior.spread if prior else None
            if true_spread is None:
                raise UsageError(f"no round spread of {args.metric} is recorded for {args.machine_class} "
                                 f"({source}); give --true-spread")
            if args.true_spread is None and not 0 < true_spread <= MAX_SPREAD:
                raise UsageError(f"the recorded round spread of {args.metric} ({source}) is {true_spread:.2%}, "
                                 f"which no simulation can draw from (0 means every earlier run's rounds agreed "
                                 f"exactly); give --true-spread")
            changes = args.change or DEFAULT_CHANGES
            for c in changes:  # every input checked before the first line is printed
                check_inputs(settings, prior, c, true_spread, args.trials)
        except SpecwatchError as exc:
            print(f"specwatch ab-power: {exc}", file=sys.stderr)
            return exc.exit_code
        header(settings, prior, source, true_spread, args.trials, out, args.seconds_per_round)
        for c in changes:  # each row as soon as it is simulated: a large --trials takes a while
            row(simulate(settings, prior, c, true_spread, args.trials, args.seed), out, args.seconds_per_round)
        return EXIT_OK


__all__ = ["DEFAULT_CHANGES", "MAX_ROUNDS", "MAX_SPREAD", "MAX_TRIALS", "ABPower", "Operating", "check_inputs",
           "header", "row", "simulate"]
