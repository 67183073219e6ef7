"""Judge the drift experiment's samples (drift_experiment.py) with specwatch's own ``compare``.

For every repetition boot and slowdown level, three rules are replayed:
  runs/2: the runs against the experiment's two baseline boots, pooled (a one- or two-session baseline);
  runs/16: the runs against the 16 other boots' healthy levels, pooled, runs alone (leave one out);
  sessions/16: the same 16 sessions with sessions as the unit (``reference_sessions``), the drift gate's
      rule when a baseline kept 3 or more sessions.
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

from specwatch.compare import compare
from specwatch.result import Result, ResultSet

METRIC = "decode_tok_s"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data")
    ap.add_argument("--tolerance", type=float, default=0.05)
    ap.add_argument("--write-results", metavar="DIR", help="one results file per boot's healthy level")
    ap.add_argument("--machine-from", metavar="RESULTS", help="copy the machine fingerprint from this results file")
    ap.add_argument("--commit", help="the commit the experiment ran (its results files carry it)")
    a = ap.parse_args(argv)
    doc = json.loads(Path(a.data).read_text())
    boots = doc["boots"]
    base = [b for b in boots if b["kind"] == "baseline"]
    reps = [b for b in boots if b["kind"] == "rep"]
    levels = sorted({lv for b in reps for lv in b["levels"]}, key=float)
    healthy = [b["levels"]["0"][METRIC] for b in boots]
    meds = np.array([statistics.median(x) for x in healthy])
    print(f"{a.data}: {len(base)} baseline boots, {len(reps)} repetition boots, levels {levels}, "
          f"{doc['workload']}")
    print(f"healthy medians ({METRIC}): {' '.join(f'{m:.0f}' for m in meds)}; "
          f"spread (SD of log medians) {np.std(np.log(meds), ddof=1) * 100:.1f}%")
    pooled2 = [x for b in base for x in b["levels"]["0"][METRIC]]
    print(f"\n| level | rule | {' | '.join(['regression', 'improvement', 'noisy', 'no_change', 'inconclusive'])} |")
    print("|---|---|---|---|---|---|---|")
    for lv in levels:
        counts = {"runs/2": Counter(), f"runs/{len(boots) - 1}": Counter(), f"sessions/{len(boots) - 1}": Counter()}
        for i, b in enumerate(reps):
            cur = b["levels"][lv][METRIC]
            me = len(base) + i
            others = [x["levels"]["0"][METRIC] for j, x in enumerate(boots) if j != me]
            pooled = [v for s in others for v in s]
            counts["runs/2"][compare(cur, pooled2, tolerance=a.tolerance).verdict.value] += 1
            counts[f"runs/{len(boots) - 1}"][compare(cur, pooled, tolerance=a.tolerance).verdict.value] += 1
            counts[f"sessions/{len(boots) - 1}"][
                compare(cur, pooled, tolerance=a.tolerance, reference_sessions=others).verdict.value] += 1
        for rule, c in counts.items():
            cells = " | ".join(str(c.get(k, 0)) for k in ("regression", "improvement", "noisy", "no_change",
                                                          "inconclusive"))
            print(f"| {lv}% | {rule} | {cells} |")
    if a.write_results:
        out = Path(a.write_results)
        out.mkdir(parents=True, exist_ok=True)
        machine = ResultSet.load(a.machine_from).machine if a.machine_from else {}
        for k, b in enumerate(boots):
            lv = b["levels"]["0"]
            when = dt.datetime.fromisoformat(doc["started"]) + dt.timedelta(seconds=lv.get("t_s", 0.0))
            rs = ResultSet(machine=dict(machine), commit=a.commit, created=when.isoformat())
            extra = {"runs": len(lv[METRIC]), "concurrency": 1, "max_new_tokens": doc["workload"]["max_new_tokens"],
                     "source": f"{Path(a.data).name} boot {k}"}
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
