"""``specwatch ab``, ``specwatch ab-ladder`` and ``specwatch ab-power``: their options, turned into the
plain-keyword commands of :mod:`specwatch.revisions.ab`, :mod:`specwatch.revisions.ladder` and
:mod:`specwatch.revisions.power`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from specwatch.errors import EXIT_USAGE
from specwatch.judge import sequential
from specwatch.paths import DEFAULT_BASELINE_DIR
from specwatch.revisions.ab import DEFAULT_TOLERANCE
from specwatch.revisions.rounds import DEFAULT_ALPHA, DEFAULT_MAX_ROUNDS, DEFAULT_METRICS, DEFAULT_ROUNDS


def _cmd_ab(args: argparse.Namespace) -> int:
    from specwatch.revisions import ab

    rest = list(args.pytest_args)
    if rest and rest[0] == "--":
        rest = rest[1:]
    elif rest:
        print(f"specwatch ab: put pytest arguments after --: {' '.join(rest)}", file=sys.stderr)
        return EXIT_USAGE
    return ab.command(pytest_args=rest, repo=args.repo, base=args.base, head=args.head,
                      base_profile=args.base_profile, head_profile=args.head_profile, setup=args.setup,
                      rounds=args.rounds, max_rounds=args.max_rounds, tolerance=args.tolerance, alpha=args.alpha,
                      spending=args.spending, round_history=args.round_history, record_rounds=args.record_rounds,
                      metrics=args.metric, memo=args.memo, python=args.python, workdir=args.workdir,
                      timeout_s=args.timeout_s, resume=args.resume, json_path=args.json)


def _cmd_ab_ladder(args: argparse.Namespace) -> int:
    from specwatch.revisions import ladder

    rest = list(args.pytest_args)
    if rest and rest[0] == "--":
        rest = rest[1:]
    elif rest:
        print(f"specwatch ab-ladder: put pytest arguments after --: {' '.join(rest)}", file=sys.stderr)
        return EXIT_USAGE
    return ladder.command(profiles=args.profile or [], pytest_args=rest, setup=args.setup, rounds=args.rounds,
                          max_rounds=args.max_rounds, tolerance=args.tolerance, alpha=args.alpha,
                          spending=args.spending, round_history=args.round_history, metrics=args.metric,
                          memo=args.memo, python=args.python, workdir=args.workdir, timeout_s=args.timeout_s,
                          start=args.start, stop_after=args.stop_after, resume=args.resume,
                          drop_unmeasured=args.drop_unmeasured, resume_only=args.resume_only,
                          json_path=args.json)


def _cmd_ab_power(args: argparse.Namespace) -> int:
    from specwatch.revisions import power

    return power.command(machine_class=args.machine_class, round_history=args.round_history, metric=args.metric,
                         key=args.key, engine=args.engine, rounds=args.rounds, max_rounds=args.max_rounds,
                         tolerance=args.tolerance,
                         alpha=args.alpha, spending=args.spending, changes=args.change, true_spread=args.true_spread,
                         replay=args.replay, trials=args.trials, seed=args.seed,
                         seconds_per_round=args.seconds_per_round)


def register(sub: Any) -> None:
    """Add ``specwatch ab`` and ``specwatch ab-power`` to the ``specwatch`` parser."""
    parser = sub.add_parser("ab", help="A/B two revisions (or two profiles) of the server in alternating rounds; "
                                       "exit 1 on a regression")
    parser.add_argument("--repo", help="git work tree of the server under test (with --base/--head)")
    parser.add_argument("--base", help="the reference revision (e.g. the merge base of a pull request)")
    parser.add_argument("--head", help="the revision under test")
    parser.add_argument("--base-profile", help="without git: the reference profile file")
    parser.add_argument("--head-profile", help="without git: the profile file under test")
    parser.add_argument("--setup", help="shell command run in each checkout before each measurement "
                                        "({checkout} is replaced by its path)")
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS,
                        help=f"alternating rounds before the first look (default {DEFAULT_ROUNDS}: A B B A); 1 "
                             f"for a server too slow to boot often, with a --round-history that stands for the "
                             f"boot-to-boot term")
    parser.add_argument("--max-rounds", type=int, default=None,
                        help=f"the last look: rounds allowed while a key is still open (default "
                             f"max({DEFAULT_MAX_ROUNDS}, --rounds))")
    parser.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE,
                        help="smallest slowdown that counts, a fraction (default: each key's own, the smallest "
                             "that the rounds settle at its recorded round spread; printed)")
    parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA,
                        help=f"false-alarm rate of each key over all looks (default {DEFAULT_ALPHA})")
    parser.add_argument("--spending", choices=sequential.SPENDING, default=sequential.POCOCK,
                        help="alpha-spending function across the looks (default: %(default)s)")
    parser.add_argument("--round-history", default=DEFAULT_BASELINE_DIR,
                        help="baseline folder whose <machine-class>/round-spread.json holds earlier A/B runs' "
                             "round spread, pooled with this run's rounds (default: %(default)s; 'none': "
                             "these rounds alone)")
    parser.add_argument("--record-rounds", action="store_true",
                        help="add this run's per-round ratios to that round-spread file")
    parser.add_argument("--metric", action="append", default=None,
                        help=f"metric(s) judged (default: {', '.join(DEFAULT_METRICS)})")
    parser.add_argument("--memo", default=None, help="memo directory (default: <git-dir>/specwatch/bisect)")
    parser.add_argument("--json", default=None, metavar="FILE",
                        help="also write the verdict as versioned JSON (keys, intervals, checks, exit code)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the newest run of this memo that stopped (Ctrl-C, kill, a time limit) from "
                             "its last whole round, instead of measuring every round again")
    parser.add_argument("--python", default=None, help="interpreter that runs pytest (default: this one)")
    parser.add_argument("--workdir", default=None, help="directory pytest runs in (default: the checkout)")
    parser.add_argument("--step-timeout", dest="timeout_s", type=float, default=None,
                        help="seconds allowed for the setup and for pytest, per measurement")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER, metavar="-- PYTEST-ARGS",
                        help="arguments of the measuring pytest run, after --")
    parser.set_defaults(func=_cmd_ab)

    parser = sub.add_parser("ab-ladder", help="A/B a chain of profiles (versions, oldest first) pair by pair, each "
                                              "booted once a round and shared by its two pairs; exit 1 on a "
                                              "regression of any pair")
    parser.add_argument("--profile", action="append", default=None, metavar="FILE",
                        help="a profile file of the chain, oldest first (repeat; at least two): each neighbouring "
                             "pair is judged as ab --base-profile OLDER --head-profile NEWER")
    parser.add_argument("--start", choices=("first", "last"), default="first",
                        help="where round 1 starts: the first profile (each pair's base first, as ab) or the last "
                             "(e.g. the version installed first); later rounds walk back and forth")
    parser.add_argument("--stop-after", type=int, default=None, metavar="N",
                        help="stop (exit 3, no verdict) before the measurement that would pass N in the ladder's "
                             "order, kept ones counted; --resume continues")
    parser.add_argument("--resume", action="store_true",
                        help="continue the newest ladder of this memo that ended without a verdict, keeping every "
                             "measurement it made")
    parser.add_argument("--resume-only", action="store_true",
                        help="as --resume, but exit 3 at once, before any boot, when this memo holds no stopped "
                             "ladder (a later call on a machine that lost the earlier calls' boots)")
    parser.add_argument("--drop-unmeasured", action="store_true",
                        help="a version that cannot be measured (no boot, no samples) is dropped and its neighbours "
                             "judged as a pair (exit 3 at best); default: the ladder stops there")
    parser.add_argument("--memo", default=None, help="memo directory (default: .specwatch/ab-ladder)")
    parser.add_argument("--json", default=None, metavar="FILE",
                        help="also write the verdicts as versioned JSON (pairs, keys, intervals, checks, dropped)")
    for flag in ("--setup", "--python", "--workdir"):
        parser.add_argument(flag, default=None, help=f"as ab's {flag}")
    parser.add_argument("--step-timeout", dest="timeout_s", type=float, default=None, help="as ab's")
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, help="as ab's (default %(default)s)")
    parser.add_argument("--max-rounds", type=int, default=None,
                        help=f"as ab's (default max({DEFAULT_MAX_ROUNDS}, --rounds)); a round after the first look "
                             f"boots only the versions of pairs still open")
    parser.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE, help="as ab's")
    parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help="as ab's, per pair (default %(default)s)")
    parser.add_argument("--spending", choices=sequential.SPENDING, default=sequential.POCOCK, help="as ab's")
    parser.add_argument("--round-history", default=DEFAULT_BASELINE_DIR,
                        help="as ab's (default: %(default)s); the ladder reads it but never records into it (its "
                             "pairs share boots, so their rounds are not independent samples of the spread)")
    parser.add_argument("--metric", action="append", default=None,
                        help=f"metric(s) judged (default: {', '.join(DEFAULT_METRICS)})")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER, metavar="-- PYTEST-ARGS",
                        help="arguments of the measuring pytest run, after --")
    parser.set_defaults(func=_cmd_ab_ladder)

    parser = sub.add_parser("ab-power", help="simulate specwatch ab verdicts at a machine class's recorded round "
                                             "spread (or replay its recorded rounds): how often a given slowdown is "
                                             "flagged, and how often a healthy head is")
    parser.add_argument("--machine-class", required=True, help="e.g. h200x1 (its round-spread.json is read)")
    parser.add_argument("--round-history", default=DEFAULT_BASELINE_DIR,
                        help="baseline folder holding <machine-class>/round-spread.json (default: %(default)s; "
                             "'none': the default round spread)")
    parser.add_argument("--metric", default="decode_tok_s", help="metric whose round spread is used, pooled "
                                                                 "over its keys, without --key: an overview, since "
                                                                 "ab borrows no other key's (default: %(default)s)")
    parser.add_argument("--key", default=None, help="a result key, e.g. large-eagle3-tuned/single-stream/"
                                                    "decode_tok_s: its own round spread, as ab plans it")
    parser.add_argument("--engine", default="",
                        help="the engine the servers run, as a results file's machine.engine names it: without --key, "
                             "that engine's runs of the metric only (default: every run of the metric)")
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
    parser.set_defaults(func=_cmd_ab_power)
