"""A concurrency sweep end to end on CPU: `pytest -m perf tests/perf/test_sweep.py` against ref-tiny
(a baseline and an EAGLE3 server), in a subprocess, driven once by the built-in prompt set and once
by a JSONL dataset beside the profile file.

Each run has the per-level verdicts, p99 latencies and the crossover in the summary's sweep table
and in the results file. The first run's crossover gate passes (speculation may be 10x slower:
ref-tiny on 2 shared cores barely gains from it); the second asks speculation for a 6x gain, which
it never makes, so the crossover is concurrency 1 and the gate fails the run. Small on purpose:
levels [1, 4], 5 runs (the fewest that can reach p < 0.01), 8 to 24 tokens a
request.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from keptruns import runs_kept

ROOT = Path(__file__).resolve().parents[2]
PROFILE = """
version = 1
[defaults]
engine = "reference"
model = "ref-tiny"
device = "cpu"
[[server]]
name = "baseline"
[[server]]
name = "eagle3"
speculative = {{ algorithm = "EAGLE3", num_steps = 2 }}
[gates]
spec_margin = {margin}
min_crossover_concurrency = {minimum}
[workload]
concurrency = [1, 4]
run_requests = 4
{workload}
"""
#: the built-in set, its prompts cut or repeated to 16-48 words (ref-tiny's context is 1024 bytes)
BUILTIN = 'dataset = "builtin"\ninput_words = { dist = "uniform", low = 16, high = 48 }\n' \
          'output_len = { dist = "uniform", low = 8, high = 24 }'
#: plus an open-loop level: Poisson arrivals at 8 requests a second (4 requests a run: about 0.5 s)
JSONL = 'dataset = "prompts/mine.jsonl"\noutput_len = 16\nrequest_rate = [8.0]'


def _sweep(tmp_path: Path, workload: str, margin: float, minimum: int) -> tuple[subprocess.CompletedProcess[str],
                                                                                 dict]:
    profile = tmp_path / "sweep.toml"
    profile.write_text(PROFILE.format(margin=margin, minimum=minimum, workload=workload))
    results = tmp_path / "results.json"
    cmd = [sys.executable, "-m", "pytest", "-m", "perf", str(ROOT / "tests" / "perf" / "test_sweep.py"),
           "-p", "no:cacheprovider", "-q", "--rootdir", str(ROOT), f"--specwatch-profiles={profile}",
           f"--specwatch-report-dir={tmp_path / 'reports'}", f"--specwatch-results={results}",
           f"--specwatch-history={tmp_path / 'history.sqlite'}", "--specwatch-runs=5", "--specwatch-warmup=1"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECWATCH_", "PYTEST_XDIST"))}
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    doc = json.loads(results.read_text()) if results.is_file() else {}
    return out, doc


def _level_lines(stdout: str) -> dict[str, str]:
    return {ln.split()[0]: ln for ln in stdout.splitlines() if ln.startswith(("concurrency-1 ", "concurrency-4 "))}


def test_the_builtin_prompt_set_drives_a_sweep(tmp_path: Path) -> None:
    out, doc = _sweep(tmp_path, BUILTIN, margin=-0.9, minimum=2)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "specwatch sweep: eagle3 vs baseline" in out.stdout and "p99 TTFT ms" in out.stdout
    lines = _level_lines(out.stdout)
    assert set(lines) == {"concurrency-1", "concurrency-4"}, out.stdout[-3000:]
    assert all(ln.rstrip().endswith("pass") for ln in lines.values()), lines  # within 10x at every level
    assert "crossover: speculation paid at every level measured (1, 4)" in out.stdout
    assert "min_crossover_concurrency = 2: pass" in out.stdout
    results = {r["key"]: r for r in doc["results"]}
    for server in ("eagle3", "baseline"):
        for level in ("concurrency-1", "concurrency-4"):
            for metric in ("output_throughput", "request_throughput", "p99_ttft_ms", "p99_itl_ms", "p99_tpot_ms",
                           "p99_e2e_latency_ms", "median_ttft_ms"):
                r = results[f"{server}/{level}/{metric}"]
                assert len(r["samples"]) == runs_kept(r, 5) and min(r["samples"]) > 0, r
    assert "eagle3/concurrency-4/accept_length" in results and "baseline/concurrency-4/accept_length" not in results
    spec = results["eagle3/concurrency-4/p99_ttft_ms"]["extra"]
    assert spec["vs_baseline"]["verdict"] == "pass" and spec["crossover"]["level"] is None
    assert spec["dataset"]["name"] == "builtin" and spec["output_len"]["dist"] == "uniform"
    assert spec["concurrency"] == 4 and spec["run_requests"] == 4


def test_a_jsonl_dataset_drives_a_sweep_and_the_crossover_gate_bites(tmp_path: Path) -> None:
    folder = tmp_path / "prompts"
    folder.mkdir()
    rows = [{"prompt": f"Explain step {i} of making tea in one short sentence.", "category": "howto"}
            for i in range(4)]
    rows += [{"messages": [{"role": "system", "content": "Be brief."},
                           {"role": "user", "content": f"Name {i} prime numbers."}], "category": "math"}
             for i in range(2, 6)]
    (folder / "mine.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out, doc = _sweep(tmp_path, JSONL, margin=5.0, minimum=4)
    assert out.returncode == 1, out.stdout[-4000:] + out.stderr[-2000:]
    assert "FAILED tests/perf/test_sweep.py::test_speculation_by_load_level" in out.stdout
    assert "speculation stops paying below min_crossover_concurrency = 4" in out.stdout
    assert "crossover: speculation does not pay at the lowest level measured, 1 (fail)" in out.stdout
    lines = _level_lines(out.stdout)
    assert lines["concurrency-1"].rstrip().endswith("fail"), lines
    results = {r["key"]: r for r in doc["results"]}
    extra = results["eagle3/concurrency-1/p99_e2e_latency_ms"]["extra"]
    assert extra["vs_baseline"]["verdict"] == "fail" and extra["crossover"]["level"] == 1
    assert extra["crossover"]["gate"] == "fail" and extra["dataset"]["name"] == "mine.jsonl"
    itl = results["baseline/concurrency-4/p99_itl_ms"]
    assert len(itl["samples"]) == runs_kept(itl, 5) >= 1, itl
    # the request-rate level ran live, with its own keys and arrival settings, and is not a crossover level
    rate = results["eagle3/request-rate-8/output_throughput"]
    assert len(rate["samples"]) == 5 and min(rate["samples"]) > 0, rate
    assert rate["extra"]["request_rate"] == 8.0 and rate["extra"]["vs_baseline"]["verdict"] in ("pass", "fail",
                                                                                                "no_effect")
    assert "request-rate-8 " in out.stdout and len(results["baseline/request-rate-8/p99_ttft_ms"]["samples"]) == 5
