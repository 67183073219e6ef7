"""A/B of two revisions (or two profiles) of the server under test, in one session on one machine.

``specwatch ab --repo PATH --base REV --head REV [--setup CMD] [--rounds N] -- PYTEST-ARGS``

A stored baseline from another day carries the machine's drift between sessions (2-5 % between
freshly started GPU machines), so it can only see changes larger than that. Two revisions measured
in alternating rounds on the same machine (A B, B A, A B, ...: each round a fresh pytest run, so a
fresh boot of the server) put every drift on both sides, and resolve about 1 %.

One measurement is bisect's step (:func:`specwatch.revisions.gitbisect.measure`: setup, then
``python -m pytest PYTEST-ARGS --specwatch-results FILE``), stored in the same memo; ``{checkout}``
in PYTEST-ARGS and in the setup command stands for the side's checkout (a detached ``git worktree``,
so the user's work tree is never touched). Judging is :func:`specwatch.judge.compare.compare` on the pooled
runs, with the rounds of the base as its sessions: a difference inside the base's own round-to-round
spread is "noisy", and noisy or inconclusive keys are measured for more rounds (up to
``--max-rounds``) before the verdict is called *unsure*, which is never a regression.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import statistics
import sys
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from specwatch.errors import EXIT_INFRA, EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, InfraError, SpecwatchError, UsageError
from specwatch.judge import stats
from specwatch.revisions.step import samples_of

PREFIX = "[ab]"
#: what ``ab`` judges unless told otherwise: the throughput the drift gates judge
DEFAULT_METRICS = ("output_tok_s", "decode_tok_s")
DEFAULT_TOLERANCE = 0.01
GOOD, BAD, UNSURE = "no_regression", "regression", "unsure"


@dataclass(frozen=True)
class Side:
    """One side of the comparison: where it is measured and what identifies it."""

    name: str  # "base" or "head"
    label: str  # revision and subject, or profile file
    checkout: Path
    commit: str  # what --specwatch-commit records
    ident: str  # memo ident stem
    extra_args: tuple[str, ...] = ()


@dataclass
class KeyVerdict:
    """The A/B verdict of one result key, from its per-round ratios (see :func:`decide`)."""

    key: str
    unit: str
    higher_is_better: bool
    base_median: float
    head_median: float
    n: int
    rounds: stats.PairedRounds
    round_ratios: list[float]
    verdict: str
    message: str
    tolerance: float


@dataclass
class ABOutcome:
    """Every key's verdict, the rounds measured and the overall verdict."""

    keys: list[KeyVerdict]
    rounds: int
    measurements: list[Any] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        verdicts = {k.verdict for k in self.keys}
        if BAD in verdicts:
            return BAD
        if UNSURE in verdicts or not self.keys:
            return UNSURE
        return GOOD


def decide(rounds: stats.PairedRounds, higher_is_better: bool, tolerance: float, alpha: float) -> tuple[str, str]:
    """(verdict, reason) of paired rounds: regression when head is significantly slower (one-sided
    p < alpha) and worse than the tolerance; no regression when the one-sided 1 - alpha bound rules
    out a slowdown beyond the tolerance; else unsure."""
    # oriented so that > 1 is better
    ratio, low = (rounds.ratio, rounds.low) if higher_is_better else (1 / rounds.ratio, 1 / rounds.high)
    change = f"{(ratio - 1) * 100:+.1f}%"
    # the question is directional (is head slower?): one-sided p, in the worse direction only
    p_worse = rounds.p / 2 if ratio < 1 else 1 - rounds.p / 2
    if p_worse < alpha and ratio < 1 - tolerance:
        return BAD, f"{change} is worse than the {tolerance:.1%} tolerance (one-sided p={p_worse:.2g})"
    if low > 1 - tolerance:
        return GOOD, f"{change}; the CI rules out a slowdown beyond {tolerance:.1%}"
    return UNSURE, (f"{change}: {rounds.rounds} rounds that disagree by {rounds.spread:.1%} can neither show nor "
                    f"rule out a slowdown beyond {tolerance:.1%}")


def judge(
    base_rounds: Sequence[Mapping[str, tuple[list[float], str, bool]]],
    head_rounds: Sequence[Mapping[str, tuple[list[float], str, bool]]],
    *,
    metrics: Sequence[str] = DEFAULT_METRICS,
    tolerance: float = DEFAULT_TOLERANCE,
    alpha: float = 0.01,
) -> list[KeyVerdict]:
    """Pure: verdicts of the keys (of ``metrics``) present in every round of both sides.

    Each alternating round is one pair (a fresh boot of each side); the runs inside a boot share
    that boot's luck, so the rounds, not the runs, are the independent samples.
    """
    keys = set.intersection(*(set(r) for r in [*base_rounds, *head_rounds])) if base_rounds and head_rounds else set()
    chosen = sorted(k for k in keys if k.rsplit("/", 1)[-1] in metrics)
    out = []
    for key in chosen:
        unit, higher = base_rounds[0][key][1], base_rounds[0][key][2]
        pairs = [(statistics.median(b[key][0]), statistics.median(h[key][0]))
                 for b, h in zip(base_rounds, head_rounds, strict=False)]
        ratios = [h / b for b, h in pairs if b > 0 and h > 0]
        if len(ratios) < 2:
            continue
        summary = stats.paired_rounds(ratios, confidence=1 - 2 * alpha)
        verdict, why = decide(summary, higher, tolerance, alpha)
        base_all = [x for r in base_rounds for x in r[key][0]]
        head_all = [x for r in head_rounds for x in r[key][0]]
        message = (f"{why}; head/base {summary.ratio:.3f} [{summary.low:.3f}, {summary.high:.3f}] over "
                   f"{summary.rounds} rounds, round-to-round spread {summary.spread:.1%}")
        out.append(KeyVerdict(key, unit, higher, statistics.median(base_all), statistics.median(head_all),
                              len(head_all), summary, ratios, verdict, message, tolerance))
    return out


def _substitute(args: Sequence[str], checkout: Path) -> tuple[str, ...]:
    return tuple(a.replace("{checkout}", str(checkout)) for a in args)


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
    rounds: int = 4,
    max_rounds: int | None = None,
    metrics: Sequence[str] = DEFAULT_METRICS,
    tolerance: float = DEFAULT_TOLERANCE,
    alpha: float = 0.01,
    out: TextIO | None = None,
) -> ABOutcome:
    """Measure ``base`` and ``head`` in alternating rounds and judge them (see the module docstring)."""
    from specwatch.revisions.step import MeasureConfig, Memo, measure

    out = out or sys.stdout
    if rounds < 2:
        raise UsageError("--rounds must be at least 2 (one round a side cannot tell drift from a change)")
    max_rounds = max(rounds, max_rounds or 2 * rounds)
    cfg = MeasureConfig(pytest_args=tuple(pytest_args), setup=setup, python=python or sys.executable,
                        workdir=str(Path(workdir).resolve()) if workdir else None, timeout_s=timeout_s)
    memo = Memo(memo_root / cfg.fingerprint("ab", base.ident, head.ident))
    session = uuid.uuid4().hex[:12]
    history = memo.root / f"history-{session}.sqlite"  # the rounds stay out of the user's history
    print(f"{PREFIX} base {base.label}, head {head.label}: {rounds} rounds (up to {max_rounds}), tolerance "
          f"{tolerance:.1%}, memo {memo.root}", file=out, flush=True)
    base_rounds: list[dict[str, tuple[list[float], str, bool]]] = []
    head_rounds: list[dict[str, tuple[list[float], str, bool]]] = []
    measured: list[Any] = []
    verdicts: list[KeyVerdict] = []
    i = 0
    while i < max_rounds:
        order = (base, head) if i % 2 == 0 else (head, base)
        for side in order:
            side_cfg = dataclasses.replace(
                cfg, pytest_args=(*_substitute(cfg.pytest_args, side.checkout), *side.extra_args,
                                  f"--specwatch-history={history}"),
                setup=setup.replace("{checkout}", str(side.checkout)) if setup else None)
            m = measure(side.checkout, side_cfg, memo, f"{side.name}-{side.ident}-{session}-r{i + 1}", side.label,
                        reference=None, commit=side.commit, session=session)
            measured.append(m)
            found = samples_of(m.results)
            if not found:
                raise InfraError(f"round {i + 1}: {side.name} ({side.label}) could not be measured: {m.reason}; "
                                 f"see {memo.log_path(m.ident)}")
            (base_rounds if side is base else head_rounds).append(found)
            print(f"{PREFIX} round {i + 1} {side.name}: {_headline(found, metrics)} ({m.seconds:.0f} s)",
                  file=out, flush=True)
        i += 1
        if i >= rounds:
            verdicts = judge(base_rounds, head_rounds, metrics=metrics, tolerance=tolerance, alpha=alpha)
            if not verdicts:
                raise UsageError(f"the two sides share no result key of {', '.join(metrics)}; do both runs "
                                 f"measure the same servers (same profile names)?")
            if all(v.verdict != UNSURE for v in verdicts):
                break
            if i < max_rounds:
                unsure = ", ".join(v.key for v in verdicts if v.verdict == UNSURE)
                print(f"{PREFIX} unsure after {i} rounds ({unsure}): one more round", file=out, flush=True)
    return ABOutcome(verdicts, i, measured)


def _headline(found: Mapping[str, tuple[list[float], str, bool]], metrics: Sequence[str]) -> str:
    parts = [f"{k} {statistics.median(v[0]):.4g} {v[1]}" for k, v in sorted(found.items())
             if k.rsplit("/", 1)[-1] in metrics]
    return "; ".join(parts[:3]) or "no key of the judged metrics"


def report(outcome: ABOutcome, out: TextIO) -> int:
    """Print each key's verdict; the exit code: 1 regression, 3 unsure, 0 otherwise."""
    from specwatch.report.table import ReportRow, summary_table

    rows = [ReportRow(key=k.key, n=k.n, median=k.head_median, unit=k.unit, baseline_median=k.base_median,
                      change=k.rounds.ratio - 1, p=k.rounds.p, verdict=k.verdict, tolerance=k.tolerance,
                      higher_is_better=k.higher_is_better, message=k.message)
            for k in outcome.keys]
    print(summary_table(rows, title=f"specwatch ab: head against base, {outcome.rounds} alternating rounds"),
          file=out)
    for k in outcome.keys:
        ratios = " ".join(f"{(r - 1) * 100:+.1f}%" for r in k.round_ratios)
        print(f"{PREFIX} {k.key}: {k.verdict.replace('_', ' ')}: {k.message}; per round: {ratios}", file=out)
    verdict = outcome.verdict
    if verdict == BAD:
        print(f"{PREFIX} REGRESSION: head is slower than base beyond the tolerance, measured in one session",
              file=out)
        return EXIT_REGRESSION
    if verdict == UNSURE:
        print(f"{PREFIX} UNSURE: too few rounds for their spread to settle the tolerance; nothing is called a "
              f"regression (run more --rounds, or a larger --tolerance, or a quieter machine)", file=out)
        return EXIT_INFRA
    print(f"{PREFIX} no regression", file=out)
    return EXIT_OK


# --------------------------------------------------------------------------------------------
# the command


@contextlib.contextmanager
def revision_sides(repo: str | Path, base: str, head: str) -> Iterator[tuple[Side, Side, Path]]:
    """Detached worktrees of ``base`` and ``head`` (removed afterwards) and the memo root."""
    from specwatch.revisions import step as revisions

    top = revisions.toplevel(repo)
    base_sha, head_sha = revisions.resolve_rev(top, base, "--base"), revisions.resolve_rev(top, head, "--head")
    with revisions.worktree(top, base_sha) as base_tree, revisions.worktree(top, head_sha) as head_tree:
        yield (Side("base", f"{base_sha[:10]} {revisions.subject(top, base_sha)!r}", base_tree, base_sha,
                    base_sha[:12]),
               Side("head", f"{head_sha[:10]} {revisions.subject(top, head_sha)!r}", head_tree, head_sha,
                    head_sha[:12]),
               revisions.default_memo(top))


def profile_sides(base_profile: str, head_profile: str) -> tuple[Side, Side]:
    """Two profile files of one revision (a change of flags or environment), measured in this folder."""
    sides = []
    for name, path in (("base", base_profile), ("head", head_profile)):
        p = Path(path).resolve()
        if not p.is_file():
            raise UsageError(f"--{name}-profile {path}: no such file")
        sides.append(Side(name, str(p), Path.cwd(), "", f"{name}-{p.stem}", (f"--specwatch-profiles={p}",)))
    return sides[0], sides[1]


class AB:
    """``specwatch ab``: two revisions (or profiles) in alternating rounds, one session, one verdict."""

    name = "ab"
    help = "A/B two revisions (or two profiles) of the server in alternating rounds; exit 1 on a regression"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--repo", help="git work tree of the server under test (with --base/--head)")
        parser.add_argument("--base", help="the reference revision (e.g. the merge base of a pull request)")
        parser.add_argument("--head", help="the revision under test")
        parser.add_argument("--base-profile", help="without git: the reference profile file")
        parser.add_argument("--head-profile", help="without git: the profile file under test")
        parser.add_argument("--setup", help="shell command run in each checkout before each measurement "
                                            "({checkout} is replaced by its path)")
        parser.add_argument("--rounds", type=int, default=4, help="alternating rounds (default 4: A B B A A B B A)")
        parser.add_argument("--max-rounds", type=int, default=None,
                            help="rounds allowed while a key is unsure (default: twice --rounds)")
        parser.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE,
                            help=f"smallest slowdown that counts (default {DEFAULT_TOLERANCE})")
        parser.add_argument("--alpha", type=float, default=0.01, help="significance level (default 0.01)")
        parser.add_argument("--metric", action="append", default=None,
                            help=f"metric(s) judged (default: {', '.join(DEFAULT_METRICS)})")
        parser.add_argument("--memo", default=None, help="memo directory (default: <git-dir>/specwatch/bisect)")
        parser.add_argument("--python", default=None, help="interpreter that runs pytest (default: this one)")
        parser.add_argument("--workdir", default=None, help="directory pytest runs in (default: the checkout)")
        parser.add_argument("--step-timeout", dest="timeout_s", type=float, default=None,
                            help="seconds allowed for the setup and for pytest, per measurement")
        parser.add_argument("pytest_args", nargs=argparse.REMAINDER, metavar="-- PYTEST-ARGS",
                            help="arguments of the measuring pytest run, after --")

    @classmethod
    def run_from_args(cls, args: argparse.Namespace, out: TextIO | None = None) -> int:
        out = out or sys.stdout
        rest = list(args.pytest_args)
        if rest and rest[0] == "--":
            rest = rest[1:]
        elif rest:
            print(f"specwatch ab: put pytest arguments after --: {' '.join(rest)}", file=sys.stderr)
            return EXIT_USAGE
        try:
            if not 0 < args.tolerance < 1 or not 0 < args.alpha < 1:
                raise UsageError("--tolerance and --alpha must be fractions in (0, 1)")
            if args.rounds < 2:
                raise UsageError("--rounds must be at least 2 (one round a side cannot tell drift from a change)")
            if args.max_rounds is not None and args.max_rounds < args.rounds:
                raise UsageError("--max-rounds must be at least --rounds")
            common: dict[str, Any] = dict(
                pytest_args=rest, setup=args.setup, python=args.python, workdir=args.workdir,
                timeout_s=args.timeout_s, rounds=args.rounds, max_rounds=args.max_rounds,
                metrics=tuple(args.metric or DEFAULT_METRICS), tolerance=args.tolerance, alpha=args.alpha, out=out)
            if args.base_profile or args.head_profile:
                if args.repo or args.base or args.head or not (args.base_profile and args.head_profile):
                    raise UsageError("give --repo/--base/--head, or both --base-profile and --head-profile")
                base, head = profile_sides(args.base_profile, args.head_profile)
                memo = Path(args.memo).resolve() if args.memo else Path.cwd() / ".specwatch" / "ab"
                outcome = run_ab(base, head, memo_root=memo, **common)
            else:
                if not (args.repo and args.base and args.head):
                    raise UsageError("--repo, --base and --head are required (or --base-profile/--head-profile)")
                with revision_sides(args.repo, args.base, args.head) as (base, head, memo_default):
                    memo = Path(args.memo).resolve() if args.memo else memo_default
                    outcome = run_ab(base, head, memo_root=memo, **common)
        except SpecwatchError as exc:
            print(f"specwatch ab: {exc}", file=sys.stderr)
            return exc.exit_code
        except KeyboardInterrupt:
            print("specwatch ab: interrupted (worktrees removed; the memo keeps what was measured)", file=sys.stderr)
            return 130
        return report(outcome, out)
