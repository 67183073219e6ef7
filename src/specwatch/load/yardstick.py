"""The machine yardstick: a few seconds of work that share a served model's bottlenecks.

A decode step of a served model is a graph replay of memory-bound GEMVs, many small kernels whose
launches dominate, and a host round trip (replay, then wait for the result). The yardstick times
each of the three alone, so that a throughput number can be read against the machine it ran on:

- ``gemv_us``: one bf16 GEMV of a ``(4 × width) × width`` weight (128 MiB at width 4096, far beyond
  L2), the median over replays of a CUDA graph of :data:`GEMV_REPS` of them (GPU time, events);
- ``tiny_us``: one replay of a graph of :data:`TINY_KERNELS` elementwise kernels on 256 floats;
- ``roundtrip_us``: one replay of a one-kernel graph plus ``torch.cuda.synchronize()``, host time:
  the 10th percentile, because the host's scheduling noise lies above it (on an H200 the medians
  of six processes spread 9.5-15.2 µs, their 10th percentiles 9.1-10.7 µs); the median is kept as
  ``roundtrip_p50_us``.

On CPU (``device="cpu"``) the same three shapes run without graphs, with numpy (float32 matvec,
a loop of tiny ops, a tiny op and a read back), so CI exercises the path.

``score`` = 1000 / geometric mean of the three times in µs: higher is a faster machine. It is a
ratio scale only among yardsticks of the same ``version``, ``device`` kind, ``gpu`` model and
``width`` (:func:`specwatch.judge.yardstick.comparable`); its absolute value means nothing.

Run it in its own process (:func:`run_yardstick`), so the tester never holds a CUDA context:
``python -m specwatch.load.yardstick [--device cuda:0|cpu|auto] [--width N] [--seconds S] [--json]``.
torch and numpy are imported inside the functions only.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from specwatch.paths import with_specwatch_importable
from specwatch.server.process import die_with_parent

#: the format of the dict; a change of what is measured bumps it (scores of two versions never compare)
VERSION = 1
#: the widest hidden size timed: two (4 × width) × width bf16 weights are 4 GiB at 16384 (the
#: widest dense models' hidden size); beyond it the weights alone could exhaust a GPU or a host
MAX_WIDTH = 16384
#: the width when none is given, per device kind (a CPU run stays small and quick)
DEFAULT_WIDTH = {"cuda": 4096, "cpu": 1024}
GEMV_REPS = 8
TINY_KERNELS = 64
#: fewest timings of each part, whatever the time budget
MIN_SAMPLES = 5
_KEYS = ("gemv_us", "tiny_us", "roundtrip_us")

log = logging.getLogger(__name__)


def score_of(times_us: dict[str, float]) -> float:
    """1000 / the geometric mean of the three times in µs (higher is faster)."""
    return 1000.0 / math.exp(statistics.fmean(math.log(times_us[k]) for k in _KEYS))


def _timed(parts: dict[str, Callable[[], float]], seconds: float) -> dict[str, float]:
    """Each part's median time in µs (the round trip's 10th percentile, and its median as
    ``roundtrip_p50_us``); the parts are interleaved, sample by sample, for ``seconds``."""
    got: dict[str, list[float]] = {k: [] for k in parts}
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or min(len(v) for v in got.values()) < MIN_SAMPLES:
        for name, sample in parts.items():
            got[name].append(sample())
    out = {k: float(statistics.median(v)) for k, v in got.items()}
    trips = sorted(got["roundtrip_us"])
    return {**out, "roundtrip_us": trips[len(trips) // 10], "roundtrip_p50_us": out["roundtrip_us"]}


def _cpu(width: int, seconds: float) -> dict[str, Any]:
    import numpy as np

    weights = np.full((4 * width, width), 1e-3, dtype=np.float32)
    x = np.full(width, 1.0, dtype=np.float32)
    out = np.empty(4 * width, dtype=np.float32)
    small = np.zeros(256, dtype=np.float32)
    clock = time.perf_counter

    def gemv() -> float:
        t = clock()
        np.matmul(weights, x, out=out)
        return (clock() - t) * 1e6

    def tiny() -> float:
        t = clock()
        for i in range(TINY_KERNELS):
            if i % 2:
                np.multiply(small, 0.5, out=small)
            else:
                np.add(small, 0.5, out=small)
        return (clock() - t) * 1e6

    def roundtrip() -> float:
        t = clock()
        np.add(small, 0.5, out=small)
        float(small[0])
        return (clock() - t) * 1e6

    for _ in range(3):  # warm up: pages touched, caches and clocks settled
        for part in (gemv, tiny, roundtrip):
            part()
    times = _timed({"gemv_us": gemv, "tiny_us": tiny, "roundtrip_us": roundtrip}, seconds)
    return {"device": "cpu", "gpu": None, "cpu": platform.processor() or platform.machine(), **times}


def _cuda(device: str, width: int, seconds: float) -> dict[str, Any]:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(f"device {device!r}: torch {torch.__version__} sees no CUDA device")
    dev = torch.device(device if ":" in device else "cuda:0")
    torch.cuda.set_device(dev)
    gen = torch.Generator(device=dev).manual_seed(0)
    mats = [torch.randn(4 * width, width, device=dev, dtype=torch.bfloat16, generator=gen) for _ in range(2)]
    x = torch.randn(1, width, device=dev, dtype=torch.bfloat16, generator=gen)
    out = torch.empty(1, 4 * width, device=dev, dtype=torch.bfloat16)
    small = torch.zeros(256, device=dev, dtype=torch.float32)

    def gemvs() -> None:
        for i in range(GEMV_REPS):  # two matrices in turn: neither stays in L2
            torch.mm(x, mats[i % 2].t(), out=out)

    def tinies() -> None:
        for i in range(TINY_KERNELS):
            if i % 2:
                small.mul_(0.5)
            else:
                small.add_(0.5)

    def one() -> None:
        small.add_(0.5)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up on a side stream before capture (cuBLAS workspaces)
        for _ in range(3):
            for body in (gemvs, tinies, one):
                body()
    torch.cuda.current_stream().wait_stream(side)
    graphs = {}
    for name, body in (("gemv", gemvs), ("tiny", tinies), ("one", one)):
        graphs[name] = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graphs[name]):
            body()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def gpu_us(graph: Any, per: int) -> Callable[[], float]:
        def sample() -> float:
            start.record()
            graph.replay()
            stop.record()
            stop.synchronize()
            return start.elapsed_time(stop) * 1e3 / per

        return sample

    def roundtrip() -> float:
        t = time.perf_counter()
        graphs["one"].replay()
        torch.cuda.synchronize()
        return (time.perf_counter() - t) * 1e6

    parts = dict(gemv_us=gpu_us(graphs["gemv"], GEMV_REPS), tiny_us=gpu_us(graphs["tiny"], 1), roundtrip_us=roundtrip)
    _timed(parts, min(0.5, seconds / 5))  # warm up: clocks up, graphs uploaded
    times = _timed(parts, seconds)
    props = torch.cuda.get_device_properties(dev)
    gbps = mats[0].numel() * mats[0].element_size() / (times["gemv_us"] * 1e-6) / 1e9
    info = {"device": "cuda", "gpu": props.name, "gemv_gbps": round(gbps, 1), "cuda": torch.version.cuda}
    return {**info, "torch": torch.__version__, **times}


def _resolve_device(device: str) -> str:
    if device != "auto":
        return device
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def measure_yardstick(device: str = "cuda", width: int | None = None, seconds: float = 3.0) -> dict[str, Any]:
    """The yardstick of this machine as a JSON-able dict (see the module docstring).

    ``device``: ``cuda``, ``cuda:N``, ``cpu`` or ``auto`` (CUDA when torch sees one). ``width``:
    the served model's hidden size (default :data:`DEFAULT_WIDTH` of the device kind). ``seconds``:
    the time spent timing, after a short warm up. RuntimeError when CUDA is asked for and absent.
    """
    device = _resolve_device(device)
    kind = "cpu" if device == "cpu" else "cuda"
    if kind == "cuda" and not device.startswith("cuda"):
        raise ValueError(f"device must be cpu, cuda, cuda:N or auto, got {device!r}")
    width = width or DEFAULT_WIDTH[kind]
    if not 1 <= width <= MAX_WIDTH or seconds <= 0:
        raise ValueError(f"width must be 1-{MAX_WIDTH} (a model's hidden size) and seconds > 0, got {width}, {seconds}")
    started = time.perf_counter()
    found = _cpu(width, seconds) if kind == "cpu" else _cuda(device, width, seconds)
    found = {k: round(v, 4) if k.endswith("_us") else v for k, v in found.items()}
    stamp = {"version": VERSION, "width": width, **found, "score": round(score_of(found), 4)}
    return {**stamp, "seconds": round(time.perf_counter() - started, 2)}


def valid(found: Any) -> bool:
    """Whether ``found`` looks like a yardstick: a dict with a version, a device and positive finite times and score."""
    if not isinstance(found, dict) or not isinstance(found.get("device"), str) or found.get("version") is None:
        return False
    nums = [found.get(k) for k in (*_KEYS, "score")]
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0 for v in nums)


def describe(found: dict[str, Any]) -> str:
    """One readable line: 'yardstick cuda NVIDIA H200, width 4096: GEMV 28.1 µs (4780 GB/s), ...'."""
    gbps = f" ({found['gemv_gbps']:g} GB/s)" if found.get("gemv_gbps") else ""
    return (
        f"yardstick {found['device']} {found.get('gpu') or found.get('cpu') or ''}, width {found['width']}: "
        f"GEMV {found['gemv_us']:.1f} µs{gbps}, {TINY_KERNELS} tiny kernels {found['tiny_us']:.1f} µs, "
        f"round trip {found['roundtrip_us']:.1f} µs; score {found['score']:.4g} (v{found['version']})"
    )


def run_yardstick(
    python: str,
    device_index: int | None,
    width: int | None = None,
    timeout_s: float = 180.0,
    *,
    seconds: float = 3.0,
    report: Callable[[str], None] | None = None,
) -> dict[str, Any] | None:
    """The yardstick measured by ``python`` in a child process, on the GPU with this nvidia-smi index
    (``CUDA_VISIBLE_DEVICES``; None: on the CPU); None when it fails or times out, with the reason
    logged (and given to ``report``). Never raises: a yardstick is worth no failed test run."""
    env = dict(os.environ)
    env["PYTHONPATH"] = with_specwatch_importable(env.get("PYTHONPATH"))
    if device_index is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(device_index)
    device = "cpu" if device_index is None else "cuda:0"
    argv = [python, "-m", "specwatch.load.yardstick", "--json", "--seconds", str(seconds), "--device", device]
    argv += ["--width", str(width)] if width else []
    where = "the CPU" if device_index is None else f"GPU {device_index}"

    def failed(why: str) -> None:
        text = f"specwatch: no machine yardstick on {where}: {why}"
        log.warning(text)
        if report is not None:
            report(text)

    try:
        # die_with_parent: a kill -9 of the run takes the child (and its CUDA context) with it; on
        # Ctrl-C or a timeout subprocess.run kills it itself
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env, check=False,
                              preexec_fn=die_with_parent)
    except subprocess.TimeoutExpired:
        failed(f"{' '.join(argv)} ran past {timeout_s:g} s")
        return None
    except OSError as exc:
        failed(f"{python}: {exc}")
        return None
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()
        failed(f"exit {proc.returncode}: {tail[-1] if tail else 'no output'}")
        return None
    for line in reversed(proc.stdout.strip().splitlines()):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if valid(found):
            return found
        break
    failed(f"no yardstick in its output: {proc.stdout.strip()[-200:]!r}")
    return None


def main(argv: list[str] | None = None) -> int:
    """Print the yardstick as one JSON line (``--json``) or one readable line."""
    p = argparse.ArgumentParser(prog="python -m specwatch.load.yardstick", description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto", help="cuda, cuda:N, cpu or auto (default: CUDA when torch sees one)")
    p.add_argument(
        "--width", type=int, default=None, help="the served model's hidden size (default: 4096 on CUDA, 1024 on CPU)"
    )
    p.add_argument("--seconds", type=float, default=3.0, help="time spent timing (default 3)")
    p.add_argument("--json", action="store_true", help="print one JSON line (default: one readable line)")
    args = p.parse_args(argv)
    try:
        found = measure_yardstick(args.device, args.width, args.seconds)
    except (RuntimeError, ValueError, ImportError) as exc:
        print(f"yardstick: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(found, sort_keys=True))
    else:
        print(describe(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
