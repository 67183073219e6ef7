"""The ``specwatch`` console script: read logs, compare results, manage baselines, history and bisection.

The main job itself is ``pytest -m perf``; these commands work on what it leaves behind (or on
an SGLang log). Every user-facing error is one line on stderr with the exit code of its kind
(see :mod:`specwatch.errors`), never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specwatch import __version__
from specwatch.errors import EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, SpecwatchError, UsageError


def _cmd_parse_log(args: argparse.Namespace) -> int:
    from specwatch.logscan import parse_log_main

    return parse_log_main(args.file)


def _load_samples(path: str) -> tuple[dict[str, tuple[list[float], str, bool]], str, dict[str, Any], dict[str, Any]]:
    """key -> (samples, unit, higher_is_better) from a results file or a baseline file, its label,
    key -> BaselineMetric (a baseline's, with its recording sessions), and the file's machine."""
    import json

    from specwatch.baseline import Baseline
    from specwatch.result import ResultSet, make_key

    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: cannot read JSON: {exc}") from None
    metrics: dict[str, Any] = {}
    if isinstance(doc, dict) and "metrics" in doc and "profile" in doc:
        base = Baseline.from_dict(doc, Path(path))
        results, machine = base.as_results(), base.machine
        label = f"baseline {path}"
        metrics = {make_key(base.profile, m.workload, m.metric): m for m in base.metrics.values()}
    else:
        rs = ResultSet.load(path)
        results, machine = rs.results, rs.machine
        label = f"results {path}"
    return {r.key: (list(r.samples), r.unit, r.higher_is_better) for r in results}, label, metrics, machine


def _cmd_compare(args: argparse.Namespace) -> int:
    from specwatch import compare, stats
    from specwatch.report import ReportRow, summary_table

    ref, ref_label, ref_metrics, _ = _load_samples(args.baseline)
    cur, _, _, cur_machine = _load_samples(args.results)
    common = sorted(set(ref) & set(cur))
    if not common:
        raise UsageError(f"{args.baseline} and {args.results} share no result key")
    rows, notes = [], []
    for key in common:
        samples, unit, higher = cur[key]
        reference, sessions = ref[key][0], None
        if key in ref_metrics:  # a baseline: its sessions, those of this machine when it has enough
            reference, sessions, note = ref_metrics[key].reference_for(cur_machine.get("host_id"),
                                                                       compare.MIN_SESSIONS)
            if note and note not in notes:
                notes.append(note)
        c = compare.compare(samples, reference, higher_is_better=higher, tolerance=args.tolerance, alpha=args.alpha,
                            reference_sessions=sessions or None)
        rows.append(ReportRow.from_comparison(key, c, unit=unit, samples=samples,
                                              median_ci=stats.bootstrap_median_ci(samples)))
    print(summary_table(rows, title=f"specwatch compare: {args.results} against {ref_label}"))
    for note in notes:
        print(f"baseline: {note}")
    for row in rows:
        if row.is_bad:
            print(f"{row.key}: {row.message}")
    for key in sorted(set(ref) ^ set(cur)):
        print(f"note: {key} is only in {'the baseline' if key in ref else 'the results'}")
    return EXIT_REGRESSION if any(r.is_bad for r in rows) else EXIT_OK


def _cmd_baseline_update(args: argparse.Namespace) -> int:
    from specwatch.baseline import BaselineStore
    from specwatch.result import ResultSet

    rs = ResultSet.load(args.results)
    if args.metric:
        unknown = set(args.metric) - {r.metric for r in rs.results}
        if unknown:
            raise UsageError(f"{args.results} has no metric {', '.join(sorted(unknown))}")
        rs = ResultSet(machine=rs.machine, commit=rs.commit, created=rs.created,
                       results=[r for r in rs.results if r.metric in args.metric])
    store = BaselineStore(args.baseline_dir)
    for path in store.record_all(rs, machine_class=args.machine_class, keep_sessions=args.keep_sessions):
        print(f"wrote {path}")
    return EXIT_OK


def _cmd_baseline_show(args: argparse.Namespace) -> int:
    from specwatch.baseline import BaselineStore

    store = BaselineStore(args.baseline_dir)
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


def _history(args: argparse.Namespace):
    from specwatch.history import History

    return History(args.history)


def _cmd_history_import(args: argparse.Namespace) -> int:
    from specwatch.result import ResultSet

    with _history(args) as hist:
        for path in args.results:
            run = hist.append(ResultSet.load(path))
            print(f"imported {path} as run {run}")
    return EXIT_OK


def _cmd_history_show(args: argparse.Namespace) -> int:
    with _history(args) as hist:
        keys = [args.key] if args.key else hist.keys(args.machine_class)
        for key in keys:
            points = hist.series(key, machine_class=args.machine_class)
            print(f"{key} ({len(points)} runs)")
            for p in points:
                print(f"  {p.time}  {(p.commit or '-')[:10]:10}  {p.machine_class or '-':16} "
                      f"median {p.median:.4g} {p.unit}  n={len(p.samples)}")
    return EXIT_OK


def _cmd_history_changes(args: argparse.Namespace) -> int:
    from specwatch.changepoint import detect

    found = 0
    with _history(args) as hist:
        for key in [args.key] if args.key else hist.keys(args.machine_class):
            points = hist.series(key, machine_class=args.machine_class)
            for cp in detect([p.median for p in points], alpha=args.alpha, test=args.test):
                found += 1
                at = points[cp.index]
                print(f"{key}: change at run {at.run_id} ({at.time}, commit {(at.commit or '-')[:10]}): "
                      f"{cp.before_median:.4g} -> {cp.after_median:.4g} {at.unit} ({cp.magnitude:+.1%}, p={cp.p:.3g})")
    if not found:
        print("no change points found")
    return EXIT_OK


def _cmd_history_plot(args: argparse.Namespace) -> int:
    from specwatch.history import plot_series

    with _history(args) as hist:
        for path in plot_series(hist, args.out, machine_class=args.machine_class, alpha=args.alpha):
            print(f"wrote {path}")
    return EXIT_OK


def _cmd_profile_show(args: argparse.Namespace) -> int:
    from specwatch.profile import load_profiles

    ps = load_profiles(args.file)
    for name, prof in ps.servers.items():
        roles = [r for r, n in ps.roles.items() if n == name]
        env = " ".join(f"{k}={v}" for k, v in sorted(prof.env_vars.items())) or "(no tuning variables)"
        print(f"# {name} [{', '.join(roles) or '-'}] env {prof.env} via {prof.env_apply}: {env}")
        print(" ".join(prof.command(args.host, args.port)))
    return EXIT_OK


def _cmd_allreduce(args: argparse.Namespace) -> int:
    from specwatch import allreduce

    try:
        sizes = [int(x) for x in args.sizes.split(",")]
    except ValueError:
        raise UsageError(f"--sizes: comma-separated byte counts, got {args.sizes!r}") from None
    allreduce.main(args.file, rounds=args.rounds, sizes=sizes, graphed=args.graphed, device=args.device,
                   calls=args.calls, samples=args.samples, timeout_s=args.timeout)
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specwatch", description="Read engine logs, compare results, manage baselines and history, bisect "
        "regressions. The main job itself is `pytest -m perf`.")
    parser.add_argument("--version", action="version", version=f"specwatch {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("parse-log", help="print one JSON object per Decode, Prefill or Capture line of an engine log")
    p.add_argument("file")
    p.set_defaults(func=_cmd_parse_log)

    p = sub.add_parser("compare", help="verdict table of RESULTS against BASELINE; exit 1 on a regression")
    p.add_argument("baseline", help="a baseline file (baselines/<class>/<profile>.json) or a results file")
    p.add_argument("results", help="a results file (pytest -m perf --specwatch-results PATH)")
    p.add_argument("--tolerance", type=float, default=0.05)
    p.add_argument("--alpha", type=float, default=0.01)
    p.set_defaults(func=_cmd_compare)

    base = sub.add_parser("baseline", help="stored baselines").add_subparsers(dest="action", required=True)
    p = base.add_parser("update", help="record baselines from a results file")
    p.add_argument("results")
    p.add_argument("--baseline-dir", default="baselines")
    p.add_argument("--machine-class", default=None)
    p.add_argument("--keep-sessions", type=int, default=1,
                   help="keep the samples of this many recording sessions, this one included (default 1: replace)")
    p.add_argument("--metric", action="append", default=[],
                   help="record only this metric (repeatable; default: every metric of the file)")
    p.set_defaults(func=_cmd_baseline_update)
    p = base.add_parser("show", help="list stored baselines")
    p.add_argument("--baseline-dir", default="baselines")
    p.set_defaults(func=_cmd_baseline_show)

    hist = sub.add_parser("history", help="the result history").add_subparsers(dest="action", required=True)
    for name, func, text in (("show", _cmd_history_show, "list a metric's series"),
                             ("changes", _cmd_history_changes, "name the runs where a metric moved"),
                             ("plot", _cmd_history_plot, "one PNG per metric with change points"),
                             ("import", _cmd_history_import, "append results files to the history")):
        p = hist.add_parser(name, help=text)
        p.add_argument("--history", default=".specwatch/history.sqlite")
        p.add_argument("--machine-class", default=None)
        p.add_argument("--alpha", type=float, default=0.01)
        p.add_argument("--test", choices=("ttest", "permutation"), default="ttest",
                       help="significance of a split: Welch t-test as Apache Otava (default) or permutation")
        if name == "import":
            p.add_argument("results", nargs="+")
        elif name == "plot":
            p.add_argument("--out", default="reports/plots")
        else:
            p.add_argument("key", nargs="?", help="profile/workload/metric (default: every key)")
        p.set_defaults(func=func)

    p = sub.add_parser("profile", help="server profiles").add_subparsers(dest="action", required=True)
    show = p.add_parser("show", help="print each server's command line and environment")
    show.add_argument("file", nargs="?", default=None, help="profile TOML (default: the built-in set)")
    show.add_argument("--host", default="127.0.0.1")
    show.add_argument("--port", type=int, default=30000)
    show.set_defaults(func=_cmd_profile_show)

    p = sub.add_parser("allreduce", help="time NCCL all-reduce under the tuned and the untuned server's environment")
    p.add_argument("file", nargs="?", default=None, help="profile TOML with tuned/untuned servers at TP ≥ 2")
    p.add_argument("--rounds", type=int, default=6,
                   help="untuned/tuned launches in alternation, the statistical unit (default 6: p < 0.01 possible)")
    p.add_argument("--sizes", default="2048,6144,14336", help="message sizes in bytes (default 2048,6144,14336)")
    p.add_argument("--graphed", choices=("auto", "yes", "no"), default="auto",
                   help="all-reduce inside a CUDA graph, as a graphed server runs it (auto: on CUDA)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--calls", type=int, default=20, help="all-reduces per timed sample")
    p.add_argument("--samples", type=int, default=30, help="timed samples per launch and size")
    p.add_argument("--timeout", type=float, default=180.0, help="seconds per launch before its ranks are killed")
    p.set_defaults(func=_cmd_allreduce)

    from specwatch.bisect import Bisect, BisectPatches

    for command in (Bisect, BisectPatches):
        p = sub.add_parser(command.name, help=command.help)
        command.add_arguments(p)
        p.set_defaults(func=command.run_from_args)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())
