"""The ``specwatch`` console script: read logs, compare results, manage baselines, history and bisection.

The main job itself is ``pytest -m perf``; these commands work on what it leaves behind (or on
an SGLang log). Every user-facing error is one line on stderr with the exit code of its kind
(see :mod:`specwatch.errors`), never a traceback.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from specwatch import __version__
from specwatch.errors import EXIT_INFRA, EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, SpecwatchError, UsageError

# ------------------------------------------------------------------------------------------------
# Argument checking: the one place for option types, and argparse's errors as one line.


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's error rule: one line on stderr (no usage block), exit 2."""

    def error(self, message: str) -> NoReturn:
        where = self.prog.removeprefix("specwatch").strip()
        self.exit(EXIT_USAGE, f"specwatch: {where + ': ' if where else ''}{message} (see `{self.prog} --help`)\n")


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def _int_at_least(low: int) -> Callable[[str], int]:
    """Type of an integer option ≥ ``low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    return parse


_positive_int = _int_at_least(1)


def _byte_sizes(text: str) -> list[int]:
    """Comma-separated positive byte counts."""
    try:
        sizes = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"comma-separated byte counts, got {text!r}") from None
    if min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"byte counts must be positive, got {text!r}")
    return sizes


def _positive_float(text: str) -> float:
    """A finite number > 0."""
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
    return value


def _fraction(text: str) -> float:
    """A number strictly between 0 and 1 (a significance level)."""
    value = _number(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1 (exclusive), got {text}")
    return value


def _existing_file(text: str) -> str:
    """The path of a file that exists (not a directory)."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory, not a file")
    if not path.exists():
        raise argparse.ArgumentTypeError(f"no such file: {text}")
    return text


def _folder(path: str, what: str, *, must_exist: bool) -> Path:
    """``path`` as a folder; UsageError when it is a file (or, with ``must_exist``, missing)."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise UsageError(f"{what} {path} is a file, not a folder")
    if must_exist and not p.exists():
        raise UsageError(f"{what} {path} does not exist")
    return p


def _cmd_parse_log(args: argparse.Namespace) -> int:
    from specwatch.signals.logscan import parse_log_main

    return parse_log_main(args.file)


@dataclass
class _Side:
    """One side of ``specwatch compare``: a results file or a baseline file."""

    path: str
    label: str
    samples: dict[str, tuple[list[float], str, bool]]  # key -> (samples, unit, higher_is_better)
    machine: dict[str, Any]
    machine_class: str | None
    metrics: dict[str, Any] = field(default_factory=dict)  # key -> BaselineMetric, for a baseline


def _load_side(path: str, kind: str) -> _Side:
    """A results file or a baseline file (told apart by its fields), each through its own loader,
    which migrates older versions."""
    from specwatch.store.baseline import Baseline
    from specwatch.store.result import ResultSet, make_key, read_json

    doc = read_json(path, kind)
    if isinstance(doc, dict) and "metrics" in doc and "profile" in doc:
        base = Baseline.from_dict(doc, Path(path))
        return _Side(path, f"baseline {path}", {r.key: (list(r.samples), r.unit, r.higher_is_better)
                                                  for r in base.as_results()},
                     base.machine, base.machine_class,
                     {make_key(base.profile, m.workload, m.metric): m for m in base.metrics.values()})
    rs = ResultSet.from_document(doc, path)
    return _Side(path, f"results {path}", {r.key: (list(r.samples), r.unit, r.higher_is_better) for r in rs.results},
                 rs.machine, rs.machine_class)


def _class_check(ref: _Side, cur: _Side, allow_other: bool) -> tuple[bool | None, list[str]]:
    """Whether both sides are of one machine class (None: a side does not say) and the warning
    lines to print; UsageError when they differ and ``allow_other`` is off."""
    a, b = ref.machine_class, cur.machine_class
    if a and b and a != b:
        if not allow_other:
            raise UsageError(f"machine classes differ: {ref.path} is {a!r}, {cur.path} is {b!r}; a comparison "
                             f"across classes measures the machines, not the server: compare against a {b!r} "
                             "baseline, or pass --allow-other-class to compare anyway")
        return False, [f"WARNING: machine classes differ ({ref.label} is {a!r}, {cur.label} is {b!r}): every "
                       "verdict below compares two kinds of machine, not two versions of the server"]
    missing = [side.path for side, mc in ((ref, a), (cur, b)) if not mc]
    return (None, [f"warning: {p} records no machine class, so it is unknown whether both sides come from "
                   "the same kind of machine" for p in missing]) if missing else (True, [])


def _cmd_compare(args: argparse.Namespace) -> int:
    from specwatch.judge import compare, stats
    from specwatch.report.table import ReportRow, summary_table

    ref = _load_side(args.baseline, "baseline")
    cur = _load_side(args.results, "results")
    same_class, warnings = _class_check(ref, cur, args.allow_other_class)
    common = sorted(set(ref.samples) & set(cur.samples))
    if not common:
        raise UsageError(f"{args.baseline} and {args.results} share no result key")
    host = cur.machine.get("host_id") if isinstance(cur.machine.get("host_id"), str) else None
    rows, notes = [], []
    for key in common:
        samples, unit, higher = cur.samples[key]
        reference, sessions = ref.samples[key][0], None
        if key in ref.metrics:  # a baseline: its sessions, those of this machine when it has enough
            reference, sessions, note = ref.metrics[key].reference_for(host, compare.MIN_SESSIONS,
                                                                       same_class=same_class)
            if note and note not in notes:
                notes.append(note)
        class_spread = None
        if key in ref.metrics and ref.machine_class and same_class is not False:
            from specwatch.store.baseline import BaselineStore

            _, workload, metric = key.split("/", 2)
            class_spread = BaselineStore(Path(args.baseline).resolve().parent.parent).class_spread(
                ref.machine_class, workload, metric)
        c, basis = compare.drift(samples, reference, higher_is_better=higher, requested=args.tolerance,
                                 alpha=args.alpha, sessions=sessions or None, class_spread=class_spread)
        notes.append(f"{key}: {basis.note}")
        rows.append(ReportRow.from_comparison(key, c, unit=unit, samples=samples,
                                              median_ci=stats.bootstrap_median_ci(samples)))
    for line in warnings:
        print(line)
    # the table lists each regression's message under it: printed once
    print(summary_table(rows, title=f"specwatch compare: {args.results} against {ref.label}"))
    for note in notes:
        print(f"baseline {note}" if note.split(":", 1)[0] in cur.samples else f"baseline: {note}")
    for key in sorted(set(ref.samples) ^ set(cur.samples)):
        print(f"note: {key} is only in {'the baseline' if key in ref.samples else 'the results'}")
    return EXIT_REGRESSION if any(r.is_bad for r in rows) else EXIT_OK


def _cmd_baseline_update(args: argparse.Namespace) -> int:
    from specwatch.store.baseline import BaselineStore
    from specwatch.store.result import ResultSet

    rs = ResultSet.load(args.results)
    if not rs.results:
        raise UsageError(f"results file {args.results} holds no results to record")
    _folder(args.baseline_dir, "baseline folder", must_exist=False)
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

    store = BaselineStore(_folder(args.baseline_dir, "baseline folder", must_exist=True))
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


def _history(args: argparse.Namespace, *, readonly: bool = True):
    """The history of ``--history``; only ``import`` may create it, the other commands just read."""
    from specwatch.store.history import History

    return History(args.history, readonly=readonly)


def _cmd_history_import(args: argparse.Namespace) -> int:
    from specwatch.store.result import ResultSet

    loaded = []
    for path in args.results:  # every file read and checked before the first is stored
        rs = ResultSet.load(path)
        if not rs.results:
            raise UsageError(f"results file {path} holds no results; nothing was imported")
        loaded.append((path, rs))
    with _history(args, readonly=False) as hist:
        for path, rs in loaded:
            print(f"imported {path} as run {hist.append(rs)}")
    return EXIT_OK


def _keys(hist: Any, args: argparse.Namespace) -> list[str]:
    keys = [args.key] if args.key else hist.keys(args.machine_class)
    if not keys:
        print(f"no runs in {args.history}" + (f" on machine class {args.machine_class}" if args.machine_class else ""))
    return keys


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
    from specwatch.store.history import plot_series

    with _history(args) as hist:
        for path in plot_series(hist, args.out, machine_class=args.machine_class, alpha=args.alpha):
            print(f"wrote {path}")
    return EXIT_OK


def _cmd_profile_show(args: argparse.Namespace) -> int:
    from specwatch.profiles.profile import load_profiles

    ps = load_profiles(args.file)
    for name, prof in ps.servers.items():
        roles = [r for r, n in ps.roles.items() if n == name]
        env = " ".join(f"{k}={v}" for k, v in sorted(prof.env_vars.items())) or "(no tuning variables)"
        print(f"# {name} [{', '.join(roles) or '-'}] env {prof.env} via {prof.env_apply}: {env}")
        print(" ".join(prof.command(args.host, args.port)))
    return EXIT_OK


def _cmd_allreduce(args: argparse.Namespace) -> int:
    from specwatch.checks import allreduce

    allreduce.main(args.file, rounds=args.rounds, sizes=args.sizes, graphed=args.graphed, device=args.device,
                   calls=args.calls, samples=args.samples, timeout_s=args.timeout)
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="specwatch", description="Read engine logs, compare results, manage baselines and history, bisect "
        "regressions. The main job itself is `pytest -m perf`.")
    parser.add_argument("--version", action="version", version=f"specwatch {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("parse-log", help="print one JSON object per Decode, Prefill or Capture line of an engine log")
    p.add_argument("file")
    p.set_defaults(func=_cmd_parse_log)

    p = sub.add_parser("compare", help="verdict table of RESULTS against BASELINE; exit 1 on a regression")
    p.add_argument("baseline", type=_existing_file,
                   help="a baseline file (baselines/<class>/<profile>.json) or a results file")
    p.add_argument("results", type=_existing_file, help="a results file (pytest -m perf --specwatch-results PATH)")
    p.add_argument("--tolerance", type=_positive_float, default=0.05,
                   help="smallest relative change of medians that counts (default 0.05)")
    p.add_argument("--alpha", type=_fraction, default=0.01, help="significance level, in (0, 1) (default 0.01)")
    p.add_argument("--allow-other-class", action="store_true",
                   help="compare even when the two sides come from different machine classes (with a warning)")
    p.set_defaults(func=_cmd_compare)

    base = sub.add_parser("baseline", help="stored baselines").add_subparsers(dest="action", required=True)
    p = base.add_parser("update", help="record baselines from a results file")
    p.add_argument("results", type=_existing_file)
    p.add_argument("--baseline-dir", default="baselines")
    p.add_argument("--machine-class", default=None)
    p.add_argument("--tolerance", type=_fraction, default=0.05,
                   help="the drift tolerance you want the baseline to resolve (warns when its sessions cannot)")
    p.add_argument("--keep-sessions", type=_positive_int, default=1,
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
        p.add_argument("--alpha", type=_fraction, default=0.01, help="significance level, in (0, 1)")
        p.add_argument("--test", choices=("ttest", "permutation"), default="ttest",
                       help="significance of a split: Welch t-test as Apache Otava (default) or permutation")
        if name == "import":
            p.add_argument("results", nargs="+", type=_existing_file)
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
    p.add_argument("file", nargs="?", default=None, type=_existing_file,
                   help="profile TOML with tuned/untuned servers at TP ≥ 2")
    p.add_argument("--rounds", type=_int_at_least(2), default=6,
                   help="untuned/tuned launches in alternation, the statistical unit (default 6: p < 0.01 possible)")
    p.add_argument("--sizes", type=_byte_sizes, default="2048,6144,14336",
                   help="message sizes in bytes (default 2048,6144,14336)")
    p.add_argument("--graphed", choices=("auto", "yes", "no"), default="auto",
                   help="all-reduce inside a CUDA graph, as a graphed server runs it (auto: on CUDA)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--calls", type=_positive_int, default=20, help="all-reduces per timed sample")
    p.add_argument("--samples", type=_positive_int, default=30, help="timed samples per launch and size")
    p.add_argument("--timeout", type=_positive_float, default=180.0,
                   help="seconds per launch before its ranks are killed")
    p.set_defaults(func=_cmd_allreduce)

    from specwatch.revisions.ab import AB
    from specwatch.revisions.gitbisect import Bisect, BisectPatches

    for command in (AB, Bisect, BisectPatches):
        p = sub.add_parser(command.name, help=command.help)
        command.add_arguments(p)
        p.set_defaults(func=command.run_from_args)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())
