"""``specwatch bisect``: find the commit that made the server under test slower (``git bisect run``).

Two searches share one step (:mod:`specwatch.revisions.bisection`); this module drives the first,
:mod:`specwatch.revisions.patches` the second:

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
judged by :func:`specwatch.revisions.rounds.judge` on the keys of ``--metric`` (default: the drift gates'
throughputs) at ``--tolerance`` (default: each key's own, the smallest that the step's rounds settle at
its recorded round spread, as ``specwatch ab``), look after look with alpha spent across the looks,
and the step's verdict, as ``git bisect run`` wants it, is:

* a regression beyond the tolerance: bad (1);
* a slowdown beyond the tolerance ruled out: good (0);
* unsure after ``--rounds`` rounds (default 2) and the extra rounds up to ``--max-rounds``
  (default 4): skip (125), never bad; the progress line says the noise exceeded the tolerance;
* setup failure, timeout, a pytest run without a results file (exit 2-5, or only errors such as a
  server that did not boot): skip (125), never bad. The pytest exit code is not the verdict.

Each round's measurement is stored in the memo directory (by default ``<git-dir>/specwatch/bisect``,
which never dirties the work tree) as ``<revision>-<side>-r<round>`` (results file, entry and log), in a
sub-directory named by a fingerprint of what is measured (pytest arguments, setup command, interpreter,
work directory, good revision), and each step's verdict under the revision (the commit) in a
``judged-<fingerprint>`` directory below it, named by the judging settings (rounds, tolerance, metrics,
alpha, round history). Rerunning the same bisection measures nothing again; rerunning it with other
judging settings (a larger ``--tolerance`` for a large regression, more ``--max-rounds``) judges the
rounds already measured again and measures only the rounds it lacks. A step stopped before its verdict
(Ctrl-C, ``kill``, a time limit) keeps its whole rounds. The rounds' pytest runs record into a history
file of the memo, not the user's history. (``bisect-patches`` keeps rounds and verdicts together, by
the settings.)

``git bisect run`` needs an executable; it runs ``python -m specwatch.revisions.gitbisect step --config FILE``,
which reads its settings (and the good worktree's path) from a JSON file in the memo directory.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys
import traceback
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from specwatch.errors import InfraError, SpecwatchError, UsageError
from specwatch.judge.sequential import POCOCK
from specwatch.paths import with_specwatch_importable
from specwatch.revisions import git
from specwatch.revisions.bisection import (
    DEFAULT_ALPHA,
    DEFAULT_ROUNDS,
    DEFAULT_TOLERANCE,
    EXIT_CODES,
    PREFIX,
    BisectOutcome,
    ab_step,
    check_bad_end,
    count_session,
    progress_line,
    reusable,
    run_command,
    step_settings,
    warn_repo_paths,
)
from specwatch.revisions.memo import BAD, GOOD, MEMO_VERSION, SKIP, Memo, RevisionRun, memo_root
from specwatch.revisions.rounds import RoundSettings, Side
from specwatch.revisions.step import MeasureConfig
from specwatch.store.result import atomic_write_json, load_versioned

ABORT_CODE = 255  # any code above 127 makes `git bisect run` stop


def _bisecting(repo: Path) -> bool:
    path = Path(git.git(repo, "rev-parse", "--git-path", "BISECT_START"))
    return (path if path.is_absolute() else repo / path).exists()


def _python_path_env() -> dict[str, str]:
    """Environment in which ``python -m specwatch.revisions.gitbisect`` finds this very package."""
    env = dict(os.environ)
    env["PYTHONPATH"] = with_specwatch_importable(env.get("PYTHONPATH"))
    return env


def _step_commit(config_path: Path, out: TextIO) -> int:
    """A/B HEAD of the bisected repo against the good worktree (memoised); print one line; git's exit code."""
    conf = load_versioned(config_path, "bisect step config", MEMO_VERSION, {})
    repo, memo = Path(conf["repo"]), Memo(Path(conf["memo"]))
    verdicts = Memo(Path(conf.get("verdicts", conf["memo"])))
    cfg = MeasureConfig.from_json(conf["measure"])
    settings = RoundSettings.from_json(conf["ab"])
    good = conf["good"]
    good_tree = Path(good["tree"])
    sha = git.git(repo, "rev-parse", "HEAD")
    entry = verdicts.get(sha)
    if not reusable(entry):
        subject = git.subject(repo, sha)
        good_side = Side("good", good["label"], good_tree, good["sha"], good["sha"][:12])
        step_side = Side("step", f"{sha[:10]} {subject!r}", repo, sha, sha[:12])
        try:
            entry = ab_step(good_side, step_side, ident=sha, label=subject, cfg=cfg, memo=memo, settings=settings,
                            session=conf["session"], out=out, verdicts=verdicts)
        finally:
            git.reset_if_dirty(repo)
            git.reset_if_dirty(good_tree)
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
    tolerance: float | None = DEFAULT_TOLERANCE,
    metrics: Sequence[str] | None = None,
    alpha: float = DEFAULT_ALPHA,
    round_history: str | None = None,
    spending: str = POCOCK,
    out: TextIO | None = None,
) -> BisectOutcome:
    """Find the first commit in good..bad that an A/B against `good` calls a regression.

    Every step measures its commit (checked out by ``git bisect run``) and `good` (a detached
    worktree, made once) in alternating rounds; see the module docstring. Raises UsageError (dirty
    tree, bad revisions, bisect in progress, bad settings, no shared key), InfraError (the good
    revision cannot be measured). Always restores the original checkout.
    """
    out = out or sys.stdout
    settings = step_settings(rounds, max_rounds, tolerance, metrics, alpha, round_history, spending)
    top = git.toplevel(repo)
    good_sha, bad_sha = git.resolve_rev(top, good, "--good"), git.resolve_rev(top, bad, "--bad")
    if good_sha == bad_sha:
        raise UsageError("--good and --bad name the same commit")
    if subprocess.run(["git", "-C", str(top), "merge-base", "--is-ancestor", good_sha, bad_sha]).returncode:
        raise UsageError(f"--good {good} is not an ancestor of --bad {bad}")
    if _bisecting(top):
        raise UsageError(f"a git bisect is already in progress in {top}; finish it with `git bisect reset` (after a "
                         f"specwatch bisect that was killed, then `git checkout` your branch: it had detached HEAD)")
    dirty = git.dirty_files(top)
    if dirty:
        raise UsageError(
            f"the work tree {top} has uncommitted changes to tracked files; commit or stash them "
            f"before bisecting (bisect checks out other revisions):\n{dirty}"
        )
    cfg = MeasureConfig.make(pytest_args, setup, python, workdir, timeout_s)
    root = memo_root(memo, git.default_memo(top))
    rounds_memo = Memo(root / cfg.fingerprint("commits", good_sha))  # the rounds: any judging settings reuse them
    verdicts = Memo(rounds_memo.root / f"judged-{hashlib.sha256(settings.anchor().encode()).hexdigest()[:12]}")
    session = uuid.uuid4().hex[:12]
    original = (git.git(top, "symbolic-ref", "--short", "-q", "HEAD", check=False)
                or git.git(top, "rev-parse", "HEAD"))
    good_label = f"{good_sha[:10]} {git.subject(top, good_sha)!r}"
    print(f"{PREFIX} {top}: good {good_sha[:10]}, bad {bad_sha[:10]}, memo {rounds_memo.root}", file=out, flush=True)
    print(f"{PREFIX} every step: an A/B against good {good_label}, {settings.describe()}", file=out, flush=True)
    warn_repo_paths(top, cfg, out)
    visited: list[RevisionRun] = []
    first_bad: str | None = None
    candidates: list[str] = []
    try:
        with git.worktree(top, good_sha) as good_tree:
            conf_path = rounds_memo.root / "step.json"
            atomic_write_json(
                conf_path,
                {
                    "version": MEMO_VERSION,
                    "repo": str(top),
                    "memo": str(rounds_memo.root),
                    "verdicts": str(verdicts.root),
                    "good": {"sha": good_sha, "tree": str(good_tree), "label": good_label},
                    "ab": settings.to_json(),
                    "measure": cfg.to_json(),
                    "session": session,
                },
            )
            # the bad end first: if it does not reproduce, there is nothing to bisect
            git.git(top, "checkout", "--quiet", "--detach", bad_sha)
            _step_commit(conf_path, out)
            bad_entry = verdicts.get(bad_sha)
            assert bad_entry is not None
            check_bad_end(bad_entry, rounds_memo, settings, good_label)
            visited.append(bad_entry)
            if bad_entry.verdict != BAD:
                return BisectOutcome(None, None, [], visited, count_session(rounds_memo, session), verdicts.root,
                                     {good_sha: git.subject(top, good_sha)}, rounds_memo.root)
            started = git.git(top, "bisect", "start", bad_sha, good_sha)
            done = re.search(r"^([0-9a-f]{40}) is the first bad commit", started, re.M)
            if done:  # bad is the only commit after good
                first_bad, candidates = done.group(1), [done.group(1)]
            else:
                first_bad, candidates = _bisect_run(top, conf_path, rounds_memo.root / "bisect-run.log", out)
            steps = _parse_bisect_log(git.git(top, "bisect", "log", check=False))
            for verdict, sha in steps:
                entry = verdicts.get(sha)
                if entry is not None and sha != bad_sha and verdict in (GOOD, BAD, SKIP):
                    visited.append(entry)
    finally:
        _restore(top, original, out)
    last_good = None
    if first_bad is not None:
        last_good = _last_good_ancestor(top, verdicts, first_bad, good_sha)
    return BisectOutcome(first_bad, last_good, candidates, visited, count_session(rounds_memo, session), verdicts.root,
                         {good_sha: git.subject(top, good_sha)}, rounds_memo.root)


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
    for sha in git.git(top, "rev-list", "--first-parent", f"{good_sha}..{first_bad}^").split():
        entry = store.get(sha)
        if entry is not None and entry.verdict == GOOD:
            return sha
    return good_sha


def _restore(top: Path, original: str, out: TextIO) -> None:
    """Leave the repo as we found it: no bisect in progress, the original branch or commit."""
    try:
        if _bisecting(top):
            git.git(top, "bisect", "reset")
    except SpecwatchError as exc:
        print(f"{PREFIX} WARNING: `git bisect reset` failed: {exc}", file=out, flush=True)
    try:
        git.git(top, "checkout", "--quiet", "-f", original)  # the tree was clean when we started
        print(f"{PREFIX} checkout restored to {original}", file=out, flush=True)
    except SpecwatchError as exc:
        print(f"{PREFIX} WARNING: could not restore {original}: {exc}", file=out, flush=True)


def command(*, out: TextIO | None = None, **kwargs: Any) -> int:
    """``specwatch bisect``: git bisect run over commits, memoised, against the good revision (the keywords of
    :func:`bisect_commits`); its report printed, a specwatch exit code (0/1/2/3)."""
    return run_command("bisect", lambda sink: bisect_commits(out=sink, **kwargs), out,
                       "checkout restored; the memo keeps what was measured")


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
