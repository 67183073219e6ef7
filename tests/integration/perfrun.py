"""A `pytest -m perf` run of the suite in a child process against CPU reference servers, for integration tests.

``pair_profile`` writes the usual plain + EAGLE-3 pair (the speculative server's model and gates as given);
``run_perf`` runs the named perf tests against it with the run's files under ``tmp_path`` and a clean environment
(no ``SPECWATCH_*`` or xdist variables of the parent, the yardstick off).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SLOWDOWN = ROOT / "fixtures" / "faults" / "slowdown"
#: one plain reference server on CPU; ``{extra}``: more lines of its server table (``SLOW``, or nothing)
PLAIN_CPU = """version = 1
[defaults]
engine = "reference"
model = "ref-tiny"
device = "cpu"
[[server]]
name = "plain"
{extra}
"""
#: the server slowed from OUTSIDE its code: 1000 us after every attention call (fixtures/faults/slowdown)
SLOW = f'pythonpath = ["{SLOWDOWN}"]\nextra_env = {{ SPECWATCH_SLOWDOWN_US = "1000" }}'


def pair_profile(spec_model: str = "ref-tiny", gates: str = "",
                 speculative: str = '{ algorithm = "EAGLE3", num_steps = 2 }') -> str:
    """A plain and an EAGLE-3 reference server on the CPU, as baseline and spec fixtures."""
    text = PLAIN_CPU.format(extra="") + f"""[[server]]
name = "eagle3"
model = "{spec_model}"
speculative = {speculative}
[fixtures]
baseline = "plain"
spec = "eagle3"
"""
    return text + (f"[gates]\n{gates}\n" if gates else "")


def run_perf(tmp_path: Path, profile: str, targets: list[str], *args: str, timeout: int = 600
             ) -> subprocess.CompletedProcess[str]:
    """``pytest -m perf TARGETS ARGS`` (targets relative to tests/perf) against ``profile``'s servers."""
    path = tmp_path / "profiles.toml"
    path.write_text(profile)
    cmd = [sys.executable, "-m", "pytest", "-m", "perf", *(str(ROOT / "tests" / "perf" / t) for t in targets),
           "-p", "no:cacheprovider", "-q", "-rA", "--rootdir", str(ROOT), f"--specwatch-profiles={path}",
           f"--specwatch-baseline-dir={tmp_path / 'baselines'}", f"--specwatch-report-dir={tmp_path / 'reports'}",
           f"--specwatch-history={tmp_path / 'history.sqlite'}", *args]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECWATCH_", "PYTEST_XDIST"))}
    env["SPECWATCH_YARDSTICK"] = "off"
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)


def git(repo: Path, *args: str) -> str:
    """``git -C repo ARGS``'s output, stripped; CalledProcessError when it fails."""
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def profile_history(repo: Path, template: str, history: list[tuple[str, str]]) -> list[str]:
    """A new git repository at ``repo`` whose commits each write ``profile.toml`` (``template`` with ``{extra}``
    filled from the history's second field) and add a line to ``CHANGES``: a server's history as a bisection sees
    it. Returns the shas, oldest first."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "ci@example.invalid")
    git(repo, "config", "user.name", "ci")
    shas = []
    for message, extra in history:
        (repo / "profile.toml").write_text(template.format(extra=extra))
        with open(repo / "CHANGES", "a") as fh:
            fh.write(message + "\n")
        git(repo, "add", "profile.toml", "CHANGES")
        git(repo, "commit", "-q", "-m", message)
        shas.append(git(repo, "rev-parse", "HEAD"))
    return shas
