"""The GPUs' clocks, temperature and power while a measurement runs (``nvidia-smi -lms``).

A launch-bound decode step runs at whatever SM clock the GPU has settled on; a GPU that idled
sits at a few hundred MHz and needs load to ramp up. Recording the clocks beside every
measurement lets a drift verdict say whether the machine, not the server, changed.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import threading
from dataclasses import dataclass, field
from typing import Any

QUERY = "index,clocks.sm,clocks.mem,temperature.gpu,power.draw,utilization.gpu"
FIELDS = ("sm_clock_mhz", "mem_clock_mhz", "temp_c", "power_w", "util_pct")


def parse_line(line: str) -> tuple[int, dict[str, float]] | None:
    """One ``--format=csv,noheader,nounits`` line → (GPU index, readings); None if unreadable."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != len(FIELDS) + 1:
        return None
    try:
        index = int(parts[0])
    except ValueError:
        return None
    out: dict[str, float] = {}
    for name, raw in zip(FIELDS, parts[1:], strict=True):
        try:
            out[name] = float(raw)
        except ValueError:  # "[N/A]" or "[Not Supported]"
            continue
    return index, out


def summarize(samples: dict[int, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Per GPU (keyed by index as a string, for JSON): the median of each reading, and the count."""
    out: dict[str, dict[str, float]] = {}
    for index, rows in sorted(samples.items()):
        summary: dict[str, float] = {"samples": float(len(rows))}
        for name in FIELDS:
            values = [r[name] for r in rows if name in r]
            if values:
                summary[name] = round(statistics.median(values), 1)
        out[str(index)] = summary
    return out


@dataclass
class ClockSampler:
    """Context manager: samples every GPU every ``interval_ms`` while the block runs.

    Does nothing (``result`` stays empty) where ``nvidia-smi`` is missing, as on CPU machines.
    """

    interval_ms: int = 250
    result: dict[str, dict[str, float]] = field(default_factory=dict)
    _proc: subprocess.Popen[str] | None = None
    _thread: threading.Thread | None = None
    _samples: dict[int, list[dict[str, float]]] = field(default_factory=dict)

    def __enter__(self) -> ClockSampler:
        exe = shutil.which("nvidia-smi")
        if exe is None:
            return self
        try:
            self._proc = subprocess.Popen(
                [exe, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", f"-lms={self.interval_ms}"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            return self
        self._thread = threading.Thread(target=self._read, name="specwatch-gpuclock", daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            parsed = parse_line(line)
            if parsed is not None:
                self._samples.setdefault(parsed[0], []).append(parsed[1])

    def __exit__(self, *exc: Any) -> None:
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.result = summarize(self._samples)


def busiest_sm_clock(result: dict[str, dict[str, float]]) -> float | None:
    """The SM clock of the most utilised GPU (the one the server ran on), if sampled."""
    rows = [r for r in result.values() if "sm_clock_mhz" in r]
    if not rows:
        return None
    return max(rows, key=lambda r: (r.get("util_pct", 0.0), r["sm_clock_mhz"]))["sm_clock_mhz"]
