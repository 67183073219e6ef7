"""The history drawn: one PNG per metric key and machine class, its change points marked (``specwatch history
plot``). matplotlib is imported only here, only when asked for."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable
from pathlib import Path

from specwatch.errors import UsageError
from specwatch.judge import changepoint
from specwatch.store.history_base import HistoryStore

__all__ = ["PLOT_INSTALL", "plot_series"]

#: What to run when matplotlib is missing (it comes with the ``test`` extra).
PLOT_INSTALL = "pip install 'specwatch[plot]' (or pip install matplotlib)"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", text).strip("_") or "x"


def plot_series(
    history: HistoryStore,
    out_dir: str | os.PathLike[str],
    *,
    keys: Iterable[str] | None = None,
    machine_class: str | None = None,
    alpha: float = 0.01,
    min_size: int = 3,
) -> list[Path]:
    """One PNG per metric key (profile/workload/metric) and machine class, change points marked.

    Each run is a dot per sample and a line through the medians; a dashed vertical line marks
    each change point found in the medians, labelled with its relative size.
    """
    try:
        import matplotlib
    except ImportError:
        raise UsageError(f"plots need matplotlib, which is not installed: {PLOT_INSTALL}") from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"plot folder {out}: {exc.strerror or exc}") from None
    classes = [machine_class] if machine_class is not None else history.machine_classes()
    written: list[Path] = []
    for mc in classes:
        for key in sorted(keys) if keys is not None else history.keys(mc):
            pts = [p for p in history.series(key, machine_class=mc) if p.machine_class == mc]
            if not pts:
                continue
            meds = [p.median for p in pts]
            # change points among the runs with a median (as `history changes`), placed at their runs
            known = [i for i, m in enumerate(meds) if math.isfinite(m)]
            cps = (changepoint.detect([meds[i] for i in known], alpha=alpha, min_size=min_size)
                   if len(known) >= 2 * min_size else [])
            fig, ax = plt.subplots(figsize=(9, 4))
            for i, p in enumerate(pts):
                ax.scatter([i] * len(p.samples), p.samples, s=8, alpha=0.35, color="tab:blue")
            ax.plot(range(len(meds)), meds, marker="o", color="tab:blue", label="median")
            for cp in cps:
                at = known[cp.index] - 0.5
                ax.axvline(at, color="tab:red", linestyle="--")
                ax.annotate(f"{cp.magnitude * 100:+.1f}% (p={cp.p:.2g})", (at, max(meds[i] for i in known)),
                            color="tab:red", fontsize=8, rotation=90, va="top", ha="right")  # fmt: skip
            direction = "higher is better" if pts[0].higher_is_better else "lower is better"
            ax.set_title(f"{key} on {mc or 'unknown machine'} ({direction})", fontsize=10)
            ax.set_xlabel("run (time order)")
            ax.set_ylabel(pts[0].unit)
            labels = [(p.commit or "")[:8] for p in pts]
            if any(labels) and len(labels) <= 40:
                ax.set_xticks(range(len(pts)), labels, rotation=60, fontsize=7)
            fig.tight_layout()
            path = out / f"{_slug(mc or 'unknown')}__{_slug(key.replace('/', '__'))}.png"
            fig.savefig(path, dpi=100)
            plt.close(fig)
            written.append(path)
    return written
