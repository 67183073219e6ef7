"""Bisection over a real temporary git repo of a tiny "server" with a real slowdown.

The temp repo carries its own ``conftest.py`` that defines ``--specwatch-results`` and
``--specwatch-reference`` (in real use the specwatch plugin provides them): the bisect driver only
depends on the pytest exit code and the results file, so this exercises it end to end without a
server. One commit does 10x the work (the regression), one commit breaks the build step.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specwatch import bisect
from specwatch.errors import EXIT_OK, EXIT_REGRESSION, EXIT_USAGE

SERVER = '''"""A tiny server whose cost depends on real work."""

WORK = 40000
ROUNDS = 1


def handle() -> int:
    total = 0
    for _ in range(ROUNDS):
        for i in range(WORK):
            total += i * i
    return total
'''

CONFTEST = '''"""In real use the specwatch plugin defines these options; here the test repo does."""

import pytest


def pytest_addoption(parser):
    parser.addoption("--specwatch-results", default=None)
    parser.addoption("--specwatch-reference", default=None)


@pytest.fixture
def options(request):
    return request.config.getoption("--specwatch-results"), request.config.getoption("--specwatch-reference")
'''

TEST_SPEED = '''import json
import os
import statistics
import time

import server


def test_handle_speed(options):
    results, reference = options
    samples = []
    for _ in range(9):
        t0 = time.perf_counter()
        server.handle()
        samples.append(time.perf_counter() - t0)
    counter = os.environ.get("BISECT_TEST_COUNTER")
    if counter:
        with open(counter, "a") as fh:
            fh.write("measured\\n")
    doc = {"version": 1, "created": "2026-01-01T00:00:00+00:00", "commit": os.environ.get("SPECWATCH_COMMIT"),
           "machine": {"machine_class": "test"},
           "results": [{"key": "tiny/handle/seconds", "profile": "tiny", "workload": "handle",
                        "metric": "seconds", "unit": "s", "higher_is_better": False,
                        "samples": samples, "extra": {}}]}
    with open(results, "w") as fh:
        json.dump(doc, fh, indent=2, sort_keys=True)
    if reference:
        ref = json.load(open(reference))["results"][0]["samples"]
        # min is robust to load spikes; the real slowdown is 10x, the gate 3x
        assert min(samples) < 3 * min(ref), f"{statistics.median(samples)} vs {statistics.median(ref)}"
'''

BUILD = '''"""The build step: every module must compile."""
import compileall
import sys

sys.exit(0 if compileall.compile_dir(".", quiet=1, force=True) else 1)
'''

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def commit(repo: Path, message: str, files: dict[str, str]) -> str:
    for name, text in files.items():
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


SLOW = SERVER.replace("ROUNDS = 1", "ROUNDS = 10  # recompute for a checksum")
BROKEN = "def broken(:\n"
FIXED = "def fine():\n    return 1\n"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "server"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / ".gitignore").write_text("__pycache__/\n")
    return path


@pytest.fixture
def counter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "counter.txt"
    monkeypatch.setenv("BISECT_TEST_COUNTER", str(path))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # faster steps; junitxml is built in
    return path


def base_files() -> dict[str, str]:
    return {
        "server.py": SERVER,
        "conftest.py": CONFTEST,
        "test_speed.py": TEST_SPEED,
        "build.py": BUILD,
        "extra.py": FIXED,
        "pytest.ini": "[pytest]\naddopts = -p no:cacheprovider -p no:specwatch\n",
    }


def n_measured(counter: Path) -> int:
    return len(counter.read_text().splitlines()) if counter.exists() else 0


PYTEST_ARGS = ["-q", "test_speed.py"]


def test_bisect_names_the_slow_commit_skips_the_broken_one_and_memoises(repo: Path, counter: Path,
                                                                         tmp_path: Path) -> None:
    shas = [commit(repo, "initial server", base_files())]
    shas.append(commit(repo, "docs: readme", {"README": "tiny\n"}))
    shas.append(commit(repo, "refactor: comment", {"server.py": SERVER.replace('"""A', '"""Our')}))
    shas.append(commit(repo, "break the build", {"extra.py": BROKEN}))  # git's first midpoint
    shas.append(commit(repo, "fix the build", {"extra.py": FIXED}))
    shas.append(commit(repo, "docs: more", {"README": "tiny server\n"}))
    shas.append(commit(repo, "checksum every reply", {"server.py": SLOW}))
    shas.append(commit(repo, "docs: changelog", {"CHANGELOG": "x\n"}))
    memo = tmp_path / "memo"
    out = io.StringIO()
    outcome = bisect.bisect_commits(repo=repo, good=shas[0], bad="main", pytest_args=PYTEST_ARGS,
                                    setup=f"{sys.executable} build.py", memo=memo, out=out)
    text = out.getvalue()
    assert outcome.first_bad == shas[6], text
    assert outcome.last_good == shas[5], text
    verdicts = {m.ident: m.verdict for m in outcome.visited}
    assert verdicts.get(shas[3]) == bisect.SKIP, text  # the broken build is visited and skipped
    assert all(verdicts.get(s) != bisect.BAD for s in shas[:6]), text
    # the checkout and branch are restored, no bisect left behind
    assert git(repo, "symbolic-ref", "--short", "HEAD") == "main"
    assert git(repo, "rev-parse", "HEAD") == shas[-1]
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""
    assert not (repo / ".git" / "BISECT_START").exists()
    # the memoised results files are real specwatch results files
    result = pytest.importorskip("specwatch.result")
    bad_entry = bisect.Memo(outcome.memo_dir).get(shas[6])
    assert bad_entry is not None
    assert bad_entry.results is not None
    assert result.ResultSet.load(bad_entry.results).keys() == ["tiny/handle/seconds"]
    first = n_measured(counter)
    assert first == outcome.measured_now - 1  # the skipped commit never reached pytest
    # the report names the commit and the neighbours' numbers
    report_out = io.StringIO()
    assert bisect.report(outcome, report_out) == EXIT_REGRESSION
    report = report_out.getvalue()
    assert f"first bad: {shas[6][:10]} 'checksum every reply'" in report
    assert f"last good: {shas[5][:10]} 'docs: more'" in report
    assert "tiny/handle/seconds" in report
    assert "skipped (not blamed)" in report
    # second run: everything comes from the memo
    again = bisect.bisect_commits(repo=repo, good=shas[0], bad="main", pytest_args=PYTEST_ARGS,
                                  setup=f"{sys.executable} build.py", memo=memo, out=io.StringIO())
    assert again.first_bad == shas[6]
    assert again.measured_now == 0
    assert n_measured(counter) == first
    assert git(repo, "symbolic-ref", "--short", "HEAD") == "main"


def test_bisect_refuses_a_dirty_tree_and_restores_on_error(repo: Path, counter: Path, tmp_path: Path) -> None:
    good = commit(repo, "initial server", base_files())
    commit(repo, "slow", {"server.py": SLOW})
    (repo / "server.py").write_text("# local edit\n")
    err = io.StringIO()
    sys_stderr, sys.stderr = sys.stderr, err
    try:
        rc = bisect.Bisect.run(repo=repo, good=good, bad="main", pytest_args=PYTEST_ARGS, memo=tmp_path / "m")
    finally:
        sys.stderr = sys_stderr
    assert rc == EXIT_USAGE
    assert "uncommitted changes" in err.getvalue()
    assert "server.py" in err.getvalue()
    git(repo, "checkout", "--", "server.py")
    # a reference that cannot be measured (pytest collects nothing) is an infrastructure error,
    # and the original branch is restored anyway
    rc = bisect.Bisect.run(repo=repo, good=good, bad="main", pytest_args=["-q", "no_such_test.py"],
                           memo=tmp_path / "m", out=io.StringIO())
    assert rc == 3
    assert git(repo, "symbolic-ref", "--short", "HEAD") == "main"


def test_bad_end_that_does_not_regress_is_not_bisected(repo: Path, counter: Path, tmp_path: Path) -> None:
    good = commit(repo, "initial server", base_files())
    commit(repo, "docs", {"README": "x\n"})
    out = io.StringIO()
    outcome = bisect.bisect_commits(repo=repo, good=good, bad="main", pytest_args=PYTEST_ARGS,
                                    memo=tmp_path / "m", out=out)
    assert outcome.first_bad is None
    assert outcome.candidates == []
    assert bisect.report(outcome, io.StringIO()) == EXIT_OK
    assert git(repo, "symbolic-ref", "--short", "HEAD") == "main"


def make_patches(repo: Path, tmp_path: Path) -> tuple[str, list[Path]]:
    base = commit(repo, "initial server", base_files())
    git(repo, "checkout", "-q", "-b", "work")
    commit(repo, "docs", {"README": "tiny\n"})
    commit(repo, "break the build", {"extra.py": BROKEN})
    commit(repo, "fix the build", {"extra.py": FIXED})
    commit(repo, "checksum every reply", {"server.py": SLOW})
    outdir = tmp_path / "patches"
    git(repo, "format-patch", "-q", "-o", str(outdir), f"{base}..work")
    git(repo, "checkout", "-q", "main")
    return base, sorted(outdir.glob("*.patch"))


def test_patch_bisection_names_the_first_bad_patch(repo: Path, counter: Path, tmp_path: Path) -> None:
    base, patches = make_patches(repo, tmp_path)
    assert len(patches) == 4
    head_before = git(repo, "rev-parse", "HEAD")
    out = io.StringIO()
    # default memo: <git-dir>/specwatch/bisect, inside the repo whose conftest.py pytest must not
    # pick up through the --specwatch-reference path while it runs in the worktree
    outcome = bisect.bisect_patches(repo=repo, base=base, patches=patches, pytest_args=PYTEST_ARGS,
                                    setup=f"{sys.executable} build.py", out=out)
    assert outcome.memo_dir.parent == repo / ".git" / "specwatch" / "bisect"
    text = out.getvalue()
    assert outcome.first_bad is not None, text
    assert bisect.patch_index(outcome.first_bad) == 4, text
    assert outcome.last_good is not None
    assert bisect.patch_index(outcome.last_good) == 3
    by_k = {bisect.patch_index(m.ident): m.verdict for m in outcome.visited}
    assert by_k == {4: bisect.BAD, 2: bisect.SKIP, 1: bisect.GOOD, 3: bisect.GOOD}, text
    # the user's checkout was never touched; the temporary worktrees are gone
    assert git(repo, "rev-parse", "HEAD") == head_before
    assert git(repo, "symbolic-ref", "--short", "HEAD") == "main"
    assert len(git(repo, "worktree", "list").splitlines()) == 1
    first = n_measured(counter)
    assert first == 4  # base, 4, 1, 3 (2 failed its setup before pytest)
    # the report names the patch file
    report_out = io.StringIO()
    rc = bisect.BisectPatches.run(repo=repo, base=base, patches=patches, pytest_args=PYTEST_ARGS,
                                  setup=f"{sys.executable} build.py", out=report_out)
    assert rc == EXIT_REGRESSION
    assert "+4/4 0004-checksum-every-reply.patch" in report_out.getvalue()
    assert n_measured(counter) == first  # all from the memo


def test_classify_never_blames_what_could_not_be_measured() -> None:
    assert bisect.classify(0, True) == (bisect.GOOD, "all gates passed")
    assert bisect.classify(1, True, failures=1)[0] == bisect.BAD
    assert bisect.classify(1, True)[0] == bisect.BAD  # a gate set at session end, no failed test
    assert bisect.classify(1, True, failures=0, errors=2)[0] == bisect.SKIP  # server did not boot
    assert bisect.classify(1, False, failures=1)[0] == bisect.SKIP  # no results file
    for rc in (2, 3, 4, 5):
        assert bisect.classify(rc, True)[0] == bisect.SKIP
    assert bisect.classify(None, True)[0] == bisect.SKIP  # timeout


def test_cli_arguments_split_at_double_dash() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    bisect.BisectPatches.add_arguments(parser)
    args = parser.parse_args(["--repo", "r", "--base", "b", "a.patch", "b.patch", "--", "-m", "perf", "--x"])
    assert bisect._split_pytest_args(args.patches_and_args) == (["a.patch", "b.patch"], ["-m", "perf", "--x"])
    parser = argparse.ArgumentParser()
    bisect.Bisect.add_arguments(parser)
    args = parser.parse_args(["--repo", "r", "--good", "g", "--bad", "b", "--", "-m", "perf"])
    assert bisect._split_pytest_args(args.pytest_args) == ([], ["-m", "perf"])


def test_memo_entries_are_sorted_versioned_json(tmp_path: Path) -> None:
    memo = bisect.Memo(tmp_path)
    entry = bisect.Measurement(ident="a" * 40, label="x", verdict=bisect.GOOD, reason="r", pytest_rc=0,
                               results=None, seconds=1.0, measured="2026-01-01T00:00:00+00:00", session="s")
    memo.put(entry)
    data = json.loads((tmp_path / f"{'a' * 40}.verdict.json").read_text())
    assert data["version"] == bisect.MEMO_VERSION
    assert list(data) == sorted(data)
    got = memo.get("a" * 40)
    assert got is not None
    assert got.cached
    assert got.verdict == bisect.GOOD
