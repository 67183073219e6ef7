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
from perfrun import PLAIN_CPU, SLOW

ROOT = Path(__file__).resolve().parents[2]


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
        (repo / "profile.toml").write_text(PLAIN_CPU.format(extra=slow))
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
    if out.returncode == 3:
        # Unsure is never a failure (issue 31 item 6): beside another CI run the rounds read -21% +29% -83% -73%
        # (spread 94%) and ab could not decide. Its bounds are checked to be truly undecided, and the skip quotes
        # them; it never says "no regression" (exit 0) of the slowed head, which would fail below.
        keys = _unsure_keys_are_undecided(out.stdout)
        pytest.skip("ab of the slowed head unsure (undecided, not cleared): " + " | ".join(keys)[:1500])
    assert out.returncode == 1, out.stdout[-4000:] + out.stderr[-2000:]
    assert "REGRESSION" in out.stdout
    # ended at a look, not at the cap: the first (round 2) on a quiet host, a later one when load widens the rounds
    assert re.search(r"head against base, [234] alternating rounds", out.stdout), out.stdout[-4000:]
    assert "/single-stream/decode_tok_s: regression" in out.stdout or "/single-stream/output_tok_s: regression" in (
        out.stdout)
    assert "would have been caught 19 times in 20" in out.stdout
    assert "the conservative default round spread 15%" in out.stdout  # no round history on this class
    assert _git(repo, "status", "--porcelain") == "" and _git(repo, "rev-parse", "HEAD") == head
    assert "specwatch-bisect-" not in _git(repo, "worktree", "list")  # the worktrees are gone


#: one key's line of ab's report: "[ab] KEY: VERDICT: ...; head/base R [LO, HI] over N round(s), ..."
KEY_LINE = re.compile(r"^\[ab\] (?P<key>\S+): (?P<verdict>unsure|no regression|regression|slower): .*?"
                      r"beyond (?P<tol>\d+(?:\.\d+)?)%.*?; "
                      r"head/base (?P<ratio>[\d.]+) \[(?P<lo>[\d.]+), (?P<hi>[\d.]+)\]", re.M)


def _unsure_keys_are_undecided(stdout: str) -> list[str]:
    """Every key ab left unsure, checked against its own printed bounds: an unsure is honest only when
    its interval holds 1 (no change) AND reaches past the tolerance on one side (too wide to rule a
    slowdown out). An unsure whose bounds would have decided is a broken rule, not noise: it fails."""
    unsure = [m for m in KEY_LINE.finditer(stdout) if m["verdict"] == "unsure"]
    assert unsure, "ab ended unsure (exit 3) without naming an unsure key:\n" + stdout[-4000:]
    for m in unsure:
        lo, hi, tol = float(m["lo"]), float(m["hi"]), float(m["tol"]) / 100
        slack = 0.001  # the bounds are printed to 3 decimals
        assert lo - slack <= 1.0 <= hi + slack, f"unsure, yet its bounds exclude no-change: {m.group(0)}"
        assert lo < 1 - tol + slack or hi > 1 / (1 - tol) - slack, (
            f"unsure, yet its bounds rule out the tolerance: {m.group(0)}")
    return [m.group(0) for m in unsure]


def _shared_note(stdout: str) -> str:
    """ab's note on rounds measured beside other servers ('' when it printed none)."""
    return next((ln for ln in stdout.splitlines() if ln.startswith("[ab] note: ")), "")


def test_ab_of_a_revision_against_itself_is_no_regression(server_repo: tuple[Path, list[str]], tmp_path: Path) -> None:
    # The default tolerance is the one the default looks (rounds 2-4) settle at the default round
    # spread of a class without history (15 %): a shared 2-core CI machine's rounds disagree by
    # 5-17 %, so 2-4 rounds rule it out, far inside the slowdown the other test must find.
    repo, (base, _) = server_repo
    out = _ab(repo, base, base, tmp_path / "try-1")
    # A false alarm (1) or a false "slower" (6) decides that head differs from itself. The rule keeps the two
    # together at alpha (1 %) for rounds whose luck is exchangeable; ab alternates the sides so load lands on
    # both, but a CI neighbour can still load one side's boots for whole rounds (fresh-clone CI beside another
    # CI run: head -34 % and -41 % in both rounds, exit 1). So the test gives a decision or an unsure (exit 3,
    # "re-run" in the CI templates) one re-run with a fresh memo, as a CI job would, and fails when the re-run
    # decides falsely again: two independent tries both false is 1e-4 under the promise.
    if out.returncode in (1, 3, 6):
        if out.returncode == 3:
            _unsure_keys_are_undecided(out.stdout)
        out = _ab(repo, base, base, tmp_path / "try-2")
        if out.returncode in (1, 6) and "shared the host" in (note := _shared_note(out.stdout)):
            # both tries measured beside other servers (another CI run's, another xdist worker's): their load is
            # not the sides' alike, and ab says so; the rule's promise holds for exchangeable luck only
            pytest.skip(f"ab A/A decided falsely twice, each time beside other servers, as ab says: {note[:600]}")
        assert out.returncode not in (1, 6), out.stdout[-4000:] + out.stderr[-2000:]
    if out.returncode == 3:
        # Unsure twice is an undecided verdict, not a wrong one: on a loaded 2-core machine rounds
        # moved by +40 % / -75 % / +188 %, far beyond the 15 % assumed. It never fails the test (issue 31
        # item 6); it skips with ab's own words, once its bounds are checked to be truly undecided.
        keys = _unsure_keys_are_undecided(out.stdout)
        pytest.skip("ab A/A unsure twice (undecided, not a false alarm): " + " | ".join(keys)[:1500])
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "[ab] no regression after " in out.stdout
    rounds = int(out.stdout.split("[ab] no regression after ", 1)[1].split()[0])
    assert 2 <= rounds <= 4
