"""The perf gates of the suite, judged with statistics and explained with numbers.

Each gate returns a :class:`~specwatch.judge.verdict.Verdict` (the checks' type too) and records
its report rows itself; tests in ``tests/perf`` only assert on it, so the same gates run from any
test file a user writes.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from specwatch.judge import compare, speculative, stats, tuning, yardstick
from specwatch.judge.cyclecost import Economics
from specwatch.judge.tuning import RoundsVerdict, tuning_effect
from specwatch.judge.verdict import Status, Verdict
from specwatch.report.table import ReportRow
from specwatch.run.specread import economics

if TYPE_CHECKING:
    from specwatch.judge.paired import RoundPrior
    from specwatch.load.measure import Measurement
    from specwatch.profiles.profile import ServerProfile
    from specwatch.run.session import Session

__all__ = ["DECODE_METRIC", "LEVEL_METRIC", "METRIC", "accept_length", "diagnose", "drift", "floor", "recorded",
           "speculation_beats_baseline", "speculation_by_level", "tuned_vs_untuned", "tuning_effect",
           "unread_difference"]

METRIC = "output_tok_s"
#: Speculation changes the decode phase only; its gates compare decode throughput (TTFT excluded).
DECODE_METRIC = "decode_tok_s"
#: A sweep level's gate compares bench_serving's output throughput (what the server sustains at that load).
LEVEL_METRIC = "output_throughput"
#: The gates' names (``Verdict.name``).
FLOOR, DRIFT, SPEC_VS_BASELINE, TUNED_VS_UNTUNED = "floor", "drift", "speculation beats baseline", "tuned vs untuned"
SPEC_BY_LEVEL = "speculation by load level"
#: what a relative gate's change is (the table says it when the medians of all runs differ in sign)
PAIRED_BASIS = "the paired rounds' (the geometric mean of each round's ratio, each round a fresh boot of both)"


def recorded(gate: Callable[..., Verdict]) -> Callable[..., Verdict]:
    """A gate hands its verdict rows to the session itself (summary table, results, benchmark.json,
    JUnit through the plugin), so a user's test that calls it needs no helper fixture."""

    @functools.wraps(gate)
    def run(session: Session, *args: Any, **kwargs: Any) -> Verdict:
        verdict = gate(session, *args, **kwargs)
        session.verdict_rows.extend(verdict.rows)
        return verdict

    return run


def _ci(samples: list[float]) -> tuple[float, float]:
    return stats.bootstrap_median_ci(samples)


def accept_length(m: Measurement) -> float | None:
    """The accept length of a measurement, as :func:`speculative.measured_accept_length` defines it:
    the batch-weighted mean of its Decode-line windows, else its requests' exact meta_info sums."""
    est = speculative.measured_accept_length([(r.accept_len, r.running) for r in m.decode_records
                                              if r.accept_len is not None], [g.meta_info for g in m.generations])
    return est.value if est is not None else None


def diagnose(spec: Measurement, baseline: Measurement | None) -> Economics:
    """The speculative economics of ``spec`` against ``baseline``: cycle and step over busy time only,
    beside the decode throughput of the same runs (:func:`specwatch.run.specread.economics`)."""
    return economics(spec, baseline)


def _findings_text(session: Session, *profiles: str) -> list[str]:
    lines = []
    for name in profiles:
        for f in session.findings_for(name):
            lines.append(f"[{f.check} on {name}: {'ok' if f.ok else 'FAILED'}] {f.summary.splitlines()[0]}")
    return lines


@recorded
def floor(session: Session, profile: str, workload: str = "single-stream") -> Verdict:
    """Absolute floor of a profile's median tok/s (``floor_tok_s`` in its profile)."""
    prof = session.profile_for(profile)
    if prof.floor_tok_s is None:
        return Verdict(FLOOR, Status.SKIP, f"profile {prof.name} sets no floor_tok_s", profile=prof.name)
    m = session.measure(prof.name, workload, pooled=True)
    xs = m.samples(METRIC)
    lo, hi = _ci(xs)
    row = ReportRow(key=f"{prof.name}/{workload}/{METRIC} ≥ floor", n=len(xs), median=m.median_tok_s, unit="tok/s",
                    ci_low=lo, ci_high=hi, baseline_median=prof.floor_tok_s, samples=tuple(xs),
                    verdict="pass" if m.median_tok_s >= prof.floor_tok_s else "fail")
    msg = (f"{prof.name} {workload}: median {m.median_tok_s:.1f} tok/s [{lo:.1f}, {hi:.1f}] against the floor "
           f"{prof.floor_tok_s:g} tok/s")
    return Verdict.of(FLOOR, m.median_tok_s >= prof.floor_tok_s, msg, profile=prof.name, rows=[row])


@recorded
def drift(session: Session, profile: str, workload: str = "single-stream", metric: str = METRIC) -> Verdict:
    """This run against the stored baseline (or ``--specwatch-reference``): regression = worse than
    the tolerance AND significant; a noisy or too-small sample is reported as inconclusive. The run is judged
    as one on its own machine when the baseline holds enough sessions of it, else as one on a new machine
    (the tolerance note says which: :func:`specwatch.run.reference.reference_samples`). With a machine
    yardstick on this run and on 3 or more baseline sessions, both are read normalised by it when that
    shrinks the sessions' spread (:mod:`specwatch.judge.yardstick`), and the note says whether it did."""
    from specwatch.load.measure import METRICS

    prof = session.profile_for(profile)
    m = session.measure(prof.name, workload, pooled=True)
    current = m.samples(metric)
    unit, higher = METRICS[metric]
    if session.config.update_baselines:
        return Verdict(DRIFT, Status.SKIP, f"--update-baselines: {prof.name} is being recorded, not compared",
                       profile=prof.name)
    ref = session.reference_samples(prof.name, workload, metric)
    if isinstance(ref, str):
        session.missing_baseline(f"{prof.name}/{workload}/{metric}", ref)
        if session.config.require_baseline:
            return Verdict(DRIFT, Status.FAIL, f"{ref} (--specwatch-require-baseline: a drift test with nothing to "
                                               f"compare against fails)", profile=prof.name)
        return Verdict(DRIFT, Status.SKIP, ref, profile=prof.name)
    wl = m.workload
    dataset = wl.describe().get("dataset")
    for key, now in (("max_new_tokens", wl.max_new_tokens), ("concurrency", wl.concurrency), ("dataset", dataset)):
        then = ref.extra.get(key)
        if (then is not None or key == "dataset") and then != now:
            return Verdict(DRIFT, Status.SKIP, f"{ref.source} was recorded with {key}={then}, this run uses {now}: "
                                               f"the two are not comparable; re-record with --update-baselines",
                           profile=prof.name)
    requested = prof.tolerance or session.config.tolerance
    run_score, scores = yardstick.scores_for(session.fingerprint().get("yardstick"), ref.yardsticks)
    cmp, basis = compare.drift(current, ref.samples, higher_is_better=higher, requested=requested,
                               alpha=session.config.alpha, sessions=ref.sessions or None,
                               class_spread=session.class_spread(workload, metric), machine=ref.machine,
                               machine_term=ref.machine_term,
                               session_scores=scores if len(scores) == len(ref.sessions) else None, run_score=run_score)
    row = ReportRow.from_comparison(f"{prof.name}/{workload}/{metric}", cmp, unit=unit, samples=current,
                                    median_ci=_ci(current), extra={"reference": ref.source,
                                                                    "tolerance_basis": basis.note})
    row = replace(row, dropped=m.dropped_note(metric))
    msg = f"{prof.name} {workload} {metric} vs {ref.source}: {cmp.message}\n{basis.note}"
    if ref.note:
        msg += f"\nbaseline: {ref.note}"
    if cmp.is_regression and prof.role == "spec":
        base = session.profiles.for_role("baseline")
        baseline_m = session.measurements.get((base.name, workload)) if base else None
        msg += "\n" + "\n".join(diagnose(m, baseline_m).lines() + _findings_text(session, prof.name))
    return Verdict.of(DRIFT, not cmp.is_regression, msg, profile=prof.name, rows=[row])


def _round_prior(session: Session, server: str, workload: str) -> tuple[RoundPrior | None, str]:
    """The round spread earlier A/B runs recorded for this machine class, and where it comes from: the
    boot-to-boot term a relative gate pools with its own rounds (None: none recorded). ``server``'s own
    key when its runs give enough degrees of freedom, else every run of decode tok/s
    (:meth:`RoundSpread.prior_for`, the rule ``specwatch ab`` uses)."""
    from specwatch.store.roundspread import RoundSpread

    spread = RoundSpread.for_class(session.config.path(session.config.baseline_dir), session.machine_class())
    return spread.prior_for(f"{server}/{workload}/{DECODE_METRIC}")


def _paired_row(key: str, a: list[float], b: list[float], judged: RoundsVerdict, verdict: str,
                *sides: Measurement) -> ReportRow:
    """The table row of a relative gate: side a's runs, side b's median, the rounds' ratio and verdict; the runs
    that ``sides`` left out of their decode tok/s, said."""
    return ReportRow(key=key, n=len(a), median=statistics.median(a), unit="tok/s", ci_low=_ci(a)[0],
                     ci_high=_ci(a)[1], baseline_median=statistics.median(b), change=judged.ratio - 1, p=judged.p,
                     verdict=verdict, samples=tuple(a), message=judged.sentence,
                     extra={"rounds": judged.rounds, "round_design": judged.design}, change_basis=PAIRED_BASIS,
                     dropped="; ".join(n for m in sides if (n := m.dropped_note(DECODE_METRIC))))


@recorded
def speculation_beats_baseline(session: Session, workload: str = "single-stream") -> Verdict:
    """Speculative ≥ baseline × (1 + margin), judged on the rounds (each a fresh boot of both, as
    ``specwatch ab`` judges; :func:`specwatch.judge.tuning.beats`); fails with the diagnosis.

    One round without a recorded round spread (a first run) is judged against a conservative
    boot-to-boot term scaled from its runs' own spread (:func:`specwatch.judge.tuning.first_round_spread`).
    Rounds that can neither show nor rule out the margin skip, saying in one line what would decide.
    """
    spec_p, base_p = session.profiles.for_role("spec"), session.profiles.for_role("baseline")
    if not spec_p or not base_p:
        return Verdict(SPEC_VS_BASELINE, Status.SKIP, "the profile set has no spec and baseline servers to compare")
    base, spec = session.measure_pair(base_p.name, spec_p.name, workload)
    prior, source = _round_prior(session, spec_p.name, workload)
    spec_boots, base_boots = spec.by_boot(DECODE_METRIC), base.by_boot(DECODE_METRIC)
    judged = tuning.beats(tuning.round_ratios(spec_boots, base_boots), margin=session.profiles.gates.spec_margin,
                          alpha=session.config.alpha, prior=prior, source=source, names=(spec_p.name, base_p.name),
                          runs=(spec_boots[0], base_boots[0]) if len(spec_boots) == 1 == len(base_boots) else None)
    row = _paired_row(f"{spec_p.name} vs {base_p.name} ({workload}, decode tok/s)", spec.samples(DECODE_METRIC),
                      base.samples(DECODE_METRIC), judged, judged.verdict, spec, base)
    lines = [judged.message, *diagnose(spec, base).lines(), *_findings_text(session, spec_p.name, base_p.name)]
    if judged.verdict in (tuning.UNSURE, tuning.NOT_JUDGED):
        return Verdict(SPEC_VS_BASELINE, Status.SKIP, "\n".join(lines), rows=[row])
    return Verdict.of(SPEC_VS_BASELINE, judged.verdict == "pass", "\n".join(lines), rows=[row])


def unread_difference(tuned: ServerProfile, untuned: ServerProfile) -> str | None:
    """Why the tuned and untuned servers cannot differ in speed (:func:`specwatch.judge.tuning.unread_difference`:
    only NCCL variables differ, at one rank), or None when they may: something else differs too."""
    def launch(p: ServerProfile) -> ServerProfile:
        return replace(p, name="", env="", env_vars={}, extra_env={}, env_apply="launch", floor_tok_s=None,
                       tolerance=None)

    if launch(tuned) != launch(untuned):
        return None
    return tuning.unread_difference({**tuned.env_vars, **tuned.extra_env}, {**untuned.env_vars, **untuned.extra_env},
                                    max(tuned.ranks, untuned.ranks))


@recorded
def tuned_vs_untuned(session: Session, workload: str = "single-stream") -> Verdict:
    """Tuned ≥ untuned × (1 − tolerance), judged on the rounds as ``specwatch ab`` judges head against
    base (:func:`specwatch.judge.tuning.tuning_rounds`); "no measurable effect" is reported, never
    called a win. With ``gates.expect_tuning_effect`` the tuning must show a significant gain.

    It skips, saying why, when the rounds cannot decide, and when the two servers differ only in
    settings the server never reads (NCCL variables at TP=1): the measured difference is then
    boot-to-boot luck, reported but never a failure.
    """
    t_p, u_p = session.profiles.for_role("tuned"), session.profiles.for_role("untuned")
    if not t_p or not u_p:
        return Verdict(TUNED_VS_UNTUNED, Status.SKIP, "the profile set has no tuned and untuned servers to compare")
    untuned, tuned = session.measure_pair(u_p.name, t_p.name, workload)
    gates = session.profiles.gates
    prior, source = _round_prior(session, t_p.name, workload)
    # decode tok/s: the all-reduces that tuning changes run in every decode step; TTFT only adds noise.
    judged = tuning.tuning_rounds(tuning.round_ratios(tuned.by_boot(DECODE_METRIC), untuned.by_boot(DECODE_METRIC)),
                                  tolerance=gates.tuned_tolerance, min_effect=gates.tuning_min_effect,
                                  alpha=session.config.alpha, prior=prior, source=source, names=(t_p.name, u_p.name))
    unread = unread_difference(t_p, u_p)
    row = _paired_row(f"{t_p.name} vs {u_p.name} ({workload}, decode tok/s)", tuned.samples(DECODE_METRIC),
                      untuned.samples(DECODE_METRIC), judged, "unread" if unread else judged.verdict, tuned,
                      untuned)
    lines = [judged.message, *_findings_text(session, t_p.name, u_p.name)]
    if unread:  # no advice: more rounds or a round spread cannot help a setting the server never reads
        expects = "; gates.expect_tuning_effect cannot hold here" if gates.expect_tuning_effect else ""
        measured = [judged.finding, judged.design, *lines[1:]]
        return Verdict(TUNED_VS_UNTUNED, Status.SKIP, f"nothing to gate: {unread}{expects}; what was measured is "
                       "boot-to-boot luck:\n" + "\n".join(measured), rows=[replace(row, message=judged.finding)])
    if judged.verdict == "fail":
        return Verdict(TUNED_VS_UNTUNED, Status.FAIL, "tuning made things worse:\n" + "\n".join(lines), rows=[row])
    if judged.verdict in (tuning.UNSURE, tuning.NOT_JUDGED):
        return Verdict(TUNED_VS_UNTUNED, Status.SKIP, "\n".join(lines), rows=[row])
    if gates.expect_tuning_effect and judged.verdict != "pass":
        return Verdict(TUNED_VS_UNTUNED, Status.FAIL, "this machine's profile expects the tuning to help, but:\n"
                       + "\n".join(lines), rows=[row])
    return Verdict(TUNED_VS_UNTUNED, Status.PASS, "\n".join(lines), rows=[row])


@recorded
def speculation_by_level(session: Session) -> Verdict:
    """Speculation against plain decoding at every level of the profile set's sweep, and the
    crossover concurrency: the first concurrency where speculation stops paying.

    Each level is judged like :func:`speculation_beats_baseline` (``spec_margin``, one-sided
    Mann-Whitney) on :data:`LEVEL_METRIC`; an inconclusive level does not pay. The per-level
    verdicts are reported (speculation is expected to stop paying somewhere); the verdict fails only
    when ``gates.min_crossover_concurrency`` is set and the crossover comes below it. Each server
    runs every level on one boot (baseline first), levels in increasing order; with
    ``gates.interleave_runs`` both servers are up at once and each level's runs are interleaved
    (:meth:`Session.measure_pair`: a fresh boot of both per level and round), so a machine that
    drifts during the sweep moves both sides of a level alike.
    """
    from specwatch.judge.levels import LEVEL_METRICS, crossover, crossover_ok
    from specwatch.load.workload import level_names

    spec_p, base_p = session.profiles.for_role("spec"), session.profiles.for_role("baseline")
    if not spec_p or not base_p:
        return Verdict(SPEC_BY_LEVEL, Status.SKIP, "the profile set has no spec and baseline servers to compare")
    levels = level_names(session.profiles.workload)
    if not levels:
        return Verdict(SPEC_BY_LEVEL, Status.SKIP, f"{session.profiles.source}: [workload] sets no sweep levels; "
                                                   "add concurrency = [1, 4, 16, 64] (or request_rate = [2.0, 8.0])")
    gates = session.profiles.gates
    if gates.interleave_runs:
        for level in levels:
            session.measure_pair(base_p.name, spec_p.name, level)
    else:
        for name in (base_p.name, spec_p.name):
            for level in levels:
                session.measure(name, level)
    rows, lines, judged = [], [], []
    for level in levels:
        spec, base = session.measurements[(spec_p.name, level)], session.measurements[(base_p.name, level)]
        a, b = spec.samples(LEVEL_METRIC), base.samples(LEVEL_METRIC)
        gate = compare.relative_gate(a, b, margin=gates.spec_margin, alpha=session.config.alpha,
                                     names=(spec_p.name, base_p.name))
        medians = {side: {metric: statistics.median(xs) for metric in LEVEL_METRICS
                          if (xs := m.samples(metric)) and not any(math.isnan(x) for x in xs)}
                   for side, m in (("spec", spec), ("baseline", base))}
        wl = spec.workload
        sweep = {"level": level, "kind": "request_rate" if wl.request_rate is not None else "concurrency",
                 "value": wl.request_rate if wl.request_rate is not None else wl.concurrency,
                 "spec": spec_p.name, "baseline": base_p.name, "metric": LEVEL_METRIC, "margin": gates.spec_margin,
                 "speedup": gate.ratio, "verdict": gate.verdict.value,
                 "spec_metrics": medians["spec"], "baseline_metrics": medians["baseline"]}
        rows.append(ReportRow(key=f"{spec_p.name} vs {base_p.name} ({level}, {LEVEL_METRIC})", n=gate.n_a,
                              median=statistics.median(a), unit="tok/s", ci_low=_ci(a)[0], ci_high=_ci(a)[1],
                              baseline_median=statistics.median(b), change=gate.ratio - 1, p=gate.p_pass,
                              verdict=gate.verdict.value, samples=tuple(a), message=gate.message,
                              extra={"sweep": sweep}))
        judged.append((sweep["kind"], float(sweep["value"]), gate.verdict.value))
        p99 = ", ".join(f"{k} {medians['spec'].get(k, float('nan')):.1f}/{medians['baseline'].get(k, float('nan')):.1f}"
                        for k in ("p99_ttft_ms", "p99_tpot_ms"))
        lines.append(f"{level}: {gate.verdict.value} ({gate.ratio:.2f}x {LEVEL_METRIC}; {p99} ms spec/baseline)")
    by_concurrency = [(v, verdict) for kind, v, verdict in judged if kind == "concurrency"]
    found = crossover(by_concurrency) if by_concurrency else None
    minimum = gates.min_crossover_concurrency
    passed = True
    if found is not None:
        passed = minimum is None or crossover_ok(found, minimum)
        gate_text = "not gated" if minimum is None else "pass" if passed else "fail"
        message = found.message + ("" if minimum is None else f"; min_crossover_concurrency = {minimum}: {gate_text}")
        lines.append(f"crossover concurrency: {message}")
        shown = gate_text if minimum is not None else "crossover" if found.level is not None else "no crossover"
        rows.append(ReportRow(key=f"{spec_p.name} vs {base_p.name} crossover concurrency", n=len(by_concurrency),
                              median=found.level if found.level is not None else math.inf,  # none: "inf"
                              unit="requests",
                              baseline_median=float(minimum) if minimum is not None else None,
                              verdict=shown, message=message,
                              extra={"crossover": {"spec": spec_p.name, "baseline": base_p.name,
                                                   "level": found.level, "verdict": found.verdict,
                                                   "minimum": minimum, "gate": gate_text, "message": message,
                                                   "levels": [lv for lv in levels
                                                              if lv.startswith("concurrency-")]}}))
    elif minimum is not None:
        lines.append("min_crossover_concurrency is set but the sweep has no concurrency levels: not judged")
    text = "\n".join(lines)
    return Verdict.of(SPEC_BY_LEVEL, passed, text if passed else "speculation stops paying below "
                      f"min_crossover_concurrency = {minimum}:\n{text}", rows=rows)
