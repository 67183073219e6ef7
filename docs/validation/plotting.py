"""What the validation plots share: a headless backend and how a figure is written."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

__all__ = ["plt", "save"]


def save(fig, out: str) -> int:
    """Write ``fig`` to ``out`` at the plots' resolution; 0 for sys.exit."""
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")
    return 0
