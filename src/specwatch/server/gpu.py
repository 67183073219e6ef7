"""GPU discovery: what nvidia-smi says of this host's GPUs (the machine fingerprint's facts), and disjoint
GPU sets for pytest-xdist workers."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping

from specwatch.errors import UsageError
from specwatch.signals.devices import select_visible, visible_devices
from specwatch.signals.installed import Runner, run_command
from specwatch.signals.nvidiasmi import (
    GpuReport,
    parse_cuda_version,
    parse_gpu_query,
    parse_serial_bus,
    parse_topology,
)


def gpu_report(runner: Runner = run_command, env: Mapping[str, str] | None = None) -> GpuReport:
    """What nvidia-smi says of the GPUs this process may use: with ``CUDA_VISIBLE_DEVICES`` set (``env``,
    default the process's), only the GPUs it names; the empty report without nvidia-smi or GPUs. The
    links between GPUs are asked for only when two or more count."""
    gpus = parse_gpu_query(runner(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]))
    if not gpus:
        return GpuReport()
    visible = visible_devices(os.environ if env is None else env)
    uuids = [ln.strip() for ln in (runner(["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"])
                                   or "").splitlines() if ln.strip()]
    uuids = uuids if len(uuids) == len(gpus) else []
    where = parse_serial_bus(runner(["nvidia-smi", "--query-gpu=serial,pci.bus_id", "--format=csv,noheader"]))
    where = where if len(where) == len(gpus) else []
    keep: list[int] | None = None
    if visible is not None:
        keep = select_visible(uuids or [""] * len(gpus), visible)
        if keep is not None:
            gpus = [gpus[i] for i in keep]
            uuids = [uuids[i] for i in keep] if uuids else []
            where = [where[i] for i in keep] if where else []
    if not gpus:  # CUDA_VISIBLE_DEVICES names none of them: the servers get no GPU
        return GpuReport()
    cuda = parse_cuda_version(runner(["nvidia-smi", "--version"])) or parse_cuda_version(runner(["nvidia-smi"]))
    topo = parse_topology(runner(["nvidia-smi", "topo", "-m"]), only=keep) if len(gpus) > 1 else None
    return GpuReport(tuple(gpus), tuple(uuids), tuple(where), cuda, topo["interconnect"] if topo else "none",
                     dict(topo["links"]) if topo else {})


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
