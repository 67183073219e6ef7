"""Boot one server of a profile, measure it with specwatch and with SGLang's own ``bench_serving``, the same
workload on the same live server, and put the two side by side (``specwatch compare-bench``).

    python docs/validation/bench_serving_check.py PROFILE SERVER OUT_DIR [--repeats 3]

What a user does on their host, in order: ``specwatch bench-prompts`` writes one run's prompts of PROFILE's
``[workload] concurrency`` levels as a file both tools send as they are; ``pytest -m perf tests/perf/test_sweep.py
--specwatch-server-url`` measures the running server at every level (its results file: bench_serving's metrics,
one sample a run); ``python -m sglang.bench_serving --dataset-name custom`` runs each level ``--repeats`` times on
that file (the same prompts, output length, requests and concurrency; one line a run in ``bench.jsonl``; the levels
round by round, all in one Python: ``DRIVER``); then ``specwatch compare-bench``. The server is booted through
specwatch's pool (nothing is left running, even on an error) and the benchmark runs in the server's Python with its
profile's ``pythonpath`` and ``extra_env`` (the kit). OUT_DIR keeps ``prompts.jsonl``, ``specwatch.json`` (and
``specwatch.txt``, the pytest output), ``bench.jsonl`` (and ``bench.txt``, the benchmark's output) and
``compare.txt``; the exit code is compare-bench's (0 agree, 1 differ or nothing judged).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from specwatch.engines.sglang import bench_serving_command
from specwatch.load.workload import level_names, resolve
from specwatch.profiles.loading import load_profiles
from specwatch.server.gpu import visible_gpus
from specwatch.server.pool import ServerPool

ROOT = Path(__file__).resolve().parents[2]
#: every benchmark run in one Python: each argv through the benchmark's own command line (``cli_main`` parses
#: sys.argv, as ``python -m sglang.bench_serving`` does), so that its start (importing sglang: seconds, most of a
#: short run's) is paid once
DRIVER = """import json, sys
from sglang.benchmark.serving import cli_main
for argv in json.loads(sys.argv[1]):
    print("[bench-check] bench_serving " + " ".join(argv), flush=True)
    sys.argv = ["bench_serving", *argv]
    cli_main()
"""


def _run(argv: list[str], out: Path | None = None, env: dict[str, str] | None = None) -> int:
    """``argv`` to completion, its output to ``out`` (and echoed) or to this script's own; its exit code."""
    print(f"[bench-check] $ {' '.join(argv)}", flush=True)
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=out is not None, text=True, check=False)
    if out is not None:
        out.write_text(done.stdout + done.stderr)
        tail = (done.stdout + done.stderr).splitlines()[-25:]
        print("\n".join(f"    {line}" for line in tail), flush=True)
    print(f"[bench-check] exit {done.returncode}", flush=True)
    return done.returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_serving_check.py", description=__doc__.splitlines()[0])
    ap.add_argument("profile")
    ap.add_argument("server")
    ap.add_argument("out_dir")
    ap.add_argument("--repeats", type=int, default=3, help="bench_serving runs per level (their spread)")
    a = ap.parse_args(argv)
    profiles = load_profiles(a.profile)
    prof = profiles.get(a.server)
    out = Path(a.out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    prompts, bench, results = out / "prompts.jsonl", out / "bench.jsonl", out / "specwatch.json"
    bench.unlink(missing_ok=True)  # bench_serving appends
    levels = [resolve(n, profiles.workload) for n in level_names(profiles.workload) if n.startswith("concurrency-")]
    if not levels:
        print(f"[bench-check] {a.profile}: [workload] sets no concurrency levels", flush=True)
        return 2
    cli = [sys.executable, "-m", "specwatch.cli"]
    pool = ServerPool([prof], out / "servers", gpus=tuple(visible_gpus()),
                      progress=lambda msg: print(f"[bench-check] {msg}", flush=True))
    try:
        server = pool.get(prof)
        if _run([*cli, "bench-prompts", str(prompts), "--profiles", a.profile, "--server", prof.name, "--url",
                 server.url, "--output-file", str(bench)]):
            return 2
        _run([sys.executable, "-m", "pytest", "-m", "perf", "tests/perf/test_sweep.py", "-p", "no:cacheprovider",
              "-rA", f"--specwatch-profiles={a.profile}", f"--specwatch-server-url={server.url}",
              f"--specwatch-server-log={server.log_path}", f"--specwatch-results={results}",
              f"--specwatch-report-dir={out / 'reports'}", f"--specwatch-history={out / 'history.sqlite'}",
              "--specwatch-yardstick=off"], out / "specwatch.txt")
        env = {**os.environ, **prof.extra_env,
               "PYTHONPATH": os.pathsep.join([*prof.pythonpath, *filter(None, [os.environ.get("PYTHONPATH")])])}
        runs = [bench_serving_command(prof.python, server.url, str(prompts), requests=wl.run_size,
                                      output_len=wl.max_new_tokens, concurrency=wl.concurrency,
                                      output_file=str(bench))
                for _ in range(a.repeats) for wl in levels]  # round by round: a drift meets every level alike
        _run([runs[0][0], "-c", DRIVER, json.dumps([cmd[3:] for cmd in runs])], out / "bench.txt", env)
    finally:
        pool.stop_all()
    return _run([*cli, "compare-bench", str(results), str(bench)], out / "compare.txt")


if __name__ == "__main__":
    raise SystemExit(main())
