"""Bisection end to end on the real reference server: one commit of a "server repo" makes it slower.

The repository under bisection holds the server's launch profile, and one commit adds the reference
server's `--ref-fault-slowdown` switch to it, as a patch that slows the engine would. Every bisect step
is an A/B in alternating rounds: it boots the server of the step's revision (the repository, checked
out by `git bisect run`) and of the good revision (a worktree of it; `{checkout}` in the pytest
arguments names the side's profile) through the perf suite, two rounds a step, more while unsure.
(Skipping a revision that cannot build or boot is covered in tests/unit/test_bisect.py.)
"""

from __future__ import annotations

import io
import os
import subprocess
from pathlib import Path

import pytest

from specwatch.revisions.gitbisect import bisect_commits

ROOT = Path(__file__).resolve().parents[2]
PROFILE = """version = 1
[defaults]
engine = "reference"
model = "ref-tiny"
device = "cpu"
tolerance = 0.6
[[server]]
name = "eagle3"
speculative = {{ algorithm = "EAGLE3", num_steps = 2 }}
extra_args = {extra}
"""


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def server_repo(tmp_path: Path) -> tuple[Path, list[str]]:
    repo = tmp_path / "server"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "ci@example.invalid")
    _git(repo, "config", "user.name", "ci")
    history = [
        ("base server", "[]"),
        ("scheduler: tidy logging", "[]"),
        ("engine: extra synchronisation per step", '["--ref-fault-slowdown", "400"]'),
        ("broken: typo in the launch flags", '["--ref-fault-slowdown", "400", "--no-such-flag"]'),
        ("draft config tweak", '["--ref-fault-slowdown", "400"]'),
    ]
    shas = []
    for message, extra in history:
        (repo / "profile.toml").write_text(PROFILE.format(extra=extra))
        with open(repo / "CHANGES", "a") as fh:
            fh.write(message + "\n")
        _git(repo, "add", "profile.toml", "CHANGES")
        _git(repo, "commit", "-q", "-m", message)
        shas.append(_git(repo, "rev-parse", "HEAD"))
    return repo, shas


def test_bisect_finds_the_commit_that_slowed_the_server(server_repo: tuple[Path, list[str]], tmp_path: Path) -> None:
    repo, shas = server_repo
    out = io.StringIO()
    env_before = dict(os.environ)
    outcome = bisect_commits(
        repo=repo, good=shas[0], bad=shas[-1], workdir=ROOT, memo=tmp_path / "memo", out=out, timeout_s=300,
        # the slowdown is six-fold, while a shared 2-core CPU swings +-25 % from one boot to the next:
        # a wide tolerance and alpha 0.05 let two or three rounds decide each step
        rounds=2, tolerance=0.5, alpha=0.05,
        pytest_args=["-m", "perf", str(ROOT / "tests" / "perf" / "test_throughput.py"), "-k", "drift and output",
                     "-p", "no:cacheprovider", "--specwatch-profiles={checkout}/profile.toml",
                     f"--specwatch-report-dir={tmp_path / 'reports'}", "--specwatch-runs=3", "--specwatch-warmup=1"],
    )
    text = out.getvalue()
    assert outcome.first_bad == shas[2], text
    assert outcome.last_good == shas[1], text
    verdicts = {m.ident: m.verdict for m in outcome.visited}
    assert verdicts.get(shas[1]) == "good" and verdicts.get(shas[-1]) == "bad", text
    assert " round 2 good: eagle3/" in text, text  # the good revision is measured inside the steps
    assert _git(repo, "rev-parse", "HEAD") == shas[-1] and _git(repo, "status", "--porcelain") == ""
    assert len(_git(repo, "worktree", "list").splitlines()) == 1  # the good worktree is gone
    assert dict(os.environ) == env_before
    assert "engine: extra synchronisation per step" in text
