"""Rendering of measured results: terminal table, Markdown, JUnit properties, pytest-benchmark JSON.

Rendering only: every function takes :class:`ReportRow` values (one per result key) and returns
text or JSON-ready data; nothing here measures, compares or decides. ``ReportRow.from_comparison``
adapts anything shaped like ``compare.Comparison`` without importing it.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from specwatch import __version__

BAD_VERDICTS = frozenset({"regression"})
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


@dataclass(frozen=True)
class ReportRow:
    """One result key with its comparison, as the renderers need it.

    ``ci_low``/``ci_high`` bound the median (same unit); ``change`` is the relative change of
    medians against the baseline (+0.05 = 5 % higher); ``verdict`` is a plain string such as
    "regression", "improvement", "no_change", "inconclusive", "noisy" or "new".
    """

    key: str
    n: int
    median: float
    unit: str = ""
    ci_low: float | None = None
    ci_high: float | None = None
    baseline_median: float | None = None
    change: float | None = None
    p: float | None = None
    verdict: str = "new"
    higher_is_better: bool = True
    samples: tuple[float, ...] = ()
    nodeid: str = ""  # the pytest test that measured it, if any
    message: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_bad(self) -> bool:
        return self.verdict in BAD_VERDICTS

    @classmethod
    def from_comparison(
        cls,
        key: str,
        comparison: Any,
        *,
        unit: str = "",
        samples: Sequence[float] = (),
        median_ci: tuple[float, float] | None = None,
        nodeid: str = "",
        extra: Mapping[str, Any] | None = None,
    ) -> ReportRow:
        """Build a row from a ``compare.Comparison``-like object (duck-typed)."""
        verdict = getattr(comparison, "verdict", "new")
        return cls(
            key=key,
            n=int(getattr(comparison, "n_current", len(samples))),
            median=float(getattr(comparison, "median_current", _median(samples))),
            unit=unit,
            ci_low=median_ci[0] if median_ci else None,
            ci_high=median_ci[1] if median_ci else None,
            baseline_median=getattr(comparison, "median_reference", None),
            change=getattr(comparison, "ratio", 1.0) - 1.0 if hasattr(comparison, "ratio") else None,
            p=getattr(comparison, "p", None),
            verdict=str(getattr(verdict, "value", verdict)),
            higher_is_better=bool(getattr(comparison, "higher_is_better", True)),
            samples=tuple(float(x) for x in samples),
            nodeid=nodeid,
            message=str(getattr(comparison, "message", "")),
            extra=dict(extra or {}),
        )


def _median(samples: Sequence[float]) -> float:
    return float(statistics.median(samples)) if samples else math.nan


# --------------------------------------------------------------------------------------------
# number formatting


def _spec(scale: float) -> str:
    ax = abs(scale)
    if ax >= 1e6 or (0 < ax < 1e-3):
        return ".3e"
    if ax >= 100:
        return ".1f"
    if ax >= 1:
        return ".2f"
    return ".4f"


def fmt_num(x: float | None, like: float | None = None) -> str:
    """Compact human number (no exponent between 1e-3 and 1e6), at the precision of `like`."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return format(x, _spec(x if like is None else like))


def fmt_median_ci(row: ReportRow) -> str:
    """'82.00 ± 0.45': the larger half-width of the median's CI (conservative for skewed CIs)."""
    if row.ci_low is None or row.ci_high is None:
        return fmt_num(row.median)
    half = max(row.median - row.ci_low, row.ci_high - row.median)
    return f"{fmt_num(row.median)} ± {fmt_num(half, like=row.median)}"


def fmt_change(change: float | None) -> str:
    return "-" if change is None else f"{change * 100:+.1f}%"


def fmt_p(p: float | None) -> str:
    if p is None or math.isnan(p):
        return "-"
    return f"{p:.2g}" if p >= 0.001 else f"{p:.1e}"


def fmt_verdict(verdict: str) -> str:
    return verdict.replace("_", " ").upper() if verdict in BAD_VERDICTS else verdict.replace("_", " ")


COLUMNS = ("test/key", "n", "median ± CI", "unit", "baseline", "change", "p", "verdict")


def _cells(row: ReportRow) -> tuple[str, ...]:
    return (
        row.key,
        str(row.n),
        fmt_median_ci(row),
        row.unit,
        fmt_num(row.baseline_median),
        fmt_change(row.change),
        fmt_p(row.p),
        fmt_verdict(row.verdict),
    )


# --------------------------------------------------------------------------------------------
# (a) terminal table


def summary_table(rows: Sequence[ReportRow], title: str = "specwatch results") -> str:
    """Plain-text table for the end of ``pytest -m perf``; numbers right-aligned."""
    if not rows:
        return f"{title}: no results"
    cells = [COLUMNS, *(_cells(r) for r in rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    right = {1, 2, 4, 5, 6}

    def line(c: Sequence[str]) -> str:
        parts = [c[i].rjust(widths[i]) if i in right else c[i].ljust(widths[i]) for i in range(len(c))]
        return "  ".join(parts).rstrip()

    bad = sum(r.is_bad for r in rows)
    out = [f"{title}: {len(rows)} result(s), {bad} regression(s)", line(COLUMNS),
           "  ".join("-" * w for w in widths)]
    out += [line(c) for c in cells[1:]]
    out += [f"  {r.key}: {r.message}" for r in rows if r.is_bad and r.message]
    return "\n".join(out)


# --------------------------------------------------------------------------------------------
# (b) Markdown and the GitHub step summary


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_summary(rows: Sequence[ReportRow], title: str = "specwatch results") -> str:
    """A GitHub-flavoured Markdown section: heading, one-line status, table, regression notes."""
    bad = [r for r in rows if r.is_bad]
    status = f"**{len(bad)} regression(s)**" if bad else "no regressions"
    out = [f"### {title}", "", f"{len(rows)} result(s), {status}.", ""]
    if rows:
        out.append("| " + " | ".join(COLUMNS) + " |")
        out.append("|" + "|".join(["---", "--:", "--:", "---", "--:", "--:", "--:", "---"]) + "|")
        for r in rows:
            cells = [_md_escape(c) for c in _cells(r)]
            cells[0] = f"`{cells[0]}`"
            if r.is_bad:
                cells[-1] = f"**{cells[-1]}**"
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    for r in bad:
        if r.message:
            out.append(f"- `{_md_escape(r.key)}`: {_md_escape(r.message)}")
    return "\n".join(out).rstrip() + "\n"


def append_step_summary(markdown: str, env: Mapping[str, str] | None = None) -> Path | None:
    """Append to ``$GITHUB_STEP_SUMMARY`` when it is set; return the file written, else None."""
    target = (env if env is not None else os.environ).get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    path = Path(target)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(markdown if markdown.endswith("\n") else markdown + "\n")
    return path


# --------------------------------------------------------------------------------------------
# (c) JUnit XML properties


def junit_properties(row: ReportRow, prefix: str = "specwatch") -> list[tuple[str, str]]:
    """(name, value) pairs for one row, named ``<prefix>.<key>.<field>``; CI dashboards read them."""
    base = f"{prefix}.{row.key}"
    values: list[tuple[str, Any]] = [
        ("verdict", row.verdict),
        ("n", row.n),
        ("median", row.median),
        ("unit", row.unit),
        ("ci_low", row.ci_low),
        ("ci_high", row.ci_high),
        ("baseline_median", row.baseline_median),
        ("change", row.change),
        ("p", row.p),
        ("higher_is_better", row.higher_is_better),
    ]
    return [(f"{base}.{name}", _prop_value(v)) for name, v in values if v is not None and v != ""]


def _prop_value(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return repr(v)
    return str(v)


def properties_element(rows: Iterable[ReportRow], prefix: str = "specwatch") -> ET.Element:
    """A JUnit ``<properties>`` element with the properties of every row (for one testcase)."""
    props = ET.Element("properties")
    for row in rows:
        for name, value in junit_properties(row, prefix):
            ET.SubElement(props, "property", name=name, value=value)
    return props


def properties_xml(rows: Iterable[ReportRow], prefix: str = "specwatch") -> str:
    """``properties_element`` serialised."""
    return ET.tostring(properties_element(rows, prefix), encoding="unicode")


def add_user_properties(item: Any, rows: Iterable[ReportRow], prefix: str = "specwatch") -> None:
    """Plugin helper: add the rows' properties to a pytest item, as ``record_property`` would.

    pytest's junitxml writes ``item.user_properties`` as ``<property>`` entries of the testcase.
    Call it during the test (or from ``pytest_runtest_makereport`` for the "call" phase, also
    extending ``report.user_properties``). Existing names are not duplicated.
    """
    have = {name for name, _ in item.user_properties}
    for name, value in (p for row in rows for p in junit_properties(row, prefix)):
        if name not in have:
            item.user_properties.append((name, value))
            have.add(name)


# --------------------------------------------------------------------------------------------
# (d) pytest-benchmark-compatible JSON


def _quartiles(data: Sequence[float]) -> tuple[float, float]:
    """Q1 and Q3 exactly as pytest-benchmark's Stats computes them."""
    d = sorted(data)
    n = len(d)
    if n == 1:
        return d[0], d[0]
    if n % 2:
        k, q = n // 4, n % 4
        if q == 1:
            return 0.25 * d[k - 1] + 0.75 * d[k], 0.75 * d[3 * k] + 0.25 * d[3 * k + 1]
        return 0.75 * d[k] + 0.25 * d[k + 1], 0.25 * d[3 * k + 1] + 0.75 * d[3 * k + 2]
    return statistics.median(d[: n // 2]), statistics.median(d[n // 2 :])


def benchmark_stats(data: Sequence[float]) -> dict[str, Any]:
    """The ``stats`` block of a pytest-benchmark entry (same fields and definitions)."""
    d = [float(x) for x in data]
    if not d:
        raise ValueError("no samples")
    srt = sorted(d)
    mean = statistics.mean(d)
    stddev = statistics.stdev(d) if len(d) > 1 else 0.0
    q1, q3 = _quartiles(d)
    iqr = q3 - q1
    lo, hi = q1 - 1.5 * iqr, q3 + 1.5 * iqr
    ld15iqr = next((x for x in srt if x >= lo), srt[0]) if len(d) > 1 else d[0]
    # pytest-benchmark takes the first datum *above* Q3 + 1.5 IQR (or the max); kept identical
    hd15iqr = next((x for x in srt if x > hi), srt[-1]) if len(d) > 1 else d[0]
    iqr_out = sum(1 for x in d if x < lo or x > hi)
    sd_out = sum(1 for x in d if x < mean - stddev or x > mean + stddev)
    total = sum(d)
    return {
        "min": srt[0],
        "max": srt[-1],
        "mean": mean,
        "stddev": stddev,
        "rounds": len(d),
        "median": statistics.median(d),
        "iqr": iqr,
        "q1": q1,
        "q3": q3,
        "iqr_outliers": iqr_out,
        "stddev_outliers": sd_out,
        "outliers": f"{sd_out};{iqr_out}",
        "ld15iqr": ld15iqr,
        "hd15iqr": hd15iqr,
        "ops": len(d) / total if total else 0,
        "total": total,
        "data": d,
        "iterations": 1,
    }


def as_seconds(samples: Sequence[float], unit: str) -> tuple[list[float], str]:
    """Samples as pytest-benchmark's "seconds per round", and how they were converted.

    Time units are scaled to seconds; rates ("tok/s", "req/s") become seconds per unit (1/x), so
    pytest-benchmark's ``ops`` (rounds/total) is the harmonic-mean rate; anything else (accept
    length, ratios) is passed through unchanged and marked as such.
    """
    u = unit.strip()
    if u in TIME_UNITS:
        return [x * TIME_UNITS[u] for x in samples], "time"
    if u.endswith("/s") and all(x > 0 for x in samples):
        return [1.0 / x for x in samples], "inverse-rate"
    return [float(x) for x in samples], "raw"


def default_machine_info() -> dict[str, Any]:
    """The fields of pytest-benchmark's machine_info that need no extra packages."""
    uname = platform.uname()
    return {
        "node": uname.node,
        "processor": uname.processor,
        "machine": uname.machine,
        "python_compiler": platform.python_compiler(),
        "python_implementation": platform.python_implementation(),
        "python_implementation_version": platform.python_version(),
        "python_version": platform.python_version(),
        "python_build": list(platform.python_build()),
        "release": uname.release,
        "system": uname.system,
        "cpu": {},
    }


def benchmark_json(
    rows: Sequence[ReportRow],
    *,
    machine_info: Mapping[str, Any] | None = None,
    commit_info: Mapping[str, Any] | None = None,
    group: str | None = "specwatch",
    when: datetime | None = None,
) -> dict[str, Any]:
    """A pytest-benchmark ``--benchmark-json`` document of the rows that have samples.

    ``name`` is the result key, ``fullname`` the test node id plus the key, ``stats`` comes from
    :func:`as_seconds` samples, and ``extra_info`` keeps the raw samples, unit, direction and the
    specwatch verdict so nothing is lost. The ``version`` is pytest-benchmark's format version
    (5.x), which its loader expects; specwatch's own version is in ``extra_info``.
    """
    benchmarks = []
    for r in rows:
        if not r.samples:
            continue
        data, conversion = as_seconds(r.samples, r.unit)
        fullname = f"{r.nodeid}::{r.key}" if r.nodeid else r.key
        extra = {
            **dict(r.extra),
            "specwatch_version": __version__,
            "unit": r.unit,
            "conversion": conversion,
            "samples": list(r.samples),
            "higher_is_better": r.higher_is_better,
            "verdict": r.verdict,
            "baseline_median": r.baseline_median,
            "change": r.change,
            "p": r.p,
            "median_ci": [r.ci_low, r.ci_high] if r.ci_low is not None else None,
        }
        benchmarks.append(
            {
                "group": group,
                "name": r.key,
                "fullname": fullname,
                "params": None,
                "param": None,
                "extra_info": extra,
                "options": {"disable_gc": False, "timer": "specwatch", "min_rounds": len(data),
                            "max_time": 0, "min_time": 0, "warmup": False},
                "stats": benchmark_stats(data),
            }
        )
    return {
        "machine_info": dict(machine_info) if machine_info is not None else default_machine_info(),
        "commit_info": dict(commit_info) if commit_info is not None else {},
        "benchmarks": benchmarks,
        "datetime": (when or datetime.now(timezone.utc)).isoformat(),
        "version": "5.2.3",
    }


def write_benchmark_json(path: str | Path, rows: Sequence[ReportRow], **kwargs: Any) -> Path:
    """Write :func:`benchmark_json` atomically (sorted, indented); return the path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(benchmark_json(rows, **kwargs), indent=4, sort_keys=True) + "\n")
    tmp.replace(target)
    return target


def rows_from_results(doc: Mapping[str, Any]) -> list[ReportRow]:
    """Rows (no comparison) from a specwatch results document, for exports of a saved run."""
    rows = []
    for e in doc.get("results") or []:
        samples = tuple(float(x) for x in e.get("samples") or ())
        rows.append(
            ReportRow(
                key=e["key"],
                n=len(samples),
                median=_median(samples),
                unit=e.get("unit", ""),
                higher_is_better=bool(e.get("higher_is_better", True)),
                samples=samples,
                extra=dict(e.get("extra") or {}),
            )
        )
    return rows


def commit_info_from_results(doc: Mapping[str, Any]) -> dict[str, Any]:
    """pytest-benchmark ``commit_info`` from a results document's commit field."""
    commit = doc.get("commit")
    return {"id": commit or "unversioned", "dirty": False, "project": "server-under-test"} if commit else {}

