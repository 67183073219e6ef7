"""``specwatch baseline update|show``: record and list stored baselines."""

from __future__ import annotations

import argparse
from typing import Any

from specwatch.cli.args import existing_file, folder, fraction, positive_int
from specwatch.errors import EXIT_OK, UsageError


def _cmd_baseline_update(args: argparse.Namespace) -> int:
    from specwatch.store.baseline import BaselineStore
    from specwatch.store.result import ResultSet

    rs = ResultSet.load(args.results)
    if not rs.results:
        raise UsageError(f"results file {args.results} holds no results to record")
    folder(args.baseline_dir, "baseline folder", must_exist=False)
    if args.metric:
        unknown = set(args.metric) - {r.metric for r in rs.results}
        if unknown:
            raise UsageError(f"{args.results} has no metric {', '.join(sorted(unknown))}")
        rs = ResultSet(machine=rs.machine, commit=rs.commit, created=rs.created,
                       results=[r for r in rs.results if r.metric in args.metric])
    store = BaselineStore(args.baseline_dir)
    # all or nothing: record_all builds every file before it writes the first
    from specwatch.store.baseline import load_baseline

    for path in store.record_all(rs, machine_class=args.machine_class, keep_sessions=args.keep_sessions):
        print(f"wrote {path}")
        for note in load_baseline(path).resolution_notes(args.tolerance):
            print(f"warning: {note}")
    return EXIT_OK


def _cmd_baseline_show(args: argparse.Namespace) -> int:
    from specwatch.store.baseline import BaselineStore

    store = BaselineStore(folder(args.baseline_dir, "baseline folder", must_exist=True))
    pairs = store.available()
    if not pairs:
        print(f"no baselines under {args.baseline_dir}")
    for mc, profile in pairs:
        base = store.load(mc, profile)
        for name, m in sorted(base.metrics.items()):
            hosts = len({s["host"] for s in m.sessions if s.get("host")})
            print(f"{mc}/{profile} {name}: median {m.summary.median:.4g} {m.unit} "
                  f"[{m.summary.ci_low:.4g}, {m.summary.ci_high:.4g}] n={m.summary.n} cv={m.summary.cv:.1%} "
                  f"sessions={len(m.sessions)}{f' machines={hosts}' if hosts else ''} "
                  f"(recorded {base.recorded}, commit {base.commit or '-'})")
    return EXIT_OK


def register(sub: Any) -> None:
    """Add this module's subcommands to the ``specwatch`` parser."""
    base = sub.add_parser("baseline", help="stored baselines").add_subparsers(dest="action", required=True)
    p = base.add_parser("update", help="record baselines from a results file")
    p.add_argument("results", type=existing_file)
    p.add_argument("--baseline-dir", default="baselines")
    p.add_argument("--machine-class", default=None)
    p.add_argument("--tolerance", type=fraction, default=0.05,
                   help="the drift tolerance you want the baseline to resolve (warns when its sessions cannot)")
    p.add_argument("--keep-sessions", type=positive_int, default=1,
                   help="keep the samples of this many recording sessions, this one included (default 1: replace)")
    p.add_argument("--metric", action="append", default=[],
                   help="record only this metric (repeatable; default: every metric of the file)")
    p.set_defaults(func=_cmd_baseline_update)
    p = base.add_parser("show", help="list stored baselines")
    p.add_argument("--baseline-dir", default="baselines")
    p.set_defaults(func=_cmd_baseline_show)
