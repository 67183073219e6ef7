"""Bisection over a real temporary git repo of a tiny "server" whose measurements a test machine scripts.

The temp repo carries its own ``conftest.py`` that defines ``--specwatch-results`` and
``--specwatch-history`` (in real use the specwatch plugin provides them), and a test that writes a
results file: the server's cost (its ``WORK * ROUNDS``, so a commit that does 10x the work is 10x
slower) times a machine factor, an expression of n (the measurement's number in the whole test)
taken from ``BISECT_TEST_MACHINE``. So the numbers are deterministic, and a test can make the machine
drift during a bisection. Every step is an A/B of the step's commit against a worktree of the good
one in alternating rounds; the verdict comes from the results files, not pytest's exit code.
"""

from __future__ import annotations

import io
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from specwatch.errors import EXIT_INFRA, EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, InfraError, UsageError
from specwatch.revisions import bisection, gitbisect, rounds
from specwatch.revisions import patches as patch_bisect
from specwatch.revisions.git import worktree
from specwatch.revisions.memo import BAD, GOOD, MEMO_VERSION, SKIP, Memo, RevisionRun, whole_rounds
from specwatch.revisions.rounds import DEFAULT_METRICS, REGRESSION, RoundSettings, Side
from specwatch.revisions.step import MeasureConfig, classify, measure, samples_of
from specwatch.store.result import Result, ResultSet

SERVER = '''"""A tiny server whose cost depends on its work."""

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
    parser.addoption("--specwatch-history", default=None)


@pytest.fixture
def options(request):
    return request.config.getoption("--specwatch-results"), request.config.getoption("--specwatch-reference")
'''

TEST_SPEED = '''import json
import os

import server


def test_handle_speed(options):
    results, reference = options
    server.handle()  # the real work: a server that does not import fails here
    counter = os.environ.get("BISECT_TEST_COUNTER")
    n = 0
    if counter:
        if os.path.exists(counter):
            with open(counter) as fh:
                n = len(fh.read().splitlines())
        with open(counter, "a") as fh:
            fh.write("measured\\n")
    machine = eval(os.environ.get("BISECT_TEST_MACHINE", "1.0"), {"n": n})
    cost = server.WORK * server.ROUNDS * 1e-7 * machine
    samples = [cost * (1 + 0.001 * j) for j in (-2, -1, 0, 1, 2)]
    doc = {"version": 1, "created": "2026-01-01T00:00:00+00:00", "commit": os.environ.get("SPECWATCH_COMMIT"),
           "machine": {"machine_class": "test"},
           "results": [{"key": "tiny/handle/seconds", "profile": "tiny", "workload": "handle",
                        "metric": "seconds", "unit": "s", "higher_is_better": False,
                        "samples": samples, "extra": {}}]}
    with open(results, "w") as fh:
        json.dump(doc, fh, indent=2, sort_keys=True)
    assert reference is None, "a bisect step must not compare against a single reference run"
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
# a quiet machine: +-1 % from one measurement to the next
QUIET = "1 + 0.01 * ((n * 37) % 7 - 3) / 3"
METRICS = ("seconds",)


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
    monkeypatch.setenv("BISECT_TEST_MACHINE", QUIET)
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
BUILD_SETUP = f"{sys.executable} build.py"


def median_of(results: str | Path | None) -> float:
    (samples, _, _), = samples_of(results).values()
    return statistics.median(samples)


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
    kwargs: dict[str, Any] = dict(repo=repo, good=shas[0], bad="main", pytest_args=PYTEST_ARGS, setup=BUILD_SETUP,
                                  memo=memo, tolerance=0.25, metrics=METRICS)
    outcome = gitbisect.bisect_commits(out=out, **kwargs)
    text = out.getvalue()
    assert outcome.first_bad == shas[6], text
    assert outcome.last_good == shas[5], text
    verdicts = {m.ident: m.verdict for m in outcome.visited}
    assert verdicts.get(shas[3]) == SKIP, text  # the broken build is visited and skipped
    assert all(verdicts.get(s) != BAD for s in shas[:6]), text
    # every step is an A/B in alternating rounds: the step first, then the good worktree, then reversed
    assert f"{shas[-1][:10]} round 1 step: tiny/handle/seconds" in text, text
    assert f"{shas[-1][:10]} round 2 good: tiny/handle/seconds" in text, text
    store = Memo(outcome.verdicts_dir)  # the verdicts
    assert outcome.rounds_dir is not None and outcome.verdicts_dir.parent == outcome.rounds_dir
    rounds_memo = Memo(outcome.rounds_dir)  # the rounds' measurements, whatever the judging settings
    for side in ("step", "good"):
        for r in (1, 2):
            round_entry = rounds_memo.get(f"{shas[6]}-{side}-r{r}")
            assert round_entry is not None, (side, r)
            assert round_entry.results is not None
    # the good side ran in a worktree of the good commit, the step in the repository itself
    assert (Path(rounds_memo.get(f"{shas[6]}-good-r1").results or "").exists())
    log_good = rounds_memo.log_path(f"{shas[6]}-good-r1").read_text()
    assert "specwatch-bisect-" in log_good and f"(in {repo})" not in log_good
    assert f"(in {repo})" in rounds_memo.log_path(f"{shas[6]}-step-r1").read_text()
    assert not any("--specwatch-reference" in p.read_text() for p in outcome.rounds_dir.glob("*.log"))
    # the checkout and branch are restored, no bisect and no worktree left behind
    assert git(repo, "symbolic-ref", "--short", "HEAD") == "main"
    assert git(repo, "rev-parse", "HEAD") == shas[-1]
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""
    assert not (repo / ".git" / "BISECT_START").exists()
    assert len(git(repo, "worktree", "list").splitlines()) == 1
    # the memoised results files are real specwatch results files
    result = pytest.importorskip("specwatch.store.result")
    bad_entry = store.get(shas[6])
    assert bad_entry is not None
    assert bad_entry.results is not None
    assert result.ResultSet.load(bad_entry.results).keys() == ["tiny/handle/seconds"]
    (key,) = bad_entry.detail["keys"]
    assert key["verdict"] == REGRESSION
    assert key["ratio"] == pytest.approx(10, rel=0.05)
    first = n_measured(counter)
    assert first == outcome.measured_now - 1  # the skipped commit's setup failed: it never reached pytest
    # the report names the commit and the first bad step's A/B
    report_out = io.StringIO()
    assert bisection.report(outcome, report_out) == EXIT_REGRESSION
    report = report_out.getvalue()
    assert f"first bad: {shas[6][:10]} 'checksum every reply'" in report
    assert f"last good: {shas[5][:10]} 'docs: more'" in report
    assert "tiny/handle/seconds" in report
    assert "regression" in report
    assert "skipped (not blamed)" in report
    # second run: every step's verdict comes from the memo
    again = gitbisect.bisect_commits(out=io.StringIO(), **kwargs)
    assert again.first_bad == shas[6]
    assert again.measured_now == 0
    assert n_measured(counter) == first
    assert git(repo, "symbolic-ref", "--short", "HEAD") == "main"
    # other judging settings judge the same rounds again: new verdicts, no measurement made again
    wider = io.StringIO()
    rejudged = gitbisect.bisect_commits(out=wider, **{**kwargs, "tolerance": 0.5})
    assert rejudged.first_bad == shas[6], wider.getvalue()
    assert rejudged.verdicts_dir != outcome.verdicts_dir and rejudged.rounds_dir == outcome.rounds_dir
    # ... but the broken commit, whose failed setup is tried again (no pytest run: the counter stays)
    assert rejudged.measured_now == 1 and n_measured(counter) == first, wider.getvalue()
    assert "kept from the memo" in wider.getvalue()


def test_a_drifting_machine_does_not_blame_an_early_commit(repo: Path, counter: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine was quiet when the good revision was first measured, then 20-37 % slower.

    Against that one reference run (the old scheme) every step reads 20 % or more slower, so it
    blamed the first commit after good; the A/B re-measures good inside every step, drifting with
    it, and finds the commit that made the server 50 % slower (at the default tolerance of a class
    without round history: 27 %).
    """
    monkeypatch.setenv("BISECT_TEST_MACHINE", "1.0 if n == 0 else min(1.37, 1.2 + 0.004 * n)")
    shas = [commit(repo, "initial server", base_files())]
    for i in range(1, 9):
        files = {"server.py": SERVER.replace("WORK = 40000", "WORK = 60000")} if i == 6 else {"README": f"{i}\n"}
        shas.append(commit(repo, f"commit {i}", files))
    # what the old scheme did first: measure the good revision once (n == 0, the quiet machine)
    with worktree(repo, shas[0]) as tree:
        cfg = MeasureConfig(pytest_args=tuple(PYTEST_ARGS))
        old_ref = measure(tree, cfg, Memo(tmp_path / "old"), "reference", "good", reference=None,
                                 commit=shas[0], session="old")
    reference = median_of(old_ref.results)
    out = io.StringIO()
    outcome = gitbisect.bisect_commits(repo=repo, good=shas[0], bad="main", pytest_args=PYTEST_ARGS,
                                    memo=tmp_path / "memo", out=out, metrics=METRICS)  # default tolerance
    text = out.getvalue()
    assert outcome.first_bad == shas[6], text
    assert outcome.last_good == shas[5], text
    store = Memo(outcome.rounds_dir or outcome.verdicts_dir)
    early = [m for m in outcome.visited if m.ident in shas[1:6]]
    assert early, text
    for m in early:
        assert m.verdict == GOOD, text
        # ... though the old scheme would have called it bad: 20 % or more slower than the reference
        assert median_of(store.get(f"{m.ident}-step-r1").results) > 1.19 * reference  # type: ignore[union-attr]
    assert bisection.report(outcome, io.StringIO()) == EXIT_REGRESSION


def fake_measure(numbers: dict[str, list[float]], calls: list[str]) -> Any:
    """A stand-in for the measurement the round loop makes: side name -> the medians its measurements give, in turn."""

    def measure(checkout: Path, cfg: MeasureConfig, memo: Memo, ident: str, label: str, *,
                reference: Path | None, commit: str, session: str) -> RevisionRun:
        assert reference is None
        side = ident.rsplit("-", 2)[1]
        value = numbers[side].pop(0)
        calls.append(ident)
        results = memo.results_path(ident)
        ResultSet(results=[Result.make("p", "w", "output_tok_s", unit="tok/s", higher_is_better=True,
                                       samples=[value] * 3)]).save(results)
        entry = RevisionRun(ident, label, GOOD, "ok", 0, str(results), 1.0, "now", session)
        memo.put(entry)
        return entry

    return measure


def sides(tmp_path: Path) -> tuple[Side, Side]:
    return (Side("good", "good rev", tmp_path, "g" * 40, "g"), Side("step", "step rev", tmp_path, "s" * 40, "s"))


def test_an_unsure_step_gets_more_rounds_then_is_skipped_never_bad(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    # the step's rounds swing between 20 % slower and 20 % faster than good's: no verdict at 5 %
    numbers = {"good": [100.0] * 4, "step": [80.0, 120.0, 82.0, 118.0]}
    monkeypatch.setattr(rounds, "measure", fake_measure(numbers, calls))
    good, step = sides(tmp_path)
    out = io.StringIO()
    memo = Memo(tmp_path / "memo")
    entry = bisection.ab_step(good, step, ident="s" * 40, label="step rev", cfg=MeasureConfig(()), memo=memo,
                              settings=bisection.step_settings(tolerance=0.05), session="x", out=out)
    text = out.getvalue()
    assert entry.verdict == SKIP, text
    assert "the noise exceeded the 5.0% tolerance after 4 rounds" in entry.reason
    assert "still open after 2 rounds" in text and "still open after 3 rounds" in text
    assert "the noise exceeded" in bisection.progress_line(entry)
    # alternating rounds, the step first; every measurement named by revision, side and round
    assert [c.split("-", 1)[1] for c in calls] == ["step-r1", "good-r1", "good-r2", "step-r2",
                                                  "step-r3", "good-r3", "good-r4", "step-r4"]
    assert memo.get("s" * 40) == entry  # the verdict is memoised under the revision
    assert entry.detail["unsure"] and entry.detail["rounds"] == 4


def test_a_clear_step_is_decided_in_the_first_rounds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good, step = sides(tmp_path)
    for step_numbers, verdict in (([60.0, 60.3], BAD), ([100.0, 100.02], GOOD)):
        calls: list[str] = []
        monkeypatch.setattr(rounds, "measure", fake_measure({"good": [100.0, 100.01], "step": step_numbers}, calls))
        entry = bisection.ab_step(good, step, ident="s" * 40, label="step rev", cfg=MeasureConfig(()),
                               memo=Memo(tmp_path / verdict), settings=bisection.step_settings(),
                               session="x", out=io.StringIO())
        assert entry.verdict == verdict, entry.reason
        assert len(calls) == 4  # two rounds, nothing more


def test_a_stopped_step_keeps_its_whole_rounds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A step stopped before its verdict (a device call's time limit, Ctrl-C) measures only what it lacks when the
    bisection runs again: its whole rounds come from the memo, a half-measured round is measured again."""
    good, step = sides(tmp_path)
    memo = Memo(tmp_path / "memo")
    calls: list[str] = []
    real = fake_measure({"good": [100.0, 100.01], "step": [60.0, 60.3]}, calls)

    def stopping(*args: Any, **kw: Any) -> RevisionRun:
        if len(calls) == 3:  # round 1 whole, round 2's first side measured
            raise KeyboardInterrupt
        return real(*args, **kw)

    monkeypatch.setattr(rounds, "measure", stopping)
    with pytest.raises(KeyboardInterrupt):
        bisection.ab_step(good, step, ident="s" * 40, label="step rev", cfg=MeasureConfig(()), memo=memo,
                          settings=bisection.step_settings(), session="x", out=io.StringIO())
    assert memo.get("s" * 40) is None  # no verdict
    def round_idents(r: int) -> list[str]:
        return [f"{'s' * 40}-good-r{r}", f"{'s' * 40}-step-r{r}"]

    assert whole_rounds(memo, round_idents) == 1
    results = memo.results_path(f"{'s' * 40}-good-r1")
    kept = results.read_text()
    results.write_text("{not json")  # a round whose results file cannot be read is not kept
    assert whole_rounds(memo, round_idents) == 0
    results.write_text(kept)
    again: list[str] = []
    monkeypatch.setattr(rounds, "measure", fake_measure({"good": [100.01], "step": [60.3]}, again))
    out = io.StringIO()
    entry = bisection.ab_step(good, step, ident="s" * 40, label="step rev", cfg=MeasureConfig(()), memo=memo,
                              settings=bisection.step_settings(), session="y", out=out)
    assert entry.verdict == BAD, entry.reason
    assert [c.split("-", 1)[1] for c in again] == ["good-r2", "step-r2"]  # round 1 kept, round 2 again
    assert "round(s) 1-1 kept from the memo" in out.getvalue()
    assert "kept from the stopped run" in out.getvalue()  # the round's progress line says where it came from


def test_a_step_whose_good_side_fails_is_skipped_and_not_reused(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    good, step = sides(tmp_path)
    real = fake_measure({"good": [], "step": [100.0]}, [])

    def measure(checkout: Path, cfg: MeasureConfig, memo: Memo, ident: str, label: str,
                **kw: Any) -> RevisionRun:
        if "-good-" in ident:
            entry = RevisionRun(ident, label, SKIP, "setup failed (exit 1)", None, None, 0.1, "now", "x")
            memo.put(entry)
            return entry
        return real(checkout, cfg, memo, ident, label, **kw)

    monkeypatch.setattr(rounds, "measure", measure)
    memo = Memo(tmp_path / "memo")
    settings = bisection.step_settings()
    entry = bisection.ab_step(good, step, ident="s" * 40, label="step rev", cfg=MeasureConfig(()), memo=memo,
                           settings=settings, session="x", out=io.StringIO())
    assert entry.verdict == SKIP
    assert "the good side could not be measured: setup failed" in entry.reason
    assert not bisection.reusable(memo.get("s" * 40))  # not the revision's fault: measured again next time
    with pytest.raises(InfraError, match="cannot measure the good revision"):
        bisection.check_bad_end(entry, memo, settings, "good rev")


def test_step_settings_are_validated() -> None:
    assert bisection.step_settings() == RoundSettings(2, 4, None, DEFAULT_METRICS, 0.01)  # each key's own tolerance
    assert bisection.step_settings(rounds=6).max_rounds == 6
    for bad in (dict(rounds=1), dict(rounds=3, max_rounds=2), dict(tolerance=0), dict(alpha=1.5)):
        with pytest.raises(UsageError):
            bisection.step_settings(**bad)  # type: ignore[arg-type]
    s = bisection.step_settings(tolerance=0.1, metrics=["seconds"])
    assert RoundSettings.from_json(json.loads(json.dumps(s.to_json()))) == s


def test_bisect_refuses_a_dirty_tree_and_restores_on_error(repo: Path, counter: Path, tmp_path: Path) -> None:
    good = commit(repo, "initial server", base_files())
    commit(repo, "slow", {"server.py": SLOW})
    (repo / "server.py").write_text("# local edit\n")
    err = io.StringIO()
    sys_stderr, sys.stderr = sys.stderr, err
    try:
        rc = gitbisect.command(repo=repo, good=good, bad="main", pytest_args=PYTEST_ARGS, memo=tmp_path / "m")
    finally:
        sys.stderr = sys_stderr
    assert rc == EXIT_USAGE
    assert "uncommitted changes" in err.getvalue()
    assert "server.py" in err.getvalue()
    git(repo, "checkout", "--", "server.py")
    # nothing measurable (pytest collects nothing) is an infrastructure error, and the original
    # branch is restored anyway
    rc = gitbisect.command(repo=repo, good=good, bad="main", pytest_args=["-q", "no_such_test.py"],
                           memo=tmp_path / "m", out=io.StringIO(), metrics=METRICS)
    assert rc == EXIT_INFRA
    assert git(repo, "symbolic-ref", "--short", "HEAD") == "main"
    # what a `kill -9` of a bisection leaves: git's bisect in progress on a detached HEAD; one line says how out
    git(repo, "checkout", "-q", "--detach", "main")
    git(repo, "bisect", "start", "main", good)
    with pytest.raises(UsageError, match=r"already in progress .* `git bisect reset` .* `git checkout` your branch"):
        gitbisect.bisect_commits(repo=repo, good=good, bad="main", pytest_args=PYTEST_ARGS, memo=tmp_path / "m")
    git(repo, "bisect", "reset")


def test_a_good_revision_that_cannot_be_measured_is_an_infrastructure_error(repo: Path, counter: Path,
                                                                            tmp_path: Path) -> None:
    good = commit(repo, "initial server, build broken", {**base_files(), "extra.py": BROKEN})
    commit(repo, "fix the build, slow", {"extra.py": FIXED, "server.py": SLOW})
    err = io.StringIO()
    sys_stderr, sys.stderr = sys.stderr, err
    try:
        rc = gitbisect.command(repo=repo, good=good, bad="main", pytest_args=PYTEST_ARGS, setup=BUILD_SETUP,
                               memo=tmp_path / "m", out=io.StringIO(), metrics=METRICS)
    finally:
        sys.stderr = sys_stderr
    assert rc == EXIT_INFRA, err.getvalue()
    assert "cannot measure the good revision" in err.getvalue()
    assert "setup failed" in err.getvalue()
    assert git(repo, "symbolic-ref", "--short", "HEAD") == "main"
    assert len(git(repo, "worktree", "list").splitlines()) == 1


def test_bad_end_that_does_not_regress_is_not_bisected(repo: Path, counter: Path, tmp_path: Path) -> None:
    good = commit(repo, "initial server", base_files())
    commit(repo, "docs", {"README": "x\n"})
    out = io.StringIO()
    outcome = gitbisect.bisect_commits(repo=repo, good=good, bad="main", pytest_args=PYTEST_ARGS,
                                    memo=tmp_path / "m", out=out, tolerance=0.25, metrics=METRICS)
    assert outcome.first_bad is None, out.getvalue()
    assert outcome.candidates == []
    assert outcome.visited[0].verdict == GOOD, out.getvalue()
    report_out = io.StringIO()
    assert bisection.report(outcome, report_out) == EXIT_OK
    assert "no regression to bisect" in report_out.getvalue()
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
    # pick up through a path while it runs in the worktrees
    kwargs: dict[str, Any] = dict(repo=repo, base=base, patches=patches, pytest_args=PYTEST_ARGS, setup=BUILD_SETUP,
                                  tolerance=0.25, metrics=METRICS)
    outcome = patch_bisect.bisect_patches(out=out, **kwargs)
    assert outcome.verdicts_dir.parent == repo / ".git" / "specwatch" / "bisect"
    text = out.getvalue()
    assert outcome.first_bad is not None, text
    assert patch_bisect.patch_index(outcome.first_bad) == 4, text
    assert outcome.last_good is not None
    assert patch_bisect.patch_index(outcome.last_good) == 3
    by_k = {patch_bisect.patch_index(m.ident): m.verdict for m in outcome.visited}
    assert by_k == {4: BAD, 2: SKIP, 1: GOOD, 3: GOOD}, text
    assert "round 2 base: tiny/handle/seconds" in text, text  # bare base re-measured in every step
    # the user's checkout was never touched; the temporary worktrees are gone
    assert git(repo, "rev-parse", "HEAD") == head_before
    assert git(repo, "symbolic-ref", "--short", "HEAD") == "main"
    assert len(git(repo, "worktree", "list").splitlines()) == 1
    first = n_measured(counter)
    assert first == outcome.measured_now - 1  # prefix 2 failed its setup before pytest
    assert first >= 12  # 4, 1 and 3: at least two rounds of both sides each
    # the report names the patch file
    report_out = io.StringIO()
    rc = patch_bisect.command(out=report_out, **kwargs)
    assert rc == EXIT_REGRESSION
    assert "+4/4 0004-checksum-every-reply.patch" in report_out.getvalue()
    assert n_measured(counter) == first  # all from the memo


def test_classify_never_blames_what_could_not_be_measured() -> None:
    assert classify(0, True) == (GOOD, "all gates passed")
    assert classify(1, True, failures=1)[0] == BAD
    assert classify(1, True)[0] == BAD  # a gate set at session end, no failed test
    assert classify(1, True, failures=0, errors=2)[0] == SKIP  # server did not boot
    assert classify(1, False, failures=1)[0] == SKIP  # no results file
    for rc in (2, 3, 4, 5):
        assert classify(rc, True)[0] == SKIP
    assert classify(None, True)[0] == SKIP  # timeout
    # the reason says what ran: a clean run whose gates all skipped is a measurement, not "all passed"
    assert classify(0, True, skipped=3, tests=3) == (GOOD, "measured; every gate was skipped (3 skipped, none ran)")
    assert classify(0, True, skipped=1, tests=3) == (GOOD, "measured; 2 gate(s) passed, 1 skipped")
    assert classify(0, True, tests=2) == (GOOD, "all 2 gate(s) passed")


SKIPPING_TEST = """import json
import pytest


def test_measures_then_skips(options):
    results, _ = options
    doc = {"version": 1, "created": "2026-01-01T00:00:00+00:00", "commit": None, "machine": {},
           "results": [{"key": "p/w/output_tok_s", "profile": "p", "workload": "w", "metric": "output_tok_s",
                        "unit": "tok/s", "higher_is_better": True, "samples": [1.0, 1.1], "extra": {}}]}
    with open(results, "w") as fh:
        json.dump(doc, fh)
    pytest.skip("no baseline for this machine")


def test_another_gate():
    pytest.skip("not on this profile")
"""


def test_the_step_line_says_every_gate_was_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24: the memo's step line said 'good (all gates passed)' when every gate had skipped."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "conftest.py").write_text(CONFTEST)
    (tree / "test_skip.py").write_text(SKIPPING_TEST)
    (tree / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider -p no:specwatch\n")
    memo = Memo(tmp_path / "memo")
    entry = measure(tree, MeasureConfig(pytest_args=("-q", "test_skip.py")), memo, "m", "tree", reference=None,
                    commit="c", session="s")
    assert entry.verdict == GOOD, memo.log_path("m").read_text()
    assert entry.reason == "measured; every gate was skipped (2 skipped, none ran)"
    assert "[specwatch] verdict: good (measured; every gate was skipped (2 skipped, none ran))" in (
        memo.log_path("m").read_text())


def test_cli_arguments_split_at_double_dash() -> None:
    from specwatch.cli import build_parser
    from specwatch.cli.bisect import split_pytest_args, step_options

    parser = build_parser()
    args = parser.parse_args(["bisect-patches", "--repo", "r", "--base", "b", "--rounds", "3", "a.patch", "b.patch",
                              "--", "-m", "perf", "--x"])
    assert split_pytest_args(args.patches_and_args) == (["a.patch", "b.patch"], ["-m", "perf", "--x"])
    assert step_options(args) == dict(rounds=3, max_rounds=None, tolerance=None, metrics=None, alpha=0.01,
                                      round_history="baselines", spending="pocock")
    args = parser.parse_args(["bisect", "--repo", "r", "--good", "g", "--bad", "b", "--max-rounds", "6", "--tolerance",
                              "0.1", "--metric", "decode_tok_s", "--", "-m", "perf"])
    assert split_pytest_args(args.pytest_args) == ([], ["-m", "perf"])
    assert step_options(args) == dict(rounds=2, max_rounds=6, tolerance=0.1, metrics=["decode_tok_s"], alpha=0.01,
                                      round_history="baselines", spending="pocock")


def test_memo_entries_are_sorted_versioned_json(tmp_path: Path) -> None:
    memo = Memo(tmp_path)
    entry = RevisionRun(ident="a" * 40, label="x", verdict=GOOD, reason="r", pytest_rc=0,
                               results=None, seconds=1.0, measured="2026-01-01T00:00:00+00:00", session="s",
                               detail={"kind": "step", "rounds": 2})
    memo.put(entry)
    data = json.loads((tmp_path / f"{'a' * 40}.entry.json").read_text())
    assert data["version"] == MEMO_VERSION
    assert list(data) == sorted(data)
    got = memo.get("a" * 40)
    assert got is not None
    assert got.cached
    assert got.verdict == GOOD
    assert got.detail == {"kind": "step", "rounds": 2}
    # an entry of the single-reference scheme (version 1) is not reused
    (tmp_path / "old.verdict.json").write_text(json.dumps({**data, "ident": "old", "version": 1}))
    assert memo.get("old") is None


def test_arguments_naming_the_repository_are_warned_about(tmp_path: Path) -> None:
    out = io.StringIO()
    cfg = MeasureConfig(pytest_args=(f"--specwatch-profiles={tmp_path}/profile.toml", "-q"))
    bisection.warn_repo_paths(tmp_path, cfg, out)
    assert "write {checkout}" in out.getvalue()
    quiet = io.StringIO()
    bisection.warn_repo_paths(tmp_path, MeasureConfig(pytest_args=("--specwatch-profiles={checkout}/p.toml",)),
                            quiet)
    assert quiet.getvalue() == ""
    side = Side("good", "g", tmp_path / "tree", "g" * 40, "g")
    got = rounds.side_config(MeasureConfig(("--p={checkout}/p.toml",), setup="cd {checkout}"), side,
                              tmp_path / "h.sqlite")
    assert got.pytest_args == (f"--p={tmp_path}/tree/p.toml", f"--specwatch-history={tmp_path}/h.sqlite")
    assert got.setup == f"cd {tmp_path}/tree"


def test_a_step_pools_the_machine_class_round_spread_and_says_so(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Rounds of a 2 % slowdown against a 1 % tolerance: never settled at the default round spread
    (15 %), bad at the first look with the round spread of earlier A/B runs of the machine class that
    the results files record."""
    from specwatch.store.roundspread import RoundSpread

    def measure(checkout: Path, cfg: MeasureConfig, memo: Memo, ident: str, label: str, **kw: Any) -> RevisionRun:
        side = ident.rsplit("-", 2)[1]
        value = numbers[side].pop(0)
        results = memo.results_path(ident)
        ResultSet(results=[Result.make("p", "w", "output_tok_s", unit="tok/s", higher_is_better=True,
                                       samples=[value] * 3)], machine={"machine_class": "h200x1"}).save(results)
        entry = RevisionRun(ident, label, GOOD, "ok", 0, str(results), 1.0, "now", "x")
        memo.put(entry)
        return entry

    monkeypatch.setattr(rounds, "measure", measure)
    good, step = sides(tmp_path)
    history = tmp_path / "baselines"
    spread = RoundSpread.for_class(history, "h200x1")
    spread.add("output_tok_s", [1.0, 1.004, 0.996, 1.002], "earlier A/A", "p/w/output_tok_s")
    spread.add("output_tok_s", [0.98, 0.975, 0.985], "earlier slowdown", "p/w/output_tok_s")
    spread.add("output_tok_s", [1.0, 1.3, 0.7], "another key's: never borrowed", "q/w/output_tok_s")
    spread.save()
    verdicts = {}
    for history_dir in (None, history):
        numbers = {"good": [100.0, 100.2, 100.1, 99.9], "step": [98.1, 97.9, 98.2, 97.8]}
        out = io.StringIO()
        entry = bisection.ab_step(good, step, ident="s" * 40, label="step rev", cfg=MeasureConfig(()),
                                  memo=Memo(tmp_path / f"memo-{history_dir is None}"),
                                  settings=bisection.step_settings(tolerance=0.01, round_history=history_dir),
                                  session="x", out=out)
        verdicts[history_dir is not None] = (entry, out.getvalue())
    alone, pooled = verdicts[False], verdicts[True]
    assert alone[0].verdict == SKIP and alone[0].detail["rounds"] == 4, alone[1]
    assert "still open after 2 rounds" in alone[1] and "at the default round spread" in alone[1]
    assert pooled[0].verdict == BAD and pooled[0].detail["rounds"] == 2, pooled[1]
    assert ("p/w/output_tok_s: round spread 0.42% over 5 df from 2 earlier A/B run(s) of this key on h200x1"
            in pooled[1])
    assert "a slowdown of" in pooled[1] and "would have been caught 19 times in 20" in pooled[1]
    assert "pooled with 0.4% over 5 df" in pooled[0].detail["keys"][0]["message"]
    assert pooled[0].detail["keys"][0]["decided_at"] == 2


def test_a_round_skips_the_yardstick_unless_the_user_asks(tmp_path: Path) -> None:
    from specwatch.revisions.step import step_environment

    env = step_environment("abc123", tmp_path, {"PATH": "/bin", "GITHUB_STEP_SUMMARY": "/s"})
    assert env["SPECWATCH_YARDSTICK"] == "off", "both sides of a round share a machine: no yardstick needed"
    assert "GITHUB_STEP_SUMMARY" not in env, "a round must not write the user's step summary"
    assert env["SPECWATCH_COMMIT"] == "abc123" and env["SPECWATCH_BISECT_CHECKOUT"] == str(tmp_path)
    assert env["PATH"] == "/bin"
    kept = step_environment("abc123", tmp_path, {"SPECWATCH_YARDSTICK": "on"})
    assert kept["SPECWATCH_YARDSTICK"] == "on", "a value the user set wins"


def test_a_memo_written_by_an_earlier_version_still_reads(tmp_path: Path) -> None:
    """Entries were ``<ident>.verdict.json`` before they were ``<ident>.entry.json``: a memo kept from then (the
    validation page's bisect memos are) is read, and a new entry is written under the new name."""
    memo = Memo(tmp_path)
    old = RevisionRun(ident="b" * 40, label="x", verdict=GOOD, reason="r", pytest_rc=0, results=None, seconds=1.0,
                      measured="2026-01-01T00:00:00+00:00", session="s")
    (tmp_path / f"{'b' * 40}.verdict.json").write_text(json.dumps(old.to_json()))
    got = memo.get("b" * 40)
    assert got is not None and got.verdict == GOOD
    assert [m.ident for m in memo.entries()] == ["b" * 40]
    memo.put(old)
    assert (tmp_path / f"{'b' * 40}.entry.json").is_file()
    assert [m.ident for m in memo.entries()] == ["b" * 40]  # one entry, whichever files hold it
