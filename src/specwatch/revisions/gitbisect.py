"""Find the change that made the server under test slower.

Two searches share one step:

* ``specwatch bisect --repo PATH --good REV --bad REV -- PYTEST-ARGS`` drives ``git bisect run``
  over the commits of the server's source tree;
* ``specwatch bisect-patches --repo PATH --base REV P1 P2 ... -- PYTEST-ARGS`` binary-searches the
  length k of a prefix of an ordered patch list, applied cumulatively onto ``base`` in a temporary
  ``git worktree``.

One measurement = run the setup command in a checkout (for example ``pip install -e .``), then
``python -m pytest PYTEST-ARGS --specwatch-results FILE``; ``{checkout}`` in PYTEST-ARGS and in the
setup command stands for the checkout being measured.

One step is an A/B of the revision under test against the good revision (the bare base, for
patches), as ``specwatch ab`` does it: both are measured in alternating rounds (step then good,
good then step, ...; each a fresh pytest run, so a fresh boot of the server), so the good side is
re-measured inside every step and a machine that drifts during the bisection drifts on both sides.
(A single measurement of the good revision at the start, the old scheme, blamed the wrong commit on
a noisy machine: every later step read 20-37 % slower than it.) The good side is measured in a
detached worktree of the good commit made once per bisection, while ``git bisect run`` checks the
step's commit out in the repository itself; for patches both sides are worktrees. The rounds are
judged by :func:`specwatch.revisions.ab.judge` on the keys of ``--metric`` (default: the drift gates'
throughputs) at ``--tolerance`` (default 0.05, the drift gate's), and the step's verdict, as
``git bisect run`` wants it, is:

* a regression beyond the tolerance: bad (1);
* a slowdown beyond the tolerance ruled out: good (0);
* unsure after ``--rounds`` rounds (default 2) and the extra rounds up to ``--max-rounds``
  (default 4): skip (125), never bad; the progress line says the noise exceeded the tolerance;
* setup failure, timeout, a pytest run without a results file (exit 2-5, or only errors such as a
  server that did not boot): skip (125), never bad. The pytest exit code is not the verdict.

Each round's measurement is stored in the memo directory (by default ``<git-dir>/specwatch/bisect``,
which never dirties the work tree) as ``<revision>-<side>-r<round>`` (results file, entry and log),
and each step's verdict under the revision (the commit, or ``prefix-<k>-<hash>``), in a
sub-directory named by a fingerprint of the settings (pytest arguments, setup command, interpreter,
good revision, rounds, tolerance, metrics), so rerunning the same bisection measures nothing again.
The rounds' pytest runs record into a history file of the memo, not the user's history.

``git bisect run`` needs an executable; it runs ``python -m specwatch.revisions.gitbisect step --config FILE``,
which reads its settings (and the good worktree's path) from a JSON file in the memo directory.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import time
import traceback
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from specwatch.errors import (
    EXIT_INFRA,
    EXIT_OK,
    EXIT_REGRESSION,
    EXIT_USAGE,
    InfraError,
    SpecwatchError,
    UsageError,
)
from specwatch.paths import with_specwatch_importable
from specwatch.revisions import ab
from specwatch.revisions import step as revisions
from specwatch.revisions.step import (
    BAD,
    GOOD,
    MEMO_VERSION,
    SKIP,
    MeasureConfig,
    Memo,
    RevisionRun,
    measure,
    samples_of,
)

EXIT_CODES = {GOOD: 0, BAD: 1, SKIP: 125}  # what `git bisect run` understands
ABORT_CODE = 255  # any code above 127 makes `git bisect run` stop
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report it
PREFIX = "[bisect]"
DEFAULT_ROUNDS, DEFAULT_MAX_ROUNDS = 2, 4
DEFAULT_TOLERANCE = 0.05  # the drift gate's default
DEFAULT_ALPHA = 0.01


# --------------------------------------------------------------------------------------------
# settings, memo entries, verdicts


@dataclass(frozen=True)
class StepSettings:
    """How a step's A/B is run and judged; identical for every step of one bisection."""

    rounds: int = DEFAULT_ROUNDS
    max_rounds: int = DEFAULT_MAX_ROUNDS
    tolerance: float = DEFAULT_TOLERANCE
    metrics: tuple[str, ...] = ab.DEFAULT_METRICS
    alpha: float = DEFAULT_ALPHA

    @classmethod
    def make(
        cls,
        rounds: int = DEFAULT_ROUNDS,
        max_rounds: int | None = None,
        tolerance: float = DEFAULT_TOLERANCE,
        metrics: Sequence[str] | None = None,
        alpha: float = DEFAULT_ALPHA,
    ) -> StepSettings:
        """Validated settings (UsageError otherwise); ``max_rounds`` defaults to max(4, rounds)."""
        if rounds < 2:
            raise UsageError("--rounds must be at least 2 (one round a side cannot tell drift from a change)")
        if max_rounds is None:
            max_rounds = max(DEFAULT_MAX_ROUNDS, rounds)
        if max_rounds < rounds:
            raise UsageError("--max-rounds must be at least --rounds")
        if not 0 < tolerance < 1 or not 0 < alpha < 1:
            raise UsageError("--tolerance and --alpha must be fractions in (0, 1)")
        chosen = tuple(dict.fromkeys(metrics or ab.DEFAULT_METRICS))
        return cls(int(rounds), int(max_rounds), float(tolerance), chosen, float(alpha))

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["metrics"] = list(self.metrics)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StepSettings:
        return cls(**{**data, "metrics": tuple(data["metrics"])})

    def anchor(self) -> str:
        """What the fingerprint of the memo directory takes from these settings."""
        return json.dumps(self.to_json(), sort_keys=True)

    def describe(self) -> str:
        return (f"{self.rounds} alternating rounds (up to {self.max_rounds} while unsure), tolerance "
                f"{self.tolerance:.1%}, metrics {', '.join(self.metrics)}")


# --------------------------------------------------------------------------------------------
# results files (the documented format; read directly so bisect depends on nothing in flux)


def _fmt(x: float) -> str:
    ax = abs(x)
    if ax >= 100:
        return f"{x:.1f}"
    if ax >= 1:
        return f"{x:.2f}"
    return f"{x:.4g}"


# --------------------------------------------------------------------------------------------
# running commands


def _short(ident: str) -> str:
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
        parts.append(f"{k['key']} {_fmt(k['step_median'])} vs {_fmt(k['good_median'])} {k['unit']} "
                     f"({(k['ratio'] - 1) * 100:+.1f}%)")
    rounds = m.detail.get("rounds")
    return "; ".join(parts) + (f" over {rounds} rounds" if parts and rounds else "")


def progress_line(m: RevisionRun) -> str:
    """One line per step: rev, subject, verdict, key numbers, where the verdict came from."""
    label = m.label if len(m.label) <= 48 else m.label[:45] + "..."
    numbers = key_numbers(m)
    detail = numbers if m.verdict != SKIP else m.reason
    source = "memo" if m.cached else f"{m.seconds:.1f} s"
    return f"{PREFIX} {_short(m.ident)} {label!r:<50} {m.verdict.upper():<4}  {detail}  ({source})"


# --------------------------------------------------------------------------------------------
# one step: an A/B against the good revision in alternating rounds


def _side_config(cfg: MeasureConfig, side: ab.Side, history: Path) -> MeasureConfig:
    """The measurement settings of one side: ``{checkout}`` replaced, its own history file."""
    return replace(
        cfg,
        pytest_args=(*ab._substitute(cfg.pytest_args, side.checkout), *side.extra_args,
                     f"--specwatch-history={history}"),
        setup=cfg.setup.replace("{checkout}", str(side.checkout)) if cfg.setup else None,
    )


def _key_detail(k: ab.KeyVerdict) -> dict[str, Any]:
    return {
        "key": k.key, "unit": k.unit, "higher_is_better": k.higher_is_better, "good_median": k.base_median,
        "step_median": k.head_median, "ratio": k.rounds.ratio, "low": k.rounds.low, "high": k.rounds.high,
        "p": k.rounds.p, "spread": k.rounds.spread, "round_ratios": k.round_ratios, "verdict": k.verdict,
        "message": k.message,
    }


def _step_verdict(keys: Sequence[ab.KeyVerdict], rounds: int, settings: StepSettings) -> tuple[str, str]:
    """(bisect verdict, reason) of a step's judged keys: regression bad, no regression good, unsure skip."""
    overall = ab.ABOutcome(list(keys), rounds).verdict
    if overall == ab.BAD:
        bad = [k for k in keys if k.verdict == ab.BAD]
        return BAD, "; ".join(f"{k.key}: {k.message}" for k in bad)
    if overall == ab.GOOD:
        return GOOD, f"no key slower than the {settings.tolerance:.1%} tolerance over {rounds} rounds"
    unsure = [k for k in keys if k.verdict == ab.UNSURE]
    return SKIP, (f"unsure: the noise exceeded the {settings.tolerance:.1%} tolerance after {rounds} rounds "
                  f"({'; '.join(f'{k.key}: {k.message}' for k in unsure)})")


def ab_step(
    good: ab.Side,
    step: ab.Side,
    *,
    ident: str,
    label: str,
    cfg: MeasureConfig,
    memo: Memo,
    settings: StepSettings,
    session: str,
    out: TextIO,
) -> RevisionRun:
    """Measure ``step`` against ``good`` in alternating rounds; store and return the step's verdict entry.

    Round r's measurements are memo entries ``<ident>-<side>-r<r>``; the verdict entry is ``ident``,
    its ``results`` the step side's last results file and its ``detail`` every judged key. The step
    side goes first in round 1, so a revision that does not build costs no measurement of the good one.
    """
    start = time.monotonic()
    history = memo.root / f"history-{session}.sqlite"  # the rounds stay out of the user's history
    taken: dict[str, list[dict[str, tuple[list[float], str, bool]]]] = {good.name: [], step.name: []}
    last_step: RevisionRun | None = None
    keys: list[ab.KeyVerdict] = []
    detail: dict[str, Any] = {"kind": "step", "good": good.label, "settings": settings.to_json()}

    def entry(verdict: str, reason: str, rounds: int, **more: Any) -> RevisionRun:
        made = RevisionRun(
            ident=ident, label=label, verdict=verdict, reason=reason,
            pytest_rc=last_step.pytest_rc if last_step else None,
            results=last_step.results if last_step else None,
            seconds=round(time.monotonic() - start, 3),
            measured=datetime.now(timezone.utc).isoformat(timespec="seconds"), session=session,
            detail={**detail, "rounds": rounds, "keys": [_key_detail(k) for k in keys], **more},
        )
        memo.put(made)
        return made

    done = 0
    while done < settings.max_rounds:
        order = (step, good) if done % 2 == 0 else (good, step)
        for side in order:
            m = measure(side.checkout, _side_config(cfg, side, history), memo, f"{ident}-{side.name}-r{done + 1}",
                        side.label, reference=None, commit=side.commit, session=session)
            found = samples_of(m.results) if m.verdict != SKIP else {}
            if not found:
                why = m.reason if m.verdict == SKIP else "no samples in its results file"
                return entry(SKIP, f"round {done + 1}: the {side.name} side could not be measured: {why}", done,
                             failed_side=side.name, log=str(memo.log_path(m.ident)))
            taken[side.name].append(found)
            if side is step:
                last_step = m
            print(f"{PREFIX}   {_short(ident)} round {done + 1} {side.name}: {ab._headline(found, settings.metrics)} "
                  f"({m.seconds:.1f} s)", file=out, flush=True)
        done += 1
        if done < settings.rounds:
            continue
        keys = ab.judge(taken[good.name], taken[step.name], metrics=settings.metrics, tolerance=settings.tolerance,
                        alpha=settings.alpha)
        if not keys:
            return entry(SKIP, f"no key of {', '.join(settings.metrics)} in every round of both sides "
                               f"(do both measure the same servers?)", done, no_keys=True)
        if ab.ABOutcome(keys, done).verdict != ab.UNSURE:
            break
        if done < settings.max_rounds:
            unsure = ", ".join(k.key for k in keys if k.verdict == ab.UNSURE)
            print(f"{PREFIX}   {_short(ident)} unsure after {done} rounds ({unsure}): one more round",
                  file=out, flush=True)
    verdict, reason = _step_verdict(keys, done, settings)
    return entry(verdict, reason, done, unsure=verdict == SKIP)


def _reusable(entry: RevisionRun | None) -> bool:
    """A memoised step verdict that is about the step: not one the good side could not be measured for."""
    return entry is not None and entry.detail.get("kind") == "step" and entry.detail.get("failed_side") not in (
        "good", "base")


def _check_bad_end(entry: RevisionRun, store: Memo, settings: StepSettings, good_label: str) -> None:
    """The bad end's step says whether the good revision can be measured at all: raise if it cannot."""
    failed = entry.detail.get("failed_side")
    if entry.verdict == SKIP and failed in ("good", "base"):
        what = "the good revision" if failed == "good" else "bare base"
        raise InfraError(f"cannot measure {what} {good_label}: {entry.reason}; "
                         f"see {entry.detail.get('log', store.root)}")
    if entry.detail.get("no_keys"):
        raise UsageError(f"the good and bad revisions share no result key of {', '.join(settings.metrics)} "
                         f"(--metric); do both runs measure the same servers (same profile names)?")


def _reset_if_dirty(tree: Path) -> None:
    """The setup may rewrite tracked files; every checkout was clean when the bisection started."""
    if tree.is_dir() and revisions.dirty_files(tree):
        revisions.git(tree, "reset", "--quiet", "--hard")


def _warn_repo_paths(top: Path, cfg: MeasureConfig, out: TextIO) -> None:
    """Arguments that name the repository's own path measure its checkout, not each side's."""
    named = [a for a in (*cfg.pytest_args, cfg.setup or "") if str(top) in a and "{checkout}" not in a]
    if named:
        print(f"{PREFIX} WARNING: {' '.join(named)} names the repository {top}; the good side is measured in a "
              f"worktree, so write {{checkout}} for the checkout being measured", file=out, flush=True)


# --------------------------------------------------------------------------------------------
# commit bisection


@dataclass
class BisectOutcome:
    """What a bisection found; idents are commit shas or patch-prefix ids."""

    first_bad: str | None  # None when skipped revisions leave it ambiguous (see candidates)
    last_good: str | None
    candidates: list[str]  # ambiguous range, in order; [first_bad] when found
    visited: list[RevisionRun]  # in visiting order
    measured_now: int  # how many measurements this run made (the rest came from the memo)
    memo_dir: Path
    labels: dict[str, str] = field(default_factory=dict)  # names of idents without a step entry (good, base)


def _bisecting(repo: Path) -> bool:
    path = Path(revisions.git(repo, "rev-parse", "--git-path", "BISECT_START"))
    return (path if path.is_absolute() else repo / path).exists()


def _python_path_env() -> dict[str, str]:
    """Environment in which ``python -m specwatch.revisions.gitbisect`` finds this very package."""
    env = dict(os.environ)
    env["PYTHONPATH"] = with_specwatch_importable(env.get("PYTHONPATH"))
    return env


def _step_commit(config_path: Path, out: TextIO) -> int:
    """A/B HEAD of the bisected repo against the good worktree (memoised); print one line; git's exit code."""
    conf = json.loads(config_path.read_text())
    repo, memo = Path(conf["repo"]), Memo(Path(conf["memo"]))
    cfg = MeasureConfig.from_json(conf["measure"])
    settings = StepSettings.from_json(conf["ab"])
    good = conf["good"]
    good_tree = Path(good["tree"])
    sha = revisions.git(repo, "rev-parse", "HEAD")
    entry = memo.get(sha)
    if not _reusable(entry):
        subject = revisions.subject(repo, sha)
        good_side = ab.Side("good", good["label"], good_tree, good["sha"], good["sha"][:12])
        step_side = ab.Side("step", f"{sha[:10]} {subject!r}", repo, sha, sha[:12])
        try:
            entry = ab_step(good_side, step_side, ident=sha, label=subject, cfg=cfg, memo=memo, settings=settings,
                            session=conf["session"], out=out)
        finally:
            _reset_if_dirty(repo)
            _reset_if_dirty(good_tree)
    assert entry is not None
    print(progress_line(entry), file=out, flush=True)
    return EXIT_CODES[entry.verdict]


def _parse_bisect_log(text: str) -> list[tuple[str, str]]:
    """[(verdict, sha)] of `git bisect log` lines, in order (start line excluded)."""
    found = []
    for line in text.splitlines():
        m = re.match(r"git bisect (good|bad|skip) ([0-9a-f]{40})", line)
        if m:
            found.append((m.group(1), m.group(2)))
    return found


def bisect_commits(
    *,
    repo: str | Path,
    good: str,
    bad: str,
    pytest_args: Sequence[str],
    setup: str | None = None,
    memo: str | Path | None = None,
    python: str | None = None,
    workdir: str | Path | None = None,
    timeout_s: float | None = None,
    rounds: int = DEFAULT_ROUNDS,
    max_rounds: int | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    metrics: Sequence[str] | None = None,
    alpha: float = DEFAULT_ALPHA,
    out: TextIO | None = None,
) -> BisectOutcome:
    """Find the first commit in good..bad that an A/B against `good` calls a regression.

    Every step measures its commit (checked out by ``git bisect run``) and `good` (a detached
    worktree, made once) in alternating rounds; see the module docstring. Raises UsageError (dirty
    tree, bad revisions, bisect in progress, bad settings, no shared key), InfraError (the good
    revision cannot be measured). Always restores the original checkout.
    """
    out = out or sys.stdout
    settings = StepSettings.make(rounds, max_rounds, tolerance, metrics, alpha)
    top = revisions.toplevel(repo)
    good_sha, bad_sha = revisions.resolve_rev(top, good, "--good"), revisions.resolve_rev(top, bad, "--bad")
    if good_sha == bad_sha:
        raise UsageError("--good and --bad name the same commit")
    if subprocess.run(["git", "-C", str(top), "merge-base", "--is-ancestor", good_sha, bad_sha]).returncode:
        raise UsageError(f"--good {good} is not an ancestor of --bad {bad}")
    if _bisecting(top):
        raise UsageError(f"a git bisect is already in progress in {top}; finish it with `git bisect reset`")
    dirty = revisions.dirty_files(top)
    if dirty:
        raise UsageError(
            f"the work tree {top} has uncommitted changes to tracked files; commit or stash them "
            f"before bisecting (bisect checks out other revisions):\n{dirty}"
        )
    cfg = MeasureConfig(
        pytest_args=tuple(pytest_args),
        setup=setup,
        python=python or sys.executable,
        workdir=str(Path(workdir).resolve()) if workdir else None,
        timeout_s=timeout_s,
    )
    memo_root = Path(memo).resolve() if memo else revisions.default_memo(top)
    store = Memo(memo_root / cfg.fingerprint("commits", good_sha, settings.anchor()))
    session = uuid.uuid4().hex[:12]
    original = (revisions.git(top, "symbolic-ref", "--short", "-q", "HEAD", check=False)
                or revisions.git(top, "rev-parse", "HEAD"))
    good_label = f"{good_sha[:10]} {revisions.subject(top, good_sha)!r}"
    print(f"{PREFIX} {top}: good {good_sha[:10]}, bad {bad_sha[:10]}, memo {store.root}", file=out, flush=True)
    print(f"{PREFIX} every step: an A/B against good {good_label}, {settings.describe()}", file=out, flush=True)
    _warn_repo_paths(top, cfg, out)
    visited: list[RevisionRun] = []
    first_bad: str | None = None
    candidates: list[str] = []
    try:
        with revisions.worktree(top, good_sha) as good_tree:
            conf_path = store.root / "step.json"
            revisions.write_json_atomic(
                conf_path,
                {
                    "version": MEMO_VERSION,
                    "repo": str(top),
                    "memo": str(store.root),
                    "good": {"sha": good_sha, "tree": str(good_tree), "label": good_label},
                    "ab": settings.to_json(),
                    "measure": cfg.to_json(),
                    "session": session,
                },
            )
            # the bad end first: if it does not reproduce, there is nothing to bisect
            revisions.git(top, "checkout", "--quiet", "--detach", bad_sha)
            _step_commit(conf_path, out)
            bad_entry = store.get(bad_sha)
            assert bad_entry is not None
            _check_bad_end(bad_entry, store, settings, good_label)
            visited.append(bad_entry)
            if bad_entry.verdict != BAD:
                return BisectOutcome(None, None, [], visited, _count_session(store, session), store.root,
                               {good_sha: revisions.subject(top, good_sha)})
            started = revisions.git(top, "bisect", "start", bad_sha, good_sha)
            done = re.search(r"^([0-9a-f]{40}) is the first bad commit", started, re.M)
            if done:  # bad is the only commit after good
                first_bad, candidates = done.group(1), [done.group(1)]
            else:
                first_bad, candidates = _bisect_run(top, conf_path, store.root / "bisect-run.log", out)
            steps = _parse_bisect_log(revisions.git(top, "bisect", "log", check=False))
            for verdict, sha in steps:
                entry = store.get(sha)
                if entry is not None and sha != bad_sha and verdict in (GOOD, BAD, SKIP):
                    visited.append(entry)
    finally:
        _restore(top, original, out)
    last_good = None
    if first_bad is not None:
        last_good = _last_good_ancestor(top, store, first_bad, good_sha)
    return BisectOutcome(first_bad, last_good, candidates, visited, _count_session(store, session), store.root,
                   {good_sha: revisions.subject(top, good_sha)})


def _count_session(store: Memo, session: str) -> int:
    """Measurements (setup and pytest runs of one side in one round) this session made."""
    return sum(1 for m in store.entries() if m.session == session and m.detail.get("kind") != "step")


def _bisect_run(top: Path, conf_path: Path, log_path: Path, out: TextIO) -> tuple[str | None, list[str]]:
    """Run `git bisect run` with our step, echo progress lines, return (first bad, candidates)."""
    cmd = ["git", "-C", str(top), "bisect", "run", sys.executable, "-m", "specwatch.revisions.gitbisect", "step",
           "--config", str(conf_path)]
    text: list[str] = []
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=_python_path_env(), stdin=subprocess.DEVNULL)
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                text.append(line)
                if line.startswith((PREFIX, "Bisecting:")) or "Traceback" in line or "Error" in line:
                    out.write(line)
                    out.flush()
            proc.wait()
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)
    joined = "".join(text)
    found = re.search(r"^([0-9a-f]{40}) is the first bad commit", joined, re.M)
    if found:
        return found.group(1), [found.group(1)]
    if "could be any of" in joined:
        tail = joined.split("could be any of", 1)[1]
        return None, re.findall(r"^([0-9a-f]{40})\s*$", tail, re.M)
    raise InfraError(f"git bisect run did not finish (exit {proc.returncode}); see {log_path}")


def _last_good_ancestor(top: Path, store: Memo, first_bad: str, good_sha: str) -> str:
    """Nearest first-parent ancestor of `first_bad` measured good (the good revision at worst)."""
    for sha in revisions.git(top, "rev-list", "--first-parent", f"{good_sha}..{first_bad}^").split():
        entry = store.get(sha)
        if entry is not None and entry.verdict == GOOD:
            return sha
    return good_sha


def _restore(top: Path, original: str, out: TextIO) -> None:
    """Leave the repo as we found it: no bisect in progress, the original branch or commit."""
    try:
        if _bisecting(top):
            revisions.git(top, "bisect", "reset")
    except SpecwatchError as exc:
        print(f"{PREFIX} WARNING: `git bisect reset` failed: {exc}", file=out, flush=True)
    try:
        revisions.git(top, "checkout", "--quiet", "-f", original)  # the tree was clean when we started
        print(f"{PREFIX} checkout restored to {original}", file=out, flush=True)
    except SpecwatchError as exc:
        print(f"{PREFIX} WARNING: could not restore {original}: {exc}", file=out, flush=True)


# --------------------------------------------------------------------------------------------
# patch bisection


def _prefix_ident(base_sha: str, patch_texts: Sequence[bytes]) -> str:
    h = hashlib.sha256(base_sha.encode())
    for text in patch_texts:
        h.update(hashlib.sha256(text).digest())
    return f"prefix-{len(patch_texts)}-{h.hexdigest()[:12]}"


def _prefix_label(patches: Sequence[Path], k: int) -> str:
    return "base" if k == 0 else f"+{k}/{len(patches)} {patches[k - 1].name}"


def bisect_patches(
    *,
    repo: str | Path,
    base: str,
    patches: Sequence[str | Path],
    pytest_args: Sequence[str],
    setup: str | None = None,
    memo: str | Path | None = None,
    python: str | None = None,
    workdir: str | Path | None = None,
    timeout_s: float | None = None,
    rounds: int = DEFAULT_ROUNDS,
    max_rounds: int | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    metrics: Sequence[str] | None = None,
    alpha: float = DEFAULT_ALPHA,
    out: TextIO | None = None,
) -> BisectOutcome:
    """Find the first patch whose cumulative inclusion an A/B against bare `base` calls a regression.

    Idents are ``prefix-<k>-<hash>``; ``first_bad``/``candidates`` hold those of the patches'
    prefixes, and :func:`patch_index` turns one back into k (1-based patch number).
    The user's checkout is never touched: bare `base` is a worktree made once, and every prefix is
    built in a temporary worktree of its own; each step measures the two in alternating rounds.
    """
    out = out or sys.stdout
    settings = StepSettings.make(rounds, max_rounds, tolerance, metrics, alpha)
    top = revisions.toplevel(repo)
    base_sha = revisions.resolve_rev(top, base, "--base")
    if not patches:
        raise UsageError("give at least one patch file")
    paths = [Path(p).resolve() for p in patches]
    for p in paths:
        if not p.is_file():
            raise UsageError(f"patch {p}: no such file")
    texts = [p.read_bytes() for p in paths]
    cfg = MeasureConfig(
        pytest_args=tuple(pytest_args),
        setup=setup,
        python=python or sys.executable,
        workdir=str(Path(workdir).resolve()) if workdir else None,
        timeout_s=timeout_s,
    )
    memo_root = Path(memo).resolve() if memo else revisions.default_memo(top)
    store = Memo(memo_root / cfg.fingerprint("patches", base_sha, settings.anchor()))
    session = uuid.uuid4().hex[:12]
    n = len(paths)
    idents = [_prefix_ident(base_sha, texts[:k]) for k in range(n + 1)]
    base_label = f"{base_sha[:10]} {revisions.subject(top, base_sha)!r}"
    print(f"{PREFIX} {top}: base {base_sha[:10]}, {n} patches, memo {store.root}", file=out, flush=True)
    print(f"{PREFIX} every step: an A/B against bare base {base_label}, {settings.describe()}", file=out, flush=True)
    _warn_repo_paths(top, cfg, out)

    with revisions.worktree(top, base_sha) as base_tree:
        base_side = ab.Side("base", base_label, base_tree, base_sha, idents[0])

        def verdict_of(k: int) -> RevisionRun:
            entry = store.get(idents[k])
            if not _reusable(entry):
                try:
                    entry = _measure_prefix(top, base_sha, paths[:k], cfg, store, idents[k], _prefix_label(paths, k),
                                            base_side, settings, session, out)
                finally:
                    _reset_if_dirty(base_tree)
            assert entry is not None
            print(progress_line(entry), file=out, flush=True)
            return entry

        visited = [verdict_of(n)]
        _check_bad_end(visited[0], store, settings, base_label)
        if visited[0].verdict != BAD:
            return BisectOutcome(None, None, [], visited, _count_session(store, session), store.root,
                                 {idents[0]: "base"})
        lo, hi, skipped = 0, n, set()
        while hi - lo > 1:
            mid = (lo + hi) // 2
            choices = [k for k in range(lo + 1, hi) if k not in skipped]
            if not choices:
                break
            k = min(choices, key=lambda c: (abs(c - mid), c))
            entry = verdict_of(k)
            visited.append(entry)
            if entry.verdict == GOOD:
                lo = k
            elif entry.verdict == BAD:
                hi = k
            else:
                skipped.add(k)
    measured, labels = _count_session(store, session), {idents[0]: "base"}
    if hi - lo == 1:
        return BisectOutcome(idents[hi], idents[lo], [idents[hi]], visited, measured, store.root, labels)
    return BisectOutcome(None, idents[lo], idents[lo + 1 : hi + 1], visited, measured, store.root, labels)


def patch_index(ident: str) -> int:
    """k of a ``prefix-<k>-<hash>`` ident: the 1-based number of the last patch it includes."""
    return int(ident.split("-")[1])


def _measure_prefix(
    top: Path,
    base_sha: str,
    paths: Sequence[Path],
    cfg: MeasureConfig,
    store: Memo,
    ident: str,
    label: str,
    base_side: ab.Side,
    settings: StepSettings,
    session: str,
    out: TextIO,
) -> RevisionRun:
    """Build the prefix in a worktree of its own and A/B it against bare base (``base_side``)."""
    with revisions.worktree(top, base_sha) as tree:
        for p in paths:
            proc = subprocess.run(["git", "-C", str(tree), "apply", "--whitespace=nowarn", str(p)],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                store.log_path(ident).write_text(proc.stderr)
                entry = RevisionRun(
                    ident=ident, label=label, verdict=SKIP,
                    reason=f"{p.name} does not apply: {proc.stderr.strip().splitlines()[0] if proc.stderr else ''}",
                    pytest_rc=None, results=None, seconds=0.0,
                    measured=datetime.now(timezone.utc).isoformat(timespec="seconds"), session=session,
                    detail={"kind": "step", "rounds": 0, "keys": [], "failed_side": "step"},
                )
                store.put(entry)
                return entry
        step_side = ab.Side("step", label, tree, base_sha, ident)
        return ab_step(base_side, step_side, ident=ident, label=label, cfg=cfg, memo=store, settings=settings,
                       session=session, out=out)


# --------------------------------------------------------------------------------------------
# reports and commands


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
        lines.append(f"  {k['key']:<{width}}  {_fmt(k['good_median']):>10}  {_fmt(k['step_median']):>10}  "
                     f"{k['unit']:<{unit}}  {k['ratio']:>6.3f}x  {ci:>15}  {k['verdict'].replace('_', ' ')} "
                     f"({per_round})")
    return lines


def report(outcome: BisectOutcome, out: TextIO, describe: Mapping[str, str] | None = None) -> int:
    """Print the verdict of a bisection; return the specwatch exit code."""
    store = Memo(outcome.memo_dir)
    describe = {**outcome.labels, **(describe or {})}

    def name(ident: str) -> str:
        entry = store.get(ident)
        label = describe.get(ident) or (entry.label if entry else "")
        return f"{_short(ident)} {label!r}"

    skipped = [m for m in outcome.visited if m.verdict == SKIP]
    print(f"{PREFIX} {len(outcome.visited)} step(s), each an A/B against the good revision in alternating rounds; "
          f"{outcome.measured_now} measurement(s) made now, the rest from the memo", file=out)
    for m in skipped:
        print(f"{PREFIX} skipped (not blamed): {name(m.ident)}: {m.reason}", file=out)
    if outcome.first_bad is None and not outcome.candidates:
        bad = outcome.visited[0] if outcome.visited else None
        why = bad.reason if bad else "nothing measured"
        if bad is not None and bad.verdict == SKIP:
            if bad.detail.get("unsure"):
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


def _common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repo", required=True, help="git work tree of the server under test")
    parser.add_argument("--setup", default=None,
                        help="shell command run in each checkout before measuring, e.g. 'pip install -e .' "
                             "({checkout} is replaced by its path)")
    parser.add_argument("--memo", default=None,
                        help="memo directory (default: <git-dir>/specwatch/bisect of --repo)")
    parser.add_argument("--python", default=None, help="interpreter that runs pytest (default: this one)")
    parser.add_argument("--workdir", default=None,
                        help="directory pytest runs in (default: the checkout being measured)")
    parser.add_argument("--step-timeout", dest="timeout_s", type=float, default=None,
                        help="seconds allowed for the setup and for pytest, per measurement (timeout: skip)")
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS,
                        help=f"alternating rounds of each step against the good revision (default {DEFAULT_ROUNDS})")
    parser.add_argument("--max-rounds", type=int, default=None,
                        help=f"rounds allowed while a step is unsure (default {DEFAULT_MAX_ROUNDS}); "
                             f"still unsure: skipped, never blamed")
    parser.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE,
                        help=f"smallest slowdown that makes a step bad (default {DEFAULT_TOLERANCE})")
    parser.add_argument("--metric", action="append", default=None,
                        help=f"metric(s) judged, repeatable (default: {', '.join(ab.DEFAULT_METRICS)})")
    parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA,
                        help=f"significance level of a regression (default {DEFAULT_ALPHA})")


def _step_options(args: argparse.Namespace) -> dict[str, Any]:
    return dict(rounds=args.rounds, max_rounds=args.max_rounds, tolerance=args.tolerance, metrics=args.metric,
                alpha=args.alpha)


def _split_pytest_args(rest: Sequence[str]) -> tuple[list[str], list[str]]:
    items = list(rest)
    if "--" in items:
        i = items.index("--")
        return items[:i], items[i + 1 :]
    return items, []


class Bisect:
    """``specwatch bisect``: git bisect run over commits, memoised, against the good revision."""

    name = "bisect"
    help = "find the commit that made the server under test slower (git bisect run)"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        _common_arguments(parser)
        parser.add_argument("--good", required=True, help="a revision without the regression")
        parser.add_argument("--bad", required=True, help="a revision with the regression")
        parser.add_argument("pytest_args", nargs=argparse.REMAINDER, metavar="-- PYTEST-ARGS",
                            help="arguments of the measuring pytest run, after --")

    @staticmethod
    def run(*, out: TextIO | None = None, **kwargs: Any) -> int:
        """Run the bisection and print its report; a specwatch exit code (0/1/2/3)."""
        out = out or sys.stdout
        try:
            outcome = bisect_commits(out=out, **kwargs)
        except SpecwatchError as exc:
            print(f"specwatch bisect: {exc}", file=sys.stderr)
            return exc.exit_code
        except KeyboardInterrupt:
            print("specwatch bisect: interrupted (checkout restored; the memo keeps what was measured)",
                  file=sys.stderr)
            return EXIT_INTERRUPTED
        return report(outcome, out)

    @classmethod
    def run_from_args(cls, args: argparse.Namespace) -> int:
        before, after = _split_pytest_args(args.pytest_args)
        if before:
            print(f"specwatch bisect: put pytest arguments after --: {' '.join(before)}", file=sys.stderr)
            return EXIT_USAGE
        return cls.run(repo=args.repo, good=args.good, bad=args.bad, pytest_args=after, setup=args.setup,
                       memo=args.memo, python=args.python, workdir=args.workdir, timeout_s=args.timeout_s,
                       **_step_options(args))


class BisectPatches:
    """``specwatch bisect-patches``: binary search over cumulative prefixes of a patch list."""

    name = "bisect-patches"
    help = "find the first of an ordered list of patches that makes the server slower"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        _common_arguments(parser)
        parser.add_argument("--base", required=True, help="the revision the patches apply to")
        parser.add_argument("patches_and_args", nargs=argparse.REMAINDER,
                            metavar="PATCH ... -- PYTEST-ARGS",
                            help="patch files in order (after all options), then -- and pytest arguments")

    @staticmethod
    def run(*, out: TextIO | None = None, **kwargs: Any) -> int:
        """Run the patch bisection and print its report; a specwatch exit code (0/1/2/3)."""
        out = out or sys.stdout
        try:
            outcome = bisect_patches(out=out, **kwargs)
        except SpecwatchError as exc:
            print(f"specwatch bisect-patches: {exc}", file=sys.stderr)
            return exc.exit_code
        except KeyboardInterrupt:
            print("specwatch bisect-patches: interrupted (the memo keeps what was measured)",
                  file=sys.stderr)
            return EXIT_INTERRUPTED
        describe = {}
        if outcome.first_bad or outcome.candidates:
            patches = [Path(p) for p in kwargs["patches"]]
            for ident in [*outcome.candidates, outcome.first_bad or "", outcome.last_good or ""]:
                if ident.startswith("prefix-"):
                    describe[ident] = _prefix_label(patches, patch_index(ident))
        return report(outcome, out, describe)

    @classmethod
    def run_from_args(cls, args: argparse.Namespace) -> int:
        patches, pytest_args = _split_pytest_args(args.patches_and_args)
        options = [p for p in patches if p.startswith("-")]
        if options:
            print(f"specwatch bisect-patches: options go before the patch files: {' '.join(options)}",
                  file=sys.stderr)
            return EXIT_USAGE
        return cls.run(repo=args.repo, base=args.base, patches=patches, pytest_args=pytest_args,
                       setup=args.setup, memo=args.memo, python=args.python, workdir=args.workdir,
                       timeout_s=args.timeout_s, **_step_options(args))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``specwatch bisect`` (see :class:`Bisect`)."""
    Bisect.add_arguments(parser)


def run(**kwargs: Any) -> int:
    """``specwatch bisect`` with plain keywords (see :func:`bisect_commits`)."""
    return Bisect.run(**kwargs)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m specwatch.revisions.gitbisect step --config FILE``: one `git bisect run` step."""
    parser = argparse.ArgumentParser(prog="python -m specwatch.revisions.gitbisect")
    sub = parser.add_subparsers(dest="command", required=True)
    step = sub.add_parser("step", help="measure HEAD of the bisected repo (used by git bisect run)")
    step.add_argument("--config", required=True, type=Path)
    args = parser.parse_args(argv)
    try:
        return _step_commit(args.config, sys.stdout)
    except KeyboardInterrupt:
        return ABORT_CODE
    except Exception:  # a bug, not a verdict on the revision: stop the bisection, loudly
        traceback.print_exc()
        return ABORT_CODE


if __name__ == "__main__":
    sys.exit(main())
