"""Plot session 5: the bf16 near-tie flip the lossless check now tells from a bug, and the
h200x2-nvlink baseline's seven sessions (two leases) replayed leave-one-out through the drift gate.

    python docs/validation/plot_session5.py docs/validation/plot-session5.png
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from loo_sessions import replay
from plotting import plt, save

S5 = Path(__file__).parent / "data" / "session5"
KEY = "single-stream/decode_tok_s"
#: From the -rA reports of data/session5/correct-tp{1,2}.txt (the lossless tests print them).
LOSSLESS = {"TP=1 (one H200)": (0.0771, None), "TP=2 (NVLink pair)": (0.0843, 0.0312)}
FACTORS = [1.0, 0.95, 0.92, 0.90, 0.88]
COLORS = {"regression": "tab:red", "noisy": "tab:orange", "no_change": "tab:green", "improvement": "tab:blue"}


def main(out: str) -> int:
    fig, (ax0, ax1, ax2) = plt.subplots(1, 3, figsize=(15, 4.6), gridspec_kw={"width_ratios": [1.0, 1.4, 1.2]})

    labels = list(LOSSLESS)
    for i, (noise, flip) in enumerate(LOSSLESS.values()):
        first = i == 0
        ax0.barh(i + 0.2, noise, height=0.35, color="tab:gray",
                 label="largest logprob difference (agreeing)" if first else None)
        ax0.barh(i - 0.2, 4 * noise, height=0.35, color="tab:blue", alpha=0.5,
                 label="near-tie bound (4x)" if first else None)
        if flip is not None:
            ax0.plot([flip], [i - 0.2], "r*", ms=14, label="the flip's margins (0.0312 + 0)")
    ax0.set_yticks(range(len(labels)), labels)
    ax0.set_xlabel("nats")
    ax0.set_title("lossless, ref-small bf16: noise, bound, flip")
    ax0.set_xlim(0, 0.5)
    ax0.legend(fontsize=8, loc="center right")

    for j, (prof, color) in enumerate((("eagle3-tuned", "tab:purple"), ("baseline-tuned", "tab:olive"))):
        doc = json.loads((S5 / f"baseline-x2-7-sessions-{prof}.json").read_text())
        sess = doc["metrics"][KEY]["sessions"]
        pos = [k + 1 + j * 0.35 for k in range(len(sess))]
        bp = ax1.boxplot([s["samples"] for s in sess], positions=pos, widths=0.3, patch_artist=True, showfliers=False)
        for patch, s in zip(bp["boxes"], sess, strict=True):
            patch.set_facecolor(color)
            patch.set_alpha(0.45 if s["host"] == sess[0]["host"] else 0.95)
        ax1.plot([], [], "s", color=color, label=prof)
    ax1.set_xticks(range(1, 8), [f"s{k}" for k in range(1, 8)])
    ax1.set_xlabel("session (s1-s6: 2026-11-29; s7, darker: 2026-11-30, other host)")
    ax1.set_ylabel("decode tok/s (20-21 runs of 256 tokens)")
    ax1.set_title("h200x2-nvlink baseline sessions, TP=2")
    ax1.legend(fontsize=8)

    width = 0.38
    for j, prof in enumerate(("eagle3-tuned", "baseline-tuned")):
        comps = replay(S5 / f"baseline-x2-7-sessions-{prof}.json", KEY, FACTORS)
        for k, f in enumerate(FACTORS):
            counts = Counter(c.verdict.value for c in comps[f])
            bottom = 0
            for v in ("regression", "noisy", "no_change", "improvement"):
                n = counts.get(v, 0)
                if n:
                    ax2.bar(k + (j - 0.5) * width, n, width * 0.95, bottom=bottom, color=COLORS[v],
                            hatch="//" if j else None, edgecolor="white", label=v.replace("_", " "))
                    bottom += n
    ax2.set_xticks(range(len(FACTORS)), [f"{round((1 - f) * 100)}%" for f in FACTORS])
    ax2.set_xlabel("slowdown of the held-out session (hatched: baseline-tuned)")
    ax2.set_ylabel("verdicts of 7 leave-one-out replays")
    ax2.set_title("drift gate at TP=2, sessions as the unit")
    handles, names = ax2.get_legend_handles_labels()
    seen = dict(zip(names, handles, strict=True))
    ax2.legend(seen.values(), seen.keys(), fontsize=8)
    return save(fig, out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "plot-session5.png"))
