"""A/B of two revisions (or two profiles) of the server under test, in one session on one machine.

``specwatch ab --repo PATH --base REV --head REV [--setup CMD] [--rounds N] -- PYTEST-ARGS``

A stored baseline from another day carries the machine's drift between sessions (2-5 % between
freshly started GPU machines), so it can only see changes larger than that. Two revisions measured
in alternating rounds on the same machine (A B, B A, A B, ...: each round a fresh pytest run, so a
fresh boot of the server) put every drift on both sides, and resolve about 1 %.

The rounds are :func:`specwatch.revisions.rounds.alternate`, the A/B measurement that every bisect
step runs too: one measurement is :func:`specwatch.revisions.step.measure` (setup, then ``python -m
pytest PYTEST-ARGS --specwatch-results FILE``), stored in the same memo; ``{checkout}`` in PYTEST-ARGS
and in the setup command stands for the side's checkout (a detached ``git worktree``, so the user's
work tree is never touched). Each key is judged on its per-round head/base ratios, look after
look (:func:`specwatch.revisions.rounds.judge`, the group-sequential rule of
:mod:`specwatch.judge.sequential`): the run ends at the first regression of any key, or when every
key is settled "no regression"; keys still open get more rounds, up to ``--max-rounds``. A key still
open at the last look is *slower* (exit 6) when its rounds show the head slower, a real slowdown not
shown beyond the tolerance, and else *unsure* (exit 3); neither is a regression. How it decides, its
defaults per machine class and its error rates: docs/reference/ab-and-bisect.md.
"""

from __future__ import annotations

import contextlib
import sys
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from specwatch.errors import (
    EXIT_INFRA,
    EXIT_OK,
    EXIT_REGRESSION,
    EXIT_SLOWER,
    InfraError,
    SpecwatchError,
    UsageError,
)
from specwatch.judge import sequential
from specwatch.paths import DEFAULT_BASELINE_DIR
from specwatch.revisions import git, outcomes, verdictfile
from specwatch.revisions.memo import Memo, ab_round_ident, memo_root, stopped_runs
from specwatch.revisions.plan import tolerances
from specwatch.revisions.rounds import (
    DEFAULT_ALPHA,
    DEFAULT_MAX_ROUNDS,
    DEFAULT_METRICS,
    DEFAULT_ROUNDS,
    REGRESSION,
    SLOWER,
    UNSURE,
    Rounds,
    RoundSettings,
    Side,
    alternate,
    slower_by,
)
from specwatch.revisions.step import MeasureConfig
from specwatch.store.roundspread import RoundSpread

PREFIX = "[ab]"
#: None: each key's own tolerance, the smallest the design settles at its round spread (plan.plan_key)
DEFAULT_TOLERANCE: float | None = None


def settings_of(rounds: int = DEFAULT_ROUNDS, max_rounds: int | None = None,
                tolerance: float | None = DEFAULT_TOLERANCE, metrics: Sequence[str] | None = None,
                alpha: float = DEFAULT_ALPHA, round_history: str | Path | None = None,
                spending: str = sequential.POCOCK) -> RoundSettings:
    """ab's round settings: ``max_rounds`` defaults to max(4, ``rounds``); UsageError when invalid."""
    return RoundSettings.make(rounds, max(DEFAULT_MAX_ROUNDS, rounds) if max_rounds is None else max_rounds,
                              tolerance, metrics, alpha, round_history, spending)


def run_ab(
    base: Side,
    head: Side,
    *,
    pytest_args: Sequence[str],
    memo_root: Path,
    setup: str | None = None,
    python: str | None = None,
    workdir: str | Path | None = None,
    timeout_s: float | None = None,
    rounds: int = DEFAULT_ROUNDS,
    max_rounds: int | None = None,
    metrics: Sequence[str] = DEFAULT_METRICS,
    tolerance: float | None = DEFAULT_TOLERANCE,
    alpha: float = DEFAULT_ALPHA,
    round_history: str | Path | None = None,
    record_rounds: bool = False,
    spending: str = sequential.POCOCK,
    out: TextIO | None = None,
    resume: bool = False,
) -> Rounds:
    """Measure ``base`` and ``head`` in alternating rounds and judge them (see the module docstring).

    ``round_history``: the baseline folder whose ``<machine-class>/round-spread.json`` holds the
    round spread of earlier A/B runs, pooled with this run's rounds (None: these rounds alone);
    ``record_rounds``: add this run's rounds to that file; ``resume``: continue the newest stopped run of
    this memo from its whole rounds (a half-measured round is measured again: a round's two sides belong
    together in time). InfraError when a side cannot be measured, UsageError when the sides share no judged key.
    """
    out = out or sys.stdout
    settings = settings_of(rounds, max_rounds, tolerance, metrics, alpha, round_history, spending)
    cfg = MeasureConfig.make(pytest_args, setup, python, workdir, timeout_s)
    memo = Memo(memo_root / cfg.fingerprint("ab", base.ident, head.ident))
    tol = f"tolerance {settings.tolerance:.1%}" if settings.tolerance is not None else "each key's own tolerance"
    print(f"{PREFIX} base {base.label}, head {head.label}: {settings.rounds}-{settings.max_rounds} rounds, {tol}, "
          f"memo {memo.root}", file=out, flush=True)
    print(f"{PREFIX} {settings.design.describe()}", file=out, flush=True)
    session, kept = uuid.uuid4().hex[:12], 0
    stopped = stopped_runs(memo)
    if resume and stopped:
        session, kept = stopped[0]
        print(f"{PREFIX} resuming run {session}: round(s) 1-{kept} kept from the memo, the rest measured now",
              file=out, flush=True)
    elif resume:
        print(f"{PREFIX} --resume: no stopped run in {memo.root} with a whole round; starting afresh", file=out,
              flush=True)
    elif stopped:
        print(f"{PREFIX} note: an earlier run in this memo stopped after {stopped[0][1]} whole round(s); "
              f"--resume continues it", file=out, flush=True)
    outcome = alternate(base, head, cfg=cfg, memo=memo, session=session, settings=settings,
                        ident=lambda side, r: ab_round_ident(side.name, side.ident, session, r), head_first=False,
                        lead=PREFIX, out=out, kept_rounds=kept)
    if outcome.failed is None:
        memo.finish(session)
    if outcome.failed is not None:
        side = base if outcome.failed_side == base.name else head
        raise InfraError(f"round {outcome.rounds + 1}: {side.name} ({side.label}) could not be measured: "
                         f"{outcome.why_failed}; see {memo.log_path(outcome.failed.ident)}")
    if not outcome.keys:
        raise UsageError(f"the two sides share no result key of {', '.join(settings.metrics)}; do both runs "
                         f"measure the same servers (same profile names)?")
    if record_rounds and settings.round_history and outcome.machine_class:
        runs = [(k.key.rsplit("/", 1)[-1], k.round_ratios, f"{base.label} -> {head.label}: {k.key}", k.key,
                 outcome.served.get(k.key, "")) for k in outcome.keys]
        written = RoundSpread.append(settings.round_history, outcome.machine_class, runs, engine=outcome.engine)
        print(f"{PREFIX} this run's rounds added to {written}", file=out, flush=True)
    return outcome


def _shared_rounds(outcome: Rounds) -> str:
    """One line when some rounds were measured beside other inference servers or GPU processes ('' when none
    was): ab alternates the sides so that load falls on both alike, and a neighbour's load need not."""
    from specwatch.revisions.rounds import neighbours_of

    seen = {m.ident: neighbours_of(m.results) for m in outcome.measurements}
    others = list(dict.fromkeys(n for names in seen.values() for n in names))
    if not others:
        return ""
    what = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
    return (f"{sum(1 for names in seen.values() if names)} of {len(seen)} measurement(s) ran while {what} shared the "
            "host: ab assumes the load falls on both sides alike, and a neighbour's need not; a verdict here may be "
            "theirs (re-run on a quiet host to be sure)")


def _engines(outcome: Rounds) -> str:
    """`` (sglang 0.5.16)`` when both sides ran one engine version, `` (base sglang 0.5.16, head sglang 0.5.17)``
    when they differ, '' when the results record none: every verdict says what it judged."""
    from specwatch.revisions.rounds import engine_label_of

    labels = {name: engine_label_of(m.results) for name, m in outcome.last.items()}
    if not any(labels.values()):
        return ""
    if len(set(labels.values())) == 1:
        return f" ({next(iter(labels.values()))})"
    return " (" + ", ".join(f"{name} {label or 'unrecorded'}" for name, label in sorted(labels.items())) + ")"


def report(outcome: Rounds, out: TextIO) -> int:
    """Print each key's verdict; the exit code: 1 regression, 6 slower, 3 unsure, 0 no regression."""
    from specwatch.report.table import ReportRow, summary_table

    rows = [ReportRow(key=k.key, n=k.n, median=k.head_median, unit=k.unit, baseline_median=k.base_median,
                      change=k.rounds.ratio - 1, p=k.rounds.p, verdict=k.verdict, tolerance=k.tolerance,
                      higher_is_better=k.higher_is_better, message=k.message,
                      change_basis="the paired rounds' (head/base in each round, their geometric mean)")
            for k in outcome.keys]
    print(summary_table(rows, title=f"specwatch ab{_engines(outcome)}: head against base, {outcome.rounds} "
                                    f"alternating rounds, "
                                    f"tolerance {tolerances(outcome.plans) if outcome.plans else '-'}"), file=out)
    for k in outcome.keys:
        ratios = " ".join(f"{(r - 1) * 100:+.1f}%" for r in k.round_ratios)
        print(f"{PREFIX} {k.key}: {k.verdict.replace('_', ' ')}: {k.message}; per round: {ratios}", file=out)
    if shared := _shared_rounds(outcome):
        print(f"{PREFIX} note: {shared}", file=out)
    for k in outcome.keys:
        if k.uneven:
            print(f"{PREFIX} note: {k.key}: {k.uneven}", file=out)
    for k in outcome.keys:
        if k.faster:
            print(f"{PREFIX} FASTER: {k.key}: {k.faster} (not a regression; a change this large is a finding to "
                  f"explain)", file=out)
    verdict = outcome.verdict
    if verdict == REGRESSION:
        print(f"{PREFIX} REGRESSION: head is slower than base beyond the tolerance, measured in one session",
              file=out)
        return EXIT_REGRESSION
    if verdict == SLOWER:
        slower = [k for k in outcome.keys if k.verdict == SLOWER]
        also = [k.key for k in outcome.keys if k.verdict == UNSURE]
        open_also = f"; unsure: {', '.join(also)}" if also else ""
        for k in slower:
            print(f"{PREFIX} SLOWER: {k.key}: {slower_by(k.rounds, k.higher_is_better, k.tolerance)}", file=out)
        print(f"{PREFIX} SLOWER after {outcome.rounds} rounds: head is measurably slower than base, by less than "
              f"the tolerance or too close to it to call a regression; not noise: look at the change "
              f"(exit {EXIT_SLOWER}){open_also}", file=out)
        return EXIT_SLOWER
    if verdict == UNSURE:
        open_keys = ", ".join(k.key for k in outcome.keys if k.verdict == UNSURE) or "none judged"
        print(f"{PREFIX} UNSURE after {outcome.rounds} rounds ({open_keys}): the rounds could neither show nor "
              f"rule out a slowdown beyond the tolerance, so they were noisier than the round history says or the "
              f"change sits near the tolerance; nothing is called a regression (re-run, allow more --max-rounds, "
              f"or give a larger --tolerance)", file=out)
        return EXIT_INFRA
    caught = [f"{k.key} {p.detectable:.1%}" for k in outcome.keys
              if (p := outcome.plans.get(k.key)) is not None and p.detectable is not None]
    seen = (f": a slowdown of this much or more would have been caught 19 times in 20: {'; '.join(caught)}"
            if caught else "")
    print(f"{PREFIX} no regression after {outcome.rounds} rounds{seen}", file=out)
    return EXIT_OK


# --------------------------------------------------------------------------------------------
# the command (its options: specwatch.cli.ab)


@contextlib.contextmanager
def revision_sides(repo: str | Path, base: str, head: str) -> Iterator[tuple[Side, Side, Path]]:
    """Detached worktrees of ``base`` and ``head`` (removed afterwards) and the memo root."""
    top = git.toplevel(repo)
    base_sha, head_sha = git.resolve_rev(top, base, "--base"), git.resolve_rev(top, head, "--head")
    with git.worktree(top, base_sha) as base_tree, git.worktree(top, head_sha) as head_tree:
        yield (Side("base", f"{base_sha[:10]} {git.subject(top, base_sha)!r}", base_tree, base_sha, base_sha[:12]),
               Side("head", f"{head_sha[:10]} {git.subject(top, head_sha)!r}", head_tree, head_sha, head_sha[:12]),
               git.default_memo(top))


def profile_side(flag: str, path: str | Path, name: str, ident: str) -> tuple[Side, frozenset[str]]:
    """One profile file as a side measured in this folder, and the servers it names: the file is read as the
    measuring run will read it, so a missing or broken one is one UsageError line (naming ``flag``) before any
    boot."""
    from specwatch.profiles.loading import load_profiles

    p = Path(path).resolve()
    if not p.is_file():
        raise UsageError(f"{flag} {path}: no such file")
    try:
        servers = frozenset(load_profiles(p).servers)
    except UsageError as exc:
        raise UsageError(f"{flag}: {exc}") from None
    return Side(name, str(p), Path.cwd(), "", ident, (f"--specwatch-profiles={p}",)), servers


def shared_servers(a: tuple[str, frozenset[str]], b: tuple[str, frozenset[str]]) -> None:
    """UsageError unless the two profile files (path, servers) name a server in common: each key an A/B judges
    is one server's, measured on both sides."""
    if not a[1] & b[1]:
        raise UsageError(f"{a[0]} serves {', '.join(sorted(a[1]))} and {b[0]} serves {', '.join(sorted(b[1]))}: no "
                         "server in common, so no key to judge (name the server alike in both)")


def profile_sides(base_profile: str, head_profile: str) -> tuple[Side, Side]:
    """Two profile files of one revision (a change of flags or environment), measured in this folder."""
    base, base_servers = profile_side("--base-profile", base_profile, "base", f"base-{Path(base_profile).stem}")
    head, head_servers = profile_side("--head-profile", head_profile, "head", f"head-{Path(head_profile).stem}")
    shared_servers((base_profile, base_servers), (head_profile, head_servers))
    return base, head


def command(
    *,
    pytest_args: Sequence[str],
    repo: str | Path | None = None,
    base: str | None = None,
    head: str | None = None,
    base_profile: str | None = None,
    head_profile: str | None = None,
    setup: str | None = None,
    rounds: int = DEFAULT_ROUNDS,
    max_rounds: int | None = None,
    tolerance: float | None = DEFAULT_TOLERANCE,
    alpha: float = DEFAULT_ALPHA,
    spending: str = sequential.POCOCK,
    round_history: str | Path | None = DEFAULT_BASELINE_DIR,
    record_rounds: bool = False,
    metrics: Sequence[str] | None = None,
    memo: str | Path | None = None,
    python: str | None = None,
    workdir: str | Path | None = None,
    timeout_s: float | None = None,
    out: TextIO | None = None,
    resume: bool = False,
    json_path: str | Path | None = None,
) -> int:
    """``specwatch ab``: two revisions (``repo``, ``base``, ``head``) or two profile files (``base_profile``,
    ``head_profile``) in alternating rounds, one session, one verdict printed; the exit code (0 no regression,
    1 regression, 6 slower, 3 unsure or a side not measured, 2 a usage error, 130 interrupted). Every setting
    is checked before any worktree is made; an error is one line on stderr."""
    out = out or sys.stdout
    try:
        settings_of(rounds, max_rounds, tolerance, metrics, alpha, round_history, spending)
        verdict_file = verdictfile.check_path(json_path)
        MeasureConfig.make(pytest_args, setup, python, workdir, timeout_s)
        if memo:
            memo_root(memo, Path())
        common: dict[str, Any] = dict(
            pytest_args=pytest_args, setup=setup, python=python, workdir=workdir, timeout_s=timeout_s, rounds=rounds,
            max_rounds=max_rounds, metrics=tuple(metrics or DEFAULT_METRICS), tolerance=tolerance, alpha=alpha,
            out=out, round_history=round_history, record_rounds=record_rounds, spending=spending, resume=resume)
        if record_rounds and round_history == "none":
            raise UsageError("--record-rounds needs a --round-history folder, not 'none'")
        if base_profile or head_profile:
            if repo or base or head or not (base_profile and head_profile):
                raise UsageError("give --repo/--base/--head, or both --base-profile and --head-profile")
            base_side, head_side = profile_sides(base_profile, head_profile)
            outcome = run_ab(base_side, head_side, memo_root=memo_root(memo, Path.cwd() / ".specwatch" / "ab"),
                             **common)
        else:
            if not (repo and base and head):
                raise UsageError("--repo, --base and --head are required (or --base-profile/--head-profile)")
            with revision_sides(repo, base, head) as (base_side, head_side, memo_default):
                outcome = run_ab(base_side, head_side, memo_root=memo_root(memo, memo_default), **common)
    except SpecwatchError as exc:
        print(f"specwatch ab: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("specwatch ab: interrupted (worktrees removed; the memo keeps what was measured: the same command "
              "with --resume continues from the last whole round)", file=sys.stderr)
        return 130
    code = report(outcome, out)
    sides = [name for name in ("base", "head") if name in outcome.outcomes]
    boots = [outcome.outcomes[name] for name in sides]
    for line in outcomes.lines(boots, sides, PREFIX):
        print(line, file=out)
    if verdict_file is not None:
        labels = {m.ident.split("-", 1)[0]: m.label for m in outcome.measurements}
        written = verdictfile.write(verdict_file, "ab", outcome.verdict, code,
                                    [verdictfile.pair_json(labels.get("base", "base"), labels.get("head", "head"),
                                                           outcome)],
                                    verdictfile.checks_json(boots, sides))
        print(f"{PREFIX} verdict written to {written}", file=out)
    return code
