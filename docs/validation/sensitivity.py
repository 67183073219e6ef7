"""The repetition experiment: how often the drift verdict false-alarms on healthy runs and flags slowed ones.

    python docs/validation/sensitivity.py HEALTHY... [--slowed SLOWED...] [--baseline B] [--slowdown S]

The false-alarm rate on results files of healthy runs and the detection rate on runs with an injected slowdown
(or a synthetic ``--slowdown`` of the healthy ones), at each requested tolerance and significance level; each
run against ``--baseline``, else each healthy run against the other healthy runs. A research tool of the
validation page (the harness's ``drift-repeat`` judges with it), formerly ``specwatch sensitivity``; it
judges with the drift gate's own verdict (:func:`specwatch.judge.compare.drift`) through
:mod:`specwatch.judge.replay`, and its errors are one line, exit 2, as the ``specwatch`` command's. Run
from the repository root.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specwatch.cli import dispatch
from specwatch.cli.args import Parser, existing_file, fraction
from specwatch.errors import EXIT_OK, UsageError
from specwatch.report.table import fmt_change

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling baseline_check.py, when imported

from baseline_check import DEFAULT_METRICS, direction


def _span(values: Sequence[float]) -> str:
    """'6.1%' or '6.1-6.6%': the range of the tolerances a group's verdicts used."""
    lo, hi = min(values), max(values)
    return f"{lo:.1%}" if f"{lo:.1%}" == f"{hi:.1%}" else f"{lo * 100:.1f}-{hi:.1%}"


def sensitivity(args: argparse.Namespace) -> int:
    from specwatch.judge import replay
    from specwatch.judge.compare import MIN_SESSIONS
    from specwatch.store.driftinput import of_baseline
    from specwatch.store.sessions import baseline_sessions, results_sessions

    metrics = tuple(args.metric or DEFAULT_METRICS)
    healthy = {k: ks for k, ks in results_sessions(args.healthy).items() if ks.metric in metrics}
    groups = [(f"slowed #{i + 1}", results_sessions(files)) for i, files in enumerate(args.slowed)]
    stored = baseline_sessions(args.baseline) if args.baseline else None
    if stored is None and len(args.healthy) < 2:
        raise UsageError("give --baseline, or at least 2 healthy results files (each is judged against the others)")
    reference = {ks.key: ks for ks in stored[1]} if stored else None
    keys = sorted(k for k in healthy if reference is None or k in reference)
    if not keys:
        where = f"with the baseline {args.baseline}" if reference is not None else "with each other"
        raise UsageError(f"the healthy results files share no key of metric {', '.join(metrics)} {where}")
    warnings: list[str] = []
    if stored is not None:  # as compare: runs of another machine class measure the machines
        runs = [*healthy.values(), *(ks for _, found in groups for ks in found.values())]
        warnings = _other_classes(args, stored[0].machine_class, runs)
    against = (f"against the baseline {args.baseline}" if reference is not None
               else "each healthy run against the other healthy runs, each slowed run against all of them")
    for line in warnings:
        print(line)
    print(f"sensitivity.py: the drift verdict {against}; rate: runs called a regression (false alarms "
          f"among healthy runs, detections among slowed ones)")
    for key in keys:
        ks = healthy[key]
        base = reference[key].sessions if reference is not None else None
        if base is None and len(ks.sessions) < 2:
            print(f"{key}: only {len(ks.sessions)} healthy run(s) hold it; nothing to judge it against")
            continue
        spread, term = None, None
        if stored is not None:  # the gate's floor and machine term, as it builds them
            _, workload, metric = key.split("/", 2)
            inputs = of_baseline(stored[0], workload, metric)
            spread, term = (inputs.floor, inputs.machine_term) if inputs else (None, None)
        slowed = [(f"{name} ({len(found[key].sessions)} runs)", found[key].sessions)
                  for name, found in groups if key in found]
        print(f"{key} ({ks.unit}, {direction(ks.higher_is_better)}): {len(ks.sessions)} healthy run(s)")
        print(f"  {'requested':>9}  {'alpha':>5}  {'used':>10}  {'runs':<24}  {'n':>4}  {'regressions':>11}  "
              f"{'rate':>5}  median change")
        for tolerance in args.tolerance or [0.05]:
            for alpha in args.alpha or [0.01]:
                judge = replay.Judge(ks.higher_is_better, tolerance, alpha, spread, machine_term=term)
                for rate in replay.rates(judge, ks.sessions, slowed, baseline=base, synthetic=args.slowdown):
                    print(f"  {tolerance:>9.1%}  {alpha:>5g}  {_span(rate.tolerances):>10}  {rate.group:<24}  "
                          f"{rate.judged:>4}  {rate.regressions:>11}  {rate.rate:>5.0%}  "
                          f"{fmt_change(statistics.median(rate.changes))}", flush=True)
        sessions = len(base) if base is not None else len(ks.sessions) - 1
        if sessions >= MIN_SESSIONS:
            print(f"  note: a baseline of {sessions} sessions sets the tolerance from their spread, so the requested "
                  f"tolerance changes nothing here; alpha does")
    return EXIT_OK


def _other_classes(args: argparse.Namespace, machine_class: str | None, found: Sequence[Any]) -> list[str]:
    """The warning per results file of another machine class than the baseline's, as ``compare`` says
    it; UsageError on the first one unless --allow-other-class."""
    from specwatch.cli.results import other_class

    files = {label: mc for ks in found for label, mc in zip(ks.labels, ks.machine_classes, strict=True)}
    lines = [other_class((args.baseline, f"baseline {args.baseline}", machine_class), (path, f"results {path}", mc),
                         args.allow_other_class) for path, mc in files.items()]
    return [line for line in lines if line]


def build_parser() -> Parser:
    """The script's options (those of the former ``specwatch sensitivity``)."""
    p = Parser(prog="sensitivity.py", description="false alarms on healthy runs and detections of slowed ones by "
               "the drift verdict, per tolerance and alpha (results files of repeated runs)")
    p.add_argument("healthy", nargs="+", type=existing_file, metavar="HEALTHY",
                   help="results files of healthy runs (pytest -m perf --specwatch-results PATH), one run each; "
                        "give them first")
    p.add_argument("--slowed", action="append", nargs="+", type=existing_file, default=[], metavar="RESULTS",
                   help="results files of runs with an injected slowdown (after the healthy files); each --slowed "
                        "is one group")
    p.add_argument("--baseline", type=existing_file, default=None,
                   help="judge every run against this baseline file (default: each healthy run against the others)")
    p.add_argument("--slowdown", action="append", type=fraction, default=[],
                   help="a synthetic slowdown of every healthy run, e.g. 0.1 (repeatable)")
    p.add_argument("--tolerance", action="append", type=fraction, default=None,
                   help="a tolerance requested of the drift gate, repeatable (default 0.05)")
    p.add_argument("--alpha", action="append", type=fraction, default=None,
                   help="a significance level, in (0, 1), repeatable (default 0.01)")
    p.add_argument("--metric", action="append", default=None,
                   help=f"metric judged, repeatable (default: the drift gates' {', '.join(DEFAULT_METRICS)})")
    p.add_argument("--allow-other-class", action="store_true",
                   help="judge runs of another machine class than the --baseline's all the same (with a warning)")
    p.set_defaults(func=sensitivity, command="sensitivity.py")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the repetition experiment on ``argv``; the exit code (0, or 2 on a usage error)."""
    return dispatch(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
