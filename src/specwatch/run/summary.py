"""What a run leaves behind: results file, history, baselines, pytest-benchmark JSON, summary table."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from specwatch.judge.levels import LEVEL_METRICS
from specwatch.load import gpuclock
from specwatch.load.measure import METRICS
from specwatch.report import table as report
from specwatch.run import specread
from specwatch.run.options import Config
from specwatch.run.record import RunRecord
from specwatch.store.result import Result, ResultSet

#: The client's own share of a measured run above which its numbers are not the server's.
CLIENT_OVERHEAD_LIMIT = 0.01

def results_of(measurements: Mapping[tuple[str, str], Any], machine: dict[str, Any], commit: str | None) -> ResultSet:
    """Every measurement of a run as a ResultSet (one Result per metric).

    A sweep level (``concurrency-16``, ``request-rate-2``) records bench_serving's metrics
    (:data:`LEVEL_METRICS`; accept length when every run has it, a latency when every run has one);
    every other workload records :data:`METRICS`, its keys unchanged.
    """
    rs = ResultSet(machine=machine, commit=commit)
    for (profile, workload), m in sorted(measurements.items()):
        extra = {"client_overhead": round(m.client_overhead, 5), "shared_host": m.shared_host,
                 "runs": len(m.runs), "concurrency": m.workload.concurrency,
                 "max_new_tokens": m.workload.max_new_tokens, **m.workload.describe()}
        if getattr(m, "neighbours", ()):  # what shared the host besides xdist workers (server.neighbours)
            extra["shared_with"] = list(m.neighbours)
        if served := getattr(m, "served", lambda: None)():  # whose boot-to-boot spread its keys' priors are
            extra["served"] = served.text()
        sm_clock = gpuclock.busiest_sm_clock(m.gpu_state)
        if sm_clock is not None:
            extra["gpu_sm_clock_mhz"] = sm_clock
            extra["gpu_state"] = m.gpu_state
        for metric, (unit, higher) in (LEVEL_METRICS if m.workload.level else METRICS).items():
            samples = m.samples(metric)
            if any(math.isnan(x) for x in samples):
                continue  # not reported by this server (accept length) or not defined (ITL of 1-token outputs)
            said = m.dropped_note(metric)
            rs.add(Result.make(profile, workload, metric, unit=unit, higher_is_better=higher, samples=samples,
                               extra={**extra, "dropped_runs": said} if said else extra))
        for result in specread.results(profile, workload, m, extra):  # accept length, cycle cost
            rs.add(result)
    return rs


#: The extra key of a sweep gate's per-level rows and of its crossover row (:func:`sweep_lines`).
SWEEP, CROSSOVER = "sweep", "crossover"
#: The sweep table's latency columns: metric -> header.
SWEEP_COLUMNS = {"p99_ttft_ms": "p99 TTFT ms", "p99_itl_ms": "p99 ITL ms", "p99_tpot_ms": "p99 TPOT ms",
                 "p99_e2e_latency_ms": "p99 e2e ms"}


def annotate_results(rs: ResultSet, rows: Iterable[report.ReportRow]) -> None:
    """Write each sweep level's verdict (and the crossover) into the spec server's level results, so
    the results file carries them beside the numbers."""
    by_key = {r.key: r for r in rs.results}
    for row in rows:
        level, cross = row.extra.get(SWEEP), row.extra.get(CROSSOVER)
        if level:
            prefix = f"{level['spec']}/{level['level']}/"
            verdict = {"baseline": level["baseline"], "metric": level["metric"], "speedup": level["speedup"],
                       "p": row.p, "verdict": level["verdict"]}
            for key, result in by_key.items():
                if key.startswith(prefix):
                    result.extra["vs_baseline"] = verdict
        if cross:
            for result in rs.results:
                if result.profile == cross["spec"] and result.workload in cross["levels"]:
                    result.extra["crossover"] = {k: cross[k] for k in ("level", "verdict", "minimum", "gate")}


def sweep_lines(rows: Sequence[report.ReportRow]) -> list[str]:
    """The sweep table: per level, output throughput of both servers, the speedup, p99 latencies
    (spec / baseline), accept length and the level's verdict; then the crossover."""
    levels = [r.extra[SWEEP] for r in rows if r.extra.get(SWEEP)]
    if not levels:
        return []
    head = ("level", "output tok/s spec / base", "speedup", *(SWEEP_COLUMNS[c] for c in SWEEP_COLUMNS), "accept",
            "verdict")
    body = []
    for lv in levels:
        spec, base = lv["spec_metrics"], lv["baseline_metrics"]
        cells = [lv["level"], f"{_fmt(spec.get('output_throughput'))} / {_fmt(base.get('output_throughput'))}",
                 f"{lv['speedup']:.2f}x"]
        cells += [f"{_fmt(spec.get(c))} / {_fmt(base.get(c))}" for c in SWEEP_COLUMNS]
        cells += [_fmt(spec.get("accept_length")), lv["verdict"].replace("_", " ")]
        body.append(tuple(cells))
    widths = [max(len(str(c[i])) for c in (head, *body)) for i in range(len(head))]
    first = levels[0]
    out = [f"specwatch sweep: {first['spec']} vs {first['baseline']} (medians over runs; p99 cells spec / baseline; "
           f"verdict: {first['metric']} at spec_margin {first['margin']:+g})",
           "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip(),
           "  ".join("-" * w for w in widths)]
    out += ["  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip() for cells in body]
    out += [f"crossover: {r.extra[CROSSOVER]['message']}" for r in rows if r.extra.get(CROSSOVER)]
    return out


def _fmt(x: float | None) -> str:
    return report.fmt_num(x) if x is not None else "-"


def table_rows(record: RunRecord) -> list[report.ReportRow]:
    """The record's verdict rows, plus a plain row for every output-throughput result without a verdict."""
    rows = list(record.rows)
    judged = {r.key for r in rows}
    for r in record.results.results:
        if r.key not in judged and r.metric in ("output_tok_s", "output_throughput"):
            rows.append(report.ReportRow(key=r.key, n=len(r.samples), median=_median(r.samples), unit=r.unit,
                                         samples=tuple(r.samples), higher_is_better=r.higher_is_better))
    return rows


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return (s[n // 2] + s[(n - 1) // 2]) / 2 if n else float("nan")


def summary_lines(rows: list[report.ReportRow], notes: list[str], engine: str = "") -> list[str]:
    """The end-of-run table (its title names ``engine``, e.g. "sglang 0.5.16", when recorded), the sweep
    table when a sweep was judged, then the notes (failed findings, warnings)."""
    from specwatch.run.specgates import summary_lines as speculation_lines

    title = f"specwatch results ({engine})" if engine else "specwatch results"
    return [*report.summary_table(rows, title=title).splitlines(), *sweep_lines(rows),
            *speculation_lines(rows), *notes]


def note_lines(findings: Iterable[Any], measurements: Mapping[tuple[str, str], Any],
               missing_baselines: list[str]) -> list[str]:
    """One line per finding that failed, and warnings about how the run measured."""
    lines: list[str] = []
    for f in findings:
        if not f.ok:
            lines.append(f"[{f.check}] {f.profile}: {f.summary.splitlines()[0]}")
    for (profile, workload), m in sorted(measurements.items()):
        if said := getattr(m, "dropped_note", str)():
            lines.append(f"note: {said}")
        if m.client_overhead > CLIENT_OVERHEAD_LIMIT:
            lines.append(f"warning: the client's own parsing took {m.client_overhead:.1%} of a run of {profile} "
                         f"{workload} (limit {CLIENT_OVERHEAD_LIMIT:.0%}): its numbers include client time")
    if missing_baselines:
        lines.append(f"MISSING BASELINE: {len(missing_baselines)} drift test(s) compared against nothing "
                     f"(record with --update-baselines; --specwatch-require-baseline makes this a failure):")
        lines += [f"  {m}" for m in missing_baselines]
    shared = [k for k, m in measurements.items() if m.shared_host]
    if shared:
        others = list(dict.fromkeys(n for m in measurements.values() for n in getattr(m, "neighbours", ())))
        what = ", ".join(others[:4]) + (f" and {len(others) - 4} more" if len(others) > 4 else "")
        if any(m.shared_host and not getattr(m, "neighbours", ()) for m in measurements.values()):
            what = "other xdist workers" + (f", {what}" if what else "")
        lines.append(f"note: {len(shared)} measurement(s) ran on a shared host ({what}); their load is in the numbers")
    return lines


def persist(record: RunRecord, cfg: Config, *, perf_run: bool, machine_class: Callable[[], str],
            tolerance_for: Callable[[str], float], progress: Callable[[str], None], partial: str = "") -> list[Path]:
    """Write the run's files (under pytest-xdist, once, on the controller); returns their paths.

    History records perf runs only (``perf_run``): a run with no perf test (``-m "not perf"``,
    whose correctness checks also measure) adds no entry; an interrupted or partly failed run is
    marked ``partial`` in each result's extra, so change points can leave it out.
    ``tolerance_for(profile)``: the drift tolerance a new baseline of that profile must resolve.
    """
    rs = record.results
    rows = table_rows(record)
    annotate_results(rs, rows)
    from specwatch.run.specgates import add_row_results

    add_row_results(rs, rows)  # the break-even samples of the cycle-cost gate
    if partial:
        for r in rs.results:
            r.extra["partial"] = partial
    written: list[Path] = []
    report_dir = cfg.path(cfg.report_dir)
    assert report_dir is not None
    written.append(rs.save(report_dir / "results-latest.json"))
    if cfg.results:
        written.append(rs.save(cfg.path(cfg.results)))
    written.append(report.write_benchmark_json(report_dir / "benchmark.json", rows,
                                               machine_info=rs.machine, commit_info={"id": rs.commit}))
    if cfg.history and perf_run and rs.results:  # a run of checks alone has rows, no samples to chart
        from specwatch.store.history import is_url, open_history

        target = cfg.history if is_url(cfg.history) else cfg.path(cfg.history)
        with open_history(target) as hist:
            hist.append(rs)
        if isinstance(target, Path):
            written.append(target)
        else:  # a database, not a file: named here, not among the files written
            progress(f"specwatch wrote this run to the history {hist.where}")
    refused = baseline_refusal(record, cfg)
    if refused:
        progress(refused)
    elif cfg.update_baselines:
        from specwatch.store.baseline import BaselineStore, load_baseline

        said: list[str] = []  # one line per baseline whose earlier sessions were dropped (asked for)
        written += BaselineStore(cfg.path(cfg.baseline_dir)).record_all(
            rs, machine_class=machine_class(), keep_sessions=cfg.baseline_sessions, replace=cfg.replace_baselines,
            said=said)
        for line in said:
            progress(f"specwatch: {line.replace('(asked for)', _asked(cfg))}")
        for warning in [*loaded_host(rs), *baseline_quality(rs)]:
            progress(warning)
        for path in written:
            if path.suffix == ".json" and path.parent.parent == cfg.path(cfg.baseline_dir):
                base = load_baseline(path)
                progress(f"specwatch: baseline {path}: {base.added()}")
                for note in base.resolution_notes(tolerance_for(base.profile), cfg.alpha):
                    progress(note)
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        report.append_step_summary(report.markdown_summary(rows))
    return written


def _asked(cfg: Config) -> str:
    """Which option asked for sessions to be dropped."""
    if cfg.replace_baselines:
        return "(--specwatch-replace-baselines)"
    return f"(--specwatch-baseline-sessions {cfg.baseline_sessions})"


def baseline_refusal(record: RunRecord, cfg: Config) -> str:
    """Why this run records no baseline ("" when it does): with --update-baselines, a test of the run failed
    (its floor, a check: a neighbour's load or a broken server would become the reference), unless
    --specwatch-record-failed asks for it anyway."""
    if not cfg.update_baselines or not record.verdict_failures or cfg.record_failed:
        return ""
    failed = [r.key for r in record.rows if r.verdict in ("fail", "regression") and r.gated]
    named = f" ({', '.join(failed[:3])}{f' and {len(failed) - 3} more' if len(failed) > 3 else ''})" if failed else ""
    return (f"specwatch: NO BASELINE RECORDED: {record.verdict_failures} test(s) of this run failed{named}, and a "
            "failed run would become the reference; fix the cause and record again, or record it anyway with "
            "--specwatch-record-failed")


def loaded_host(rs: ResultSet) -> list[str]:
    """The loud line of a baseline recorded from measurements that shared the host (other xdist workers, other
    inference servers or GPU processes): their load is in the baseline."""
    shared = sorted({r.profile + "/" + r.workload for r in rs.results if r.extra.get("shared_host")})
    if not shared:
        return []
    others = list(dict.fromkeys(n for r in rs.results for n in r.extra.get("shared_with") or ()))
    what = ", ".join(others[:4]) + (f" and {len(others) - 4} more" if len(others) > 4 else "") or "other xdist workers"
    return [f"specwatch: WARNING: recorded into the baselines while the host was shared ({what}) in "
            f"{len(shared)} measurement(s) ({', '.join(shared[:3])}{' ...' if len(shared) > 3 else ''}): their "
            "load is in the baseline, which later runs on a quiet host will look fast against; re-record on a quiet "
            "host (--specwatch-replace-baselines drops these sessions)"]


def baseline_quality(rs: ResultSet, noisy_cv: float = 0.05, outlier_mads: float = 4.0) -> list[str]:
    """Warnings for throughput samples about to become a baseline that would blunt every later verdict:
    a high run-to-run spread, or runs far from the rest (:func:`specwatch.judge.stats.recording_noise`)."""
    from specwatch.judge.stats import recording_noise

    out = []
    for r in rs.results:
        noise = recording_noise(r.samples, noisy_cv, outlier_mads) if r.metric.endswith("tok_s") else None
        if noise is not None and noise.noisy:
            why = f"cv {noise.cv:.1%}" + (f", runs {noise.outliers} are outliers" if noise.outliers else "")
            out.append(f"baseline {r.key} is noisy ({why}): later drift verdicts can only see changes above "
                       f"that; re-record on a quiet machine or with more runs (--specwatch-runs 20)")
        elif noise is not None:
            out.append(f"baseline {r.key}: runs {noise.outliers} lie up to {noise.worst:.1%} from the median of the "
                       f"others (cv {noise.cv:.1%}): a transient while recording; re-record if it was not the server")
    return out
