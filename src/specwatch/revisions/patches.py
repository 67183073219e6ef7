"""``specwatch bisect-patches``: find the first of an ordered list of patches that makes the server slower.

``specwatch bisect-patches --repo PATH --base REV P1 P2 ... -- PYTEST-ARGS`` binary-searches the
length k of a prefix of the patch list, applied cumulatively onto ``base``. The user's checkout is
never touched: bare ``base`` is a temporary ``git worktree`` made once, and every prefix is built in
a worktree of its own. Each step is an A/B of the prefix against bare base in alternating rounds
(:func:`specwatch.revisions.bisection.ab_step`); a prefix whose patches do not apply, or that
cannot be measured or judged, is skipped and never blamed. Prefixes are memoised as
``prefix-<k>-<hash>`` (the hash of the base and the patches' texts).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from specwatch.errors import UsageError
from specwatch.judge.sequential import POCOCK
from specwatch.revisions import git
from specwatch.revisions.bisection import (
    DEFAULT_ALPHA,
    DEFAULT_ROUNDS,
    DEFAULT_TOLERANCE,
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
from specwatch.revisions.memo import BAD, GOOD, SKIP, Memo, RevisionRun, memo_root
from specwatch.revisions.rounds import RoundSettings, Side
from specwatch.revisions.step import MeasureConfig


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
    tolerance: float | None = DEFAULT_TOLERANCE,
    metrics: Sequence[str] | None = None,
    alpha: float = DEFAULT_ALPHA,
    round_history: str | None = None,
    spending: str = POCOCK,
    out: TextIO | None = None,
) -> BisectOutcome:
    """Find the first patch whose cumulative inclusion an A/B against bare `base` calls a regression.

    Idents are ``prefix-<k>-<hash>``; ``first_bad``/``candidates`` hold those of the patches'
    prefixes, and :func:`patch_index` turns one back into k (1-based patch number).
    The user's checkout is never touched: bare `base` is a worktree made once, and every prefix is
    built in a temporary worktree of its own; each step measures the two in alternating rounds.
    """
    out = out or sys.stdout
    settings = step_settings(rounds, max_rounds, tolerance, metrics, alpha, round_history, spending)
    top = git.toplevel(repo)
    base_sha = git.resolve_rev(top, base, "--base")
    if not patches:
        raise UsageError("give at least one patch file")
    paths = [Path(p).resolve() for p in patches]
    for p in paths:
        if not p.is_file():
            raise UsageError(f"patch {p}: no such file")
    texts = [p.read_bytes() for p in paths]
    cfg = MeasureConfig.make(pytest_args, setup, python, workdir, timeout_s)
    memo_dir = memo_root(memo, git.default_memo(top))
    store = Memo(memo_dir / cfg.fingerprint("patches", base_sha, settings.anchor()))
    session = uuid.uuid4().hex[:12]
    n = len(paths)
    idents = [_prefix_ident(base_sha, texts[:k]) for k in range(n + 1)]
    base_label = f"{base_sha[:10]} {git.subject(top, base_sha)!r}"
    print(f"{PREFIX} {top}: base {base_sha[:10]}, {n} patches, memo {store.root}", file=out, flush=True)
    print(f"{PREFIX} every step: an A/B against bare base {base_label}, {settings.describe()}", file=out, flush=True)
    warn_repo_paths(top, cfg, out)

    with git.worktree(top, base_sha) as base_tree:
        base_side = Side("base", base_label, base_tree, base_sha, idents[0])

        def verdict_of(k: int) -> RevisionRun:
            entry = store.get(idents[k])
            if not reusable(entry):
                try:
                    entry = _measure_prefix(top, base_sha, paths[:k], cfg, store, idents[k], _prefix_label(paths, k),
                                            base_side, settings, session, out)
                finally:
                    git.reset_if_dirty(base_tree)
            assert entry is not None
            print(progress_line(entry), file=out, flush=True)
            return entry

        visited = [verdict_of(n)]
        check_bad_end(visited[0], store, settings, base_label)
        if visited[0].verdict != BAD:
            return BisectOutcome(None, None, [], visited, count_session(store, session), store.root,
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
    measured, labels = count_session(store, session), {idents[0]: "base"}
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
    base_side: Side,
    settings: RoundSettings,
    session: str,
    out: TextIO,
) -> RevisionRun:
    """Build the prefix in a worktree of its own and A/B it against bare base (``base_side``)."""
    with git.worktree(top, base_sha) as tree:
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
        step_side = Side("step", label, tree, base_sha, ident)
        return ab_step(base_side, step_side, ident=ident, label=label, cfg=cfg, memo=store, settings=settings,
                       session=session, out=out)


def command(*, out: TextIO | None = None, **kwargs: Any) -> int:
    """``specwatch bisect-patches``: binary search over cumulative prefixes of a patch list (the keywords of
    :func:`bisect_patches`); its report printed, a specwatch exit code (0/1/2/3)."""

    def describe(outcome: BisectOutcome) -> Mapping[str, str]:
        patches = [Path(p) for p in kwargs["patches"]]
        return {ident: _prefix_label(patches, patch_index(ident))
                for ident in [*outcome.candidates, outcome.first_bad or "", outcome.last_good or ""]
                if ident.startswith("prefix-")}

    return run_command("bisect-patches", lambda sink: bisect_patches(out=sink, **kwargs), out,
                       "the memo keeps what was measured", describe)
