"""Plot session 3: ref-large's drift windows and pytest runs over three machine leases, beside
ref-small's healthy wander from session 2.

    python docs/validation/plot_session3.py docs/validation/plot-session3-ref-large.png
"""

from __future__ import annotations

import datetime as dt
import json
import statistics
import sys
from pathlib import Path

from plotting import plt, save

DATA = Path(__file__).parent / "data"
S3 = DATA / "session3"
LEASES = {  # file → lease (one device call each)
    "drift-large-gpu0.json": 1, "drift-large-gpu1.json": 1,
    "drift-large-gpu0-b.json": 2, "drift-large-gpu1-b.json": 2,
}
COLORS = {"0": "tab:blue", "4": "tab:olive", "6": "tab:orange", "8": "tab:red"}


def _t(iso: str) -> dt.datetime:
    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00"))


def drift_windows() -> list[tuple[dt.datetime, str, float]]:
    """(time, level, median decode tok/s) of every window of the ref-large drift experiments."""
    out = []
    for name in LEASES:
        doc = json.loads((S3 / name).read_text())
        t0 = _t(doc["started"])
        for b in doc["boots"]:
            for lv, rec in b["levels"].items():
                out.append((t0 + dt.timedelta(seconds=rec["t_s"]), lv, statistics.median(rec["decode_tok_s"])))
    return out


def pytest_runs() -> list[tuple[dt.datetime, str, float]]:
    """(time, kind, median decode tok/s) of every pytest run of calls 2 and 3."""
    out = []
    for f in sorted((S3 / "pytest-call2").glob("*.json")) + sorted((S3 / "pytest-call3").glob("g*.json")):
        doc = json.loads(f.read_text())
        if "results" not in doc:
            continue
        kind = "slow8" if "slow8" in f.stem else ("record" if "record" in f.stem else "healthy")
        for r in doc["results"]:
            if r["metric"] == "decode_tok_s":
                out.append((_t(doc["created"]), kind, statistics.median(r["samples"])))
    return out


def relative(meds: list[float]) -> list[float]:
    m = statistics.mean(meds)
    return [100 * (x / m - 1) for x in meds]


def main(out: str) -> int:
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(13, 4.6), gridspec_kw={"width_ratios": [1, 2.4]})
    small = json.loads((DATA / "drift-seq-gpu0.json").read_text())
    s_meds = [statistics.median(b["levels"]["0"]["decode_tok_s"]) for b in small["boots"]]
    ax0.plot([0] * len(s_meds), relative(s_meds), "o", alpha=0.6, label="ref-small (session 2, one lease)")
    by_lease = {1: [], 2: []}
    for name, lease in LEASES.items():
        doc = json.loads((S3 / name).read_text())
        by_lease[lease] += [statistics.median(b["levels"]["0"]["decode_tok_s"]) for b in doc["boots"]]
    for x, lease in ((1, 1), (2, 2)):
        ax0.plot([x] * len(by_lease[lease]), relative(by_lease[lease]), "s", alpha=0.6,
                 label=f"ref-large, lease {lease}")
    ax0.set_xticks([0, 1, 2], ["ref-small", "ref-large\nlease 1", "ref-large\nlease 2"])
    ax0.set_ylabel("healthy median vs its group's mean (%)")
    ax0.axhline(0, color="grey", linewidth=0.8)
    ax0.set_title("healthy windows: host-bound vs GPU-bound", fontsize=10)

    t0 = min(t for t, _, _ in drift_windows())
    for lv, color in COLORS.items():
        pts = [(t, m) for t, level, m in drift_windows() if level == lv]
        if pts:
            ax1.plot([(t - t0).total_seconds() / 60 for t, _ in pts], [m for _, m in pts], "o", ms=4,
                     color=color, alpha=0.7, label=f"drift experiment, slowdown {lv}%")
    style = {"record": ("k", "D", "pytest: recorded session"), "healthy": ("tab:blue", "*", "pytest: healthy rerun"),
             "slow8": ("tab:red", "X", "pytest: --ref-fault-slowdown 8")}
    for kind, (color, marker, label) in style.items():
        pts = [(t, m) for t, k, m in pytest_runs() if k == kind]
        ax1.plot([(t - t0).total_seconds() / 60 for t, _ in pts], [m for _, m in pts], marker, color=color, ms=8,
                 linestyle="none", label=label, markeredgecolor="k", markeredgewidth=0.5)
    ax1.set_xlabel("minutes since the first window (three device calls, each a fresh machine lease)")
    ax1.set_ylabel("median decode tok/s (16 runs of 128 tokens)")
    ax1.set_title("large-eagle3-tuned on one H200: 0 / 4 / 6 / 8% slowdowns and the pytest runs", fontsize=10)
    ax1.legend(fontsize=7, loc="lower right", ncol=2)
    return save(fig, out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
