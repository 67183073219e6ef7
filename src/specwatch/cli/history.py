"""``specwatch history show|changes|plot|import|export``: the result history.

``--history`` (and ``import --from``, ``export --to``) take a SQLite file path or a
``postgresql://`` URL. Only ``import`` and ``export`` write (to ``--history`` and ``--to``); the
other commands, and the source of a copy, only read.
"""

from __future__ import annotations

import argparse
import difflib
import math
from typing import Any

from specwatch.cli.args import existing_file, fraction
from specwatch.errors import EXIT_OK, UsageError
from specwatch.run.options import DEFAULTS

#: where the history is unless --history says otherwise
DEFAULT_PATH = DEFAULTS["history"]
#: how many of its keys a history names when asked for one it does not hold
_SHOW_KEYS = 5


def _history(args: argparse.Namespace, *, readonly: bool = True) -> Any:
    """The history of ``--history``; only ``import`` may create it, the other commands just read."""
    from specwatch.store.history import open_history

    return open_history(args.history, readonly=readonly)


def _cmd_history_import(args: argparse.Namespace) -> int:
    from specwatch.store.history import copy_runs, open_history, same_store
    from specwatch.store.result import ResultSet

    if args.source and same_store(args.source, args.history):
        raise UsageError(f"history import: --from {args.source} is --history itself")
    loaded = []
    for path in args.results:  # every file read and checked before the first is stored
        rs = ResultSet.load(path)
        if not rs.results:
            raise UsageError(f"results file {path} holds no results; nothing was imported")
        loaded.append((path, rs))
    source = open_history(args.source, readonly=True) if args.source else None
    try:
        with _history(args, readonly=False) as hist:
            for path, rs in loaded:
                run_id, new = hist.add_run(rs)
                print(f"imported {path} as run {run_id}" if new
                      else f"{path} is already in the history as run {run_id}")
            if source is not None:
                copied, present = copy_runs(source, hist, machine_class=args.machine_class)
                print(f"copied {copied} run(s) from {source.where} to {hist.where}"
                      + (f" ({present} already there)" if present else ""))
            if not loaded and source is None:  # nothing to import: the history was created or migrated
                print(f"history {hist.where}: schema version {hist.schema_version}, {hist.run_count()} run(s)")
    finally:
        if source is not None:
            source.close()
    return EXIT_OK


def _cmd_history_export(args: argparse.Namespace) -> int:
    from specwatch.store.history import copy_runs, open_history, same_store

    if same_store(args.to, args.history):
        raise UsageError(f"history export: --to {args.to} is --history itself")
    with _history(args) as hist, open_history(args.to) as target:
        copied, present = copy_runs(hist, target, machine_class=args.machine_class)
        print(f"copied {copied} run(s) from {hist.where} to {target.where}"
              + (f" ({present} already there)" if present else ""))
    return EXIT_OK


def _keys(hist: Any, args: argparse.Namespace) -> list[str]:
    """The keys to show: every key with runs, or the one asked for. A history without runs (on the
    machine class) is said and is not an error; a key it does not hold is: a typo, most likely."""
    known = hist.keys(args.machine_class)
    on = f" on machine class {args.machine_class}" if args.machine_class else ""
    if not known:
        print(f"no runs in {hist.where}{on}")
        return []
    if args.key and args.key not in known:
        closest = difflib.get_close_matches(args.key, known, n=_SHOW_KEYS, cutoff=0.0)
        raise UsageError(f"history {hist.where} has no runs of {args.key}{on}; the closest of its {len(known)} "
                         f"key(s): {', '.join(closest)}")
    return [args.key] if args.key else known


def _cmd_history_show(args: argparse.Namespace) -> int:
    with _history(args) as hist:
        for key in _keys(hist, args):
            points = hist.series(key, machine_class=args.machine_class)
            print(f"{key} ({len(points)} runs)")
            for p in points:
                print(f"  {p.time}  {(p.commit or '-')[:10]:10}  {p.machine_class or '-':16} "
                      f"median {p.median:.4g} {p.unit}  n={len(p.samples)}"
                      + (f"  (partial: {p.partial})" if p.partial else ""))
    return EXIT_OK


def _cmd_history_changes(args: argparse.Namespace) -> int:
    from specwatch.judge.changepoint import detect

    found = 0
    with _history(args) as hist:
        for key in _keys(hist, args):
            # partial runs (interrupted, or some tests could not measure) are left out of change points
            points = [p for p in hist.series(key, machine_class=args.machine_class)
                      if math.isfinite(p.median) and not p.partial]
            for cp in detect([p.median for p in points], alpha=args.alpha, test=args.test):
                found += 1
                at = points[cp.index]
                print(f"{key}: change at run {at.run_id} ({at.time}, commit {(at.commit or '-')[:10]}): "
                      f"{cp.before_median:.4g} -> {cp.after_median:.4g} {at.unit} ({cp.magnitude:+.1%}, p={cp.p:.3g})")
    if not found:
        print("no change points found")
    return EXIT_OK


def _cmd_history_plot(args: argparse.Namespace) -> int:
    from specwatch.report.plot import plot_series

    with _history(args) as hist:
        for path in plot_series(hist, args.out, machine_class=args.machine_class, alpha=args.alpha):
            print(f"wrote {path}")
    return EXIT_OK


HISTORY_HELP = f"SQLite file or postgresql://user@host/db URL (default {DEFAULT_PATH})"


def register(sub: Any) -> None:
    """Add this module's subcommands to the ``specwatch`` parser."""
    hist = sub.add_parser("history", help="the result history").add_subparsers(dest="action", required=True)
    for name, func, text in (("show", _cmd_history_show, "list a metric's series"),
                             ("changes", _cmd_history_changes, "name the runs where a metric moved"),
                             ("plot", _cmd_history_plot, "one PNG per metric with change points"),
                             ("import", _cmd_history_import,
                              "append results files, or another history's runs (--from), to the history; with "
                              "neither, create or migrate it"),
                             ("export", _cmd_history_export, "copy the history's runs into another one (--to)")):
        p = hist.add_parser(name, help=text)
        p.add_argument("--history", default=DEFAULT_PATH, help=HISTORY_HELP)
        p.add_argument("--machine-class", default=None,
                       help="only this machine class" + (" (of the runs copied)" if name in ("import", "export")
                                                         else ""))
        if name in ("import", "export"):
            p.add_argument(*(("--from",) if name == "import" else ("--to",)),
                           dest="source" if name == "import" else "to", required=name == "export",
                           metavar="HISTORY", help="the other history: SQLite file or postgresql:// URL; a run "
                           "already there is skipped, so copying again copies only what is new")
        else:
            p.add_argument("--alpha", type=fraction, default=DEFAULTS["alpha"], help="significance level, in (0, 1)")
            p.add_argument("--test", choices=("ttest", "permutation"), default="ttest",
                           help="significance of a split: Welch t-test as Apache Otava (default) or permutation")
        if name == "import":
            p.add_argument("results", nargs="*", type=existing_file, help="results files (JSON)")
        elif name == "plot":
            p.add_argument("--out", default="reports/plots")
        elif name != "export":
            p.add_argument("key", nargs="?", help="profile/workload/metric (default: every key)")
        p.set_defaults(func=func)
