"""``specwatch ab-ladder``: a chain of versions judged pair by pair, each version booted once a round.

Given profiles P0, P1, ..., Pn (oldest first), every neighbouring pair (P[i] the base, P[i+1] the head) is
judged by ab's own rule (:func:`specwatch.revisions.rounds.judge` on its per-round ratios, each key planned by
:mod:`specwatch.revisions.plan` on that pair's first look), as ``specwatch ab --base-profile P[i] --head-profile
P[i+1]`` would judge it; but each version is booted once a round and that measurement serves both pairs it
belongs to: n+1 boots a round instead of 2n.

The order keeps ab's alternation: round r walks the chain one way and round r+1 back (a boustrophedon), so in
every round a pair's two boots are consecutive in time, and the pair's order flips from round to round (head
then base, then base then head; which comes first in round 1 is ``start``). What the ladder gives up against n
separate ab runs: neighbouring pairs share a measurement, so their verdicts are not independent (a lucky boot of
P[i] makes one pair read faster and the next one slower by the same amount; the changes along the chain add up
exactly from P0 to Pn). Each verdict alone keeps ab's error rates (alpha per key and pair, as n ab runs would).
For the same reason the ladder does not record its rounds into the round spread. From ``rounds`` on, every whole
round is a look; a further round boots only the versions of the pairs still open.

``drop_unmeasured``: a version that cannot be measured (it did not boot, or its run wrote no samples) is dropped
from the chain and its two neighbours become a pair, judged on the rounds both were booted in; without it the
ladder stops there (``resume`` measures it again). A resumed ladder drops again every version its memo holds an
unmeasured boot of, without booting it.

``resume_only``: as ``resume``, but a memo with no stopped ladder is an error at once, before any boot (a call that
continues a ladder, on a machine that lost the earlier calls' boots).

``stop_after`` ends the run before the measurement that would pass that many in the ladder's order (a lent
machine's call limit, or versions installed call by call); ``resume`` continues the newest ladder of the memo
that ended without a verdict, keeping every measurement it made (each is a boot of its own; one cut short left
no results file and is made again).
"""

from __future__ import annotations

import hashlib
import itertools
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TextIO

from specwatch.errors import EXIT_INFRA, EXIT_OK, EXIT_REGRESSION, EXIT_SLOWER, InfraError, SpecwatchError, UsageError
from specwatch.judge import sequential
from specwatch.paths import DEFAULT_BASELINE_DIR
from specwatch.revisions import ab, outcomes, verdictfile
from specwatch.revisions.memo import SKIP, Memo, RevisionRun, ladder_ident, measured, memo_root, stopped_ladders
from specwatch.revisions.plan import KeyPlan, plan_keys
from specwatch.revisions.rounds import (
    DEFAULT_ALPHA,
    DEFAULT_METRICS,
    DEFAULT_ROUNDS,
    NO_REGRESSION,
    REGRESSION,
    SLOWER,
    UNSURE,
    Found,
    Rounds,
    RoundSettings,
    Side,
    engine_of,
    headline,
    judge,
    key_ratios,
    machine_class_of,
    overall,
    round_spread_of,
    side_config,
)
from specwatch.revisions.step import MeasureConfig, measure, samples_of, served_of

PREFIX = "[ladder]"
#: where round 1 starts: at the first (oldest) profile, or at the last (newest)
STARTS = ("first", "last")
#: the exit code of a ladder, from its pairs' verdicts: the first of these any pair has
_WORST = ((REGRESSION, EXIT_REGRESSION), (SLOWER, EXIT_SLOWER), (UNSURE, EXIT_INFRA))


def walk(members: Sequence[int], n: int, start: str = "first") -> list[int]:
    """The order in which round ``n`` boots ``members`` (indices into the chain): odd rounds from the ``start``
    end of the chain, even rounds back, so every neighbouring pair is booted back to back in every round, in the
    opposite order to the round before."""
    up = (n % 2 == 1) == (start == "first")
    return sorted(members, reverse=not up)


def rungs_of(profiles: Sequence[str | Path]) -> list[Side]:
    """The chain's sides, oldest first: each profile file measured in this folder (UsageError: a missing file,
    fewer than two)."""
    if len(profiles) < 2:
        raise UsageError("ab-ladder needs at least two --profile files (oldest first)")
    rungs, served = [], []
    for i, path in enumerate(profiles):
        stem = Path(path).stem
        side, servers = ab.profile_side("--profile", path, stem, f"{i}-{stem}")
        rungs.append(side)
        served.append((str(path), servers))
    for older, newer in itertools.pairwise(served):
        ab.shared_servers(older, newer)
    return rungs


def content_id(path: str | Path) -> str:
    """A profile's name and the hash of its text: what keys the ladder's memo folder (a profile edited between two
    calls starts another ladder; one written to another folder with the same text continues it)."""
    p = Path(path)
    return f"{p.stem}:{hashlib.sha256(p.read_bytes()).hexdigest()[:16]}"


@dataclass
class Ladder:
    """What :func:`run_ladder` measured and judged."""

    rungs: list[Side]
    taken: dict[int, dict[int, Found]] = field(default_factory=dict)  # rung -> round -> its samples
    entries: dict[int, dict[int, RevisionRun]] = field(default_factory=dict)  # rung -> round -> its measurement
    pairs: dict[int, Rounds] = field(default_factory=dict)  # base rung -> the pair's judged rounds
    heads: dict[int, int] = field(default_factory=dict)  # base rung -> its pair's head (the next rung not dropped)
    plans: dict[tuple[int, int], dict[str, KeyPlan]] = field(default_factory=dict)  # (base, head) -> keys' plans
    dropped: dict[int, str] = field(default_factory=dict)  # rung -> why it could not be measured (drop_unmeasured)
    made: int = 0  # measurements of the ladder's order done, kept ones included
    rounds: int = 0  # rounds begun
    stopped: bool = False  # ended by ``stop_after`` before its verdicts
    failed: RevisionRun | None = None
    failed_rung: int | None = None
    memo: Path | None = None  # the memo folder its measurements and logs are in

    def verdict(self) -> str:
        """The worst of the pairs' verdicts (regression, slower, unsure, no regression); a dropped version makes
        it at least unsure (the pairs it was in were never judged)."""
        worst = overall([k for pair in self.pairs.values() for k in pair.keys])
        return UNSURE if self.dropped and worst == NO_REGRESSION else worst

    def chain(self) -> list[int]:
        """The rungs not dropped, oldest first: each neighbouring two a pair."""
        return [i for i in range(len(self.rungs)) if i not in self.dropped]


def gaps(ladder: Ladder, base: int) -> list[float | None]:
    """Seconds between the end of a pair's first boot and the start of its second, round by round (None where the
    entries' times cannot be read): a call boundary between them shows here."""
    out: list[float | None] = []
    head = ladder.heads.get(base, base + 1)
    for n in sorted(set(ladder.entries.get(base, {})) & set(ladder.entries.get(head, {}))):
        a, b = ladder.entries[base][n], ladder.entries[head][n]
        try:
            ends = sorted([(datetime.fromisoformat(a.measured), a), (datetime.fromisoformat(b.measured), b)],
                          key=lambda t: t[0])
        except ValueError:
            out.append(None)
            continue
        (end1, _), (end2, second) = ends
        out.append(max(0.0, (end2 - end1).total_seconds() - second.seconds))
    return out


def judge_pair(ladder: Ladder, base: int, head: int, settings: RoundSettings, out: TextIO) -> Rounds:
    """Pair (``base``, ``head``) judged on every round both were booted in, by ab's rule; its keys are planned
    once, at its first look, from the machine class its base's first results file records."""
    both = sorted(set(ladder.taken[base]) & set(ladder.taken[head]))
    b_rounds, h_rounds = [ladder.taken[base][n] for n in both], [ladder.taken[head][n] for n in both]
    first = ladder.entries[base][both[0]].results
    pair = Rounds([], len(both), machine_class=machine_class_of(first), engine=engine_of(first),
                  served=served_of(first))
    pair.measurements = [m for n in both for m in (ladder.entries[base][n], ladder.entries[head][n])]
    pair.last = {"base": ladder.entries[base][both[-1]], "head": ladder.entries[head][both[-1]]}
    if (base, head) not in ladder.plans:
        lead = f"{PREFIX} {ladder.rungs[base].name} -> {ladder.rungs[head].name}:"
        shared = set.intersection(*(set(r) for r in [*b_rounds, *h_rounds]))
        judged = [k for k in shared if k.rsplit("/", 1)[-1] in settings.metrics]
        spread = round_spread_of(settings, pair.machine_class, lead, out)
        ladder.plans[base, head] = plan_keys(judged, spread, settings.design, settings.tolerance, lead, out,
                                             pair.engine, pair.served,
                                             {k: key_ratios(b_rounds, h_rounds, k) for k in judged})
    pair.plans = ladder.plans[base, head]
    pair.keys = judge(b_rounds, h_rounds, settings, pair.plans)
    return pair


def _open(pair: Rounds) -> bool:
    """A pair still open: a key unsure and none a regression (ab stops at its first regression)."""
    return pair.verdict != REGRESSION and any(k.verdict == UNSURE for k in pair.keys)


def run_ladder(
    profiles: Sequence[str | Path],
    *,
    pytest_args: Sequence[str],
    memo_root: Path,
    settings: RoundSettings,
    setup: str | None = None,
    python: str | None = None,
    workdir: str | Path | None = None,
    timeout_s: float | None = None,
    start: str = "first",
    stop_after: int | None = None,
    resume: bool = False,
    drop_unmeasured: bool = False,
    resume_only: bool = False,
    out: TextIO | None = None,
) -> Ladder:
    """Boot the chain round by round in the ladder's order and judge every neighbouring pair (see the module
    docstring). InfraError when a version cannot be measured (what was measured stays for ``resume``)."""
    out = out or sys.stdout
    if start not in STARTS:
        raise UsageError(f"--start must be one of {', '.join(STARTS)}, got {start!r}")
    cfg = MeasureConfig.make(pytest_args, setup, python, workdir, timeout_s)
    rungs = rungs_of(profiles)
    memo = Memo(memo_root / cfg.fingerprint("ab-ladder", start, *(content_id(p) for p in profiles)))
    chain = " < ".join(r.name for r in rungs)
    print(f"{PREFIX} {chain}: {len(rungs) - 1} pairs, {len(rungs)} boots a round (ab of each pair alone: "
          f"{2 * (len(rungs) - 1)}), memo {memo.root}", file=out, flush=True)
    print(f"{PREFIX} {settings.describe()}", file=out, flush=True)
    session = uuid.uuid4().hex[:12]
    stopped = stopped_ladders(memo)
    if (resume or resume_only) and stopped:
        session = stopped[0][0]
        print(f"{PREFIX} resuming ladder {session}: {stopped[0][1]} measurement(s) kept from the memo", file=out,
              flush=True)
    elif resume_only:
        raise InfraError(f"--resume-only: no stopped ladder in {memo.root} to continue (a machine that lost the "
                         "earlier calls' boots? start the ladder again from its first call)")
    elif resume:
        print(f"{PREFIX} --resume: no stopped ladder in {memo.root}; starting afresh", file=out, flush=True)
    elif stopped:
        print(f"{PREFIX} note: an earlier ladder in this memo stopped after {stopped[0][1]} measurement(s); "
              f"--resume continues it", file=out, flush=True)
    history = memo.root / f"history-{session}.sqlite"
    ladder = Ladder(rungs, {i: {} for i in range(len(rungs))}, {i: {} for i in range(len(rungs))}, memo=memo.root)
    members = list(range(len(rungs)))
    while members and ladder.rounds < settings.max_rounds:
        n = ladder.rounds = ladder.rounds + 1
        for i in walk(members, n, start):
            rung, ident = rungs[i], ladder_ident(rungs[i].ident, session, n)
            if i in ladder.dropped:
                continue
            m = measured(memo, ident)
            kept = m is not None
            if m is None and drop_unmeasured and (earlier := memo.get(ident)) is not None and earlier.verdict == SKIP:
                m, kept = earlier, True  # a boot the stopped ladder could not measure: dropped again, not rebooted
            if m is None:
                if stop_after is not None and ladder.made >= stop_after:
                    ladder.stopped = True
                    print(f"{PREFIX} stopped after {ladder.made} measurement(s), as --stop-after asked; the same "
                          f"command with --resume continues with round {n} of {rung.name}", file=out, flush=True)
                    return ladder
                m = measure(rung.checkout, side_config(cfg, rung, history), memo, ident, rung.label,
                            reference=None, commit=rung.commit, session=session)
            ladder.made += 1
            found = samples_of(m.results) if m.verdict != SKIP else {}
            if not found and drop_unmeasured and len(ladder.chain()) > 2:
                drop(ladder, i, m, n, out)
                continue
            if not found:
                ladder.failed, ladder.failed_rung = m, i
                return ladder
            ladder.taken[i][n], ladder.entries[i][n] = found, m
            print(f"{PREFIX} round {n} {rung.name}: {headline(found, settings.metrics)} ({m.seconds:.1f} s"
                  f"{', kept from the stopped ladder' if kept else ''})", file=out, flush=True)
        if n < settings.rounds:
            continue
        for i, j in itertools.pairwise(ladder.chain()):
            if n in ladder.taken[i] and n in ladder.taken[j]:
                ladder.heads[i] = j
                ladder.pairs[i] = judge_pair(ladder, i, j, settings, out)
        still = [i for i, pair in sorted(ladder.pairs.items()) if _open(pair)]
        members = sorted({j for i in still for j in (i, ladder.heads[i])})
        if members and n < settings.max_rounds:
            names = ", ".join(f"{rungs[i].name} -> {rungs[ladder.heads[i]].name}" for i in still)
            print(f"{PREFIX} still open after {n} rounds ({names}): one more round of "
                  f"{', '.join(rungs[j].name for j in members)}", file=out, flush=True)
    memo.finish(session)
    return ladder


def boots_of(ladder: Ladder) -> list[list[dict[str, str]]]:
    """Per rung, the test outcomes of each of its boots, in round order (a dropped rung's: none)."""
    return [[ladder.entries[i][n].outcomes for n in sorted(ladder.entries[i])] for i in range(len(ladder.rungs))]


def drop(ladder: Ladder, i: int, m: RevisionRun, n: int, out: TextIO) -> None:
    """Drop rung ``i`` from the chain: what it measured no longer counts, the pairs it was in are forgotten, and its
    neighbours become a pair from the next look on."""
    why = m.reason if m.verdict == SKIP else "no samples in its results file"
    ladder.dropped[i] = f"round {n}: {why}"
    ladder.taken[i].clear()
    ladder.entries[i].clear()
    for base in [b for b, h in ladder.heads.items() if i in (b, h)]:
        ladder.pairs.pop(base, None)
        ladder.heads.pop(base)
    chain = ladder.chain()
    before = [j for j in chain if j < i]
    after = [j for j in chain if j > i]
    joined = (f"; {ladder.rungs[before[-1]].name} -> {ladder.rungs[after[0]].name} is a pair now"
              if before and after else "")
    print(f"{PREFIX} round {n} {ladder.rungs[i].name}: could not be measured ({why}): dropped from the ladder, as "
          f"--drop-unmeasured asks{joined}", file=out, flush=True)


def report(ladder: Ladder, out: TextIO) -> int:
    """Each pair's verdict as ab prints it, then one line per pair; the exit code of the worst (1 regression,
    6 slower, 3 unsure, 0 no regression)."""
    rungs = ladder.rungs
    for i in sorted(ladder.pairs):
        apart = ", ".join(f"round {n} {g:.0f} s" if g is not None else f"round {n} ?"
                          for n, g in enumerate(gaps(ladder, i), 1))
        head = rungs[ladder.heads[i]]
        print(f"{PREFIX} pair {rungs[i].name} -> {head.name}: base {rungs[i].label}, head "
              f"{head.label}; from the end of one boot to the start of the other: {apart}", file=out)
        ab.report(ladder.pairs[i], out)
    for i in sorted(ladder.pairs):
        pair = ladder.pairs[i]
        changes = "; ".join(f"{k.key} {(k.rounds.ratio - 1) * 100:+.1f}% {k.verdict.replace('_', ' ')}"
                            for k in pair.keys)
        print(f"{PREFIX} {rungs[i].name} -> {rungs[ladder.heads[i]].name}: {pair.verdict.replace('_', ' ')} after "
              f"{pair.rounds} round(s): {changes}", file=out)
    faster = [f"{rungs[i].name} -> {rungs[ladder.heads[i]].name}: {k.key} {k.faster}"
              for i in sorted(ladder.pairs) for k in ladder.pairs[i].keys if k.faster]
    if faster:
        print(f"{PREFIX} faster beyond the tolerance (not a regression; a finding to explain): {'; '.join(faster)}",
              file=out)
    for i, why in sorted(ladder.dropped.items()):
        print(f"{PREFIX} {rungs[i].name}: DROPPED, not judged ({why}; its log is in {ladder.memo})", file=out)
    for line in outcomes.lines(boots_of(ladder), [r.name for r in rungs], PREFIX):
        print(line, file=out)
    verdict = ladder.verdict()
    print(f"{PREFIX} {len(ladder.pairs)} pair(s) judged over {ladder.rounds} round(s), {ladder.made} boots; "
          f"the pairs share their versions' boots, so their verdicts are not independent of each other", file=out)
    return next((code for v, code in _WORST if v == verdict), EXIT_OK)


def command(
    *,
    profiles: Sequence[str],
    pytest_args: Sequence[str],
    setup: str | None = None,
    rounds: int = DEFAULT_ROUNDS,
    max_rounds: int | None = None,
    tolerance: float | None = ab.DEFAULT_TOLERANCE,
    alpha: float = DEFAULT_ALPHA,
    spending: str = sequential.POCOCK,
    round_history: str | Path | None = DEFAULT_BASELINE_DIR,
    metrics: Sequence[str] | None = None,
    memo: str | Path | None = None,
    python: str | None = None,
    workdir: str | Path | None = None,
    timeout_s: float | None = None,
    start: str = "first",
    stop_after: int | None = None,
    resume: bool = False,
    drop_unmeasured: bool = False,
    resume_only: bool = False,
    json_path: str | Path | None = None,
    out: TextIO | None = None,
) -> int:
    """``specwatch ab-ladder``: the exit code (0 every pair no regression, 1 a regression, 6 slower, 3 unsure,
    a version not measured, or stopped by ``stop_after``; 2 a usage error, 130 interrupted)."""
    out = out or sys.stdout
    try:
        settings = ab.settings_of(rounds, max_rounds, tolerance, metrics or DEFAULT_METRICS, alpha, round_history,
                                  spending)
        if stop_after is not None and stop_after < 1:
            raise UsageError(f"--stop-after must be at least 1, got {stop_after}")
        verdict_file = verdictfile.check_path(json_path)
        ladder = run_ladder(profiles, pytest_args=pytest_args, memo_root=memo_root(memo, Path.cwd() / ".specwatch"
                                                                                  / "ab-ladder"),
                            settings=settings, setup=setup, python=python, workdir=workdir, timeout_s=timeout_s,
                            start=start, stop_after=stop_after, resume=resume, drop_unmeasured=drop_unmeasured,
                            resume_only=resume_only, out=out)
        if ladder.failed is not None:
            rung = ladder.rungs[ladder.failed_rung or 0]
            why = ladder.failed.reason if ladder.failed.verdict == SKIP else "no samples in its results file"
            log = Memo(ladder.memo).log_path(ladder.failed.ident) if ladder.memo else ladder.failed.ident
            raise InfraError(f"round {ladder.rounds}: {rung.name} ({rung.label}) could not be measured: {why}; "
                             f"see {log} (--resume keeps the {ladder.made - 1} measurement(s) made before it)")
        if ladder.stopped:
            return EXIT_INFRA
        if not all(p.keys for p in ladder.pairs.values()):
            raise UsageError(f"some pair shares no result key of {', '.join(settings.metrics)}; do all profiles "
                             "measure the same servers (same profile names)?")
    except SpecwatchError as exc:
        print(f"specwatch ab-ladder: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("specwatch ab-ladder: interrupted (the memo keeps every measurement made: the same command with "
              "--resume continues)", file=sys.stderr)
        return 130
    code = report(ladder, out)
    if verdict_file is not None:
        names = [r.name for r in ladder.rungs]
        written = verdictfile.write(
            verdict_file, "ab-ladder", ladder.verdict(), code,
            [verdictfile.pair_json(names[i], names[ladder.heads[i]], pair) for i, pair in sorted(ladder.pairs.items())],
            verdictfile.checks_json(boots_of(ladder), names), chain=names, boots=ladder.made,
            dropped={names[i]: why for i, why in sorted(ladder.dropped.items())})
        print(f"{PREFIX} verdict written to {written}", file=out)
    return code
