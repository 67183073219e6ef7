"""`specwatch ab-ladder` end to end on the reference server (CPU): three versions, two calls.

The chain is base < slow < fast: "slow" is the base server slowed from OUTSIDE its code (1000 us after every
attention call through fixtures/faults/slowdown, 4-5x slower on a loaded 2-core CPU, as
tests/integration/test_ab_refserver.py), "fast" is the base again. So the first pair must be a regression and the
second no regression, whatever the CI host's load does to the rounds (the effect is far beyond the default round
spread's tolerance either way). The ladder runs as a lent machine runs it: a first call stopped after two boots,
a second call that resumes it and boots the rest; each version is booted once a round (6 boots, two abs take 8).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from perfrun import PLAIN_CPU, SLOW

ROOT = Path(__file__).resolve().parents[2]


def _ladder(profiles: list[Path], tmp: Path, *more: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "specwatch.cli", "ab-ladder", *(a for p in profiles for a in ("--profile", str(p))),
           "--start", "last", "--resume", "--memo", str(tmp / "memo"), "--workdir", str(ROOT), "--step-timeout",
           "300", *more, "--", "-m", "perf", str(ROOT / "tests" / "perf" / "test_throughput.py"), "-k",
           "drift and output", "-p", "no:cacheprovider", f"--specwatch-report-dir={tmp / 'reports'}",
           "--specwatch-runs=5", "--specwatch-warmup=1"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=ROOT)


@pytest.mark.nightly  # 70 s on CI; the ladder's order, judging and resume are unit-tested (test_ab_ladder.py)
def test_a_ladder_over_two_calls_names_the_slow_version(tmp_path: Path) -> None:
    profiles = []
    for name, slow in (("base", ""), ("slow", SLOW), ("fast", "")):
        (tmp_path / f"{name}.toml").write_text(PLAIN_CPU.format(extra=slow))
        profiles.append(tmp_path / f"{name}.toml")
    first = _ladder(profiles, tmp_path, "--stop-after", "2")
    assert first.returncode == 3, first.stdout[-3000:] + first.stderr[-2000:]
    assert "stopped after 2 measurement(s), as --stop-after asked" in first.stdout
    assert re.findall(r"^\[ladder\] round (\d) (\w+):", first.stdout, re.M) == [("1", "fast"), ("1", "slow")]

    second = _ladder(profiles, tmp_path)
    out = second.stdout
    assert "resuming ladder" in out and "2 measurement(s) kept" in out, out[-3000:] + second.stderr[-2000:]
    booted = re.findall(r"^\[ladder\] round (\d) (\w+):.*?(, kept from the stopped ladder)?\)$", out, re.M)
    assert [(n, v) for n, v, _ in booted] == [("1", "fast"), ("1", "slow"), ("1", "base"), ("2", "base"),
                                              ("2", "slow"), ("2", "fast")]  # back and forth, each once a round
    assert [bool(k) for _, _, k in booted] == [True, True, False, False, False, False]
    assert second.returncode == 1, out[-4000:] + second.stderr[-2000:]
    assert re.search(r"^\[ladder\] base -> slow: regression after 2 round\(s\)", out, re.M), out[-4000:]
    assert re.search(r"^\[ladder\] slow -> fast: no regression after 2 round\(s\)", out, re.M), out[-4000:]
    assert "the pairs share their versions' boots" in out


EAGLE3_CPU = """version = 1
[defaults]
engine = "reference"
device = "cpu"
[[server]]
name = "eagle3"
model = "{model}"
speculative = {{ algorithm = "EAGLE3", num_steps = 2 }}
"""
#: the checks a ladder runs beside its numbers, on the server it measured (no boot of their own)
CHECKS = ["-m", "perf or correctness", str(ROOT / "tests" / "perf" / "test_throughput.py"),
          *(str(ROOT / "tests" / "correctness" / f) for f in ("test_accept_length.py", "test_draft_alive.py")),
          "-k", "(drift and decode) or sources_reconcile or the_draft_is_alive"]


@pytest.mark.nightly  # 25 s on 2 cores; the outcomes' layout is unit-tested (test_outcomes.py)
def test_a_check_that_fails_on_one_version_is_named_beside_the_verdicts(tmp_path: Path) -> None:
    """The second version's draft accepts nothing (the reference model's ``-poor`` preset, chosen by the profile):
    its accept length falls and the draft-alive check fails there alone, each version booted once a round."""
    profiles = []
    for name, model in (("good", "ref-tiny"), ("dead", "ref-tiny-poor")):
        (tmp_path / f"{name}.toml").write_text(EAGLE3_CPU.format(model=model))
        profiles.append(tmp_path / f"{name}.toml")
    cmd = [sys.executable, "-m", "specwatch.cli", "ab-ladder", *(a for p in profiles for a in ("--profile", str(p))),
           "--memo", str(tmp_path / "memo"), "--workdir", str(ROOT), "--step-timeout", "300", "--metric",
           "accept_length", "--", *CHECKS, "-p", "no:cacheprovider", "-q", f"--specwatch-report-dir={tmp_path}/r",
           f"--specwatch-baseline-dir={tmp_path}/none", "--specwatch-runs=3", "--specwatch-warmup=1"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=ROOT)
    out = run.stdout
    assert run.returncode == 1, out[-4000:] + run.stderr[-2000:]  # accept length: a regression
    assert re.search(r"^\[ladder\] good -> dead: regression after 2 round\(s\)", out, re.M), out[-4000:]
    assert "[ladder]   test_accept_length::test_sources_reconcile_on_the_live_server: good pass | dead pass" in out
    line = next(ln for ln in out.splitlines() if "test_draft_alive::test_the_draft_is_alive" in ln)
    assert "DIFFERS between versions: good pass | dead FAIL (" in line and "accepted" in line, line
    logs = sorted((tmp_path / "memo").glob("*/ladder-*.log"))
    assert len(logs) == 4 and all(log.read_text().count("[specwatch] booting ") == 1 for log in logs)
