"""specwatch and SGLang's own ``bench_serving`` against one hand-started reference server, the same workload, then
``specwatch compare-bench``: what a user does on their host, end to end on the CPU.

SGLang is not installed on CI (pyproject's ``sglang`` extra), so this skips there, saying so. It runs where
``sglang.bench_serving`` can be imported, or where ``BENCH_SERVING_COMMAND`` names a command that runs it
(tests/unit/data/bench-serving-cpu/bench_serving_cpu.py is how it ran on a CPU host without torchvision:
``BENCH_SERVING_COMMAND="env PYTHONPATH=SGLANG_SOURCE:SITE python .../bench_serving_cpu.py"``, SITE holding
the pure-Python packages SGLang imports at start).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import handstarted
import pytest
import tinyhf

from specwatch.engines.sglang import BENCH_SERVING, bench_serving_command
from specwatch.store.benchfile import read_bench_runs

ROOT = Path(__file__).resolve().parents[2]
COMMAND = os.environ.get("BENCH_SERVING_COMMAND", "")


def _importable(module: str) -> bool:
    """Whether ``module`` can be found (a folder named like its package on sys.path is not it: docs/validation has
    one, a namespace package without the module)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


if not COMMAND and not _importable(BENCH_SERVING):
    pytest.skip(f"{BENCH_SERVING} is not importable here (SGLang is not installed on CI: pyproject's sglang extra), "
                "and BENCH_SERVING_COMMAND names no command that runs it", allow_module_level=True)

PROFILE = """version = 1
[defaults]
engine = "reference"
model = "ref-tiny"
device = "cpu"
[[server]]
name = "ref-eagle3"
speculative = { algorithm = "EAGLE3", num_steps = 2 }
[workload]
concurrency = [1, 4]
run_requests = 8
max_new_tokens = 16
runs = 3
"""


def test_both_tools_on_one_server_side_by_side(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECWATCH_")}
    proc, url = handstarted.start(tmp_path / "server.log", {**env, "PYTHONPATH": str(ROOT / "src")})
    try:
        profile, prompts, bench, results = (tmp_path / n for n in ("p.toml", "prompts.jsonl", "bench.jsonl", "sw.json"))
        profile.write_text(PROFILE)
        cli = [sys.executable, "-m", "specwatch.cli"]
        made = subprocess.run([*cli, "bench-prompts", str(prompts), "--profiles", str(profile), "--url", url],
                              capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert made.returncode == 0, made.stderr
        sweep = subprocess.run([sys.executable, "-m", "pytest", "-m", "perf", "tests/perf/test_sweep.py", "-q", "-rs",
                                "-p", "no:cacheprovider", f"--specwatch-profiles={profile}",
                                f"--specwatch-server-url={url}", f"--specwatch-results={results}",
                                f"--specwatch-report-dir={tmp_path / 'r'}", f"--specwatch-history={tmp_path / 'h.db'}",
                                "--specwatch-yardstick=off"], capture_output=True, text=True, cwd=ROOT, env=env,
                               timeout=300)
        assert "measured at concurrency-1, concurrency-4" in sweep.stdout, sweep.stdout[-3000:]
        tokenizer = tinyhf.build(tmp_path / "tok")  # the reference server has no /model_info to name one
        prefix = shlex.split(COMMAND) if COMMAND else [sys.executable, "-m", BENCH_SERVING]
        for c in (1, 4):
            cmd = bench_serving_command(sys.executable, url, str(prompts), requests=8, output_len=16, concurrency=c,
                                        output_file=str(bench))
            cmd = [*prefix, *cmd[3:], "--tokenizer", str(tokenizer), "--model", "ref-tiny"]
            ran = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env={**os.environ,
                                 "HF_HUB_OFFLINE": "1"}, timeout=300)
            assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    finally:
        handstarted.stop(proc)
    runs = read_bench_runs(bench)
    assert [(r.max_concurrency, r.completed, r.output_len) for r in runs] == [(1, 8, 16), (4, 8, 16)]
    compared = subprocess.run([*cli, "compare-bench", str(results), str(bench)], capture_output=True, text=True,
                              cwd=ROOT, timeout=60)
    assert compared.returncode in (0, 1), compared.stderr  # a verdict either way: the CPU's noise decides which
    rows = [x for x in compared.stdout.splitlines() if x.startswith("concurrency-")]
    assert len(rows) == 30 and all(x.endswith(("agree", "DIFFER", "cannot tell")) for x in rows), compared.stdout
    assert json.loads(results.read_text())["results"], "the sweep recorded nothing"
