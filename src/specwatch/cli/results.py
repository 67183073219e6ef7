"""``specwatch parse-log`` and ``specwatch compare``: read an engine log, judge results against a baseline."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specwatch.cli.args import existing_file, fraction
from specwatch.errors import EXIT_OK, EXIT_REGRESSION, UsageError
from specwatch.run.options import DEFAULTS

if TYPE_CHECKING:
    from specwatch.store.baseline import Baseline
    from specwatch.store.driftinput import DriftInput


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
    run_machine: str | None = None  # the machine a results file's run was on, as baseline sessions name theirs
    base: Baseline | None = None  # the baseline file, for a baseline


def _load_side(path: str, kind: str) -> _Side:
    """A results file or a baseline file (told apart by its fields), each through its own loader,
    which migrates older versions."""
    from specwatch.store.baseline import Baseline
    from specwatch.store.machine import run_machine
    from specwatch.store.result import ResultSet, make_key, read_json

    doc = read_json(path, kind)
    if isinstance(doc, dict) and "metrics" in doc and "profile" in doc:
        base = Baseline.from_dict(doc, Path(path))
        return _Side(path, f"baseline {path}", {r.key: (list(r.samples), r.unit, r.higher_is_better)
                                                  for r in base.as_results()},
                     base.machine, base.machine_class,
                     {make_key(base.profile, m.workload, m.metric): m for m in base.metrics.values()}, base=base)
    rs = ResultSet.from_document(doc, path)
    return _Side(path, f"results {path}", {r.key: (list(r.samples), r.unit, r.higher_is_better) for r in rs.results},
                 rs.machine, rs.machine_class, run_machine=run_machine(rs.machine, rs.commit, rs.created))


def other_class(ref: tuple[str, str, str | None], cur: tuple[str, str, str | None], allow_other: bool) -> str | None:
    """The warning line when both sides, each ``(path, label, machine class)``, name a machine class and
    they differ (None when they do not); UsageError instead unless ``allow_other`` (--allow-other-class).
    The one rule of ``compare`` and of ``sensitivity --baseline``."""
    (ref_path, ref_label, a), (cur_path, cur_label, b) = ref, cur
    if not (a and b and a != b):
        return None
    if not allow_other:
        raise UsageError(f"machine classes differ: {ref_path} is {a!r}, {cur_path} is {b!r}; a comparison "
                         f"across classes measures the machines, not the server: compare against a {b!r} "
                         "baseline, or pass --allow-other-class to compare anyway")
    return (f"WARNING: machine classes differ ({ref_label} is {a!r}, {cur_label} is {b!r}): every "
            "verdict below compares two kinds of machine, not two versions of the server")


def _class_check(ref: _Side, cur: _Side, allow_other: bool) -> tuple[bool | None, list[str]]:
    """Whether both sides are of one machine class (None: a side does not say) and the warning
    lines to print; UsageError when they differ and ``allow_other`` is off."""
    a, b = ref.machine_class, cur.machine_class
    warning = other_class((ref.path, ref.label, a), (cur.path, cur.label, b), allow_other)
    if warning is not None:
        return False, [warning]
    missing = [side.path for side, mc in ((ref, a), (cur, b)) if not mc]
    return (None, [f"warning: {p} records no machine class, so it is unknown whether both sides come from "
                   "the same kind of machine" for p in missing]) if missing else (True, [])


def _cmd_compare(args: argparse.Namespace) -> int:
    from specwatch.judge import compare, stats, yardstick
    from specwatch.report.table import ReportRow, summary_table

    ref = _load_side(args.baseline, "baseline")
    cur = _load_side(args.results, "results")
    same_class, warnings = _class_check(ref, cur, args.allow_other_class)
    common = sorted(set(ref.samples) & set(cur.samples))
    if not common:
        raise UsageError(f"{args.baseline} and {args.results} share no result key")
    machine = cur.run_machine
    rows, notes = [], []
    for key in common:
        samples, unit, higher = cur.samples[key]
        reference, sessions, scores, run_score, class_spread, term = ref.samples[key][0], None, None, None, None, None
        if key in ref.metrics:  # a baseline: the drift gate's inputs (its sessions, floor and machine term)
            inputs = _inputs(ref, key, machine, str(cur.machine.get("engine") or ""), same_class)
            reference, sessions, note = inputs.samples, inputs.sessions, inputs.note
            if note and note not in notes:
                notes.append(note)
            run_score, scores = yardstick.scores_for(cur.machine.get("yardstick"), inputs.yardsticks)
            class_spread, term = inputs.floor, inputs.machine_term
        c, basis = compare.drift(samples, reference, higher_is_better=higher, requested=args.tolerance, machine=machine,
                                 alpha=args.alpha, sessions=sessions or None, class_spread=class_spread,
                                 session_scores=scores if sessions and scores and len(scores) == len(sessions)
                                 else None, run_score=run_score, machine_term=term)
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


def _inputs(ref: _Side, key: str, machine: str | None, engine: str, same_class: bool | None) -> DriftInput:
    """The drift gate's inputs of a baseline side's key (:func:`specwatch.store.driftinput.drift_input`): the
    class's floor and machine term from the folder the baseline lies in, unless the sides' classes differ."""
    from specwatch.store.baseline import BaselineStore
    from specwatch.store.driftinput import drift_input

    assert ref.base is not None  # a side with metrics is a baseline
    _, workload, metric = key.split("/", 2)
    found = drift_input(BaselineStore(Path(ref.path).resolve().parent.parent), ref.base, workload, metric,
                        machine=machine, engine=engine, same_class=same_class)
    if isinstance(found, str):  # a key of the baseline's metrics: cannot be
        raise UsageError(found)
    return found


def register(sub: Any) -> None:
    """Add this module's subcommands to the ``specwatch`` parser."""
    p = sub.add_parser("parse-log", help="print one JSON object per Decode, Prefill or Capture line of an engine log")
    p.add_argument("file")
    p.set_defaults(func=_cmd_parse_log)

    p = sub.add_parser("compare", help="verdict table of RESULTS against BASELINE; exit 1 on a regression")
    p.add_argument("baseline", type=existing_file,
                   help="a baseline file (baselines/<class>/<profile>.json) or a results file")
    p.add_argument("results", type=existing_file, help="a results file (pytest -m perf --specwatch-results PATH)")
    p.add_argument("--tolerance", type=fraction, default=DEFAULTS["tolerance"],
                   help=f"smallest relative change of medians that counts, in (0, 1) (default {DEFAULTS['tolerance']})")
    p.add_argument("--alpha", type=fraction, default=DEFAULTS["alpha"],
                   help=f"significance level, in (0, 1) (default {DEFAULTS['alpha']})")
    p.add_argument("--allow-other-class", action="store_true",
                   help="compare even when the two sides come from different machine classes (with a warning)")
    p.set_defaults(func=_cmd_compare)
