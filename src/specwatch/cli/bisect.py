"""``specwatch bisect`` and ``specwatch bisect-patches``: their options, turned into the plain-keyword commands of
:mod:`specwatch.revisions.gitbisect` and :mod:`specwatch.revisions.patches` (both take pytest's own arguments
after ``--``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from specwatch.errors import EXIT_USAGE
from specwatch.judge import sequential
from specwatch.paths import DEFAULT_BASELINE_DIR
from specwatch.revisions.bisection import DEFAULT_TOLERANCE
from specwatch.revisions.rounds import DEFAULT_ALPHA, DEFAULT_MAX_ROUNDS, DEFAULT_METRICS, DEFAULT_ROUNDS


def common_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``bisect`` and ``bisect-patches`` (the pytest arguments come after --)."""
    parser.add_argument("--repo", required=True, help="git work tree of the server under test")
    parser.add_argument("--setup", default=None,
                        help="shell command run in each checkout before measuring, e.g. 'pip install -e .' "
                             "({checkout} is replaced by its path)")
    parser.add_argument("--memo", default=None,
                        help="memo directory (default: <git-dir>/specwatch/bisect of --repo)")
    parser.add_argument("--python", default=None, help="interpreter that runs pytest (default: this one)")
    parser.add_argument("--workdir", default=None,
                        help="directory pytest runs in (default: the checkout being measured)")
    parser.add_argument("--step-timeout", dest="timeout_s", type=float, default=None,
                        help="seconds allowed for the setup and for pytest, per measurement (timeout: skip)")
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS,
                        help=f"alternating rounds of each step before its first look (default {DEFAULT_ROUNDS})")
    parser.add_argument("--max-rounds", type=int, default=None,
                        help=f"the last look of a step (default {DEFAULT_MAX_ROUNDS}); still open then: skipped, "
                             f"never blamed")
    parser.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE,
                        help="smallest slowdown that makes a step bad, a fraction (default: each key's own, the "
                             "smallest that the rounds settle at its recorded round spread, as ab)")
    parser.add_argument("--spending", choices=sequential.SPENDING, default=sequential.POCOCK,
                        help="alpha-spending function across each step's looks (default: %(default)s)")
    parser.add_argument("--metric", action="append", default=None,
                        help=f"metric(s) judged, repeatable (default: {', '.join(DEFAULT_METRICS)})")
    parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA,
                        help=f"significance level of a regression (default {DEFAULT_ALPHA})")
    parser.add_argument("--round-history", default=DEFAULT_BASELINE_DIR,
                        help="baseline folder whose <machine-class>/round-spread.json (written by specwatch ab "
                             "--record-rounds) gives the round spread pooled with each step's rounds "
                             "(default: %(default)s; 'none': each step's rounds alone)")


def step_options(args: argparse.Namespace) -> dict[str, Any]:
    """The round settings among parsed arguments, as keywords of the bisect functions."""
    return dict(rounds=args.rounds, max_rounds=args.max_rounds, tolerance=args.tolerance, metrics=args.metric,
                alpha=args.alpha, round_history=args.round_history, spending=args.spending)


def split_pytest_args(rest: Sequence[str]) -> tuple[list[str], list[str]]:
    """(before --, after --) of the remaining arguments."""
    items = list(rest)
    if "--" in items:
        i = items.index("--")
        return items[:i], items[i + 1 :]
    return items, []


def usage_error(command: str, message: str) -> int:
    """A one-line usage error of a bisect command; its exit code."""
    print(f"specwatch {command}: {message}", file=sys.stderr)
    return EXIT_USAGE


def _cmd_bisect(args: argparse.Namespace) -> int:
    from specwatch.revisions import gitbisect

    before, after = split_pytest_args(args.pytest_args)
    if before:
        return usage_error("bisect", f"put pytest arguments after --: {' '.join(before)}")
    return gitbisect.command(repo=args.repo, good=args.good, bad=args.bad, pytest_args=after, setup=args.setup,
                             memo=args.memo, python=args.python, workdir=args.workdir, timeout_s=args.timeout_s,
                             **step_options(args))


def _cmd_bisect_patches(args: argparse.Namespace) -> int:
    from specwatch.revisions import patches as patch_bisect

    patches, pytest_args = split_pytest_args(args.patches_and_args)
    options = [p for p in patches if p.startswith("-")]
    if options:
        return usage_error("bisect-patches", f"options go before the patch files: {' '.join(options)}")
    return patch_bisect.command(repo=args.repo, base=args.base, patches=patches, pytest_args=pytest_args,
                                setup=args.setup, memo=args.memo, python=args.python, workdir=args.workdir,
                                timeout_s=args.timeout_s, **step_options(args))


def register(sub: Any) -> None:
    """Add ``specwatch bisect`` and ``specwatch bisect-patches`` to the ``specwatch`` parser."""
    parser = sub.add_parser("bisect", help="find the commit that made the server under test slower (git bisect run)")
    common_arguments(parser)
    parser.add_argument("--good", required=True, help="a revision without the regression")
    parser.add_argument("--bad", required=True, help="a revision with the regression")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER, metavar="-- PYTEST-ARGS",
                        help="arguments of the measuring pytest run, after --")
    parser.set_defaults(func=_cmd_bisect)

    parser = sub.add_parser("bisect-patches",
                            help="find the first of an ordered list of patches that makes the server slower")
    common_arguments(parser)
    parser.add_argument("--base", required=True, help="the revision the patches apply to")
    parser.add_argument("patches_and_args", nargs=argparse.REMAINDER,
                        metavar="PATCH ... -- PYTEST-ARGS",
                        help="patch files in order (after all options), then -- and pytest arguments")
    parser.set_defaults(func=_cmd_bisect_patches)
