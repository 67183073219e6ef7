"""What a run leaves behind: results file, history, baselines, pytest-benchmark JSON, summary table."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from specwatch.load import gpuclock
from specwatch.load.measure import METRICS
from specwatch.report import table as report
from specwatch.store.result import Result, ResultSet

#: The client's own share of a measured run above which its numbers are not the server's.
CLIENT_OVERHEAD_LIMIT = 0.01

if TYPE_CHECKING:
    from specwatch.run.session import Session


def results_of(session: Session) -> ResultSet:
    """Every memoised measurement of the session as a ResultSet (one Result per metric)."""
    rs = ResultSet(machine=session.fingerprint(), commit=session.commit())
    for (profile, workload), m in sorted(session.measurements.items()):
        extra = {"client_overhead": round(m.client_overhead, 5), "shared_host": m.shared_host,
                 "runs": len(m.runs), "concurrency": m.workload.concurrency,
                 "max_new_tokens": m.workload.max_new_tokens}
        sm_clock = gpuclock.busiest_sm_clock(m.gpu_state)
        if sm_clock is not None:
            extra["gpu_sm_clock_mhz"] = sm_clock
            extra["gpu_state"] = m.gpu_state
        for metric, (unit, higher) in METRICS.items():
            rs.add(Result.make(profile, workload, metric, unit=unit, higher_is_better=higher,
                               samples=m.samples(metric), extra=extra))
    return rs


def rows_of(session: Session) -> list[report.ReportRow]:
    """Verdict rows recorded by tests, plus a plain row for every measured key without one."""
    return rows_for(session.verdict_rows, results_of(session))


def rows_for(verdict_rows: list[report.ReportRow], rs: ResultSet) -> list[report.ReportRow]:
    """``verdict_rows`` plus a plain row for every output-throughput result without a verdict."""
    rows = list(verdict_rows)
    judged = {r.key for r in rows}
    for r in rs.results:
        if r.key not in judged and r.metric == "output_tok_s":
            rows.append(report.ReportRow(key=r.key, n=len(r.samples), median=_median(r.samples), unit=r.unit,
                                         samples=tuple(r.samples), higher_is_better=r.higher_is_better))
    return rows


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return (s[n // 2] + s[(n - 1) // 2]) / 2 if n else float("nan")


def summary_lines(rows: list[report.ReportRow], notes: list[str]) -> list[str]:
    """The end-of-run table, then the notes (failed findings, warnings)."""
    return [*report.summary_table(rows, title="specwatch results").splitlines(), *notes]


def note_lines(session: Session) -> list[str]:
    """One line per finding that failed, and warnings about how the session measured."""
    lines: list[str] = []
    for f in session.findings:
        if not f.ok:
            lines.append(f"[{f.check}] {f.profile}: {f.summary.splitlines()[0]}")
    for (profile, workload), m in sorted(session.measurements.items()):
        if m.client_overhead > CLIENT_OVERHEAD_LIMIT:
            lines.append(f"warning: the client's own parsing took {m.client_overhead:.1%} of a run of {profile} "
                         f"{workload} (limit {CLIENT_OVERHEAD_LIMIT:.0%}): its numbers include client time")
    if session.missing_baselines:
        lines.append(f"MISSING BASELINE: {len(session.missing_baselines)} drift test(s) compared against nothing "
                     f"(record with --update-baselines; --specwatch-require-baseline makes this a failure):")
        lines += [f"  {m}" for m in session.missing_baselines]
    shared = [k for k, m in session.measurements.items() if m.shared_host]
    if shared:
        lines.append(f"note: {len(shared)} measurement(s) ran while other xdist workers shared this host")
    return lines


def persist(session: Session, rs: ResultSet, rows: list[report.ReportRow], partial: str = "") -> list[Path]:
    """Write the run's files (under pytest-xdist, once, on the controller); returns their paths.

    History records perf measurements only: a run with no perf test (``-m "not perf"``, whose
    correctness checks also measure) adds no entry; an interrupted or partly failed run is marked
    ``partial`` in each result's extra, so change points can leave it out.
    """
    cfg = session.config
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
    perf_run = session.perf_tests_run > 0 or session.gathered.measured
    if cfg.history and perf_run:
        from specwatch.store.history import History

        path = cfg.path(cfg.history)
        path.parent.mkdir(parents=True, exist_ok=True)
        with History(path) as hist:
            hist.append(rs)
        written.append(path)
    if cfg.update_baselines:
        from specwatch.store.baseline import BaselineStore

        written += BaselineStore(cfg.path(cfg.baseline_dir)).record_all(
            rs, machine_class=session.machine_class(), keep_sessions=cfg.baseline_sessions)
        for warning in baseline_quality(rs):
            session.progress(warning)
        from specwatch.store.baseline import load_baseline

        for path in written:
            if path.suffix == ".json" and path.parent.parent == cfg.path(cfg.baseline_dir):
                base = load_baseline(path)
                prof = session.profiles.servers.get(base.profile)
                for note in base.resolution_notes((prof.tolerance if prof else None) or cfg.tolerance, cfg.alpha):
                    session.progress(note)
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        report.append_step_summary(report.markdown_summary(rows))
    return written


def baseline_quality(rs: ResultSet, noisy_cv: float = 0.05, outlier_mads: float = 4.0) -> list[str]:
    """Warnings for throughput samples about to become a baseline that would blunt every later verdict:
    a high run-to-run spread, or runs far from the rest (a transient on the machine while recording)."""
    from specwatch.judge import stats

    out = []
    for r in rs.results:
        if not r.metric.endswith("tok_s") or len(r.samples) < 3:
            continue
        med = stats.median(r.samples)
        mad = stats.median([abs(x - med) for x in r.samples]) * 1.4826
        outliers = [i for i, x in enumerate(r.samples) if mad > 0 and abs(x - med) > outlier_mads * mad]
        cv = stats.cv(r.samples)
        if cv > noisy_cv or outliers:
            why = f"cv {cv:.1%}" + (f", runs {outliers} are outliers" if outliers else "")
            out.append(f"baseline {r.key} is noisy ({why}): later drift verdicts can only see changes above "
                       f"that; re-record on a quiet machine or with more runs (--specwatch-runs 20)")
    return out
