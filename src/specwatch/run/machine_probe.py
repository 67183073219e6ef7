"""The run's machine yardstick: measured once per pytest session, lazily, before the first server boot.

It goes into the fingerprint (``machine.yardstick`` of the results file, and so each baseline session
recorded from it), and the drift gate reads it against the baseline sessions' yardsticks
(:mod:`specwatch.judge.yardstick`). It runs in a child process (:func:`specwatch.load.yardstick.run_yardstick`),
in the Python of the first server profile that needs a GPU, on the first GPU of this worker's set (the
GPU that profile's server is booted on; ``CUDA_VISIBLE_DEVICES`` as :mod:`specwatch.signals.devices` reads
it, through :func:`specwatch.server.gpu.visible_gpus`). ``--specwatch-yardstick``: ``auto`` measures on GPU
runs only (CI on CPU stays fast), ``on`` on CPU runs too (the tester's own Python), ``off`` never.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from specwatch.profiles.profile import ProfileSet
from specwatch.run.options import Config

#: seconds the child may take: torch's import and CUDA's start, then a few seconds of timing
TIMEOUT_S = 180.0


def yardstick_before_boot(
    cfg: Config, profiles: ProfileSet, gpus: tuple[int, ...], progress: Callable[[str], None]
) -> dict[str, Any] | None:
    """The yardstick of this run's machine, or None (off, a CPU run under ``auto``, or it failed: said
    through ``progress``). ``gpus``: this worker's GPU set, nvidia-smi indices (empty on CPU)."""
    from specwatch.load.yardstick import describe, run_yardstick

    if cfg.yardstick == "off" or (cfg.yardstick == "auto" and not gpus):
        return None
    first = next((p for p in profiles.servers.values() if p.gpus_needed), None) if gpus else None
    python = first.interpreter() if first is not None else sys.executable
    where = f"GPU {gpus[0]}" if gpus else "the CPU"
    progress(f"specwatch: measuring the machine yardstick on {where} (--specwatch-yardstick {cfg.yardstick})")
    found = run_yardstick(python, gpus[0] if gpus else None, None, TIMEOUT_S, report=progress)
    if found is not None:
        progress(f"specwatch: {describe(found)}")
    return found


def fingerprint_fields(found: dict[str, Any] | None) -> dict[str, Any]:
    """What the yardstick adds to the run's fingerprint: ``{"yardstick": found}``, or nothing."""
    return {"yardstick": found} if found else {}


__all__ = ["TIMEOUT_S", "fingerprint_fields", "yardstick_before_boot"]
