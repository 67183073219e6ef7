"""A perf gate that silently did not compare is worse than one that fails.

A project of its own in a temporary folder (its pyproject.toml keeps baselines in ``stored/``) runs
`pytest -m perf` with the profile file OUTSIDE the project, given in the space form
(``--specwatch-profiles /elsewhere/p.toml``). pytest then takes ``/elsewhere`` as its rootdir and
does not read the project's ini file; specwatch must still resolve baselines, reports and history
from the project, say what happened, and never pass a drift test that compared against nothing.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROFILE = """
version = 1
[defaults]
engine = "reference"
model = "ref-tiny"
device = "cpu"
tolerance = 0.5
[[server]]
name = "plain"
env = "untuned"
"""
PYPROJECT = """
[tool.pytest.ini_options]
addopts = "-p no:cacheprovider"
specwatch_baseline_dir = "stored"
specwatch_history = "hist/history.sqlite"
specwatch_machine_class = "ci-cpu"
"""


USER_TEST = """
import pytest
from specwatch.run import gatekeeper

pytestmark = pytest.mark.perf


def test_my_own_drift_check(specwatch_session):
    outcome = gatekeeper.drift(specwatch_session, "plain", metric="decode_tok_s")
    assert not outcome.failed, outcome.message
"""


@pytest.fixture
def project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A fresh project per test (no baselines, no history), so each test passes alone and in any order."""
    tmp = tmp_path_factory.mktemp("silent")
    proj, elsewhere = tmp / "proj", tmp / "elsewhere"
    (proj / "tests").mkdir(parents=True)
    elsewhere.mkdir()
    (proj / "pyproject.toml").write_text(PYPROJECT)
    # the drift tests of test_throughput.py (the relative gates, the sweep and the prefix-reuse gate need two
    # servers, the speculation-health gates a speculative one)
    shutil.copytree(ROOT / "tests" / "perf", proj / "tests" / "perf",
                    ignore=shutil.ignore_patterns("test_gates.py", "test_sweep.py", "test_speculation_health.py",
                                                  "test_prefix_reuse.py"))
    (elsewhere / "p.toml").write_text(PROFILE)
    return proj, elsewhere / "p.toml"


def _run(proj: Path, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # no test path: the profile is the only path-like argument (`pytest -m perf --specwatch-profiles /x/p.toml`)
    cmd = [sys.executable, "-m", "pytest", "-m", "perf", "-q",
           "--specwatch-profiles", str(profile),  # the space form: pytest's rootdir becomes profile's folder
           "--specwatch-runs=4", "--specwatch-warmup=1", *args]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECWATCH_", "PYTEST_XDIST"))}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=proj, env=env)


def test_missing_baseline_is_loud_and_fails_when_required(project: tuple[Path, Path]) -> None:
    proj, profile = project
    out = _run(proj, profile, "--specwatch-require-baseline")
    text = out.stdout + out.stderr
    assert out.returncode == 1, text[-3000:]
    assert "specwatch uses the project" in text and str(proj) in text  # the rootdir guess, said plainly
    assert "MISSING BASELINE: 2 drift test(s) compared against nothing" in text
    assert "--specwatch-require-baseline" in text
    with sqlite3.connect(proj / "hist" / "history.sqlite") as db:  # a failing run is kept in the history too
        assert db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 1
    # nothing was written next to the profile file, where pytest's rootdir went
    assert sorted(p.name for p in profile.parent.iterdir()) == ["p.toml"]


def test_baselines_reports_and_history_go_to_the_project(project: tuple[Path, Path]) -> None:
    proj, profile = project
    out = _run(proj, profile, "--update-baselines")
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    assert (proj / "stored" / "ci-cpu" / "plain.json").is_file()
    assert (proj / "reports" / "results-latest.json").is_file()
    assert f"specwatch wrote {proj / 'reports' / 'results-latest.json'}" in out.stdout
    out = _run(proj, profile)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-3000:]
    # the drift tests compared; the floor (unset) and the context-length table (no speculative server) skip
    assert "2 passed, 2 skipped" in text, text[-3000:]
    assert "MISSING BASELINE" not in text
    with sqlite3.connect(proj / "hist" / "history.sqlite") as db:
        runs = db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    assert runs == 2  # every perf run of this project, the one that wrote the baselines included
    assert sorted(p.name for p in profile.parent.iterdir()) == ["p.toml"]
    # a user's own test calls a gate without the suite's helper fixture: its row still reaches the table
    (proj / "tests" / "perf" / "test_user.py").write_text(USER_TEST)
    out = _run(proj, profile, "tests/perf/test_user.py")
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    row = next(line for line in out.stdout.splitlines() if line.startswith("plain/single-stream/decode_tok_s"))
    assert row.split()[-1] != "new" and "±50%" in row, out.stdout[-3000:]  # judged against the baseline


def test_a_run_without_perf_tests_adds_no_history(project: tuple[Path, Path], tmp_path: Path) -> None:
    proj, _ = project
    (proj / "tests" / "test_plain.py").write_text("def test_nothing_measured():\n    assert 1 + 1 == 2\n")
    hist = tmp_path / "h.sqlite"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECWATCH_", "PYTEST_XDIST"))}
    out = subprocess.run([sys.executable, "-m", "pytest", "-m", "not perf", "tests/test_plain.py", "-q",
                          f"--specwatch-history={hist}"], capture_output=True, text=True, timeout=120, cwd=proj,
                         env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert not hist.exists()


@pytest.mark.parametrize(("content", "field"), [
    ("version = 1\n[[server]]\nname = '../../etc'\n", "server[0].name"),
    ("version = 1\n[defaults]\nextra_args = '--foo'\n[[server]]\nname = 'a'\n", "extra_args"),
    ("version = 1\n[[server]]\nname = 'a'\n[workload]\nruns = 0\n", "workload.runs"),
    (None, "does not exist"),
])
def test_a_broken_profile_is_a_usage_error_not_internalerror(tmp_path: Path, content: str | None,
                                                             field: str) -> None:
    profile = tmp_path / "p.toml"
    if content is not None:
        profile.write_text(content)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECWATCH_", "PYTEST_XDIST"))}
    out = subprocess.run([sys.executable, "-m", "pytest", "-m", "perf", "-q", "-p", "no:cacheprovider",
                          "--specwatch-profiles", str(profile), str(ROOT / "tests" / "perf")],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert out.returncode == 4, out.stdout + out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("ERROR: specwatch:")]
    assert len(errors) == 1 and field in errors[0], out.stderr
    assert "INTERNALERROR" not in out.stdout + out.stderr and "Traceback" not in out.stdout + out.stderr
