"""A measurement that must also last a minimum time keeps running, and cycles its prompts."""

from __future__ import annotations

from pathlib import Path

from specwatch.load.measure import measure
from specwatch.load.workload import Workload
from specwatch.profiles.loading import parse_profiles
from specwatch.server.pool import ServerPool


def test_min_duration_keeps_measuring_past_the_runs(tmp_path: Path) -> None:
    ps = parse_profiles({"server": [{"name": "plain", "engine": "reference", "model": "ref-tiny", "device": "cpu"}]})
    prof = ps.get("plain")
    pool = ServerPool([prof], tmp_path, boot_timeout=120)
    try:
        server = pool.get(prof)
        notes: list[str] = []
        wl = Workload("w", runs=2, warmup=1, max_new_tokens=8, min_duration_s=1.5, same_prompts_each_run=False)
        m = measure(server, wl, notes.append)
    finally:
        pool.stop_all()
    assert len(m.runs) > 2 and m.wall_s >= 1.5
    assert all(r.completion_tokens == 8 for r in m.runs)
    assert any("≥ 1.5 s" in n for n in notes), notes
    assert m.gpu_state == {}  # no nvidia-smi here
