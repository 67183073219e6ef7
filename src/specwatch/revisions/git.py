"""The git helpers ``ab``, ``bisect`` and ``bisect-patches`` share: revisions, temporary worktrees, the memo folder."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from specwatch.errors import InfraError, UsageError


def git(repo: Path, *args: str, check: bool = True) -> str:
    """``git -C repo ARGS``'s stdout, stripped; InfraError when it fails (unless ``check`` is off)."""
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise InfraError(f"git {' '.join(args)} failed in {repo}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def toplevel(repo: str | Path) -> Path:
    """The top folder of the work tree ``repo`` is in; UsageError when it is not one."""
    path = Path(repo).resolve()
    if not path.is_dir():
        raise UsageError(f"--repo {repo}: no such directory")
    proc = subprocess.run(["git", "-C", str(path), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise UsageError(f"--repo {repo}: not a git work tree")
    return Path(proc.stdout.strip())


def resolve_rev(repo: Path, rev: str, flag: str) -> str:
    """The full sha of commit ``rev``; UsageError naming ``flag`` when it is not a commit."""
    proc = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise UsageError(f"{flag} {rev}: not a commit in {repo}")
    return proc.stdout.strip()


def subject(repo: Path, sha: str) -> str:
    """The subject line of commit ``sha``."""
    return git(repo, "log", "-1", "--format=%s", sha)


def dirty_files(repo: Path) -> str:
    """``git status --porcelain`` of the tracked files ('' when the tree is clean)."""
    return git(repo, "status", "--porcelain", "--untracked-files=no")


def reset_if_dirty(tree: Path) -> None:
    """The setup may rewrite tracked files; every checkout was clean when the measurement started."""
    if tree.is_dir() and dirty_files(tree):
        git(tree, "reset", "--quiet", "--hard")


def default_memo(repo: Path) -> Path:
    """``<git-common-dir>/specwatch/bisect``: the memo folder that never dirties the work tree."""
    common = Path(git(repo, "rev-parse", "--git-common-dir"))
    if not common.is_absolute():
        common = repo / common
    return common / "specwatch" / "bisect"


@contextlib.contextmanager
def worktree(top: Path, base: str) -> Iterator[Path]:
    """A temporary detached worktree of `base`, removed afterwards."""
    tmp = Path(tempfile.mkdtemp(prefix="specwatch-bisect-"))
    path = tmp / "tree"
    try:
        git(top, "worktree", "add", "--quiet", "--detach", str(path), base)
        yield path
    finally:
        subprocess.run(["git", "-C", str(top), "worktree", "remove", "--force", str(path)],
                       capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run(["git", "-C", str(top), "worktree", "prune"], capture_output=True)
