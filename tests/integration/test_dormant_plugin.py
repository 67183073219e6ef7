"""With specwatch installed, a project that does not use it runs unchanged and hears nothing from it.

pytest loads the plugin (entry point ``pytest11``) in every project of the environment. It must stay
dormant there: load no profile, reorder no test, write no file, print nothing. It wakes up when the
run asks for it: an option, an ini key, a SPECWATCH_* variable, ``-m perf``, or a test with one of
its markers or fixtures.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = '''
def test_zebra():
    pass


def test_apple():
    pass


def test_mango():
    pass
'''


#: the project's own conftest notes which specwatch modules the run imported: dormant, only the
#: plugin's thin modules (no session, no profiles, no server pool)
CONFTEST = '''
import sys


def pytest_sessionfinish(session):
    loaded = sorted(m for m in sys.modules if m.startswith("specwatch."))
    (session.config.rootpath / "loaded.txt").write_text("\\n".join(loaded))
'''


def _project(tmp_path: Path, ini: str = "[pytest]\n") -> Path:
    (tmp_path / "pytest.ini").write_text(ini)
    (tmp_path / "test_plain.py").write_text(TESTS)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    return tmp_path


def _pytest(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECWATCH_", "PYTEST_"))}
    # -p no:randomly: pytest-randomly (installed for the suite's own runs) would reorder the project's tests
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", *args],
                          cwd=project, env=env, capture_output=True, text=True, timeout=300)


def _specwatch_lines(out: str) -> list[str]:
    # pytest itself lists installed plugins in its header ("plugins: ..., specwatch-0.1.0"): not ours
    return [ln for ln in out.splitlines() if "specwatch" in ln.lower() and not ln.startswith("plugins:")]


def test_an_unrelated_project_runs_unchanged_and_silent(tmp_path: Path) -> None:
    project = _project(tmp_path)
    out = _pytest(project, "-v")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "plugins:" in out.stdout and "specwatch" in out.stdout  # the plugin was loaded ...
    assert _specwatch_lines(out.stdout + out.stderr) == []  # ... and said nothing
    order = [ln.split("::")[1].split()[0] for ln in out.stdout.splitlines() if "::test_" in ln and "PASSED" in ln]
    assert order == ["test_zebra", "test_apple", "test_mango"]  # file order, not reordered
    assert not {"reports", ".specwatch"} & {p.name for p in project.iterdir()}  # no reports, no history
    loaded = set((project / "loaded.txt").read_text().split())
    assert loaded and not loaded & {"specwatch.run.session", "specwatch.profiles.loading", "specwatch.server.pool"}


def test_an_ini_key_wakes_it_up(tmp_path: Path) -> None:
    """Asked for by the ini file, it validates the named profile before anything runs (exit 4)."""
    project = _project(tmp_path, "[pytest]\nspecwatch_profiles = missing.toml\n")
    out = _pytest(project)
    assert out.returncode == 4, out.stdout + out.stderr
    assert "specwatch:" in out.stderr and "missing.toml" in out.stderr


def test_an_option_wakes_it_up(tmp_path: Path) -> None:
    project = _project(tmp_path)
    out = _pytest(project, "--specwatch-profiles", str(project / "broken.toml"))
    assert out.returncode == 4 and "broken.toml" in out.stderr, out.stdout + out.stderr


def test_a_marker_wakes_it_up(tmp_path: Path) -> None:
    """A test with a specwatch marker in an otherwise plain project, no option given: tests are
    ordered by the servers they need (no-server tests first), so each server boots once."""
    project = _project(tmp_path)
    (project / "test_marked.py").write_text("import pytest\n\n\n@pytest.mark.perf\ndef test_fast():\n    pass\n")
    out = _pytest(project, "--collect-only", "-q")
    assert out.returncode == 0, out.stdout + out.stderr
    collected = [ln for ln in out.stdout.splitlines() if "::" in ln]
    assert collected == ["test_plain.py::test_zebra", "test_plain.py::test_apple", "test_plain.py::test_mango",
                         "test_marked.py::test_fast"]  # dormant, file order would put test_marked.py first
