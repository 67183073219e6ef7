"""``specwatch baseline update|show|explain|machine-term``: record, list and explain stored baselines.

``baseline update RESULTS.json`` records one session from a results file; ``baseline update
--from-history HISTORY --machine-class C`` rebuilds class C's baselines from the history of every
host of that class, each run one recording session.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specwatch.cli.args import existing_file, folder, fraction, positive_int
from specwatch.errors import EXIT_OK, UsageError
from specwatch.run.options import DEFAULTS

if TYPE_CHECKING:
    from specwatch.store.baseline import Baseline


def _write_baselines(built: Sequence[tuple[Path, Baseline]], tolerance: float, extra: dict[Path, str]) -> None:
    from specwatch.store.atomic import write_text_atomic
    from specwatch.store.result import dumps

    for path, base in built:
        print(f"wrote {write_text_atomic(path, dumps(base.to_dict()))}{extra.get(path, '')}")
        for note in base.resolution_notes(tolerance):
            print(f"warning: {note}")


def _update_from_history(args: argparse.Namespace) -> int:
    from specwatch.store.baseline import BaselineStore
    from specwatch.store.history import open_history
    from specwatch.store.rebuild import baselines_from_history

    if args.results:
        raise UsageError("baseline update: give a results file or --from-history, not both")
    if not args.machine_class:
        raise UsageError("baseline update --from-history: --machine-class is required (the class whose "
                         "baselines are rebuilt from its hosts' runs)")
    if args.keep_sessions is not None or args.replace:
        raise UsageError("baseline update --from-history: use --last N (the runs kept as sessions), "
                         "not --keep-sessions or --replace (it always rebuilds from the history)")
    store = BaselineStore(folder(args.baseline_dir, "baseline folder", must_exist=False))
    store.path_for(args.machine_class, "check")  # a machine class that cannot name a folder stops here
    with open_history(args.from_history, readonly=True) as hist:
        runs = hist.stored_runs(args.machine_class)
        where = hist.where
    if not runs:
        raise UsageError(f"history {where} has no runs of machine class {args.machine_class}")
    built = baselines_from_history(store, runs, args.machine_class, profiles=args.profile, metrics=args.metric,
                                   last=args.last)
    notes = {path: f" ({n} session(s) from {hosts or 'no recorded'} machine(s))" for path, _, n, hosts in built}
    _write_baselines([(path, base) for path, base, _, _ in built], args.tolerance, notes)
    return EXIT_OK


def _cmd_baseline_update(args: argparse.Namespace) -> int:
    from specwatch.store.baseline import BaselineStore
    from specwatch.store.result import ResultSet

    if args.from_history:
        return _update_from_history(args)
    if not args.results:
        raise UsageError("baseline update: give a results file, or --from-history HISTORY --machine-class C")
    if args.last is not None or args.profile:
        raise UsageError("baseline update: --last and --profile go with --from-history")
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

    if args.replace and args.keep_sessions is not None:
        raise UsageError("baseline update: give --replace (drop every earlier session) or --keep-sessions N, "
                         "not both")
    said: list[str] = []
    paths = store.record_all(rs, machine_class=args.machine_class, keep_sessions=args.keep_sessions,
                             replace=args.replace, said=said)
    for line in said:
        print(line.replace("(asked for)", "(--replace)" if args.replace else f"(--keep-sessions {args.keep_sessions})"))
    for path in paths:
        base = load_baseline(path)
        print(f"wrote {path}: {base.added()}")
        for note in base.resolution_notes(args.tolerance):
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
        if base is None:  # removed since available() listed it
            continue
        for name, m in sorted(base.metrics.items()):
            hosts = len({s["host"] for s in m.sessions if s.get("host")})
            print(f"{mc}/{profile} {name}: median {m.summary.median:.4g} {m.unit} "
                  f"[{m.summary.ci_low:.4g}, {m.summary.ci_high:.4g}] n={m.summary.n} cv={m.summary.cv:.1%} "
                  f"sessions={len(m.sessions)}{f' machines={hosts}' if hosts else ''} "
                  f"(recorded {base.recorded}, commit {base.commit or '-'})")
    return EXIT_OK


def _cmd_baseline_machine_term(args: argparse.Namespace) -> int:
    from specwatch.store import machineterm

    root = folder(args.baseline_dir, "baseline folder", must_exist=True)
    path = machineterm.write(root, args.machine_class, classes=tuple(args.also),
                             command=f"specwatch baseline machine-term {args.machine_class}")
    for metric, term in sorted(machineterm.load(root, args.machine_class).items()):
        print(f"{metric}: machine term {term.sigma:.2%} on {term.df:.1f} effective degrees of freedom ({term.source})")
    print(f"specwatch wrote {path}" + "".join(f" and {root / c / machineterm.FILE_NAME}" for c in args.also))
    return EXIT_OK


def _cmd_baseline_explain(args: argparse.Namespace) -> int:
    from specwatch.store.baseline import BaselineStore
    from specwatch.store.driftinput import drift_input

    store = BaselineStore(folder(args.baseline_dir, "baseline folder", must_exist=True))
    pairs = store.available()
    if not pairs:
        raise UsageError(f"no baselines under {args.baseline_dir}: nothing to explain")
    parts = args.key.split("/")
    if len(parts) != 3 or not all(parts):
        raise UsageError(f"baseline explain: {args.key!r} is no result key (PROFILE/WORKLOAD/METRIC, e.g. "
                         "eagle3-tuned/single-stream/decode_tok_s)")
    profile, workload, metric = parts
    classes = [mc for mc, p in pairs if p == profile and (args.machine_class in (None, mc))]
    if not classes:
        where = f" of machine class {args.machine_class}" if args.machine_class else ""
        raise UsageError(f"baseline explain: no baseline of profile {profile!r}{where} under {args.baseline_dir} "
                         f"(it has {', '.join(sorted({p for _, p in pairs}))})")
    if len(classes) > 1:
        raise UsageError(f"baseline explain: profile {profile!r} has baselines of {', '.join(classes)}; give "
                         "--machine-class")
    base = store.require(classes[0], profile)
    engine = args.engine or str(base.machine.get("engine") or "")  # the engine of a run of its profile
    inputs = drift_input(store, base, workload, metric, machine=args.machine, engine=engine,
                         machine_class=classes[0], profile=profile)
    if isinstance(inputs, str):
        raise UsageError(f"baseline explain: {inputs}")
    for line in inputs.lines(args.tolerance, args.alpha, args.runs):
        print(line)
    return EXIT_OK


def register(sub: Any) -> None:
    """Add this module's subcommands to the ``specwatch`` parser."""
    base = sub.add_parser("baseline", help="stored baselines").add_subparsers(dest="action", required=True)
    p = base.add_parser("update", help="record baselines from a results file, or rebuild a machine class's "
                        "from the history of its hosts")
    p.add_argument("results", nargs="?", type=existing_file, help="a results file (JSON)")
    p.add_argument("--from-history", metavar="HISTORY", default=None,
                   help="rebuild from this history (SQLite file or postgresql:// URL) instead: each run of "
                   "--machine-class becomes one recording session; partial runs are left out")
    p.add_argument("--profile", action="append", default=[],
                   help="with --from-history: only this profile (repeatable; default: every profile)")
    p.add_argument("--last", type=positive_int, default=None,
                   help="with --from-history: keep the last N runs of each profile as sessions (default: all)")
    p.add_argument("--baseline-dir", default=DEFAULTS["baseline_dir"])
    p.add_argument("--machine-class", default=None)
    p.add_argument("--tolerance", type=fraction, default=DEFAULTS["tolerance"],
                   help="the drift tolerance you want the baseline to resolve (warns when its sessions cannot)")
    p.add_argument("--keep-sessions", type=positive_int, default=None,
                   help="keep only the last N recording sessions, this one included (default: every session: "
                        "each update adds one)")
    p.add_argument("--replace", action="store_true",
                   help="replace each baseline with this session, dropping its earlier ones (said in one line)")
    p.add_argument("--metric", action="append", default=[],
                   help="record only this metric (repeatable; default: every metric)")
    p.set_defaults(func=_cmd_baseline_update)
    p = base.add_parser("machine-term", help="pool the machine term of a class's hardware over every baseline of "
                        "the same GPU model into <baseline-dir>/<class>/machine-term.json (a new machine's drift "
                        "tolerance)")
    p.add_argument("machine_class")
    p.add_argument("--also", action="append", default=[], metavar="CLASS",
                   help="write the same file for this class too (one of the same hardware; repeatable)")
    p.add_argument("--baseline-dir", default=DEFAULTS["baseline_dir"])
    p.set_defaults(func=_cmd_baseline_machine_term)
    p = base.add_parser("explain", help="the chain that makes KEY's drift tolerance, in the order the drift gate "
                        "applies it: sessions and machines, within-session spread, machine term, floor and its "
                        "prior, the tolerance and the smallest slowdown it flags")
    p.add_argument("key", help="a result key: PROFILE/WORKLOAD/METRIC (e.g. eagle3-tuned/single-stream/decode_tok_s)")
    p.add_argument("--baseline-dir", default=DEFAULTS["baseline_dir"])
    p.add_argument("--machine-class", default=None,
                   help="the class whose baseline is explained (default: the one class holding the profile)")
    p.add_argument("--machine", default=None, metavar="LABEL",
                   help="the run's machine as the sessions name theirs (host:NAME, commit:SHA; default: a run on "
                        "none of their machines)")
    p.add_argument("--engine", default=None, help="the run's engine (default: the one the baseline recorded)")
    p.add_argument("--tolerance", type=fraction, default=DEFAULTS["tolerance"],
                   help=f"the tolerance requested (default {DEFAULTS['tolerance']})")
    p.add_argument("--alpha", type=fraction, default=DEFAULTS["alpha"],
                   help=f"significance level, in (0, 1) (default {DEFAULTS['alpha']})")
    p.add_argument("--runs", type=positive_int, default=None,
                   help="the runs of the run judged (default: as many as a recorded session)")
    p.set_defaults(func=_cmd_baseline_explain)
    p = base.add_parser("show", help="list stored baselines")
    p.add_argument("--baseline-dir", default=DEFAULTS["baseline_dir"])
    p.set_defaults(func=_cmd_baseline_show)
