"""GPU discovery and disjoint GPU sets for pytest-xdist workers."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from specwatch.errors import UsageError


def visible_gpus(environ: dict[str, str] | None = None) -> list[int]:
    """GPU indices this process may use: CUDA_VISIBLE_DEVICES if set, else what nvidia-smi lists."""
    env = os.environ if environ is None else environ
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        return [int(x) for x in re.split(r"[,\s]+", cvd.strip()) if x.strip().isdigit()]
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [int(m.group(1)) for m in re.finditer(r"^GPU (\d+):", out, re.M)]


def worker_index(worker_id: str | None) -> int:
    """0 for the controller or ``gw0``, n for ``gwN``."""
    if not worker_id or worker_id == "master":
        return 0
    m = re.fullmatch(r"gw(\d+)", worker_id)
    if not m:
        raise UsageError(f"unexpected xdist worker id {worker_id!r}")
    return int(m.group(1))


def gpu_set_for_worker(gpus: list[int], worker_id: str | None, worker_count: int, per_worker: int) -> tuple[int, ...]:
    """A disjoint slice of ``gpus`` for this xdist worker, ``per_worker`` wide.

    Raises UsageError when the host has too few GPUs for that many workers, rather than letting
    two servers share a GPU silently.
    """
    if per_worker <= 0:
        return ()
    idx = worker_index(worker_id)
    needed = per_worker * max(worker_count, 1)
    if len(gpus) < needed:
        raise UsageError(f"{max(worker_count, 1)} xdist worker(s) × {per_worker} GPU(s) need {needed} GPUs, "
                         f"but only {len(gpus)} are visible ({gpus}); use fewer workers (-n) or a smaller tp")
    return tuple(gpus[idx * per_worker:(idx + 1) * per_worker])
