"""Reading nvidia-smi's clock samples, and the sampler's behaviour where there is no GPU."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from specwatch.load import gpuclock


def test_parse_line_reads_numbers_and_skips_unsupported_fields() -> None:
    assert gpuclock.parse_line("0, 1980, 3201, 41, 190.52, 37") == (
        0, {"sm_clock_mhz": 1980.0, "mem_clock_mhz": 3201.0, "temp_c": 41.0, "power_w": 190.52, "util_pct": 37.0})
    idx, row = gpuclock.parse_line("1, 345, 3201, 30, [N/A], 0")
    assert idx == 1 and "power_w" not in row and row["sm_clock_mhz"] == 345.0
    assert gpuclock.parse_line("garbage") is None
    assert gpuclock.parse_line("x, 1, 2, 3, 4, 5") is None


def test_summarize_takes_medians_and_busiest_picks_the_loaded_gpu() -> None:
    rows = {0: [{"sm_clock_mhz": c, "util_pct": 60.0} for c in (1900.0, 1980.0, 1965.0)],
            1: [{"sm_clock_mhz": 345.0, "util_pct": 0.0}]}
    result = gpuclock.summarize(rows)
    assert result["0"] == {"samples": 3.0, "sm_clock_mhz": 1965.0, "util_pct": 60.0}
    assert gpuclock.busiest_sm_clock(result) == 1965.0
    assert gpuclock.busiest_sm_clock({}) is None


def test_sampler_without_nvidia_smi_records_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with gpuclock.ClockSampler() as s:
        pass
    assert s.result == {}


def test_sampler_reads_a_looping_nvidia_smi(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\nwhile true; do echo '0, 1980, 3201, 40, 200.0, 55'; echo '1, 345, 3201, 30, 70.0, 0';"
                    " sleep 0.02; done\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with gpuclock.ClockSampler(interval_ms=20) as s:
        import time

        deadline = time.monotonic() + 5
        while len(s._samples.get(1, [])) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert s.result["0"]["sm_clock_mhz"] == 1980.0 and s.result["0"]["samples"] >= 3
    assert gpuclock.busiest_sm_clock(s.result) == 1980.0
    assert s._proc is not None and s._proc.poll() is not None  # nvidia-smi stopped with the block
