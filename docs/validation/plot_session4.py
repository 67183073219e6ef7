"""Plot session 4: ref-large's 0 / 10% repetitions on both GPUs (the 19-of-20 row), the re-recorded
h200x2-nvlink baseline sessions, and tuned against untuned over sockets with runs interleaved.

    python docs/validation/plot_session4.py docs/validation/plot-session4.png
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from plotting import plt, save

S4 = Path(__file__).parent / "data" / "session4"


def decode(doc: dict, profile: str) -> list[float]:
    """The decode tok/s samples of one profile in a results file."""
    return next(r["samples"] for r in doc["results"] if r["key"] == f"{profile}/single-stream/decode_tok_s")


def main(out: str) -> int:
    fig, (ax0, ax1, ax2) = plt.subplots(1, 3, figsize=(15, 4.6), gridspec_kw={"width_ratios": [1.6, 1.3, 0.8]})

    for g, marker in ((0, "o"), (1, "s")):
        doc = json.loads((S4 / f"drift-large-gpu{g}-c.json").read_text())
        boots = [b for b in doc["boots"] if b["kind"] == "rep"]
        for lv, color in (("0", "tab:blue"), ("10", "tab:red")):
            meds = [statistics.median(b["levels"][lv]["decode_tok_s"]) for b in boots]
            ax0.plot(range(len(meds)), meds, marker, color=color, alpha=0.7, linestyle="none",
                     label=f"GPU {g}, slowdown {lv}%")
    ax0.set_xlabel("boot (one repetition each: both levels, shuffled order)")
    ax0.set_ylabel("median decode tok/s (16 runs of 128 tokens)")
    ax0.set_title("ref-large, large-eagle3-tuned: 10% flagged 22/22, healthy 0/22", fontsize=10)
    ax0.legend(fontsize=7, loc="center right")

    files = [S4 / f"results-x2-s{i}.json" for i in range(1, 6)] + [S4 / "results-x2-all.json"]
    for profile, color in (("baseline-tuned", "tab:gray"), ("eagle3-tuned", "tab:green")):
        for i, f in enumerate(files):
            s = decode(json.loads(f.read_text()), profile)
            ax1.plot([i + 1] * len(s), s, ".", color=color, alpha=0.35)
            ax1.plot([i + 1], [statistics.median(s)], "D", color=color, markeredgecolor="k",
                     label=profile if i == 0 else None)
    ax1.set_xlabel("recording session (6 = the one with all four profiles)")
    ax1.set_ylabel("decode tok/s per run (256 tokens)")
    ax1.set_title("h200x2-nvlink baseline sessions, TP=2 (spread 2.9% / 1.1%)", fontsize=10)
    ax1.legend(fontsize=7, loc="center right")

    sock = json.loads((S4 / "results-socket.json").read_text())
    for x, profile, color in ((0, "eagle3-untuned", "tab:orange"), (1, "eagle3-tuned", "tab:purple")):
        s = decode(sock, profile)
        ax2.plot([x + 0.08 * ((i % 5) - 2) for i in range(len(s))], s, "o", color=color, alpha=0.6)
        ax2.plot([x - 0.3, x + 0.3], [statistics.median(s)] * 2, color="k")
    ax2.set_xticks([0, 1], ["untuned", "tuned"])
    ax2.set_xlim(-0.6, 1.6)
    ax2.set_ylabel("decode tok/s per run")
    ax2.set_title("sockets, TP=2, runs interleaved:\n-1.3% [-3.2%, +0.2%]", fontsize=10)
    return save(fig, out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
