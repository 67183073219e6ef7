"""Speculation health end to end on CPU (issue 25's "done when"): `pytest -m perf` against reference servers.

One session records the baselines of a plain and a speculative server; a second, healthy, raises no finding
against them; two more boot the speculative server with a reference-only fault each:

- ``--ref-fault-perturb-draft``: a fixed bias on the draft's logits. Greedy output stays lossless and
  acceptance drops: the accept-length gate fails naming the prompts and the first output token where
  acceptance diverged, while the throughput drift of the same runs does not fail (a drop of about 13%, far
  inside the tolerance a shared 2-core machine needs);
- ``--ref-fault-eager-verify``: on CPU, where no graph exists, the verify runs one forward per position. No
  graph counter can show it there: the cycle-cost gate's break-even does.

The two servers' runs are interleaved (``gates.interleave_runs``) and both decode on the CPU, so the break-even
is gated on their CPU time, one sample per run pair (``cyclecost.cpu_run_ratios``): other processes on a shared
machine make a server wait for a core, which its busy windows' wall clock holds and its CPU time does not, and
they do not make both servers wait alike even in one run pair. With three busy loops beside the servers, the
busy windows' break-evens of healthy sessions moved by up to +364% against a recording while an eager verify's
moved by as little as +54% (the CI failure: +109% on a healthy server); their CPU times' moved by at most +76%,
the eager verify's by at least +87% (docs/reference/speculation-health.md has the counts); on a quiet machine
the busy windows read +199% and +282% for it. Hence a tolerance of 90% here (the GPU sets judge by their
sessions' own spread).
"""

from __future__ import annotations

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
tolerance = 0.9
decode_log_interval = 10
[workload]
max_new_tokens = 48
[[server]]
name = "plain"
[[server]]
name = "eagle3"
speculative = {{ algorithm = "EAGLE3", num_steps = 2 }}
extra_args = {faults}
[fixtures]
baseline = "plain"
spec = "eagle3"
[gates]
interleave_runs = true
"""
#: runs per server and session. The break-even is one sample per run pair, judged by Mann-Whitney at alpha 0.01:
#: with 5 a side only a complete separation reaches p < 0.01 (smallest p 0.0079), so one overlapping run of an
#: eager verify read "inconclusive" and passed (a fresh-clone CI run); with 8 two runs may overlap
RUNS = 8
HEALTH = str(ROOT / "tests" / "perf" / "test_speculation_health.py")
THROUGHPUT = str(ROOT / "tests" / "perf" / "test_throughput.py") + "::test_no_drift_against_baseline"


def _why(out: subprocess.CompletedProcess[str]) -> str:
    """What a failing assertion shows of a run: its verdicts' lines and its summary."""
    lines = out.stdout.splitlines()
    said = [ln for ln in lines if ln.startswith("E ") and "] Decode batch" not in ln and "] Prefill batch" not in ln]
    return "\n".join(said[:60] + [ln for ln in lines if ln.startswith(("specwatch speculation", "FAILED"))])


def _run(tmp: Path, *args: str, faults: str = "[]", throughput: bool = False) -> subprocess.CompletedProcess[str]:
    profile = tmp / "profiles.toml"
    profile.write_text(PROFILE.format(faults=faults))
    tests = (HEALTH, THROUGHPUT) if throughput else (HEALTH,)
    cmd = [sys.executable, "-m", "pytest", "-m", "perf", *tests, "-p", "no:cacheprovider", "-q", "-rA",
           "--rootdir", str(ROOT), f"--specwatch-profiles={profile}", f"--specwatch-baseline-dir={tmp / 'baselines'}",
           f"--specwatch-report-dir={tmp / 'reports'}", f"--specwatch-history={tmp / 'history.sqlite'}",
           "--specwatch-machine-class=ci-cpu", f"--specwatch-runs={RUNS}", "--specwatch-warmup=1", *args]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECWATCH_", "PYTEST_XDIST"))}
    env["SPECWATCH_YARDSTICK"] = "off"
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("spechealth")
    out = _run(tmp, "--update-baselines")
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    # the history as the recording left it: the module's other runs add to history.sqlite, in any order
    shutil.copyfile(tmp / "history.sqlite", tmp / "history-recorded.sqlite")
    return tmp


def test_the_recording_keeps_per_prompt_counts_cycle_cost_and_break_even(recorded: Path) -> None:
    base = json.loads((recorded / "baselines" / "ci-cpu" / "eagle3.json").read_text())["metrics"]
    probe = base["speculation-probe/accept_length"]
    assert len(probe["extra"]["per_prompt"]) == 6 and all(p["verify_ct"] for p in probe["extra"]["per_prompt"])
    for key in ("single-stream/accept_length", "single-stream/cycle_ms", "single-stream/cycle_ratio"):
        assert base[key]["samples"], key
    plain = json.loads((recorded / "baselines" / "ci-cpu" / "plain.json").read_text())["metrics"]
    assert "single-stream/decode_step_ms" in plain and "single-stream/accept_length" not in plain
    from specwatch.store.history import History

    with History(recorded / "history-recorded.sqlite") as hist:  # history and change points see them
        assert len(hist.series("eagle3/single-stream/cycle_ratio")) == 1
        assert len(hist.series("eagle3/single-stream/accept_length")) == 1


def test_healthy_runs_against_the_recorded_baseline_raise_no_finding(recorded: Path) -> None:
    out = _run(recorded)
    assert out.returncode == 0, _why(out)
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("specwatch speculation eagle3:"))
    assert re.search(r"accept length \d\.\d\d from meta_info of each run, exact: pass", line), line
    assert re.search(r"cycle \d+\.\d\d ms from .*, step \d+\.\d\d ms: pass; break-even \d\.\d\d -> ", line), line


def _failed(text: str) -> set[str]:
    return {m.group(1) for m in re.finditer(r"^FAILED \S+::(\S+)", text, re.M)}


def test_a_perturbed_draft_fails_the_accept_length_gate_naming_the_prompts(recorded: Path) -> None:
    out = _run(recorded, faults='["--ref-fault-perturb-draft", "0.5"]', throughput=True)
    text = out.stdout
    assert out.returncode == 1, _why(out)
    failed = _failed(text)
    assert "test_accept_length_against_baseline[eagle3]" in failed, _why(out)
    # throughput alone (its drift gate on the same runs) does not call the drop; only a machine that moved
    # (the plain server's throughput failing too: a shared 2-core machine can halve its speed) may fail it
    drift = {n for n in failed if n.startswith("test_no_drift_against_baseline[")}
    assert not {n for n in drift if "[eagle3" in n} or {n for n in drift if "[plain" in n}, failed
    assert failed - drift == {"test_accept_length_against_baseline[eagle3]"}, failed
    assert re.search(r"acceptance dropped on [1-6]/6 greedy prompts: prompt \d \(\d+ -> \d+\)", text), text[-5000:]
    assert "lossless output: the draft or its inputs changed" in text
    assert re.search(r"acceptance first diverged (at|at or before) output token \d+", text), text[-5000:]


def test_an_eager_verify_fails_the_cycle_cost_gate_without_any_graph_counter(recorded: Path) -> None:
    out = _run(recorded, "-k", "cycle_cost", faults='["--ref-fault-eager-verify"]')  # (its drafts: tests/refserver)
    text = out.stdout
    row = re.search(r"^eagle3/single-stream/cycle_ratio\s.*?\s(?P<verdict>inconclusive|noisy)\s*$", text, re.M)
    if out.returncode == 0 and row:
        # Undecided, not wrong: under three busy loops the gate caught the eager verify 9 of 10 times; the
        # tenth read a break-even its 8 runs a side could not tell from the baseline's. That is an honest
        # "cannot tell", never a test failure (issue 31 item 6). A verdict of "no change" (a real miss) still
        # fails below, as does any other test's failure.
        pytest.skip(f"the cycle-cost gate was {row['verdict']} on an eager verify: " + "\n".join(
            ln for ln in text.splitlines() if "cycle_ratio" in ln or ln.startswith("specwatch speculation"))[:1500])
    assert out.returncode == 1, _why(out)
    assert _failed(text) == {"test_cycle_cost_against_baseline[eagle3]"}, _why(out)
    assert re.search(r"(break-even \(cycle / plain step\)|cycle_ms) rose", text), _why(out)
    if "the speculative path itself got slower" not in text:
        # Beside another CI run the plain step slowed too (by at least half the cycle's rise), and the cause then
        # reads the machine's, as cycle_cause's rule says for such numbers: the gate still failed on the cycle
        assert "the machine or the target model got slower" in text, _why(out)
    assert "CPU time of each server's processes, per run pair" in text  # the CPU servers' break-even
