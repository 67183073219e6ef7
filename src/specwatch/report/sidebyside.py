"""specwatch's numbers beside another tool's for the same server and workload, as a plain-text table: per
workload and metric, both means, the difference, the allowance and the verdict of
:func:`specwatch.judge.crosscheck.agreement` (the table shows that verdict, never another)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specwatch.judge.crosscheck import AGREE, CANNOT_TELL, DIFFER, WIDEST, Agreement
from specwatch.report.table import fmt_num


@dataclass(frozen=True)
class SideRow:
    """One table row: a workload's metric, its unit, and its verdict."""

    workload: str
    unit: str
    found: Agreement


def _pct(x: float, sign: bool = True) -> str:
    if x != x:  # NaN
        return "-"
    return f"{x * 100:+.2f}%" if sign else f"±{x * 100:.2f}%"


def _mean(x: float, n: int, like: float) -> str:
    return "-" if not n else f"{fmt_num(x, like=like)} ({n})"


def side_by_side(rows: Sequence[SideRow], ours: str = "specwatch", theirs: str = "other",
                 widest: float = WIDEST) -> str:
    """The table; under it why each row that cannot tell cannot (one line for those whose spreads were too wide)
    and each difference with its basis; then the count of each verdict."""
    head = ("workload", "metric", "unit", f"{ours} (runs)", f"{theirs} (runs)", "difference", "allowance", "verdict")
    body = []
    for r in rows:
        a = r.found
        like = a.ours if a.ours == a.ours else a.theirs
        body.append((r.workload, a.metric, r.unit, _mean(a.ours, a.n_ours, like), _mean(a.theirs, a.n_theirs, like),
                     _pct(a.difference), _pct(a.allowance, sign=False),
                     a.verdict.upper() if a.verdict == DIFFER else a.verdict))
    widths = [max(len(c[i]) for c in (head, *body)) for i in range(len(head))]
    right = {3, 4, 5, 6}

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    out = [line(head), "  ".join("-" * w for w in widths), *(line(c) for c in body)]
    unsure = [r for r in rows if r.found.verdict == CANNOT_TELL]
    wide = [r for r in unsure if r.found.allowance == r.found.allowance]  # judged, but the spreads were too wide
    out += [f"  {r.workload} {r.found.metric}: cannot tell: {r.found.reason}" for r in unsure if r not in wide]
    if wide:
        out.append(f"  cannot tell, {len(wide)} row(s): within an allowance over ±{widest * 100:g}%: the runs spread "
                   "too much to show agreement (more runs, longer runs or a quieter machine narrow it)")
    out += [f"  {r.workload} {r.found.message}" for r in rows if r.found.verdict == DIFFER]
    count = {v: sum(r.found.verdict == v for r in rows) for v in (AGREE, DIFFER, CANNOT_TELL)}
    out.append(f"{count[AGREE]} agree, {count[DIFFER]} differ, {count[CANNOT_TELL]} cannot tell")
    return "\n".join(out)
