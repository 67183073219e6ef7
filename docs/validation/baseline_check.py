"""``specwatch baseline check`` and ``specwatch sensitivity``: how the drift verdict does on recorded runs.

* ``baseline check BASELINE``: each recorded session of the baseline, in turn, judged against a
  baseline of the other sessions: how many the drift verdict would falsely call regressions, and
  the smallest slowdown of each that it would flag (the leave-one-session-out replay).
* ``sensitivity HEALTHY... [--slowed SLOWED...] [--baseline B]``: the false-alarm rate on results
  files of healthy runs and the detection rate on runs with an injected slowdown (or a synthetic
  ``--slowdown`` of the healthy ones), at each requested tolerance and significance level (the
  repetition experiment).

Both use the drift gate's own verdict (:func:`specwatch.judge.compare.drift`) through
:mod:`specwatch.judge.replay`; the files are read by :mod:`specwatch.store.sessions`.
"""

from __future__ import annotations

import argparse
import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Any

from specwatch.cli.args import existing_file, fraction
from specwatch.errors import EXIT_OK, EXIT_REGRESSION, UsageError
from specwatch.report.table import fmt_change, fmt_num, fmt_verdict
from specwatch.run.options import DEFAULTS

#: what the replays judge unless told otherwise: the throughput the drift gates judge
DEFAULT_METRICS = ("output_tok_s", "decode_tok_s")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def _span(values: Sequence[float]) -> str:
    """'6.1%' or '6.1-6.6%': the range of the tolerances a group's verdicts used."""
    lo, hi = min(values), max(values)
    return f"{lo:.1%}" if f"{lo:.1%}" == f"{hi:.1%}" else f"{lo * 100:.1f}-{hi:.1%}"


def _direction(higher_is_better: bool) -> str:
    return "higher is better" if higher_is_better else "lower is better"


# --------------------------------------------------------------------------------------------
# baseline check


def _cmd_baseline_check(args: argparse.Namespace) -> int:
    from specwatch.judge import replay, yardstick
    from specwatch.judge.compare import MIN_SESSIONS, drift_basis
    from specwatch.store.sessions import baseline_sessions, class_spread

    base, keys = baseline_sessions(args.baseline)
    metrics = tuple(args.metric or DEFAULT_METRICS)
    chosen = [ks for ks in keys if ks.metric in metrics]
    if not chosen:
        raise UsageError(f"{args.baseline} has no metric {', '.join(metrics)} (it has "
                         f"{', '.join(sorted({ks.metric for ks in keys})) or 'none'})")
    if args.leave_one_machine_out:
        from specwatch.cli.machineout import leave_one_machine_out

        return leave_one_machine_out(args, chosen)
    if args.peer:
        raise UsageError("baseline check: --peer goes with --leave-one-machine-out")
    print(f"specwatch baseline check {args.baseline}: each recorded session against the others, with the drift "
          f"verdict (requested tolerance {args.tolerance:.1%}, alpha {args.alpha:g})", flush=True)
    false_alarms, checked = 0, 0
    for ks in chosen:
        _, workload, metric = ks.key.split("/", 2)
        spread = class_spread(base, workload, metric)
        head = f"{ks.key} ({ks.unit}, {_direction(ks.higher_is_better)}): {len(ks.sessions)} session(s)"
        if len(ks.sessions) < 2:
            print(f"{head}: nothing to hold out (needs 2 or more); record more (each --update-baselines adds a "
                  f"session)", flush=True)
            continue
        checked += 1
        judge = replay.Judge(ks.higher_is_better, args.tolerance, args.alpha, spread)
        known = [m for m, n in Counter(ks.machines).items() if n >= MIN_SESSIONS]
        rows_are = (f"each row is judged against the other sessions of its own machine where that machine has "
                    f"{MIN_SESSIONS} or more ({len(known)} machine(s) here), else as a run on a new machine; "
                    if known else "each row is judged as a run on a new machine; ")
        print(f"{head}; {rows_are}a run on a new machine: "
              f"{drift_basis(args.tolerance, ks.sessions, spread, args.alpha).note}")
        _, scores = yardstick.scores_for(None, ks.yardsticks)
        if any(x is not None for x in scores):
            print(f"  {_yardstick_line(ks, scores, args.alpha)}")
        print(f"  {'#':>3}  {'recorded':<32}  {'median':>9}  {'change':>7}  {'verdict':<12}  {'tolerance':>9}  "
              f"flags a slowdown of", flush=True)
        held = replay.leave_one_out(judge, ks.sessions, scores if any(x is not None for x in scores) else None)
        for h in held:
            c = h.comparison
            print(f"  {h.index + 1:>3}  {ks.labels[h.index]:<32}  {fmt_num(h.median):>9}  {fmt_change(c.change):>7}  "
                  f"{fmt_verdict(c.verdict.value):<12}  {h.basis.tolerance:>9.1%}  "
                  f"{_pct(h.detects) if h.detects is not None else f'none up to {replay.LIMIT:.0%}'}", flush=True)
        alarms = sum(h.false_alarm for h in held)
        false_alarms += alarms
        found = sorted(h.detects for h in held if h.detects is not None)
        line = f"  false alarms: {alarms} of {len(held)}"
        if found:
            line += (f"; smallest slowdown flagged: median {_pct(statistics.median(found))}, largest {_pct(found[-1])}"
                     f" ({_pct(found[-1])} or more is flagged in every session"
                     f"{'' if len(found) == len(held) else ' that flags one'})")
        if len(found) < len(held):
            line += f"; {len(held) - len(found)} session(s) flag no slowdown up to {replay.LIMIT:.0%}"
        print(line, flush=True)
    if not checked:
        raise UsageError(f"{args.baseline}: no metric of {', '.join(metrics)} has 2 or more recorded sessions; "
                         f"nothing to hold out")
    return EXIT_REGRESSION if false_alarms else EXIT_OK


def _yardstick_line(ks: Any, scores: list[float | None], alpha: float) -> str:
    """'machine yardstick: 5 of 6 sessions carry one; session spread raw 2.4%, normalised 1.1% (...)'."""
    from specwatch.judge import yardstick

    medians = [statistics.median(s) for s in ks.sessions]
    # any run score: the rule's baseline side is printed here, the held-out runs are judged below
    d = yardstick.decide(medians, scores, 1.0, higher_is_better=ks.higher_is_better, alpha=alpha)
    spreads = ("" if d.raw_spread is None or d.normalised_spread is None else
               f"; session spread raw {d.raw_spread:.1%}, normalised {d.normalised_spread:.1%}")
    rule = d.reason if not d.use_normalised else "a run with a comparable yardstick is judged normalised"
    return f"machine yardstick: {d.with_yardstick} of {d.sessions} sessions carry one{spreads}; {rule}"


def register_baseline_check(baseline_subparsers: Any) -> None:
    """Add ``check`` to the subcommands of ``specwatch baseline``."""
    p = baseline_subparsers.add_parser(
        "check", help="replay each recorded session against the others through the drift verdict: false alarms and "
                      "the smallest slowdown flagged; exit 1 on a false alarm")
    p.add_argument("baseline", type=existing_file, help="a baseline file (baselines/<class>/<profile>.json)")
    p.add_argument("--metric", action="append", default=None,
                   help=f"metric replayed, repeatable (default: the drift gates' {', '.join(DEFAULT_METRICS)})")
    p.add_argument("--tolerance", type=fraction, default=DEFAULTS["tolerance"],
                   help=f"the tolerance requested of the drift gate (default {DEFAULTS['tolerance']}); 3 or more "
                        "sessions set their own")
    p.add_argument("--alpha", type=fraction, default=DEFAULTS["alpha"],
                   help=f"significance level, in (0, 1) (default {DEFAULTS['alpha']})")
    p.add_argument("--leave-one-machine-out", action="store_true",
                   help="the detector benchmark instead: each session judged against the sessions of the other "
                        "machines, as recorded and 2, 4, 6 and 8%% slower, by the drift gate and by its peers")
    p.add_argument("--peer", action="append", default=None, choices=("pytest-benchmark", "asv", "otava", "changepoint"),
                   help="with --leave-one-machine-out: a peer judged beside the gate, repeatable (default: all four; "
                        "one whose package is not installed says so)")
    p.set_defaults(func=_cmd_baseline_check)


# --------------------------------------------------------------------------------------------
# sensitivity


def _cmd_sensitivity(args: argparse.Namespace) -> int:
    from specwatch.judge import replay
    from specwatch.judge.compare import MIN_SESSIONS
    from specwatch.store.sessions import baseline_sessions, class_spread, results_sessions

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
    print(f"specwatch sensitivity: the drift verdict {against}; rate: runs called a regression (false alarms "
          f"among healthy runs, detections among slowed ones)")
    for key in keys:
        ks = healthy[key]
        base = reference[key].sessions if reference is not None else None
        if base is None and len(ks.sessions) < 2:
            print(f"{key}: only {len(ks.sessions)} healthy run(s) hold it; nothing to judge it against")
            continue
        spread = None
        if stored is not None:
            _, workload, metric = key.split("/", 2)
            spread = class_spread(stored[0], workload, metric)
        slowed = [(f"{name} ({len(found[key].sessions)} runs)", found[key].sessions)
                  for name, found in groups if key in found]
        print(f"{key} ({ks.unit}, {_direction(ks.higher_is_better)}): {len(ks.sessions)} healthy run(s)")
        print(f"  {'requested':>9}  {'alpha':>5}  {'used':>10}  {'runs':<24}  {'n':>4}  {'regressions':>11}  "
              f"{'rate':>5}  median change")
        for tolerance in args.tolerance or [0.05]:
            for alpha in args.alpha or [0.01]:
                judge = replay.Judge(ks.higher_is_better, tolerance, alpha, spread)
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


def register(sub: Any) -> None:
    """Add ``specwatch sensitivity`` to the ``specwatch`` parser."""
    p = sub.add_parser(
        "sensitivity", help="false alarms on healthy runs and detections of slowed ones by the drift verdict, per "
                            "tolerance and alpha (results files of repeated runs)")
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
    p.set_defaults(func=_cmd_sensitivity)
