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

import argparse
import math
import sys
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


class ABPower:
    """``specwatch ab-power``: the operating characteristic of ``specwatch ab`` on a machine class."""

    name = "ab-power"
    help = ("simulate specwatch ab verdicts at a machine class's recorded round spread (or replay its recorded "
            "rounds): how often a given slowdown is flagged, and how often a healthy head is")

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--machine-class", required=True, help="e.g. h200x1 (its round-spread.json is read)")
        parser.add_argument("--round-history", default=DEFAULT_BASELINE_DIR,
                            help="baseline folder holding <machine-class>/round-spread.json (default: %(default)s; "
                                 "'none': the default round spread)")
        parser.add_argument("--metric", default="decode_tok_s", help="metric whose round spread is used, pooled "
                                                                     "over its keys (default: %(default)s)")
        parser.add_argument("--key", default=None, help="a result key, e.g. large-eagle3-tuned/single-stream/"
                                                        "decode_tok_s: its own round spread, as ab plans it")
        parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, help="rounds before the first look (as ab)")
        parser.add_argument("--max-rounds", type=int, default=None,
                            help=f"the last look (default max({DEFAULT_MAX_ROUNDS}, --rounds), as ab)")
        parser.add_argument("--tolerance", type=float, default=None,
                            help="as ab's (default: the smallest the design settles at the round spread, as ab)")
        parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help="as ab's (default %(default)s)")
        parser.add_argument("--spending", choices=sequential.SPENDING, default=sequential.POCOCK,
                            help="as ab's (default: %(default)s)")
        parser.add_argument("--change", type=float, action="append", default=None,
                            help="true slowdown to simulate, a fraction (repeatable; default 0, 0.01, 0.02, 0.03, "
                                 "0.05)")
        parser.add_argument("--true-spread", type=float, default=None,
                            help="round spread the rounds are drawn at (default: the recorded one)")
        parser.add_argument("--replay", action="store_true",
                            help="draw rounds from the recorded rounds themselves (each run's around its own mean) "
                                 "instead of a lognormal")
        parser.add_argument("--trials", type=int, default=4000, help="verdicts simulated per change")
        parser.add_argument("--seed", type=int, default=0, help="of the simulation's random draws (>= 0)")
        parser.add_argument("--seconds-per-round", type=float, default=None,
                            help="wall time of one round (both sides), to print each verdict's mean wall time")

    @classmethod
    def run_from_args(cls, args: argparse.Namespace, out: TextIO | None = None) -> int:
        out = out or sys.stdout
        try:
            if args.seconds_per_round is not None and not args.seconds_per_round > 0:
                raise UsageError(f"--seconds-per-round must be positive, got {args.seconds_per_round:g}")
            if args.seed < 0:
                raise UsageError(f"--seed must be 0 or more, got {args.seed}")
            if args.replay and args.true_spread is not None:
                raise UsageError("--replay draws the recorded rounds: give it or --true-spread, not both")
            max_rounds = max(DEFAULT_MAX_ROUNDS, args.rounds) if args.max_rounds is None else args.max_rounds
            history = None if args.round_history == "none" else args.round_history
            settings = RoundSettings.make(args.rounds, max_rounds, args.tolerance, (args.metric,), args.alpha, history,
                                          args.spending)
            key = args.key or f"<any key>/{args.metric}"
            spread = RoundSpread.for_class(history, args.machine_class) if history is not None else None
            changes = args.change or DEFAULT_CHANGES
            for c in changes:  # cheap checks first: a plan costs a simulation
                if not 0 <= c < 1:
                    raise UsageError(f"--change must be in [0, 1) (a slowdown as a fraction), got {c:g}")
            if args.true_spread is not None and not 0 < args.true_spread <= MAX_SPREAD:
                raise UsageError(f"--true-spread must be a positive fraction up to {MAX_SPREAD:g}, "
                                 f"got {args.true_spread:g}")
            if not 1 <= args.trials <= MAX_TRIALS:
                raise UsageError(f"--trials must be 1-{MAX_TRIALS}, got {args.trials}")
            plan = plan_key(args.key or args.metric, spread, settings.design, settings.tolerance)
            pool = None
            if args.replay:
                pool = spread.residuals(args.key or args.metric) if spread is not None and plan.recorded else []
                if not pool:
                    raise UsageError(f"--replay needs recorded rounds of {args.key or args.metric} on "
                                     f"{args.machine_class}; none are recorded")
                drawn = f"from {len(pool)} recorded rounds of {plan.source} (a replay)"
            else:
                at = args.true_spread if args.true_spread is not None else plan.prior.spread
                drawn = f"lognormal at a round spread of {at:.2%}"
            for c in changes:
                check_inputs(settings, plan, c, args.true_spread, args.trials)
        except SpecwatchError as exc:
            print(f"specwatch ab-power: {exc}", file=sys.stderr)
            return exc.exit_code
        header(settings, plan, key, drawn, args.trials, out, args.seconds_per_round)
        for c in changes:  # each row as soon as it is simulated
            row(simulate(settings, plan, c, args.true_spread, args.trials, args.seed, pool), out,
                args.seconds_per_round)
        return EXIT_OK


__all__ = ["DEFAULT_CHANGES", "MAX_SPREAD", "MAX_TRIALS", "ABPower", "Operating", "check_inputs", "header", "row",
           "simulate"]
