"""Any OpenAI-compatible server: `pytest -m perf` on fixtures/profiles/openai-example.toml (engine = "openai")
against a fake OpenAI-compatible server (tests/unit/openai_fake.py) reached with --specwatch-server-url.

Throughput is measured through streamed /v1/completions and recorded (baseline, results), the drift gate
compares against it on the next run, and every SGLang-only check skips with the profile's reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from openaiup import fake_openai_server

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "fixtures" / "profiles" / "openai-example.toml"
CORRECTNESS = [
    ROOT / "tests" / "correctness" / f"test_{name}.py"
    for name in ("accept_length", "verify_graphs", "env_propagation", "lossless")
]


@pytest.fixture(scope="module")
def fake_server() -> Iterator[str]:
    with fake_openai_server() as url:
        yield url


def _run(tmp: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-m",
        "perf or correctness",
        "-p",
        "no:cacheprovider",
        "-q",
        "-rs",
        "--rootdir",
        str(ROOT),
        str(ROOT / "tests" / "perf" / "test_throughput.py"),
        str(ROOT / "tests" / "perf" / "test_gates.py"),
        *map(str, CORRECTNESS),
        f"--specwatch-profiles={PROFILE}",
        f"--specwatch-server-url={url}",
        f"--specwatch-baseline-dir={tmp / 'baselines'}",
        f"--specwatch-report-dir={tmp / 'reports'}",
        f"--specwatch-history={tmp / 'history.sqlite'}",
        "--specwatch-machine-class=ci-cpu",
        "--specwatch-runs=4",
        "--specwatch-warmup=1",
        "--specwatch-tolerance=0.5",
        *args,
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECWATCH_", "PYTEST_XDIST"))}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=400, cwd=ROOT, env=env)


def test_perf_on_an_openai_server_records_throughput_and_skips_the_sglang_checks(
    fake_server: str, tmp_path: Path
) -> None:
    out = _run(tmp_path, fake_server, "--update-baselines")
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-4000:]
    assert "booting" not in text, "an openai server is never booted"
    doc = json.loads((tmp_path / "baselines" / "ci-cpu" / "vllm-llama8b.json").read_text())
    samples = doc["metrics"]["single-stream/output_tok_s"]["samples"]
    assert len(samples) == 4 and min(samples) > 0, samples
    results = json.loads((tmp_path / "reports" / "results-latest.json").read_text())
    keys = {r["key"] for r in results["results"]}
    assert {"vllm-llama8b/single-stream/output_tok_s", "vllm-llama8b/single-stream/ttft_ms"} <= keys, keys
    summary = text.split("short test summary info")[-1]
    # every correctness test skipped with the one reason, not with a failure or an unreachable /generate
    reasons = [line for line in summary.splitlines() if line.startswith("SKIPPED") and "correctness" in line]
    assert len(reasons) >= 8, summary
    for line in reasons:
        assert "is an SGLang-only check" in line and "vllm-llama8b is engine = 'openai'" in line, line
        assert "/v1/completions" in line, line

    again = _run(tmp_path, fake_server)  # the drift gate against the baseline just recorded
    text = again.stdout + again.stderr
    assert again.returncode == 0, text[-4000:]
    assert "2 passed" in text.split("short test summary info")[-1].splitlines()[-1], text[-2000:]  # both drifts
    assert "MISSING BASELINE" not in text and "0 regression(s)" in text, text[-3000:]
    row = next(line for line in text.splitlines() if line.startswith("vllm-llama8b/single-stream/output_tok_s "))
    assert "tok/s" in row and "±50%" in row, row  # compared against the recorded baseline, at the run's tolerance
