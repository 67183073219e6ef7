"""GPU discovery and disjoint GPU sets for pytest-xdist workers."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping

from specwatch.errors import UsageError
from specwatch.signals.devices import select_visible, visible_devices


def visible_gpus(environ: Mapping[str, str] | None = None) -> list[int]:
    """nvidia-smi indices of the GPUs this process may use: those ``CUDA_VISIBLE_DEVICES`` names (read
    as CUDA reads it, :func:`specwatch.signals.devices.visible_devices`), else every GPU nvidia-smi lists."""
    env = os.environ if environ is None else environ
    visible = visible_devices(env)
    if visible is not None:
        if all(tok.isdigit() for tok in visible):
            return list(dict.fromkeys(int(tok) for tok in visible))
        picked = select_visible(nvidia_smi(["--query-gpu=uuid", "--format=csv,noheader"]), visible)
        if picked is None:
            raise UsageError(f"CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES')!r} names a GPU UUID or MIG "
                             "instance that nvidia-smi does not list once: give GPU indices or full UUIDs")
        return picked
    return [int(m.group(1)) for line in nvidia_smi(["-L"]) if (m := re.match(r"GPU (\d+):", line))]


def nvidia_smi(args: list[str]) -> list[str]:
    """Non-empty output lines of ``nvidia-smi ARGS``; [] without nvidia-smi or when it fails."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [ln.strip() for ln in out.splitlines() if ln.strip()]


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
