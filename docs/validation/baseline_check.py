"""How the drift verdict does on the sessions a baseline recorded: each one held out in turn.

    python docs/validation/baseline_check.py BASELINE [--metric M] [--tolerance T] [--alpha A]
    python docs/validation/baseline_check.py BASELINE --leave-one-machine-out [--peer NAME]

Each recorded session of the baseline, in turn, judged against a baseline of the other sessions: how many
the drift verdict would falsely call regressions, and the smallest slowdown of each that it would flag (the
leave-one-session-out replay; exit 1 on a false alarm). ``--leave-one-machine-out``: the detector benchmark
instead (machineout.py), the gate beside its peers (peers.py). A research tool of the validation page,
formerly ``specwatch baseline check``; it judges with the drift gate's own verdict
(:func:`specwatch.judge.compare.drift`) through :mod:`specwatch.judge.replay`, the files read by
:mod:`specwatch.store.sessions`, and its errors are one line, exit 2, as the ``specwatch`` command's.
Run from the repository root.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specwatch.cli import dispatch
from specwatch.cli.args import Parser, existing_file, fraction
from specwatch.errors import EXIT_OK, EXIT_REGRESSION, UsageError
from specwatch.report.table import fmt_change, fmt_num, fmt_verdict
from specwatch.run.options import DEFAULTS

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling machineout.py, when imported

#: what the replays judge unless told otherwise: the throughput the drift gates judge
DEFAULT_METRICS = ("output_tok_s", "decode_tok_s")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def direction(higher_is_better: bool) -> str:
    return "higher is better" if higher_is_better else "lower is better"


def baseline_check(args: argparse.Namespace) -> int:
    from specwatch.judge import replay, yardstick
    from specwatch.judge.compare import MIN_SESSIONS, drift_basis
    from specwatch.store.driftinput import of_baseline
    from specwatch.store.sessions import baseline_sessions

    base, keys = baseline_sessions(args.baseline)
    metrics = tuple(args.metric or DEFAULT_METRICS)
    chosen = [ks for ks in keys if ks.metric in metrics]
    if not chosen:
        raise UsageError(f"{args.baseline} has no metric {', '.join(metrics)} (it has "
                         f"{', '.join(sorted({ks.metric for ks in keys})) or 'none'})")
    if args.leave_one_machine_out:
        from machineout import leave_one_machine_out

        return leave_one_machine_out(args, chosen)
    if args.peer:
        raise UsageError("baseline_check.py: --peer goes with --leave-one-machine-out")
    print(f"baseline_check.py {args.baseline}: each recorded session against the others, with the drift "
          f"verdict (requested tolerance {args.tolerance:.1%}, alpha {args.alpha:g})", flush=True)
    false_alarms, checked = 0, 0
    for ks in chosen:
        _, workload, metric = ks.key.split("/", 2)
        inputs = of_baseline(base, workload, metric)  # the gate's floor and machine term, as it builds them
        spread, term = (inputs.floor, inputs.machine_term) if inputs else (None, None)
        head = f"{ks.key} ({ks.unit}, {direction(ks.higher_is_better)}): {len(ks.sessions)} session(s)"
        if len(ks.sessions) < 2:
            print(f"{head}: nothing to hold out (needs 2 or more); record more (each --update-baselines adds a "
                  f"session)", flush=True)
            continue
        checked += 1
        judge = replay.Judge(ks.higher_is_better, args.tolerance, args.alpha, spread, machine_term=term)
        known = [m for m, n in Counter(ks.machines).items() if n >= MIN_SESSIONS]
        rows_are = (f"each row is judged against the other sessions of its own machine where that machine has "
                    f"{MIN_SESSIONS} or more ({len(known)} machine(s) here), else as a run on a new machine; "
                    if known else "each row is judged as a run on a new machine; ")
        print(f"{head}; {rows_are}a run on a new machine: "
              f"{drift_basis(args.tolerance, ks.sessions, spread, args.alpha, term=term).note}")
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


def build_parser() -> Parser:
    """The script's options (those of the former ``specwatch baseline check``)."""
    p = Parser(prog="baseline_check.py", description="replay each recorded session against the others through "
               "the drift verdict: false alarms and the smallest slowdown flagged; exit 1 on a false alarm")
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
    p.set_defaults(func=baseline_check, command="baseline_check.py")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the replay on ``argv``; the exit code (0, 1 on a false alarm, 2 on a usage error)."""
    return dispatch(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
