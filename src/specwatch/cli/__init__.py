"""The ``specwatch`` console script: read logs, compare results, manage baselines, history and bisection.

One shape for every command: one module per group of subcommands, each with a ``register(sub)`` that adds
them and points each at a ``_cmd_*(args)`` that reads the options and calls into the parts (for ``ab`` and
the bisections, the plain-keyword ``command()`` of :mod:`specwatch.revisions`). :func:`dispatch` runs a
parsed command under the error rule below (the research scripts under docs/validation use it too).

The main job itself is ``pytest -m perf``; these commands work on what it leaves behind (or on
an SGLang log). Every user-facing error is one line on stderr with the exit code of its kind
(see :mod:`specwatch.errors`), never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from specwatch import __version__
from specwatch.cli import ab, baselines, bench, bisect, history, inspect, profiles, report, results, yardstick
from specwatch.cli.args import Parser
from specwatch.errors import EXIT_INFRA, EXIT_OK, EXIT_USAGE, SpecwatchError

#: the modules that add subcommands, in ``specwatch --help`` order
COMMAND_MODULES = (results, baselines, history, report, profiles, inspect, yardstick, ab, bisect, bench)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="specwatch", description="Read engine logs, compare results, manage baselines and history, bisect "
        "regressions. The main job itself is `pytest -m perf`.")
    parser.add_argument("--version", action="version", version=f"specwatch {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``specwatch ARGV``: the exit code."""
    return dispatch(build_parser(), argv)


def dispatch(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen command's ``func``: every user-facing error one line on stderr with
    the exit code of its kind, never a traceback (also the driver of the research scripts under
    docs/validation, which take the same rules)."""
    try:
        args, unknown = parser.parse_known_args(argv)
        if unknown:  # ab and the bisections take pytest's own options, but only after --
            after = "; pytest arguments go after --" if hasattr(args, "pytest_args") or hasattr(
                args, "patches_and_args") else ""
            parser.error(f"unrecognized arguments: {' '.join(unknown)}{after}")
    except SystemExit as exc:  # --help, --version, or a usage error already printed as one line
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE if exc.code else EXIT_OK
    try:
        return int(args.func(args) or 0)
    except SpecwatchError as exc:
        print(f"specwatch: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("specwatch: interrupted", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # output piped into head & co.
        sys.stderr.close()
        return EXIT_OK
    except OSError as exc:  # the last net: the file system failed under a command (disk full, I/O error)
        print(f"specwatch: {exc}", file=sys.stderr)
        return EXIT_INFRA
    except MemoryError:  # the last net: an input asked for more memory than the machine has
        print(f"specwatch: {args.command}: out of memory (the input asks for more than this machine has)",
              file=sys.stderr)
        return EXIT_INFRA

