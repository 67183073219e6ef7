"""``specwatch report --html DIR``: the history as a static site that needs no server.

``index.html`` lists every metric key and machine class (runs, latest median, last change, latest
verdict, a sparkline); ``keys/<key>.html`` has, per machine class, a plot (inline SVG: every
sample, the run medians, each segment's median, change points marked), the change points and
every run with its verdict, commit, machine and engine. Open ``index.html`` from disk or publish
the folder (GitHub Pages: docs/ci/github-pages-report.yml).

Change points are those of ``specwatch history changes`` (partial runs left out). A run's verdict
is what the drift gate would say of it against the ``window`` complete runs before it, taken as a
baseline of that many sessions, each naming the machine it ran on (host, GPU identity), as baseline
sessions do: a fleet's history is judged with its machine term, not as one machine's
(:func:`specwatch.judge.compare.drift`). Every text is escaped.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from specwatch import __version__
from specwatch.errors import UsageError
from specwatch.judge import changepoint, compare
from specwatch.judge.variance import MachineSession
from specwatch.store.history_base import HistoryStore, SeriesPoint
from specwatch.store.machine import engine_text, run_machine
from specwatch.store.result import utc_now

#: verdicts shown in red / green
BAD, GOOD = frozenset({"regression"}), frozenset({"improvement"})
CSS = """body{font:14px/1.45 system-ui,sans-serif;margin:1.5em auto;max-width:1100px;padding:0 1em;color:#222}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:2em}table{border-collapse:collapse;margin:.5em 0 1em}
th,td{border-bottom:1px solid #ddd;padding:.25em .6em;text-align:left;vertical-align:middle}
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}.regression{color:#b00;font-weight:600}
.improvement{color:#080;font-weight:600}.partial{color:#888}.meta{color:#666}svg{max-width:100%;height:auto}
code{font-size:.95em}"""


@dataclass
class RunRow:
    """One run of one key on one machine class, as the page shows it."""

    point: SeriesPoint
    machine: dict[str, Any]
    verdict: str = ""
    message: str = ""


@dataclass
class Section:
    """One key on one machine class: its runs in time order and the change points among them."""

    key: str
    machine_class: str | None
    rows: list[RunRow]
    #: (position in ``rows``, change point) for each change point of the complete runs
    changes: list[tuple[int, changepoint.ChangePoint]] = field(default_factory=list)

    @property
    def unit(self) -> str:
        return self.rows[0].point.unit

    @property
    def higher_is_better(self) -> bool:
        return self.rows[0].point.higher_is_better


def _complete(p: SeriesPoint) -> bool:
    return not p.partial and math.isfinite(p.median) and bool(p.samples)


def _verdicts(rows: list[RunRow], *, window: int, tolerance: float, alpha: float) -> None:
    """Each complete run judged as the drift gate would, against the ``window`` complete runs before it and
    the ``window`` before it on its own machine: each a session of the machine it ran on, so that the run is
    judged as one on its machine once that holds enough of them, else as one on a new machine."""
    before: list[MachineSession] = []
    by_machine: dict[str, list[MachineSession]] = {}
    for row in rows:
        p = row.point
        if not _complete(p):
            row.verdict = "partial" if p.partial else "no samples"
            row.message = p.partial or "this run has no samples of the metric"
            continue
        machine = run_machine(row.machine, p.commit, p.time)
        if before:
            recent = before[-window:]
            sessions = [s for s in by_machine.get(machine, [])[-window:] if all(s is not r for r in recent)] + recent
            try:
                cmp, _ = compare.drift(list(p.samples), [x for s in sessions for x in s],
                                       higher_is_better=p.higher_is_better, requested=tolerance, alpha=alpha,
                                       sessions=sessions, machine=machine)
                row.verdict, row.message = cmp.verdict.value, cmp.message
            except UsageError as exc:  # e.g. a metric that can be 0, which a ratio cannot judge
                row.verdict, row.message = "not judged", str(exc)
        else:
            row.verdict, row.message = "first", "the first complete run: nothing before it to compare with"
        before.append(MachineSession(p.samples, machine))
        by_machine.setdefault(machine, []).append(before[-1])


def build_sections(history: HistoryStore, *, machine_class: str | None = None, alpha: float = 0.01,
                   test: str = "ttest", tolerance: float = 0.05, window: int = 5) -> list[Section]:
    """Every key on every machine class (or one class), with change points and verdicts."""
    machines = history.machines()
    classes = [machine_class] if machine_class is not None else history.machine_classes()
    sections = []
    for mc in classes:
        for key in history.keys(mc):
            points = [p for p in history.series(key, machine_class=mc) if p.machine_class == mc]
            if not points:
                continue
            rows = [RunRow(p, machines.get(p.run_id, {})) for p in points]
            complete = [i for i, r in enumerate(rows) if _complete(r.point)]
            found = changepoint.detect([rows[i].point.median for i in complete], alpha=alpha, test=test) \
                if len(complete) >= 6 else []
            _verdicts(rows, window=window, tolerance=tolerance, alpha=alpha)
            sections.append(Section(key, mc, rows, [(complete[cp.index], cp) for cp in found]))
    return sorted(sections, key=lambda s: (s.key, s.machine_class is None, s.machine_class or ""))


# -- the plot -------------------------------------------------------------------------------------
def _fmt(x: float) -> str:
    return f"{x:.4g}" if math.isfinite(x) else "–"


def _ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    raw = (hi - lo) / max(1, count - 1)
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def svg_plot(section: Section, *, width: int = 760, height: int = 300) -> str:
    """The section's runs as an inline SVG: samples (dots), medians (line), segment medians (dashed),
    change points (red dashed verticals with their size), partial runs hollow and grey."""
    rows = section.rows
    values = [x for r in rows for x in r.point.samples if math.isfinite(x)]
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    pad = (hi - lo) * 0.08 or abs(hi) * 0.05 or 1.0
    lo, hi = lo - pad, hi + pad
    left, right, top, bottom = 64, 16, 26, 70
    pw, ph = width - left - right, height - top - bottom
    step = pw / max(1, len(rows))

    def x(i: float) -> float:
        return left + (i + 0.5) * step

    def y(v: float) -> float:
        return top + ph * (hi - v) / (hi - lo)

    label = escape(f"{section.key} on {section.machine_class or '-'}")
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
           f'height="{height}" role="img" aria-label="{label}">',
           f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fff" stroke="#ccc"/>']
    for t in _ticks(lo, hi):
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y(t):.1f}" y2="{y(t):.1f}" stroke="#eee"/>'
                   f'<text x="{left - 6}" y="{y(t) + 4:.1f}" font-size="11" text-anchor="end">{_fmt(t)}</text>')
    direction = "higher is better" if section.higher_is_better else "lower is better"
    out.append(f'<text x="14" y="{top + ph / 2:.1f}" font-size="11" text-anchor="middle" '
               f'transform="rotate(-90 14 {top + ph / 2:.1f})">{escape(section.unit)} ({direction})</text>')
    bounds = [0, *[i for i, _ in section.changes], len(rows)]
    meds = ([section.changes[0][1].before_median, *[cp.after_median for _, cp in section.changes]]
            if section.changes else [_median_of(rows)])
    for a, b, med in zip(bounds, bounds[1:], meds, strict=False):
        if math.isfinite(med):
            out.append(f'<line class="segment" x1="{x(a - 0.5):.1f}" x2="{x(b - 0.5):.1f}" y1="{y(med):.1f}" '
                       f'y2="{y(med):.1f}" stroke="#2a8" stroke-width="2" stroke-dasharray="6 4"><title>segment '
                       f'median {_fmt(med)} {escape(section.unit)}</title></line>')
    dots = "".join(f"M{x(i):.1f} {y(s):.1f}h0" for i, r in enumerate(rows) for s in r.point.samples
                   if math.isfinite(s))
    if dots:  # every sample, as round dots of one path (a circle element each would weigh 5 times more)
        out.append(f'<path class="samples" d="{dots}" stroke="#1f77b4" stroke-opacity="0.4" stroke-width="4" '
                   'stroke-linecap="round" fill="none"/>')
    line = " ".join(f"{x(i):.1f},{y(r.point.median):.1f}" for i, r in enumerate(rows) if _complete(r.point))
    if line:
        out.append(f'<polyline points="{line}" fill="none" stroke="#1f77b4" stroke-width="1.5"/>')
    for i, r in enumerate(rows):
        p = r.point
        if not math.isfinite(p.median):
            continue
        look = 'fill="#fff" stroke="#999"' if p.partial else 'fill="#1f77b4" stroke="#fff"'
        tip = (f"run {p.run_id} · {p.time} · commit {p.commit or '-'} · median {_fmt(p.median)} {p.unit}"
               f" · n={len(p.samples)} · {r.verdict}" + (f" · partial: {p.partial}" if p.partial else ""))
        out.append(f'<circle class="run" cx="{x(i):.1f}" cy="{y(p.median):.1f}" r="4" {look}>'
                   f'<title>{escape(tip)}</title></circle>')
    for i, cp in section.changes:
        cx = x(i - 0.5)
        out.append(f'<line class="change" x1="{cx:.1f}" x2="{cx:.1f}" y1="{top}" y2="{top + ph}" stroke="#c00" '
                   f'stroke-dasharray="5 3"/><text x="{cx + 3:.1f}" y="{top - 8}" font-size="11" fill="#c00">'
                   f'{cp.magnitude * 100:+.1f}% (p={cp.p:.2g})</text>')
    every = max(1, math.ceil(len(rows) / 30))
    for i, r in enumerate(rows):
        if i % every == 0:
            label = escape((r.point.commit or str(r.point.run_id))[:8])
            out.append(f'<text x="{x(i):.1f}" y="{top + ph + 12}" font-size="10" text-anchor="end" '
                       f'transform="rotate(-45 {x(i):.1f} {top + ph + 12})">{label}</text>')
    out.append(f'<text x="{left + pw / 2:.1f}" y="{height - 4}" font-size="11" text-anchor="middle">'
               "run, in time order (labels: commit)</text></svg>")
    return "".join(out)


def _median_of(rows: Sequence[RunRow]) -> float:
    meds = sorted(r.point.median for r in rows if _complete(r.point))
    if not meds:
        return float("nan")
    n = len(meds)
    return (meds[n // 2] + meds[(n - 1) // 2]) / 2


def sparkline(section: Section, width: int = 120, height: int = 24) -> str:
    """A tiny line of the complete runs' medians, for the index."""
    meds = [r.point.median for r in section.rows if _complete(r.point)]
    if len(meds) < 2:
        return ""
    lo, hi = min(meds), max(meds)
    span = (hi - lo) or 1.0
    pts = " ".join(f"{2 + (width - 4) * i / (len(meds) - 1):.1f},{2 + (height - 4) * (hi - m) / span:.1f}"
                   for i, m in enumerate(meds))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} '
            f'{height}"><polyline points="{pts}" fill="none" stroke="#1f77b4" stroke-width="1.5"/></svg>')


# -- the pages ------------------------------------------------------------------------------------
def _page(title: str, body: str, *, home: str = "") -> str:
    nav = f'<p><a href="{escape(home)}">← all keys</a></p>' if home else ""
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{escape(title)}</title>\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n<style>{CSS}</style>\n</head>\n'
            f"<body>\n{nav}<h1>{escape(title)}</h1>\n{body}\n</body>\n</html>\n")


def _cell(text: object, cls: str = "") -> str:
    return f'<td class="{escape(cls)}">{escape(str(text))}</td>' if cls else f"<td>{escape(str(text))}</td>"


def _verdict_cell(r: RunRow) -> str:
    """The verdict, coloured, its full message on hover."""
    cls = r.verdict if r.verdict in BAD | GOOD else "partial" if r.point.partial else ""
    return f'<td class="{cls}" title="{escape(r.message)}">{escape(r.verdict.replace("_", " "))}</td>'


def _machine(fp: dict[str, Any]) -> tuple[str, str, str]:
    """(host, GPUs, engine with version) of a fingerprint, '-' where not recorded."""
    gpus = fp.get("gpu_model") or ""
    if gpus and fp.get("gpu_count"):
        gpus = f"{fp['gpu_count']} × {gpus}"
    engine = engine_text(fp)
    return str(fp.get("host_id") or "-"), str(gpus or "-"), engine or "-"


def _section_html(s: Section, anchor: str) -> str:
    mc = s.machine_class or "unknown machine class"
    rows = s.rows
    hosts = sorted({_machine(r.machine)[0] for r in rows} - {"-"})
    engines = sorted({_machine(r.machine)[2] for r in rows} - {"-"})
    parts = [f'<section id="{escape(anchor)}"><h2>{escape(mc)}</h2>',
             f'<p class="meta">{len(rows)} runs, {sum(not _complete(r.point) for r in rows)} partial or empty; '
             f"machines: {escape(', '.join(hosts) or 'not recorded')}; engines: "
             f"{escape(', '.join(engines) or 'not recorded')}</p>", svg_plot(s)]
    if s.changes:
        parts.append("<h3>Change points</h3><table><tr><th>at run</th><th>time</th><th>commit</th><th>before</th>"
                     "<th>after</th><th>change</th><th>p</th><th>meaning</th></tr>")
        for i, cp in s.changes:
            p = rows[i].point
            worse = (cp.magnitude < 0) == s.higher_is_better
            parts.append("<tr>" + _cell(p.run_id, "num") + _cell(p.time) + _cell(p.commit or "-")
                         + _cell(f"{_fmt(cp.before_median)} {s.unit}", "num")
                         + _cell(f"{_fmt(cp.after_median)} {s.unit}", "num")
                         + _cell(f"{cp.magnitude * 100:+.1f}%", "num") + _cell(f"{cp.p:.2g}", "num")
                         + _cell("regression" if worse else "improvement", "regression" if worse else "improvement")
                         + "</tr>")
        parts.append("</table>")
    else:
        parts.append("<p>No change points among the complete runs.</p>")
    parts.append("<h3>Runs</h3><table><tr><th>run</th><th>time</th><th>commit</th><th>machine</th><th>GPUs</th>"
                 "<th>engine</th><th>median</th><th>n</th><th>verdict vs the runs before</th></tr>")
    for r in rows:
        p = r.point
        host, gpus, engine = _machine(r.machine)
        parts.append("<tr>" + _cell(p.run_id, "num") + _cell(p.time) + _cell(p.commit or "-") + _cell(host)
                     + _cell(gpus) + _cell(engine) + _cell(f"{_fmt(p.median)} {p.unit}", "num")
                     + _cell(len(p.samples), "num") + _verdict_cell(r) + "</tr>")
    parts.append("</table></section>")
    return "\n".join(parts)


def page_names(keys: Sequence[str]) -> dict[str, str]:
    """A distinct file name per key (``keys/<slug>.html``), stable across builds."""
    names: dict[str, str] = {}
    taken: set[str] = set()
    for key in sorted(set(keys)):
        slug = re.sub(r"[^A-Za-z0-9._+-]+", "_", key.replace("/", "__")).strip("_.") or "key"
        if slug.lower() in taken:
            slug = f"{slug}-{hashlib.sha1(key.encode()).hexdigest()[:8]}"
        taken.add(slug.lower())
        names[key] = f"keys/{slug}.html"
    return names


def write_site(history: HistoryStore, out_dir: str | os.PathLike[str], *, machine_class: str | None = None,
               alpha: float = 0.01, test: str = "ttest", tolerance: float = 0.05, window: int = 5,
               title: str = "specwatch history") -> list[Path]:
    """Write ``index.html`` and one page per key under ``out_dir``; the paths written, index first."""
    sections = build_sections(history, machine_class=machine_class, alpha=alpha, test=test, tolerance=tolerance,
                              window=window)
    out = Path(out_dir)
    try:
        (out / "keys").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"report folder {out}: {exc.strerror or exc}") from None
    names = page_names([s.key for s in sections])
    by_key: dict[str, list[Section]] = {}
    for s in sections:
        by_key.setdefault(s.key, []).append(s)
    written = []
    about = (f'<p class="meta">From the history {escape(history.where)}, built {escape(utc_now())} by specwatch '
             f"{escape(__version__)}. Change points: {escape(test)} at alpha {alpha:g}, partial runs left out. "
             f"A run's verdict: the drift gate's (tolerance {tolerance:.0%}) against the {window} complete runs "
             f"before it and the {window} before it on its machine, each a session of the machine it ran on.</p>")
    for key, secs in by_key.items():
        body = [about, '<p>Machine classes: ' + ", ".join(
            f'<a href="#mc-{i}">{escape(s.machine_class or "unknown")}</a>' for i, s in enumerate(secs)) + "</p>"]
        body += [_section_html(s, f"mc-{i}") for i, s in enumerate(secs)]
        path = out / names[key]
        path.write_text(_page(key, "\n".join(body), home="../index.html"), encoding="utf-8")
        written.append(path)
    rows = []
    for key, secs in by_key.items():
        for i, s in enumerate(secs):
            latest = s.rows[-1]
            last = s.changes[-1] if s.changes else None
            at = s.rows[last[0]].point if last else None
            change = f"{last[1].magnitude * 100:+.1f}% at {at.commit or at.run_id}" if last and at else "none"
            rows.append(f'<tr><td><a href="{escape(names[key])}#mc-{i}">{escape(key)}</a></td>'
                        + _cell(s.machine_class or "-") + _cell(len(s.rows), "num")
                        + _cell(f"{_fmt(latest.point.median)} {s.unit}", "num") + _cell(change)
                        + _verdict_cell(latest)
                        + f"<td>{sparkline(s)}</td></tr>")
    index_body = about + (
        "<table><tr><th>key</th><th>machine class</th><th>runs</th><th>latest median</th><th>last change</th>"
        "<th>latest verdict</th><th>medians</th></tr>\n" + "\n".join(rows) + "\n</table>"
        if rows else "<p>The history holds no runs.</p>")
    index = out / "index.html"
    index.write_text(_page(title, index_body), encoding="utf-8")
    return [index, *written]
