"""The main job end to end on CPU: `pytest -m perf` against reference servers, in a subprocess.

Records a baseline, then shows that a real slowdown of the server (the reference server's
documented `--ref-fault-slowdown` switch) fails the drift gate against it, that the healthy server
passes, and that a server that cannot boot is an infrastructure error (exit 3), not a regression.
The 8% GPU case is in docs/validation. A shared 2-core CI machine moves by up to ~45% between sessions
on its own, so the profile here tolerates 50% and the slowdown is 5x (400%).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
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
floor_tok_s = 20
tolerance = 0.5
[[server]]
name = "eagle3"
env = "tuned"
speculative = {{ algorithm = "EAGLE3", num_steps = 2 }}
extra_args = {extra}
"""


def _run(tmp_path: Path, *args: str, extra: str = "[]") -> subprocess.CompletedProcess[str]:
    profile = tmp_path / "profiles.toml"
    profile.write_text(PROFILE.format(extra=extra))
    cmd = [sys.executable, "-m", "pytest", "-m", "perf", str(ROOT / "tests" / "perf" / "test_throughput.py"),
           "-p", "no:cacheprovider", "-q", "--rootdir", str(ROOT), f"--specwatch-profiles={profile}",
           f"--specwatch-baseline-dir={tmp_path / 'baselines'}", f"--specwatch-report-dir={tmp_path / 'reports'}",
           f"--specwatch-history={tmp_path / 'history.sqlite'}", "--specwatch-machine-class=ci-cpu",
           "--specwatch-runs=8", "--specwatch-warmup=1", *args]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECWATCH_", "PYTEST_XDIST"))}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project folder with a recorded baseline, reports and history, one per worker.

    Under xdist the module's tests may run on several workers; the recording (a perf run, 25-40 s on
    CI) is made once, under a lock, in the run's shared temporary folder, and each worker copies it.
    """
    tmp = tmp_path_factory.mktemp("mainjob")
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        out = _run(tmp, "--update-baselines")
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
        return tmp
    shared = tmp_path_factory.getbasetemp().parent / "mainjob-recorded"  # this run's, shared by its workers
    with open(f"{shared}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (shared / "recorded.ok").exists():
            shutil.rmtree(shared, ignore_errors=True)
            shared.mkdir()
            out = _run(shared, "--update-baselines")
            assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
            (shared / "recorded.ok").write_text("")
    shutil.copytree(shared, tmp, dirs_exist_ok=True, ignore=shutil.ignore_patterns("recorded.ok"))
    return tmp


def test_update_baselines_writes_a_versioned_baseline(recorded: Path) -> None:
    path = recorded / "baselines" / "ci-cpu" / "eagle3.json"
    doc = json.loads(path.read_text())
    assert doc["version"] >= 1 and doc["profile"] == "eagle3"
    samples = doc["metrics"]["single-stream/output_tok_s"]["samples"]
    assert len(samples) == 8 and min(samples) > 0
    results = json.loads((recorded / "reports" / "results-latest.json").read_text())
    assert results["machine"]["machine_class"] == "ci-cpu"
    assert (recorded / "reports" / "benchmark.json").is_file()


def test_a_real_slowdown_fails_the_drift_gate(recorded: Path) -> None:
    out = _run(recorded, extra='["--ref-fault-slowdown", "400"]')
    assert out.returncode == 1, out.stdout[-3000:]
    assert "FAILED tests/perf/test_throughput.py::test_no_drift_against_baseline[eagle3-output_tok_s]" in out.stdout
    assert "regression" in out.stdout
    assert "specwatch results" in out.stdout  # the summary table


def test_the_healthy_server_passes_against_its_baseline(tmp_path: Path) -> None:
    """Recorded right before it is judged, not minutes earlier by the module's fixture: under xdist the load of a
    2-core machine can double between the two (a fresh-clone CI run read -53% of a healthy server against the shared
    recording while other tests started). The 5x slowdown test keeps the shared recording: no load swing hides 5x."""
    recorded = _run(tmp_path, "--update-baselines")
    assert recorded.returncode == 0, recorded.stdout[-3000:] + recorded.stderr[-2000:]
    out = _run(tmp_path)
    assert out.returncode == 0, out.stdout[-3000:]
    assert "3 passed" in out.stdout


def test_a_server_that_cannot_boot_is_an_infrastructure_error(tmp_path: Path) -> None:
    out = _run(tmp_path, extra='["--model-path", "no-such-preset"]')
    assert out.returncode == 3, out.stdout[-3000:]
    assert "during boot" in out.stdout and "no-such-preset" in out.stdout


def test_under_xdist_the_controller_gathers_one_run_and_prints_the_table(tmp_path: Path) -> None:
    """pytest -n 2: the workers measure, the controller writes one results file, one baseline and
    one history entry, prints one summary table, and keeps every run the workers measured."""
    out = _run(tmp_path, "-n", "2", "--update-baselines", "-W", "ignore::pytest.PytestWarning")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "specwatch results" in out.stdout
    reports = tmp_path / "reports"
    assert sorted(p.name for p in reports.glob("*.json")) == ["benchmark.json", "results-latest.json"]
    results = json.loads((reports / "results-latest.json").read_text())
    runs = results["results"][0]["samples"]
    assert len(runs) in (8, 16)  # one or both workers measured eagle3: every run kept
    base = json.loads((tmp_path / "baselines" / "ci-cpu" / "eagle3.json").read_text())
    assert base["metrics"]["single-stream/output_tok_s"]["sessions"][-1]["samples"] == next(
        r["samples"] for r in results["results"] if r["key"] == "eagle3/single-stream/output_tok_s")
    from specwatch.store.history import History

    with History(tmp_path / "history.sqlite") as hist:
        assert len(hist.series("eagle3/single-stream/output_tok_s")) == 1  # one run, not one per worker


# nightly: the boot failure (test_a_server_that_cannot_boot_...) again, on the xdist path that
# test_under_xdist_the_controller_gathers_... guards in the default run
@pytest.mark.nightly
def test_under_xdist_a_server_that_cannot_boot_is_still_an_infrastructure_error(tmp_path: Path) -> None:
    out = _run(tmp_path, "-n", "2", "-W", "ignore::pytest.PytestWarning", extra='["--model-path", "no-such-preset"]')
    assert out.returncode == 3, out.stdout[-3000:]
    assert "specwatch results" not in out.stdout


ALTERNATING = """
version = 1
[defaults]
engine = "reference"
model = "ref-tiny"
device = "cpu"
speculative = { algorithm = "EAGLE3", num_steps = 2 }
[[server]]
name = "eagle3-untuned"
env = "untuned"
[[server]]
name = "eagle3-tuned"
env = "tuned"
[gates]
tuned_tolerance = 0.5
alternate_rounds = 2
"""


def _tuned_gate(tmp_path: Path, profile_text: str, select: str = "tuned") -> subprocess.CompletedProcess[str]:
    """`pytest -m perf -k tuned` (or ``select``) on a gate profile set, 6 runs a side; asserts it passed."""
    profile = tmp_path / "gates.toml"
    profile.write_text(profile_text)
    cmd = [sys.executable, "-m", "pytest", "-m", "perf", str(ROOT / "tests" / "perf" / "test_gates.py"), "-k", select,
           "-p", "no:cacheprovider", "-q", "--rootdir", str(ROOT), f"--specwatch-profiles={profile}",
           f"--specwatch-report-dir={tmp_path / 'reports'}", f"--specwatch-history={tmp_path / 'h.sqlite'}",
           "--specwatch-runs=6", "--specwatch-warmup=1"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECWATCH_", "PYTEST_XDIST"))}
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stdout[-3000:]
    return out


def test_relative_gate_boots_the_two_servers_in_alternation(tmp_path: Path) -> None:
    out = _tuned_gate(tmp_path, ALTERNATING)
    boots = [line for line in out.stdout.splitlines() if "[specwatch] booting" in line]
    assert [b.split("booting ")[1].split(":")[0] for b in boots] == ["eagle3-untuned", "eagle3-tuned"] * 2
    assert "round 2/2" in out.stdout
    # the summary row counts the pooled runs: 2 rounds x 3 runs per side
    # six paired runs, less any run whose tokens reached the client in one burst (a loaded host): left out and said
    m = re.search(r"eagle3-tuned vs eagle3-untuned \(single-stream, decode tok/s\)\s+(\d)\s", out.stdout)
    assert m and 1 <= int(m[1]) <= 6, out.stdout[-2000:]
    assert int(m[1]) == 6 or "left out of decode_tok_s" in out.stdout, out.stdout[-2000:]


def test_relative_gate_can_interleave_two_live_servers_run_by_run(tmp_path: Path) -> None:
    out = _tuned_gate(tmp_path, ALTERNATING.replace("alternate_rounds = 2",
                                                    "alternate_rounds = 1\ninterleave_runs = true"))
    boots = [line for line in out.stdout.splitlines() if "[specwatch] booting" in line]
    assert [b.split("booting ")[1].split(":")[0] for b in boots] == ["eagle3-untuned", "eagle3-tuned"]
    assert "interleaving eagle3-untuned / eagle3-tuned run by run: round 1/1" in out.stdout
    assert "eagle3-untuned single-stream: run 6/6" in out.stdout and "eagle3-tuned single-stream: run 6/6" in out.stdout
    # six paired runs, less any run whose tokens reached the client in one burst (a loaded host): left out and said
    m = re.search(r"eagle3-tuned vs eagle3-untuned \(single-stream, decode tok/s\)\s+(\d)\s", out.stdout)
    assert m and 1 <= int(m[1]) <= 6, out.stdout[-2000:]
    assert int(m[1]) == 6 or "left out of decode_tok_s" in out.stdout, out.stdout[-2000:]


THREE = """
version = 1
[defaults]
engine = "reference"
model = "ref-tiny"
device = "cpu"
[[server]]
name = "baseline-tuned"
env = "tuned"
[[server]]
name = "eagle3-untuned"
env = "untuned"
speculative = { algorithm = "EAGLE3", num_steps = 2 }
[[server]]
name = "eagle3-tuned"
env = "tuned"
speculative = { algorithm = "EAGLE3", num_steps = 2 }
[fixtures]
baseline = "baseline-tuned"
spec = "eagle3-tuned"
tuned = "eagle3-tuned"
untuned = "eagle3-untuned"
[gates]
spec_margin = -0.9
tuned_tolerance = 0.5
alternate_rounds = 2
"""


def test_two_gates_sharing_a_server_boot_it_once_a_round(tmp_path: Path) -> None:
    """The GPU sets' shape: eagle3-tuned is both the spec and the tuned server. Each round boots
    baseline, eagle3-tuned, eagle3-untuned once (3 boots a round, not 4); both gates pool 6 runs."""
    out = _tuned_gate(tmp_path, THREE, select="tuned or speculation_beats")
    boots = [ln.split("booting ")[1].split(":")[0] for ln in out.stdout.splitlines() if "[specwatch] booting" in ln]
    assert boots == ["baseline-tuned", "eagle3-tuned", "eagle3-untuned"] * 2, boots
    assert "alternating baseline-tuned / eagle3-tuned / eagle3-untuned: round 2/2" in out.stdout
    # 6 runs, less any that a loaded host made a burst (said: "1 of 6 run(s) of eagle3-tuned ... left out of
    # decode_tok_s"; a fresh-clone CI run beside a busy loop had one)
    left_out = re.search(r"(\d+) of 6 run\(s\) of eagle3-tuned single-stream left out of decode_tok_s", out.stdout)
    n = 6 - (int(left_out[1]) if left_out else 0)
    for row in (rf"eagle3-tuned vs baseline-tuned \(single-stream, decode tok/s\)\s+{n}\s",
                rf"eagle3-tuned vs eagle3-untuned \(single-stream, decode tok/s\)\s+{n}\s"):
        assert re.search(row, out.stdout), out.stdout[-2000:]
