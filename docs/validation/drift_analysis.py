"""Judge the drift experiment's samples (drift_experiment.py) with specwatch's own ``compare``.

For every repetition boot and slowdown level, three rules are replayed:
  runs/B: the runs against the experiment's B baseline boots, pooled (a one-session baseline when B is 1);
  runs/16: the runs against the 16 other boots' healthy levels, pooled, runs alone (leave one out);
  sessions/16: the same 16 sessions with sessions as the unit (``reference_sessions``), the drift gate's
      rule when a baseline kept 3 or more sessions.
Several data files (one experiment continued in several calls, or one per GPU of a machine class)
are judged as one: their boots are pooled in the order given, and every file's baseline boots
count as baseline boots. ``n`` is how many repetitions measured a level.
It prints the verdict counts per level, the spread of the healthy medians, and, with
``--write-results DIR``, one results file per boot's healthy level, for ``specwatch baseline update``.

    python docs/validation/drift_analysis.py docs/validation/data/drift-seq-gpu0.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from specwatch.judge.compare import compare
from specwatch.store.result import Result, ResultSet

METRIC = "decode_tok_s"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", nargs="+", help="drift_experiment.py output files, judged as one experiment")
    ap.add_argument("--tolerance", type=float, default=0.05)
    ap.add_argument("--write-results", metavar="DIR", help="one results file per boot's healthy level")
    ap.add_argument("--machine-from", metavar="RESULTS", help="copy the machine fingerprint from this results file")
    ap.add_argument("--commit", help="the commit the experiment ran (its results files carry it)")
    a = ap.parse_args(argv)
    docs = [json.loads(Path(f).read_text()) for f in a.data]
    doc = docs[0]
    boots = [dict(b, started=d["started"], source=Path(f).name) for f, d in zip(a.data, docs, strict=True)
             for b in d["boots"]]
    base = [b for b in boots if b["kind"] == "baseline"]
    reps = [b for b in boots if b["kind"] == "rep"]
    levels = sorted({lv for b in reps for lv in b["levels"]}, key=float)
    healthy = [b["levels"]["0"][METRIC] for b in boots]
    meds = np.array([statistics.median(x) for x in healthy])
    print(f"{' + '.join(a.data)}: {len(base)} baseline boots, {len(reps)} repetition boots, levels {levels}, "
          f"{doc['workload']}")
    print(f"healthy medians ({METRIC}): {' '.join(f'{m:.0f}' for m in meds)}; "
          f"spread (SD of log medians) {np.std(np.log(meds), ddof=1) * 100:.1f}%")
    pooled2 = [x for b in base for x in b["levels"]["0"][METRIC]]
    kinds = ("regression", "improvement", "noisy", "no_change", "inconclusive")
    print(f"\n| level | rule | n | {' | '.join(kinds)} |")
    print("|---|---|---|---|---|---|---|---|")
    for lv in levels:
        few, many = f"runs/{len(base)}", f"runs/{len(boots) - 1}"
        counts = {few: Counter(), many: Counter(), f"sessions/{len(boots) - 1}": Counter()}
        for me, b in enumerate(boots):
            if b["kind"] != "rep" or lv not in b["levels"]:
                continue
            cur = b["levels"][lv][METRIC]
            others = [x["levels"]["0"][METRIC] for j, x in enumerate(boots) if j != me]
            pooled = [v for s in others for v in s]
            if pooled2:
                counts[few][compare(cur, pooled2, tolerance=a.tolerance).verdict.value] += 1
            counts[f"runs/{len(boots) - 1}"][compare(cur, pooled, tolerance=a.tolerance).verdict.value] += 1
            counts[f"sessions/{len(boots) - 1}"][
                compare(cur, pooled, tolerance=a.tolerance, reference_sessions=others).verdict.value] += 1
        for rule, c in counts.items():
            if not c:
                continue
            cells = " | ".join(str(c.get(k, 0)) for k in kinds)
            print(f"| {lv}% | {rule} | {sum(c.values())} | {cells} |")
    if a.write_results:
        out = Path(a.write_results)
        out.mkdir(parents=True, exist_ok=True)
        machine = ResultSet.load(a.machine_from).machine if a.machine_from else {}
        for k, b in enumerate(boots):
            lv = b["levels"]["0"]
            when = dt.datetime.fromisoformat(b["started"]) + dt.timedelta(seconds=lv.get("t_s", 0.0))
            rs = ResultSet(machine=dict(machine), commit=a.commit, created=when.isoformat())
            extra = {"runs": len(lv[METRIC]), "concurrency": 1, "max_new_tokens": doc["workload"]["max_new_tokens"],
                     "source": f"{b['source']} boot {k}"}
            if lv.get("gpu_state"):
                extra["gpu_state"] = lv["gpu_state"]
            for metric, unit, higher in (("decode_tok_s", "tok/s", True), ("output_tok_s", "tok/s", True),
                                         ("itl_ms", "ms", False)):
                rs.add(Result.make(doc["profile"], "single-stream", metric, unit=unit, higher_is_better=higher,
                                   samples=lv[metric], extra=extra))
            rs.save(out / f"boot{k:02d}.json")
        print(f"\nwrote {len(boots)} results files under {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
