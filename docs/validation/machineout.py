"""``python docs/validation/baseline_check.py BASELINE --leave-one-machine-out``: the drift gate beside its peers.

Each recorded session is held out with every other session of its machine (a lease, when the sessions
record no GPU identity: :func:`specwatch.store.baseline.session_machine`) and judged against the
sessions of the other machines, as recorded (a false alarm when flagged) and with its samples 2, 4, 6
and 8% slower (:func:`specwatch.judge.replay.leave_one_machine_out`), by the drift gate and by the peers
of peers.py, each through its own code. The last lines say what the sessions' variance
components allow any detector on a new machine (:func:`specwatch.judge.variance.best_detection`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from specwatch.errors import EXIT_OK, UsageError

#: issue 23's targets: the slowdown, the share of held-out sessions to flag, the false alarms allowed in 46
TARGET = (0.08, 0.90, 1, 46)


def _cell(k: int, n: int) -> str:
    return f"{k}/{n} ({k / n:.0%})"


def leave_one_machine_out(args: argparse.Namespace, chosen: Sequence[Any]) -> int:
    """Print the table per metric of ``chosen`` (:class:`specwatch.store.sessions.KeySessions`)."""
    from peers import LABELS, NAMES, detector

    from specwatch.judge import replay, variance

    slow, share, alarms, of = TARGET
    print(f"baseline_check.py {args.baseline} --leave-one-machine-out: each session against the sessions "
          f"of the other machines, as recorded and slowed by 2, 4, 6 and 8% (target, issue 23: {slow:.0%} "
          f"flagged in >= {share:.0%} with <= {alarms} false alarm in {of})", flush=True)
    done = 0
    for ks in chosen:
        machines = ks.machines
        if len(set(machines)) < 2:
            print(f"{ks.key}: its {len(ks.sessions)} session(s) come from one machine; nothing to hold out")
            continue
        done += 1
        comp = variance.components(ks.sessions)
        kinds = sorted({m.split(":", 1)[0] for m in machines})
        print(f"{ks.key} ({ks.unit}): {len(ks.sessions)} sessions on {len(set(machines))} machines (told apart by "
              f"{', '.join(kinds)}); {comp.line()}", flush=True)
        judge = replay.Judge(ks.higher_is_better, args.tolerance, args.alpha, None, n_resamples=100)
        rows: list[tuple[str, replay.Detector | str]] = [("specwatch drift gate (new-machine interval)", judge.flags)]
        rows += [(LABELS[name], detector(name, ks.higher_is_better)) for name in args.peer or NAMES]
        width = max(len(name) for name, _ in rows)
        print(f"  {'detector':<{width}}  {'false alarms':>12}  " + "  ".join(
            f"{f'flags {1 - k:.0%}':>13}" for k in replay.SCALES), flush=True)
        for name, det in rows:
            if isinstance(det, str):
                print(f"  {name:<{width}}  {det}", flush=True)
                continue
            rate = replay.leave_one_machine_out([(name, det)], ks.sessions, higher_is_better=ks.higher_is_better)[0]
            print(f"  {name:<{width}}  {_cell(rate.false_alarms, rate.judged):>12}  " + "  ".join(
                f"{_cell(rate.detected[k], rate.judged):>13}" for k in replay.SCALES), flush=True)
        pred = variance.predict(comp, alpha=args.alpha)
        best = variance.best_detection(pred.sd, slow, alarms / of)
        print(f"  limit: a session on a new machine lands within ±{pred.sd:.1%} (1 SD) of these machines' centre; "
              f"at {alarms} false alarm in {of} no rule flags {slow:.0%} in more than {best:.0%} of such sessions "
              f"on average", flush=True)
    if not done:
        raise UsageError(f"{args.baseline}: no metric of {', '.join(ks.metric for ks in chosen)} has sessions of "
                         "2 or more machines; nothing to hold out")
    return EXIT_OK
