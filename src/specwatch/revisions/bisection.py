"""What ``specwatch bisect`` and ``bisect-patches`` share: the step, its verdict, the outcome and its report.

One step is an A/B of the revision under test against the good revision (the bare base, for
patches) in alternating rounds (:func:`specwatch.revisions.rounds.alternate`, the round loop of
``specwatch ab``), the step side first. Its verdict, as ``git bisect run`` wants it:

* a regression beyond the tolerance: bad (1);
* a slowdown beyond the tolerance ruled out: good (0);
* still open at the last look (``--max-rounds``): skip (125), never bad;
* a side that could not be measured (setup failure, timeout, a pytest run without a results file
  or with only errors): skip (125), never bad. The pytest exit code is not the verdict.

Each round's measurement is the memo entry ``<revision>-<side>-r<round>``, and the step's verdict
the entry of the revision itself (the commit, or ``prefix-<k>-<hash>``).
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from specwatch.errors import EXIT_INFRA, EXIT_OK, EXIT_REGRESSION, InfraError, SpecwatchError, UsageError
from specwatch.judge import sequential
from specwatch.report.table import fmt_num
from specwatch.revisions.memo import BAD, GOOD, SKIP, Memo, RevisionRun, step_round_ident, whole_rounds
from specwatch.revisions.rounds import (
    DEFAULT_ALPHA,
    DEFAULT_MAX_ROUNDS,
    DEFAULT_ROUNDS,
    NO_REGRESSION,
    REGRESSION,
    SLOWER,
    UNSURE,
    KeyVerdict,
    RoundSettings,
    Side,
    alternate,
    overall,
)
from specwatch.revisions.step import MeasureConfig

EXIT_CODES = {GOOD: 0, BAD: 1, SKIP: 125}  # what `git bisect run` understands
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report it
PREFIX = "[bisect]"
#: None: each key's own tolerance, the smallest the design settles at its round spread (as ab)
DEFAULT_TOLERANCE: float | None = None


def step_settings(
    rounds: int = DEFAULT_ROUNDS,
    max_rounds: int | None = None,
    tolerance: float | None = DEFAULT_TOLERANCE,
    metrics: Sequence[str] | None = None,
    alpha: float = DEFAULT_ALPHA,
    round_history: str | None = None,
    spending: str = sequential.POCOCK,
) -> RoundSettings:
    """A bisection's validated round settings (UsageError otherwise); ``max_rounds`` defaults to max(4, rounds)."""
    return RoundSettings.make(rounds, max(DEFAULT_MAX_ROUNDS, rounds) if max_rounds is None else max_rounds,
                              tolerance, metrics, alpha, round_history, spending)


# --------------------------------------------------------------------------------------------
# one step: an A/B against the good revision in alternating rounds


def _key_detail(k: KeyVerdict) -> dict[str, Any]:
    return {
        "key": k.key, "unit": k.unit, "higher_is_better": k.higher_is_better, "good_median": k.base_median,
        "step_median": k.head_median, "ratio": k.rounds.ratio, "low": k.rounds.low, "high": k.rounds.high,
        "p": k.rounds.p, "spread": k.rounds.spread, "round_ratios": k.round_ratios, "verdict": k.verdict,
        "message": k.message, "tolerance": k.tolerance, "decided_at": k.decided_at,
    }


def _step_verdict(keys: Sequence[KeyVerdict], rounds: int, settings: RoundSettings) -> tuple[str, str]:
    """(bisect verdict, reason) of a step's judged keys: regression bad, no regression good, unsure or slower
    (shown slower, not beyond the tolerance) skip."""
    verdict = overall(keys)
    if verdict == REGRESSION:
        bad = [k for k in keys if k.verdict == REGRESSION]
        return BAD, "; ".join(f"{k.key}: {k.message}" for k in bad)
    if verdict == NO_REGRESSION:
        return GOOD, (f"no key slower than its tolerance ({', '.join(f'{k.key} {k.tolerance:.1%}' for k in keys)}) "
                      f"over {rounds} rounds")
    slower = [k for k in keys if k.verdict == SLOWER]
    if slower:
        return SKIP, (f"slower, not shown beyond the tolerance after {rounds} rounds "
                      f"({'; '.join(f'{k.key}: {k.message}' for k in slower)})")
    unsure = [k for k in keys if k.verdict == UNSURE]
    tolerance = "/".join(dict.fromkeys(f"{k.tolerance:.1%}" for k in unsure))
    return SKIP, (f"unsure: the noise exceeded the {tolerance} tolerance after {rounds} rounds "
                  f"({'; '.join(f'{k.key}: {k.message}' for k in unsure)})")


def ab_step(
    good: Side,
    step: Side,
    *,
    ident: str,
    label: str,
    cfg: MeasureConfig,
    memo: Memo,
    settings: RoundSettings,
    session: str,
    out: TextIO,
    verdicts: Memo | None = None,
) -> RevisionRun:
    """Measure ``step`` against ``good`` in alternating rounds; store and return the step's verdict entry.
    ``memo`` holds the rounds' measurements, ``verdicts`` (default ``memo``) the verdict.

    The verdict entry is ``ident``, its ``results`` the step side's last results file and its
    ``detail`` every judged key. The step side goes first in round 1, so a revision that does not
    build costs no measurement of the good one. The whole rounds of a step that was stopped before its
    verdict (Ctrl-C, ``kill``, a call's time limit) are kept from the memo, not measured again.
    """
    start = time.monotonic()
    lead = f"{PREFIX}   {short(ident)}"
    kept = whole_rounds(memo, lambda r: [step_round_ident(ident, good.name, r), step_round_ident(ident, step.name, r)])
    if kept:
        print(f"{lead} round(s) 1-{kept} kept from the memo {memo.root} (an earlier run of this step, stopped before "
              f"its verdict or judged under other settings)", file=out, flush=True)
    done = alternate(good, step, cfg=cfg, memo=memo, session=session, settings=settings,
                     ident=lambda side, r: step_round_ident(ident, side.name, r), head_first=True, lead=lead, out=out,
                     kept_rounds=kept)
    last_step = done.last.get(step.name)
    detail: dict[str, Any] = {"kind": "step", "good": good.label, "settings": settings.to_json(),
                              "rounds": done.rounds, "keys": [_key_detail(k) for k in done.keys]}
    if done.failed is not None:
        verdict, reason = SKIP, (f"round {done.rounds + 1}: the {done.failed_side} side could not be measured: "
                                 f"{done.why_failed}")
        detail.update(failed_side=done.failed_side, log=str(memo.log_path(done.failed.ident)))
    elif not done.keys:
        verdict, reason = SKIP, (f"no key of {', '.join(settings.metrics)} in every round of both sides "
                                 f"(do both measure the same servers?)")
        detail.update(no_keys=True)
    else:
        verdict, reason = _step_verdict(done.keys, done.rounds, settings)
        detail.update(unsure=verdict == SKIP, slower=overall(done.keys) == SLOWER)
    entry = RevisionRun(
        ident=ident, label=label, verdict=verdict, reason=reason,
        pytest_rc=last_step.pytest_rc if last_step else None, results=last_step.results if last_step else None,
        seconds=round(time.monotonic() - start, 3),
        measured=datetime.now(timezone.utc).isoformat(timespec="seconds"), session=session, detail=detail,
    )
    (verdicts or memo).put(entry)
    return entry


def reusable(entry: RevisionRun | None) -> bool:
    """A memoised step verdict that is about the step: not one the good side could not be measured for."""
    return entry is not None and entry.detail.get("kind") == "step" and entry.detail.get("failed_side") not in (
        "good", "base")


def check_bad_end(entry: RevisionRun, store: Memo, settings: RoundSettings, good_label: str) -> None:
    """The bad end's step says whether the good revision can be measured at all: raise if it cannot."""
    failed = entry.detail.get("failed_side")
    if entry.verdict == SKIP and failed in ("good", "base"):
        what = "the good revision" if failed == "good" else "bare base"
        raise InfraError(f"cannot measure {what} {good_label}: {entry.reason}; "
                         f"see {entry.detail.get('log', store.root)}")
    if entry.detail.get("no_keys"):
        raise UsageError(f"the good and bad revisions share no result key of {', '.join(settings.metrics)} "
                         f"(--metric); do both runs measure the same servers (same profile names)?")


def warn_repo_paths(top: Path, cfg: MeasureConfig, out: TextIO) -> None:
    """Arguments that name the repository's own path measure its checkout, not each side's."""
    named = [a for a in (*cfg.pytest_args, cfg.setup or "") if str(top) in a and "{checkout}" not in a]
    if named:
        print(f"{PREFIX} WARNING: {' '.join(named)} names the repository {top}; the good side is measured in a "
              f"worktree, so write {{checkout}} for the checkout being measured", file=out, flush=True)


def count_session(store: Memo, session: str) -> int:
    """Measurements (setup and pytest runs of one side in one round) this session made."""
    return sum(1 for m in store.entries() if m.session == session and m.detail.get("kind") != "step")


@dataclass
class BisectOutcome:
    """What a bisection found; idents are commit shas or patch-prefix ids."""

    first_bad: str | None  # None when skipped revisions leave it ambiguous (see candidates)
    last_good: str | None
    candidates: list[str]  # ambiguous range, in order; [first_bad] when found
    visited: list[RevisionRun]  # in visiting order
    measured_now: int  # how many measurements this run made (the rest came from the memo)
    verdicts_dir: Path  # the step verdicts (of these settings)
    labels: dict[str, str] = field(default_factory=dict)  # names of idents without a step entry (good, base)
    rounds_dir: Path | None = None  # the rounds' measurements, when kept apart from the verdicts (None: verdicts_dir)


# --------------------------------------------------------------------------------------------
# progress lines and the report


def short(ident: str) -> str:
    """A commit sha's first 10 digits; a patch-prefix ident as it is."""
    return ident[:10] if re.fullmatch(r"[0-9a-f]{40}", ident) else ident


def _sorted_keys(detail: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The A/B keys of a step's verdict entry, the most worsened first."""
    def worse_first(k: Mapping[str, Any]) -> float:
        return k["ratio"] if k["higher_is_better"] else 1 / k["ratio"]

    return sorted(detail.get("keys") or [], key=worse_first)


def key_numbers(m: RevisionRun, limit: int = 2) -> str:
    """'key 82.0 vs 89.0 tok/s (-7.9%, 2 rounds)' for the most worsened keys of a step's A/B."""
    parts = []
    for k in _sorted_keys(m.detail)[:limit]:
        parts.append(f"{k['key']} {fmt_num(k['step_median'])} vs {fmt_num(k['good_median'])} {k['unit']} "
                     f"({(k['ratio'] - 1) * 100:+.1f}%)")
    rounds = m.detail.get("rounds")
    return "; ".join(parts) + (f" over {rounds} rounds" if parts and rounds else "")


def progress_line(m: RevisionRun) -> str:
    """One line per step: rev, subject, verdict, key numbers, where the verdict came from."""
    label = m.label if len(m.label) <= 48 else m.label[:45] + "..."
    detail = key_numbers(m) if m.verdict != SKIP else m.reason
    source = "memo" if m.cached else f"{m.seconds:.1f} s"
    return f"{PREFIX} {short(m.ident)} {label!r:<50} {m.verdict.upper():<4}  {detail}  ({source})"


def _ab_table(entry: RevisionRun | None, title: str) -> list[str]:
    """A step's A/B, one line a key: good and step medians, ratio with its CI, per-round changes."""
    keys = _sorted_keys(entry.detail) if entry is not None else []
    if entry is None or not keys:
        return []
    width = max(len(k["key"]) for k in keys)
    unit = max(len(k["unit"]) for k in keys)
    lines = [f"  {title}, {entry.detail.get('rounds')} alternating rounds against {entry.detail.get('good', 'good')}:",
             f"  {'key':<{width}}  {'good':>10}  {'this':>10}  {'':<{unit}}  {'ratio':>7}  {'CI':>15}  "
             f"verdict (change per round)"]
    for k in keys:
        ci = f"[{k['low']:.3f}, {k['high']:.3f}]"
        per_round = " ".join(f"{(r - 1) * 100:+.1f}%" for r in k["round_ratios"])
        lines.append(f"  {k['key']:<{width}}  {fmt_num(k['good_median']):>10}  {fmt_num(k['step_median']):>10}  "
                     f"{k['unit']:<{unit}}  {k['ratio']:>6.3f}x  {ci:>15}  {k['verdict'].replace('_', ' ')} "
                     f"({per_round})")
    return lines


def report(outcome: BisectOutcome, out: TextIO, describe: Mapping[str, str] | None = None) -> int:
    """Print the verdict of a bisection; return the specwatch exit code."""
    store = Memo(outcome.verdicts_dir)
    describe = {**outcome.labels, **(describe or {})}

    def name(ident: str) -> str:
        entry = store.get(ident)
        label = describe.get(ident) or (entry.label if entry else "")
        return f"{short(ident)} {label!r}"

    skipped = [m for m in outcome.visited if m.verdict == SKIP]
    print(f"{PREFIX} {len(outcome.visited)} step(s), each an A/B against the good revision in alternating rounds; "
          f"{outcome.measured_now} measurement(s) made now, the rest from the memo", file=out)
    for m in skipped:
        print(f"{PREFIX} skipped (not blamed): {name(m.ident)}: {m.reason}", file=out)
    if outcome.first_bad is None and not outcome.candidates:
        bad = outcome.visited[0] if outcome.visited else None
        why = bad.reason if bad else "nothing measured"
        if bad is not None and bad.verdict == SKIP:
            if bad.detail.get("slower"):
                print(f"{PREFIX} the bad end is slower than the good one, but not shown beyond the tolerance: {why}; "
                      f"to bisect a slowdown this small, give a --tolerance below it", file=out)
            elif bad.detail.get("unsure"):
                print(f"{PREFIX} the bad end is neither shown slower than the good one nor ruled out: {why}; "
                      f"try more --max-rounds, a larger --tolerance or a quieter machine", file=out)
            else:
                print(f"{PREFIX} the bad end could not be measured: {why}", file=out)
            return EXIT_INFRA
        print(f"{PREFIX} the bad end is not slower than the good one ({why}): no regression to bisect", file=out)
        for line in _ab_table(bad, "bad end"):
            print(line, file=out)
        return EXIT_OK
    if outcome.first_bad is None:
        print(f"{PREFIX} skipped revisions leave the first bad one ambiguous; it is one of:", file=out)
        for ident in outcome.candidates:
            print(f"  {name(ident)}", file=out)
        return EXIT_REGRESSION
    print(f"{PREFIX} first bad: {name(outcome.first_bad)}", file=out)
    if outcome.last_good:
        print(f"{PREFIX} last good: {name(outcome.last_good)}", file=out)
    for line in [*_ab_table(store.get(outcome.first_bad), "first bad"),
                 *_ab_table(store.get(outcome.last_good or ""), "last good")]:
        print(line, file=out)
    out.flush()
    return EXIT_REGRESSION


# --------------------------------------------------------------------------------------------
# running a bisection command (its options: specwatch.cli.bisect)


def run_command(command: str, search: Callable[[TextIO], BisectOutcome], out: TextIO | None, interrupted: str,
                describe: Callable[[BisectOutcome], Mapping[str, str]] | None = None) -> int:
    """Run a bisection (``search()`` -> BisectOutcome) and print its report; a specwatch exit code (0/1/2/3).

    ``describe(outcome)``: names of idents for the report; ``interrupted``: what Ctrl-C leaves behind.
    """
    out = out or sys.stdout
    try:
        outcome = search(out)
    except SpecwatchError as exc:
        print(f"specwatch {command}: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"specwatch {command}: interrupted ({interrupted})", file=sys.stderr)
        return EXIT_INTERRUPTED
    return report(outcome, out, describe(outcome) if describe else None)
