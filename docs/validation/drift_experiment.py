"""How small a slowdown does the drift gate catch? The repetition experiment of issue 7, section 5.

Boots one server profile again and again on one GPU and measures it with specwatch's own
workload code. The first ``--baseline-boots`` boots are healthy and become the baseline. Every
later boot is one repetition: it measures each slowdown level of ``--levels`` in a shuffled order,
switching the reference server's slowdown while it serves (``POST /ref/fault``, the runtime form
of ``--ref-fault-slowdown``). Each level's samples are later judged against the baseline by
``drift_analysis.py`` with specwatch's ``compare``, exactly as the drift gate judges them.

Everything lands in one JSON file, rewritten after every boot, so a run cut short keeps its data.

    PYTHONPATH=src python docs/validation/drift_experiment.py \\
        --profiles fixtures/profiles/gpu-ref-small.toml --profile eagle3-tuned --gpu 0 \\
        --baseline-boots 2 --reps 20 --levels 0,5,8 --runs 10 --budget-s 500 --out drift-gpu0.json

The first run (data/drift-parallel-*) ran one experiment per GPU at once; the second
(data/drift-seq-gpu0.json) ran one alone. The healthy medians spread about as much in both (4.2%
and 6.2%), so the noise is the machine's, not the neighbour's.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

from specwatch.load.measure import Measurement, measure
from specwatch.load.workload import WORKLOADS
from specwatch.profiles.profile import load_profiles
from specwatch.server.pool import ServerPool
from specwatch.store.result import atomic_write_json, utc_now

FORMAT_VERSION = 1


def set_slowdown(url: str, pct: float) -> None:
    """Reference-only: the server's slowdown switch, while it serves."""
    req = urllib.request.Request(f"{url}/ref/fault", data=json.dumps({"slowdown_pct": pct}).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert json.load(resp)["slowdown_pct"] == pct


def level_record(m: Measurement, order: int, t: float) -> dict:
    """The samples and machine state of one measured level (``t``: seconds since the start)."""
    gen = [r.gen_tput for r in m.decode_records if r.gen_tput]
    load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else None
    return {"order": order, "t_s": round(t, 1), "loadavg_1m": load,
            "decode_tok_s": m.samples("decode_tok_s"), "output_tok_s": m.samples("output_tok_s"),
            "itl_ms": m.samples("itl_ms"), "gpu_state": m.gpu_state, "wall_s": round(m.wall_s, 3),
            "server_gen_throughput_median": statistics.median(gen) if gen else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", required=True)
    ap.add_argument("--profile", default="eagle3-tuned")
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--baseline-boots", type=int, default=2)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--levels", default="0,4,6,8,10", help="slowdown percentages measured in every repetition")
    ap.add_argument("--budget-s", type=float, default=420.0, help="start no boot after this many seconds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", type=int, default=0, help="runs per level (default: the profile set's)")
    ap.add_argument("--min-duration-s", type=float, default=None,
                    help="measure each level for at least this long (default: the profile set's)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    levels = [float(x) for x in a.levels.split(",")]
    ps = load_profiles(a.profiles)
    prof = ps.get(a.profile)
    wl = replace(WORKLOADS["single-stream"], **ps.workload)
    if a.runs:
        wl = replace(wl, runs=a.runs)
    if a.min_duration_s is not None:
        wl = replace(wl, min_duration_s=a.min_duration_s)
    later = replace(wl, warmup=2, warmup_s=0.0)  # the GPU is already under load after the first level
    rng = random.Random(a.seed * 1000 + a.gpu)
    out = {"version": FORMAT_VERSION, "started": utc_now(), "profile": prof.name, "profiles": a.profiles,
           "gpu": a.gpu, "levels": levels, "workload": {"runs": wl.runs, "warmup": wl.warmup,
                                                          "warmup_s": wl.warmup_s, "max_new_tokens": wl.max_new_tokens,
                                                          "min_duration_s": wl.min_duration_s},
           "boots": []}
    t0 = time.monotonic()
    boot_s: list[float] = []
    with tempfile.TemporaryDirectory(prefix="drift-") as tmp:
        for k in range(a.baseline_boots + a.reps):
            per_boot = statistics.median(boot_s) if boot_s else 30.0
            if time.monotonic() - t0 + per_boot > a.budget_s:
                print(f"[gpu{a.gpu}] budget reached after {k} boots", flush=True)
                break
            kind = "baseline" if k < a.baseline_boots else "rep"
            order = [0.0] if kind == "baseline" else rng.sample(levels, len(levels))
            b0 = time.monotonic()
            pool = ServerPool([prof], Path(tmp) / f"boot{k}", gpus=(a.gpu,), boot_timeout=300,
                              progress=lambda msg: None)
            try:
                server = pool.get(prof)
                rec = {"kind": kind, "boot_seconds": round(server.boot_seconds or 0.0, 2), "levels": {}}
                for i, pct in enumerate(order):
                    set_slowdown(server.url, pct)
                    m = measure(server, wl if i == 0 else later)
                    rec["levels"][f"{pct:g}"] = level_record(m, i, time.monotonic() - t0)
            finally:
                pool.stop_all()
            boot_s.append(time.monotonic() - b0)
            out["boots"].append(rec)
            out["elapsed_s"] = round(time.monotonic() - t0, 1)
            atomic_write_json(a.out, out)
            meds = {lv: round(statistics.median(v["decode_tok_s"]), 1) for lv, v in rec["levels"].items()}
            print(f"[gpu{a.gpu}] boot {k} ({kind}) {boot_s[-1]:.1f} s: median decode tok/s {meds}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
