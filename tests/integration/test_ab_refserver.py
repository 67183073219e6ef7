"""`specwatch ab` end to end on the reference server (CPU): two commits of a "server repository".

The head commit slows the server from OUTSIDE its code: its profile puts
fixtures/faults/slowdown (a sitecustomize that busy-waits after every attention call) on the
server's PYTHONPATH. The reference server itself is unchanged. ab must call that a regression
(exit 1), and the base measured against itself no regression (exit 0).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SLOWDOWN = ROOT / "fixtures" / "faults" / "slowdown"
PROFILE = """version = 1
[defaults]
engine = "reference"
model = "ref-tiny"
device = "cpu"
[[server]]
name = "plain"
{slow}
"""
SLOW = f'pythonpath = ["{SLOWDOWN}"]\nextra_env = {{ SPECWATCH_SLOWDOWN_US = "1000" }}'


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def server_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    repo = tmp_path_factory.mktemp("abrepo") / "server"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "ci@example.invalid")
    _git(repo, "config", "user.name", "ci")
    shas = []
    for message, slow in (("base server", ""), ("engine: one more pass per attention call", SLOW)):
        (repo / "profile.toml").write_text(PROFILE.format(slow=slow))
        _git(repo, "add", "profile.toml")
        _git(repo, "commit", "-q", "-m", message)
        shas.append(_git(repo, "rev-parse", "HEAD"))
    return repo, shas


def _ab(repo: Path, base: str, head: str, tmp: Path, tolerance: float) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "specwatch.cli", "ab", "--repo", str(repo), "--base", base, "--head", head,
           "--rounds", "4", "--max-rounds", "6", "--tolerance", str(tolerance), "--metric", "decode_tok_s",
           "--workdir", str(ROOT), "--memo", str(tmp / "memo"), "--step-timeout", "300", "--",
           "-m", "perf", str(ROOT / "tests" / "perf" / "test_throughput.py"), "-k", "drift and output",
           "-p", "no:cacheprovider", "--specwatch-profiles={checkout}/profile.toml",
           f"--specwatch-report-dir={tmp / 'reports'}", "--specwatch-runs=5", "--specwatch-warmup=1"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=1200, cwd=ROOT)


def test_ab_flags_a_slowdown_injected_from_outside(server_repo: tuple[Path, list[str]], tmp_path: Path) -> None:
    repo, (base, head) = server_repo
    out = _ab(repo, base, head, tmp_path, tolerance=0.25)
    assert out.returncode == 1, out.stdout[-4000:] + out.stderr[-2000:]
    assert "REGRESSION" in out.stdout
    assert "plain/single-stream/decode_tok_s: regression" in out.stdout
    assert _git(repo, "status", "--porcelain") == "" and _git(repo, "rev-parse", "HEAD") == head
    assert "specwatch-bisect-" not in _git(repo, "worktree", "list")  # the worktrees are gone


def test_ab_of_a_revision_against_itself_is_no_regression(server_repo: tuple[Path, list[str]], tmp_path: Path) -> None:
    # The tolerance is the change that must be ruled out. A 2-core CI machine shared with other
    # jobs moved single runs between 222 and 389 tok/s (rounds disagreeing by 17 %), and then 6
    # rounds cannot rule out 25 % (ab says "unsure", exit 3, correctly). 50 % is still far inside
    # the injected slowdown that the other test must find at 25 %.
    repo, (base, _) = server_repo
    out = _ab(repo, base, base, tmp_path, tolerance=0.5)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "[ab] no regression" in out.stdout
