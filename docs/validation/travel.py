"""What a device call carries, and how to make it fit: the tree (tracked files and untracked ones git does not
ignore, counted in disk blocks) plus the ``carry`` paths must stay under 64 MiB.

    python docs/validation/travel.py size .kit/sglang-0.5.16.tar.xz .kit/sgl-fa3-hdim128.tar.xz
    python docs/validation/travel.py light      # untrack docs/validation/data for the call (the scenarios write there)
    python docs/validation/travel.py restore    # track it again: run before any commit

``light`` takes the recorded data out of git's index and excludes it, so the device's copy of the tree leaves it
behind; the files stay on disk. ``restore`` puts both back. A commit made in between would delete the data from
the repository, so ``light`` refuses when the index already has changes, and ``restore`` checks the result.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT_MIB = 64.0
DATA = "docs/validation/data"
EXCLUDE = ROOT / ".git" / "info" / "exclude"
MARK = f"# travel.py light\n/{DATA}/\n"  # a comment line, then the pattern (gitignore has no trailing comments)


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True).stdout


def _blocks_mib(paths: list[Path]) -> float:
    """Disk use of ``paths`` as ``du`` counts it (whole blocks), in MiB."""
    return sum(p.stat().st_blocks * 512 for p in paths if p.is_file()) / 2**20


def tree_mib() -> float:
    """The tree a device call copies: tracked files and untracked ones git does not ignore."""
    names = _git("ls-files", "--cached", "--others", "--exclude-standard", "-z").split("\0")
    return _blocks_mib([ROOT / n for n in names if n])


def size(carry: list[str]) -> int:
    tree = tree_mib()
    extra = _blocks_mib([ROOT / c for c in carry])
    total = tree + extra
    print(f"travel: tree {tree:.1f} MiB + carry {extra:.1f} MiB = {total:.1f} MiB of {LIMIT_MIB:g}"
          + ("" if total < LIMIT_MIB else f": over by {total - LIMIT_MIB:.1f} MiB (travel.py light)"))
    return 0 if total < LIMIT_MIB else 1


def light() -> int:
    if _git("diff", "--cached", "--name-only").strip():
        raise SystemExit("travel: the index has staged changes; commit or unstage them first")
    _git("rm", "-r", "-q", "--cached", DATA)
    with EXCLUDE.open("a") as fh:
        fh.write(MARK)
    print(f"travel: {DATA} untracked for the call (still on disk); run `travel.py restore` before any commit")
    return size([])


def restore() -> int:
    _git("reset", "-q", "--", DATA)
    if EXCLUDE.is_file():
        EXCLUDE.write_text(EXCLUDE.read_text().replace(MARK, ""))
    left = _git("status", "--porcelain", "--", DATA).strip()
    if left:
        raise SystemExit(f"travel: {DATA} differs from the last commit after restoring:\n{left}")
    print(f"travel: {DATA} tracked again")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="travel.py", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    s = sub.add_parser("size", help="the tree and the carry paths against the 64 MiB a call carries")
    s.add_argument("carry", nargs="*")
    sub.add_parser("light", help=f"untrack {DATA} for a device call")
    sub.add_parser("restore", help=f"track {DATA} again")
    a = ap.parse_args(argv)
    return size(a.carry) if a.what == "size" else light() if a.what == "light" else restore()


if __name__ == "__main__":
    sys.exit(main())
