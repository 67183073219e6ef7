"""What ``nvidia-smi`` prints, parsed (pure): the GPUs, their driver and CUDA version, serials and PCI buses,
and the links between them; :class:`GpuReport`, the facts of the GPUs a process may use that the machine
fingerprint is built from (:func:`specwatch.store.machine.fingerprint`; :func:`specwatch.server.gpu.gpu_report`
asks nvidia-smi for them)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

__all__ = ["GpuReport", "parse_cuda_version", "parse_gpu_query", "parse_serial_bus", "parse_topology"]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PCIE_KINDS = ("PIX", "PXB", "PHB", "NODE", "SYS")


@dataclass(frozen=True)
class GpuReport:
    """What nvidia-smi says of the GPUs a process may use (those ``CUDA_VISIBLE_DEVICES`` names); the
    empty report is a machine without GPUs (or without nvidia-smi)."""

    gpus: tuple[tuple[str, str], ...] = ()  # (name, driver version) per GPU
    uuids: tuple[str, ...] = ()  # one per GPU, or none when nvidia-smi did not give one each
    where: tuple[tuple[str | None, str | None], ...] = ()  # (serial, PCI bus id) per GPU, or none
    cuda: str | None = None  # the driver's CUDA version
    interconnect: str = "none"  # between the GPUs: "nvlink", "pcie", "mixed" or "none" (one GPU)
    links: dict[str, int] = field(default_factory=dict)  # link kind -> GPU pairs joined by it


def parse_gpu_query(text: str | None) -> list[tuple[str, str]]:
    """Rows of ``nvidia-smi --query-gpu=name,driver_version --format=csv,noheader``."""
    rows = []
    for line in (text or "").splitlines():
        parts = [p.strip() for p in line.rsplit(",", 1)]
        if len(parts) == 2 and parts[0]:
            rows.append((parts[0], parts[1]))
    return rows


def parse_cuda_version(text: str | None) -> str | None:
    """CUDA version from ``nvidia-smi`` or ``nvidia-smi --version`` output."""
    m = re.search(r"CUDA Version\s*:?\s*([0-9][0-9.]*)", text or "")
    return m.group(1) if m else None


def parse_topology(text: str | None, only: Collection[int] | None = None) -> dict[str, Any]:
    """Summarise ``nvidia-smi topo -m``: link kinds between GPU pairs and one interconnect word.

    Returns ``{"links": {"NV18": 1}, "interconnect": "nvlink" | "pcie" | "mixed" | "none"}``;
    ``"pcie"`` covers PIX/PXB/PHB/NODE/SYS (``"sys"`` in ``"worst"`` when a pair crosses NUMA).
    ``only``: count the pairs among these GPU indices alone (the visible ones).
    """
    lines = [_ANSI.sub("", ln).rstrip("\n") for ln in (text or "").splitlines()]
    rows = [[c.strip() for c in ln.split("\t")] for ln in lines]
    cols = next((r for r in rows if len(r) > 1 and r[0] == "" and "GPU0" in r), None)
    if cols is None:
        return {"links": {}, "interconnect": "none", "worst": None}
    gpu_cols = {i: c for i, c in enumerate(cols) if re.fullmatch(r"GPU\d+", c)}
    links: Counter[str] = Counter()
    for cells in rows:
        if not re.fullmatch(r"GPU\d+", cells[0]):
            continue
        me = int(cells[0][3:])
        if only is not None and me not in only:
            continue
        for i, name in gpu_cols.items():
            # Header cell 0 is empty and row cell 0 is the row label, so indices line up.
            other = int(name[3:])
            if other <= me or i >= len(cells) or (only is not None and other not in only):
                continue
            links[cells[i]] += 1
    if not links:
        return {"links": {}, "interconnect": "none", "worst": None}
    nv = sum(v for k, v in links.items() if k.startswith("NV"))
    if nv == sum(links.values()):
        kind = "nvlink"
    elif nv:
        kind = "mixed"
    else:
        kind = "pcie"
    worst = None
    for k in reversed(_PCIE_KINDS):
        if k in links:
            worst = k
            break
    if worst is None:
        worst = min(links, key=lambda k: int(k[2:]) if k[2:].isdigit() else 0)
    return {"links": dict(sorted(links.items())), "interconnect": kind, "worst": worst}


def parse_serial_bus(text: str | None) -> list[tuple[str | None, str | None]]:
    """Rows of ``nvidia-smi --query-gpu=serial,pci.bus_id --format=csv,noheader``; "[N/A]" reads None."""
    def value(cell: str) -> str | None:
        cell = cell.strip()
        return None if not cell or cell.startswith("[") or cell.upper() == "N/A" else cell

    rows = [line.split(",") for line in (text or "").splitlines() if line.strip()]
    return [(value(r[0]), value(r[1])) for r in rows if len(r) == 2]
