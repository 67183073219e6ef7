"""Leave-one-session-out replay of the drift gate on a stored baseline's own sessions.

Each recorded session in turn is the "current" run (as measured, and scaled by each slowdown
factor); the baseline is the other sessions, judged with sessions as the unit, as
``specwatch compare`` does for a baseline of 3 or more sessions. Prints the verdict per session.

    python docs/validation/loo_sessions.py docs/validation/data/session5/baseline-x2-7-sessions-eagle3-tuned.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter
from pathlib import Path

from specwatch.judge.compare import Comparison, compare


def replay(path: Path, key: str, factors: list[float]) -> dict[float, list[Comparison]]:
    """Per slowdown factor, the comparison of every session against the others."""
    sessions = [s["samples"] for s in json.loads(path.read_text())["metrics"][key]["sessions"]]
    out: dict[float, list[Comparison]] = {}
    for f in factors:
        out[f] = []
        for i, cur in enumerate(sessions):
            others = [s for j, s in enumerate(sessions) if j != i]
            out[f].append(compare([x * f for x in cur], [x for s in others for x in s], reference_sessions=others))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("baseline", type=Path)
    ap.add_argument("--key", default="single-stream/decode_tok_s")
    ap.add_argument("--factors", default="1.0,0.95,0.92,0.90,0.88")
    a = ap.parse_args(argv)
    doc = json.loads(a.baseline.read_text())["metrics"][a.key]["sessions"]
    print(f"{a.baseline.name}: {len(doc)} sessions, medians "
          f"{[round(statistics.median(s['samples']), 1) for s in doc]}, hosts {[s.get('host') for s in doc]}")
    for f, comps in replay(a.baseline, a.key, [float(x) for x in a.factors.split(",")]).items():
        counts = Counter(c.verdict.value for c in comps)
        changes = ", ".join(f"{c.change:+.1%}" for c in comps)
        print(f"  x{f:.2f}: {dict(counts)}  changes {changes}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
