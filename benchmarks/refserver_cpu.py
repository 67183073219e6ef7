"""Boot time and batch-1 decode speed of the reference server, measured from outside (HTTP only).

    python benchmarks/refserver_cpu.py [--runs 3] [--tokens 256] [-- extra server flags]

Boot time: from starting ``python -m specwatch.refserver`` to the first 200 from ``/health``.
tok/s: completion_tokens / e2e_latency of one greedy request (ignore_eos) at a time, after one warmup.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, body: dict | None = None) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=120) as r:
            return r.status, r.read()
    except OSError:
        return 0, b""


def run_once(flags: list[str], tokens: int, requests: int) -> tuple[float, list[float], list[float]]:
    port = _port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "specwatch.refserver", "--port", str(port), *flags],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        while _get(url + "/health")[0] != 200:
            if proc.poll() is not None or time.perf_counter() - t0 > 120:
                raise RuntimeError("server did not boot")
            time.sleep(0.05)
        boot = time.perf_counter() - t0
        body = {"text": "The reference server measures itself.", "sampling_params": {
            "max_new_tokens": tokens, "temperature": 0.0, "ignore_eos": True}}
        _get(url + "/generate", body)  # warmup
        tps, accept = [], []
        for _ in range(requests):
            meta = json.loads(_get(url + "/generate", body)[1])["meta_info"]
            tps.append(meta["completion_tokens"] / meta["e2e_latency"])
            accept.append(meta.get("spec_accept_length", 1.0))
        return boot, tps, accept
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--requests", type=int, default=5)
    p.add_argument("flags", nargs="*", default=["--model-path", "ref-tiny"])
    a = p.parse_args()
    boots, tps, acc = [], [], []
    for _ in range(a.runs):
        b, t, x = run_once(a.flags, a.tokens, a.requests)
        boots.append(b)
        tps += t
        acc += x
    print(f"flags: {' '.join(a.flags)}")
    print(f"boot s: median {statistics.median(boots):.2f}, max {max(boots):.2f} over {len(boots)} boots")
    print(f"tok/s (batch 1, {a.tokens} tokens): median {statistics.median(tps):.1f}, min {min(tps):.1f}, "
          f"max {max(tps):.1f} over {len(tps)} requests; accept length {statistics.median(acc):.2f}")


if __name__ == "__main__":
    main()
