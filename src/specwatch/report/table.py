"""Rendering of measured results: terminal table, Markdown, JUnit properties, pytest-benchmark JSON.

Rendering only: every function takes :class:`ReportRow` values (one per result key) and returns
text or JSON-ready data; nothing here measures, compares or decides. ``ReportRow.from_comparison``
adapts anything shaped like ``compare.Comparison`` without importing it; the row type itself is judging's
(:class:`specwatch.judge.verdict.ReportRow`, the type of a verdict's rows).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from specwatch import __version__
from specwatch.judge.verdict import BAD_VERDICTS, ReportRow

TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


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


#: what a verdict reads as on a row its gate reports and does not judge
_REPORTED = {"regression": "worse", "improvement": "better"}


def fmt_verdict(verdict: str, gated: bool = True) -> str:
    """A verdict as the table shows it: a regression in capitals; on a row that is not gated, what it
    measured and "not gated" (never a regression)."""
    text = verdict.replace("_", " ")
    if not gated:
        return f"{_REPORTED.get(verdict, text)}, not gated"
    return text.upper() if verdict in BAD_VERDICTS else text


def fmt_row_change(row: ReportRow) -> str:
    """The change cell: the change, marked ``*`` when its sign differs from its medians' (a note says why)."""
    return fmt_change(row.change) + ("*" if row.change_disagrees else "")


def change_notes(rows: Sequence[ReportRow]) -> list[str]:
    """One line per row whose change and medians differ in sign: which estimate the change is."""
    out = []
    for r in rows:
        if r.change_disagrees:
            basis = r.change_basis or "the verdict's own estimate, not the medians'"
            out.append(f"  * {r.key}: change {fmt_change(r.change)} is {basis}; the medians shown differ by "
                       f"{fmt_change(r.medians_change)}")
    return out


def dropped_notes(rows: Sequence[ReportRow]) -> list[str]:
    """One line per row that left runs out of its samples, saying why."""
    return [f"  {r.key}: {r.dropped}" for r in rows if r.dropped]


COLUMNS = ("test/key", "n", "median ± CI", "unit", "baseline", "change", "tol", "p", "verdict")


def fmt_tolerance(tolerance: float | None) -> str:
    return "-" if tolerance is None else f"±{tolerance * 100:.3g}%"


def _cells(row: ReportRow) -> tuple[str, ...]:
    return (
        row.key,
        str(row.n),
        fmt_median_ci(row),
        row.unit,
        fmt_num(row.baseline_median),
        fmt_row_change(row),
        fmt_tolerance(row.tolerance),
        fmt_p(row.p),
        fmt_verdict(row.verdict, row.gated),
    )


# --------------------------------------------------------------------------------------------
# (a) terminal table


def summary_table(rows: Sequence[ReportRow], title: str = "specwatch results") -> str:
    """Plain-text table for the end of ``pytest -m perf``; numbers right-aligned."""
    if not rows:
        return f"{title}: no results"
    cells = [COLUMNS, *(_cells(r) for r in rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    right = {1, 2, 4, 5, 6, 7}

    def line(c: Sequence[str]) -> str:
        parts = [c[i].rjust(widths[i]) if i in right else c[i].ljust(widths[i]) for i in range(len(c))]
        return "  ".join(parts).rstrip()

    bad = sum(r.is_bad for r in rows)
    out = [f"{title}: {len(rows)} result(s), {bad} regression(s)", line(COLUMNS),
           "  ".join("-" * w for w in widths)]
    out += [line(c) for c in cells[1:]]
    out += [f"  {r.key}: {r.message}" for r in rows if r.is_bad and r.message]
    out += change_notes(rows) + dropped_notes(rows)
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
        out.append("|" + "|".join(["---", "--:", "--:", "---", "--:", "--:", "--:", "--:", "---"]) + "|")
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
    out += [f"- {_md_escape(line.strip())}" for line in change_notes(rows) + dropped_notes(rows)]
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
        ("gated", row.gated),
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
# (d) pytest-benchmark JSON, written through pytest-benchmark's own classes
#
# specwatch once re-implemented pytest-benchmark's Stats; pytest-benchmark 5.3.1 fixed its
# ``hd15iqr`` and the copy silently went wrong. Now the statistics, the per-benchmark document and
# the file's envelope all come from pytest-benchmark itself (a run-time dependency), so its
# ``compare`` command and dashboards read exactly what they would have written.


def _pytest_benchmark():
    from pytest_benchmark import plugin as pb_plugin
    from pytest_benchmark import stats as pb_stats

    return pb_stats, pb_plugin


def benchmark_stats(data: Sequence[float]) -> dict[str, Any]:
    """The ``stats`` block of a pytest-benchmark entry, computed by ``pytest_benchmark.stats.Stats``."""
    d = [float(x) for x in data]
    if not d:
        raise ValueError("no samples")
    pb_stats, _ = _pytest_benchmark()
    stats = pb_stats.Stats()
    for x in d:
        stats.update(x)
    return {**stats.as_dict(), "data": d, "iterations": 1}


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
    """pytest-benchmark's own ``machine_info`` (its hook implementation, with py-cpuinfo's cpu)."""
    _, pb_plugin = _pytest_benchmark()
    info = dict(pb_plugin.pytest_benchmark_generate_machine_info())
    info["python_build"] = list(info.get("python_build") or ())
    return info


@dataclass
class _Fixture:
    """The attributes of a ``BenchmarkFixture`` that ``pytest_benchmark.stats.Metadata`` reads."""

    name: str
    fullname: str
    group: str | None
    extra_info: dict[str, Any]
    param: Any = None
    params: Any = None
    cprofile_stats: Any = None
    has_error: bool = False


def _finite(samples: Sequence[float]) -> list[float]:
    """The samples pytest-benchmark's statistics can take: a NaN (a level a check could not time) or an infinity
    makes its ``statistics`` calls raise."""
    return [x for x in samples if math.isfinite(x)]


def _metadata(row: ReportRow, group: str | None) -> Any:
    pb_stats, _ = _pytest_benchmark()
    data, conversion = as_seconds(_finite(row.samples), row.unit)
    extra = {
        **dict(row.extra),
        "specwatch_version": __version__,
        "unit": row.unit,
        "conversion": conversion,
        "samples": [x if math.isfinite(x) else None for x in row.samples],  # JSON has no NaN: null, nothing lost
        "higher_is_better": row.higher_is_better,
        "verdict": row.verdict,
        "gated": row.gated,
        "baseline_median": row.baseline_median,
        "change": row.change,
        "p": row.p,
        "median_ci": [row.ci_low, row.ci_high] if row.ci_low is not None else None,
    }
    fixture = _Fixture(name=row.key, fullname=f"{row.nodeid}::{row.key}" if row.nodeid else row.key,
                       group=group, extra_info=extra)
    options = {"disable_gc": False, "timer": "specwatch", "min_rounds": len(data), "max_time": 0,
               "min_time": 0, "warmup": False}
    meta = pb_stats.Metadata(fixture, iterations=1, options=options)
    for x in data:
        meta.update(x)
    return meta


def benchmark_json(
    rows: Sequence[ReportRow],
    *,
    machine_info: Mapping[str, Any] | None = None,
    commit_info: Mapping[str, Any] | None = None,
    group: str | None = "specwatch",
    when: datetime | None = None,
) -> dict[str, Any]:
    """A pytest-benchmark ``--benchmark-json`` document of the rows that have finite samples.

    Built by pytest-benchmark's ``Metadata`` and its ``pytest_benchmark_generate_json`` hook:
    ``name`` is the result key, ``fullname`` the test node id plus the key, ``stats`` comes from
    :func:`as_seconds` samples, and ``extra_info`` keeps the raw samples, unit, direction and the
    specwatch verdict so nothing is lost. ``version`` is the installed pytest-benchmark's.
    """
    _, pb_plugin = _pytest_benchmark()
    doc = pb_plugin.pytest_benchmark_generate_json(
        config=None,
        benchmarks=[_metadata(r, group) for r in rows if _finite(r.samples)],
        include_data=True,
        machine_info=dict(machine_info) if machine_info is not None else default_machine_info(),
        commit_info=dict(commit_info) if commit_info is not None else {},
    )
    if when is not None:
        doc["datetime"] = when.isoformat()
    return doc


def write_benchmark_json(path: str | Path, rows: Sequence[ReportRow], **kwargs: Any) -> Path:
    """Write :func:`benchmark_json` atomically (sorted, indented); return the path."""
    from specwatch.store.atomic import write_text_atomic

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    return write_text_atomic(target, json.dumps(benchmark_json(rows, **kwargs), indent=4, sort_keys=True) + "\n")


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

