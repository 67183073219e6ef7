"""``specwatch report --html DIR``: the history as a static site (index of keys, one page per key)."""

from __future__ import annotations

import argparse
from typing import Any

from specwatch.cli.args import folder, fraction, positive_int
from specwatch.errors import EXIT_OK
from specwatch.run.options import DEFAULTS


def _cmd_report(args: argparse.Namespace) -> int:
    from specwatch.report.html import write_site
    from specwatch.store.history import open_history

    folder(args.html, "report folder", must_exist=False)
    with open_history(args.history, readonly=True) as hist:
        paths = write_site(hist, args.html, machine_class=args.machine_class, alpha=args.alpha, test=args.test,
                           tolerance=args.tolerance, window=args.window, title=args.title)
    print(f"wrote {paths[0]} and {len(paths) - 1} key page(s) under {paths[0].parent / 'keys'}")
    return EXIT_OK


def register(sub: Any) -> None:
    """Add this module's subcommand to the ``specwatch`` parser."""
    p = sub.add_parser("report", help="the history as a static HTML site (no server needed)")
    p.add_argument("--html", required=True, metavar="DIR", help="the folder to write index.html and keys/ into")
    p.add_argument("--history", default=DEFAULTS["history"],
                   help="SQLite file or postgresql://user@host/db URL (default .specwatch/history.sqlite)")
    p.add_argument("--machine-class", default=None, help="only this machine class (default: every one)")
    p.add_argument("--alpha", type=fraction, default=DEFAULTS["alpha"], help="significance level, in (0, 1)")
    p.add_argument("--test", choices=("ttest", "permutation"), default="ttest",
                   help="change points' significance test, as `specwatch history changes`")
    p.add_argument("--tolerance", type=fraction, default=DEFAULTS["tolerance"],
                   help="the drift tolerance each run's verdict uses (default 0.05)")
    p.add_argument("--window", type=positive_int, default=5,
                   help="a run is judged against this many complete runs before it (default 5)")
    p.add_argument("--title", default="specwatch history", help="the index page's title")
    p.set_defaults(func=_cmd_report)
