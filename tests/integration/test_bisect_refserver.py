"""Bisection end to end on the real reference server: one of ten commits of a "server repo" makes it slower.

The repository under bisection holds the server's launch profile. Commit 7 slows the server from
OUTSIDE its code, as a real regression would: its profile puts fixtures/faults/slowdown (a
sitecustomize that busy-waits 1000 us after every attention call) on the server's PYTHONPATH, several
times slower; the reference server itself is unchanged. Commit 4, git's first midpoint, cannot boot (an
unknown launch flag) and is skipped, never blamed. Every bisect step is an A/B in alternating
rounds of the step's revision (checked out by `git bisect run`) against the good revision (a
worktree; `{checkout}` in the pytest arguments names the side's profile), under the defaults of
the machine class (a shared 2-core CPU records no round history: the documented default round
spread, and the tolerance its looks settle), issue 23's CPU target. Skipping a revision that
cannot build, and the memo, are covered in tests/unit/test_bisect.py.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from perfrun import PLAIN_CPU, SLOW, git, profile_history

from specwatch.revisions.gitbisect import bisect_commits

ROOT = Path(__file__).resolve().parents[2]
UNBOOTABLE = 'extra_args = ["--no-such-flag"]'


@pytest.fixture
def server_repo(tmp_path: Path) -> tuple[Path, list[str]]:
    repo = tmp_path / "server"
    history = [
        ("base server", ""),
        ("scheduler: tidy logging", ""),
        ("docs: launch notes", ""),
        ("refactor: profile comments", ""),
        ("broken: typo in the launch flags", UNBOOTABLE),
        ("fix the launch flags", ""),
        ("draft config tweak", ""),
        ("engine: one more pass per attention call", SLOW),
        ("docs: changelog", SLOW),
        ("scheduler: retry on abort", SLOW),
    ]
    return repo, profile_history(repo, PLAIN_CPU, history)


# nightly: 5-6 steps of 2-4 rounds each boot the server 20-40 times (5-15 min on 2 cores); the default run
# guards the same paths faster: tests/unit/test_bisect.py (git bisect run over a scripted server: the slow
# commit named, the broken one skipped, the memo) and tests/integration/test_ab_refserver.py (the A/B of
# every step, end to end on the reference server with the slowdown injected from outside)
@pytest.mark.nightly
def test_bisect_names_the_commit_that_slowed_the_server(server_repo: tuple[Path, list[str]], tmp_path: Path) -> None:
    repo, shas = server_repo
    out = io.StringIO()
    env_before = dict(os.environ)
    outcome = bisect_commits(
        repo=repo, good=shas[0], bad=shas[-1], workdir=ROOT, memo=tmp_path / "memo", out=out, timeout_s=300,
        round_history=str(ROOT / "baselines"),  # the command's default; this class has no round history
        pytest_args=["-m", "perf", str(ROOT / "tests" / "perf" / "test_throughput.py"), "-k", "drift and output",
                     "-p", "no:cacheprovider", "--specwatch-profiles={checkout}/profile.toml",
                     f"--specwatch-report-dir={tmp_path / 'reports'}", "--specwatch-runs=5", "--specwatch-warmup=1"],
    )
    text = out.getvalue()
    assert outcome.first_bad == shas[7], text
    assert outcome.last_good == shas[6], text
    verdicts = {m.ident: m.verdict for m in outcome.visited}
    assert verdicts.get(shas[-1]) == "bad", text  # the bad end is shown slower
    assert verdicts.get(shas[4]) == "skip", text  # the commit that cannot boot is skipped, not blamed
    assert all(verdicts.get(s) != "bad" for s in shas[:7]), text
    assert "the conservative default round spread 15%" in text
    assert " round 2 good: plain/" in text, text  # the good revision is measured inside the steps
    bad_end = next(m for m in outcome.visited if m.ident == shas[-1])
    assert bad_end.detail["rounds"] == 2, text  # a slowdown this large ends at the first look
    assert git(repo, "rev-parse", "HEAD") == shas[-1] and git(repo, "status", "--porcelain") == ""
    assert len(git(repo, "worktree", "list").splitlines()) == 1  # the good worktree is gone
    assert dict(os.environ) == env_before
    assert "engine: one more pass per attention call" in text
