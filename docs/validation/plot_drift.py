"""Plot the drift experiment: each boot's median decode tok/s per slowdown level, in boot order.

    python docs/validation/plot_drift.py docs/validation/data/drift-seq-gpu0.json docs/validation/plot-drift-levels.png
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from plotting import plt, save


def main(data: str, out: str) -> int:
    doc = json.loads(Path(data).read_text())
    boots = doc["boots"]
    levels = sorted({lv for b in boots for lv in b["levels"]}, key=float)
    fig, ax = plt.subplots(figsize=(9, 4.2))
    for lv, marker in zip(levels, "os^vD", strict=False):
        xs = [i for i, b in enumerate(boots) if lv in b["levels"]]
        ys = [statistics.median(boots[i]["levels"][lv]["decode_tok_s"]) for i in xs]
        ax.plot(xs, ys, marker=marker, linestyle="none", label=f"slowdown {lv}%")
    healthy = [statistics.median(b["levels"]["0"]["decode_tok_s"]) for b in boots]
    ax.axhline(statistics.median(healthy), color="grey", linewidth=0.8)
    ax.axvspan(-0.5, sum(b["kind"] == "baseline" for b in boots) - 0.5, color="grey", alpha=0.12,
               label="baseline boots")
    ax.set_xlabel("boot (in order; every repetition measures each level once, shuffled)")
    ax.set_ylabel("median decode tok/s (12 runs)")
    ax.set_title("eagle3-tuned on one H200: an 8% slowdown against the machine's own 6% wander")
    ax.legend(loc="lower right", fontsize=8)
    return save(fig, out)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
