"""Session 7's figure: the concurrency sweeps (ref-small, one H200 and TP=2) and the per-round head/base
ratios of `specwatch ab` (ref-large on one H200, ref-small at TP=2), from docs/validation/data/session7.

Run from the repository root: python docs/validation/plot_session7.py
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from plotting import plt, save

DATA = Path("docs/validation/data/session7")
ROUND = re.compile(r"^\[ab\] round (\d+) (base|head): \S+/decode_tok_s ([\d.]+) tok/s")


def sweep(path: Path) -> dict[str, dict[int, float]]:
    """server -> concurrency -> median output tok/s over the runs."""
    out: dict[str, dict[int, float]] = {}
    for r in json.loads(path.read_text())["results"]:
        server, level, metric = r["key"].split("/")
        if metric == "output_throughput" and level.startswith("concurrency-"):
            out.setdefault(server, {})[int(level.split("-")[1])] = statistics.median(r["samples"])
    return out


def ratios(path: Path) -> list[float]:
    """Per-round head/base ratios (percent change) of one ab log."""
    med: dict[tuple[int, str], float] = {}
    for line in path.read_text().splitlines():
        if m := ROUND.match(line):
            med[(int(m[1]), m[2])] = float(m[3])
    return [(med[(r, "head")] / med[(r, "base")] - 1) * 100 for r in sorted({r for r, _ in med})
            if (r, "head") in med and (r, "base") in med]


fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
SWEEPS = ((DATA / "s7d-sweep-small.json", "-", "1 GPU"), (DATA / "s7b-sweep-small-tp2.json", "--", "TP=2"))
for path, style, where in SWEEPS:
    for server, levels in sorted(sweep(path).items()):
        xs = sorted(levels)
        left.plot(xs, [levels[x] for x in xs], style, marker="o", label=f"{server} ({where})")
left.set_xscale("log", base=2)
left.set_yscale("log")
left.set_xlabel("requests in flight (concurrency)")
left.set_ylabel("output tok/s (median of 5 runs)")
left.set_title("ref-small sweep on H200: speculation pays at every level")
left.legend(fontsize=7)
groups = [("ref-large 1 GPU, ~2.5% slower", "s7a-ab-slow-*.txt", "tab:red"),
          ("ref-large 1 GPU, A/A", "s7a-ab-same-*.txt", "tab:green"),
          ("ref-small TP=2, GPU sleep", "s7c-ab-tp2-slow-*.txt", "tab:orange"),
          ("ref-small TP=2, A/A", "s7c-ab-tp2-same-*.txt", "tab:blue")]
for i, (_, pattern, color) in enumerate(groups):
    ys = [y for p in sorted(DATA.glob(pattern)) for y in ratios(p)]
    right.scatter([i] * len(ys), ys, color=color, alpha=0.7)
right.axhline(0, color="grey", lw=0.8)
right.set_xticks(range(len(groups)), [g[0] for g in groups], rotation=20, fontsize=7)
right.set_ylabel("head / base per round, %")
right.set_title("specwatch ab: one dot per alternating round (fresh boots)")
sys.exit(save(fig, "docs/validation/plot-session7.png"))
