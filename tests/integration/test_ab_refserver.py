"""`specwatch ab` end to end on the reference server (CPU): two commits of a "server repository".

The head commit slows the server from OUTSIDE its code: its profile puts
fixtures/faults/slowdown (a sitecustomize that busy-waits after every attention call) on the
server's PYTHONPATH (1000 us after every attention call: the head read 4-5x slower on a loaded
2-core CPU). The reference server itself is unchanged.
Under the defaults of the machine class (a shared 2-core CPU records no round history, so the
documented default round spread and the tolerance its looks settle), ab must call that a
regression within 2 rounds (exit 1), and the base measured against itself no regression (exit 0),
issue 23's CPU target.
"""

from __future__ import annotations

import re
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


def _ab(repo: Path, base: str, head: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    """ab with the machine class's defaults: rounds, looks, tolerance, metrics, alpha, round history."""
    tmp.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "specwatch.cli", "ab", "--repo", str(repo), "--base", base, "--head", head,
           "--workdir", str(ROOT), "--memo", str(tmp / "memo"), "--step-timeout", "300", "--",
           "-m", "perf", str(ROOT / "tests" / "perf" / "test_throughput.py"), "-k", "drift and output",
           "-p", "no:cacheprovider", "--specwatch-profiles={checkout}/profile.toml",
           f"--specwatch-report-dir={tmp / 'reports'}", "--specwatch-runs=5", "--specwatch-warmup=1"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=1200, cwd=ROOT)


def test_ab_flags_a_slowdown_injected_from_outside(server_repo: tuple[Path, list[str]], tmp_path: Path) -> None:
    repo, (base, head) = server_repo
    out = _ab(repo, base, head, tmp_path)
    assert out.returncode == 1, out.stdout[-4000:] + out.stderr[-2000:]
    assert "REGRESSION" in out.stdout
    assert "head against base, 2 alternating rounds" in out.stdout, out.stdout[-4000:]  # ended at the first look
    assert "/single-stream/decode_tok_s: regression" in out.stdout or "/single-stream/output_tok_s: regression" in (
        out.stdout)
    assert "would have been caught 19 times in 20" in out.stdout
    assert "the conservative default round spread 15%" in out.stdout  # no round history on this class
    assert _git(repo, "status", "--porcelain") == "" and _git(repo, "rev-parse", "HEAD") == head
    assert "specwatch-bisect-" not in _git(repo, "worktree", "list")  # the worktrees are gone


def test_ab_of_a_revision_against_itself_is_no_regression(server_repo: tuple[Path, list[str]], tmp_path: Path) -> None:
    # The default tolerance is the one the default looks (rounds 2-4) settle at the default round
    # spread of a class without history (15 %): a shared 2-core CI machine's rounds disagree by
    # 5-17 %, so 2-4 rounds rule it out, far inside the slowdown the other test must find.
    repo, (base, _) = server_repo
    out = _ab(repo, base, base, tmp_path / "try-1")
    # never a false alarm (1), nor a false "slower" (6): A/A reads either at most alpha of the time together
    assert out.returncode not in (1, 6), out.stdout[-4000:] + out.stderr[-2000:]
    if out.returncode == 3:
        # exit 3 is "re-run" in the CI templates (docs/ci/github-ab.yml), and a user re-runs: CI's other
        # xdist workers once read this A/A unsure at rounds of -18% -19% -31% +7% (spread 18%, inside the
        # skip below). One re-run, with a fresh memo, as that job would; it too must never be a false alarm.
        out = _ab(repo, base, base, tmp_path / "try-2")
        assert out.returncode not in (1, 6), out.stdout[-4000:] + out.stderr[-2000:]
    spreads = [float(x) for x in re.findall(r"round-to-round spread (\d+(?:\.\d+)?)%", out.stdout)]
    if out.returncode == 3 and ("the run is noisier than its record" in out.stdout
                                or (spreads and max(spreads) > 2 * 15.0)):
        # unsure is the documented answer for rounds far noisier than the spread assumed (15 % for a
        # class without history): other jobs on the 2 cores moved rounds by +40 % / -75 % / +188 % once,
        # and CI's other xdist workers by 38 %. Not this test's case; a false alarm fails above.
        pytest.skip(f"the rounds spread {max(spreads or [0]):.0f}%, beyond twice the assumed 15%: "
                    + out.stdout[-1500:])
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "[ab] no regression after " in out.stdout
    rounds = int(out.stdout.split("[ab] no regression after ", 1)[1].split()[0])
    assert 2 <= rounds <= 4
