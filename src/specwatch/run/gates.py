"""The perf gates of the suite, judged with statistics and explained with numbers.

Each gate takes its evidence (measurements, the reference they are compared against, the run's
:class:`~specwatch.run.evidence.Policy`) and returns a :class:`~specwatch.judge.verdict.Verdict` (the checks'
type too) whose rows are the report table's. The Session is no argument: :mod:`specwatch.run.gatekeeper`
gathers the evidence from it and records the rows, so the same gates run from any test file a user writes.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from typing import TYPE_CHECKING

from specwatch.judge import compare, speculative, stats, tuning, yardstick
from specwatch.judge.cyclecost import Economics
from specwatch.judge.tuning import RoundsVerdict, tuning_effect
from specwatch.judge.verdict import ReportRow, Status, Verdict
from specwatch.run.evidence import Pair, Policy, Reference
from specwatch.run.specread import economics

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from specwatch.load.measure import Measurement
    from specwatch.profiles.profile import Gates, ServerProfile

__all__ = ["DECODE_METRIC", "LEVEL_METRIC", "METRIC", "accept_length", "diagnose", "drift", "floor",
           "speculation_beats_baseline", "speculation_by_level", "speculation_ttft", "tuned_vs_untuned",
           "tuning_effect",
           "unread_difference"]

METRIC = "output_tok_s"
#: Speculation changes the decode phase only; its gates compare decode throughput (TTFT excluded).
DECODE_METRIC = "decode_tok_s"
#: A sweep level's gate compares bench_serving's output throughput (what the server sustains at that load).
LEVEL_METRIC = "output_throughput"
#: The gates' names (``Verdict.name``).
FLOOR, DRIFT, SPEC_VS_BASELINE, TUNED_VS_UNTUNED = "floor", "drift", "speculation beats baseline", "tuned vs untuned"
SPEC_BY_LEVEL = "speculation by load level"
SPEC_TTFT = "speculation TTFT within allowance"
#: what a relative gate's change is (the table says it when the medians of all runs differ in sign)
PAIRED_BASIS = "the paired rounds' (the geometric mean of each round's ratio, each round a fresh boot of both)"


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


def floor(measurement: Measurement, floor_tok_s: float, *, profile: str, workload: str = "single-stream") -> Verdict:
    """Absolute floor of a profile's median tok/s (``floor_tok_s`` in its profile)."""
    m = measurement
    xs = m.samples(METRIC)
    lo, hi = _ci(xs)
    row = ReportRow(key=f"{profile}/{workload}/{METRIC} ≥ floor", n=len(xs), median=m.median_tok_s, unit="tok/s",
                    ci_low=lo, ci_high=hi, baseline_median=floor_tok_s, samples=tuple(xs),
                    verdict="pass" if m.median_tok_s >= floor_tok_s else "fail")
    msg = (f"{profile} {workload}: median {m.median_tok_s:.1f} tok/s [{lo:.1f}, {hi:.1f}] against the floor "
           f"{floor_tok_s:g} tok/s")
    return Verdict.of(FLOOR, m.median_tok_s >= floor_tok_s, msg, profile=profile, rows=[row])


def drift(measurement: Measurement, reference: Reference | str, policy: Policy, *, profile: str,
          workload: str = "single-stream", metric: str = METRIC,
          diagnosis: tuple[Measurement | None, Sequence[str]] | None = None) -> Verdict:
    """This run against the stored baseline (or ``--specwatch-reference``): regression = worse than
    the tolerance AND significant; a noisy or too-small sample is reported as inconclusive. The run is judged
    as one on its own machine when the baseline holds enough sessions of it, else as one on a new machine
    (the tolerance note says which: :func:`specwatch.run.reference.reference_samples`). With a machine
    yardstick on this run and on 3 or more baseline sessions, both are read normalised by it when that
    shrinks the sessions' spread (:mod:`specwatch.judge.yardstick`), and the note says whether it did.

    ``reference``: what :func:`~specwatch.run.reference.reference_samples` found, or why nothing (a skip, or a
    failure under ``policy.require_baseline``). ``diagnosis`` (a speculative server's): the plain server's
    measurement and the checks' findings, said beside a regression."""
    from specwatch.load.measure import METRICS

    m = measurement
    current = m.samples(metric)
    unit, higher = METRICS[metric]
    if policy.update_baselines:
        return Verdict(DRIFT, Status.SKIP, f"--update-baselines: {profile} is being recorded, not compared",
                       profile=profile)
    ref = reference
    if isinstance(ref, str):
        if policy.require_baseline:
            return Verdict(DRIFT, Status.FAIL, f"{ref} (--specwatch-require-baseline: a drift test with nothing to "
                                               f"compare against fails)", profile=profile)
        return Verdict(DRIFT, Status.SKIP, ref, profile=profile)
    wl = m.workload
    dataset = wl.describe().get("dataset")
    for key, now in (("max_new_tokens", wl.max_new_tokens), ("concurrency", wl.concurrency), ("dataset", dataset)):
        then = ref.extra.get(key)
        if (then is not None or key == "dataset") and then != now:
            return Verdict(DRIFT, Status.SKIP, f"{ref.source} was recorded with {key}={then}, this run uses {now}: "
                                               f"the two are not comparable; re-record with --update-baselines",
                           profile=profile)
    run_score, scores = yardstick.scores_for(ref.run_yardstick, ref.yardsticks)
    cmp, basis = compare.drift(current, ref.samples, higher_is_better=higher, requested=policy.tolerance,
                               alpha=policy.alpha, sessions=ref.sessions or None,
                               class_spread=ref.class_spread, machine=ref.machine,
                               machine_term=ref.machine_term,
                               session_scores=scores if len(scores) == len(ref.sessions) else None, run_score=run_score)
    row = ReportRow.from_comparison(f"{profile}/{workload}/{metric}", cmp, unit=unit, samples=current,
                                    median_ci=_ci(current), extra={"reference": ref.source,
                                                                    "tolerance_basis": basis.note})
    row = replace(row, dropped=m.dropped_note(metric))
    msg = f"{profile} {workload} {metric} vs {ref.source}: {cmp.message}\n{basis.note}"
    if ref.note:
        msg += f"\nbaseline: {ref.note}"
    if cmp.is_regression and diagnosis is not None:
        baseline_m, findings = diagnosis
        msg += "\n" + "\n".join(diagnose(m, baseline_m).lines() + list(findings))
    if cmp.is_regression and policy.explain and ref.inputs is not None:  # pytest -v: what made the tolerance
        msg += ("\nhow the tolerance was made (specwatch baseline explain):\n  "
                + "\n  ".join(ref.inputs.lines(policy.tolerance, policy.alpha, len(current))))
    return Verdict.of(DRIFT, not cmp.is_regression, msg, profile=profile, rows=[row])


def _paired_row(key: str, a: list[float], b: list[float], judged: RoundsVerdict, verdict: str,
                *sides: Measurement, unit: str = "tok/s", higher: bool = True,
                shown: tuple[float, float] | None = None) -> ReportRow:
    """The table row of a relative gate: side a's runs, side b's median, the rounds' ratio and verdict; the runs
    that ``sides`` left out of their decode tok/s, said. ``unit``/``higher``: the samples' unit and whether more
    is better; ``shown``: the two sides' values the row shows instead of the medians (a percentile), and no
    interval of a median then."""
    ci = (None, None) if shown else _ci(a)
    value, base = shown or (statistics.median(a), statistics.median(b))
    return ReportRow(key=key, n=len(a), median=value, unit=unit, ci_low=ci[0], ci_high=ci[1], baseline_median=base,
                     change=judged.ratio - 1, p=judged.p, verdict=verdict, samples=tuple(a), message=judged.sentence,
                     extra={"rounds": judged.rounds, "round_design": judged.design}, change_basis=PAIRED_BASIS,
                     higher_is_better=higher,
                     dropped="; ".join(n for m in sides if (n := m.dropped_note(DECODE_METRIC))))


def speculation_beats_baseline(pair: Pair, policy: Policy, *, margin: float = 0.0) -> Verdict:
    """Speculative ≥ baseline × (1 + margin), judged on the rounds (each a fresh boot of both, as
    ``specwatch ab`` judges; :func:`specwatch.judge.tuning.beats`); fails with the diagnosis.
    ``pair``: the speculative server's measurement (``a``) and the baseline's (``b``).

    One round without a recorded round spread (a first run) is judged against a conservative
    boot-to-boot term scaled from its runs' own spread (:func:`specwatch.judge.tuning.first_round_spread`).
    Rounds that can neither show nor rule out the margin skip, saying in one line what would decide.
    A ``pair.cause`` (the draft-alive check's failure on the speculative side: speculation off, a dead draft)
    fails a verdict that does not pass, unsure ones included, and is its first line.
    """
    spec, base = pair.a, pair.b
    spec_name, base_name = pair.names
    spec_boots, base_boots = spec.by_boot(DECODE_METRIC), base.by_boot(DECODE_METRIC)
    judged = tuning.beats(tuning.round_ratios(spec_boots, base_boots), margin=margin,
                          alpha=policy.alpha, prior=pair.prior, source=pair.prior_source, names=pair.names,
                          runs=(spec_boots[0], base_boots[0]) if len(spec_boots) == 1 == len(base_boots) else None)
    row = _paired_row(f"{spec_name} vs {base_name} ({pair.workload}, decode tok/s)", spec.samples(DECODE_METRIC),
                      base.samples(DECODE_METRIC), judged, judged.verdict, spec, base)
    lines = [judged.message, *diagnose(spec, base).lines(), *pair.findings]
    if pair.cause and judged.verdict != "pass":  # a dead draft or speculation off: said before "slower", and
        lines.insert(0, pair.cause)              # no "unsure" where the evidence says speculation cannot win
        return Verdict(SPEC_VS_BASELINE, Status.FAIL, "\n".join(lines), rows=[row])
    if judged.verdict in (tuning.UNSURE, tuning.NOT_JUDGED):
        return Verdict(SPEC_VS_BASELINE, Status.SKIP, "\n".join(lines), rows=[row])
    return Verdict.of(SPEC_VS_BASELINE, judged.verdict == "pass", "\n".join(lines), rows=[row])


def speculation_ttft(pair: Pair, policy: Policy, *, margin: float) -> Verdict:
    """Speculative TTFT ≤ baseline TTFT × (1 + margin), at p50 and at p99, each judged on the rounds like
    :func:`speculation_beats_baseline` (:func:`specwatch.judge.tuning.beats`, ``at_most``): per round, each side's
    percentile over that boot's requests, and the ratio. ``pair``: the speculative server's measurement (``a``),
    the baseline's (``b``), and the round spread of the speculative server's ``ttft_ms`` key (``prior``), which
    stands for the p50's boot-to-boot term only: a p99 wanders more than a median, so it has its rounds alone.

    Fails when either percentile is shown beyond the allowance, passes when both are shown within it, else
    skips saying which could not be decided and what would decide it (more rounds)."""
    from specwatch.judge.levels import percentiles

    spec, base = pair.a, pair.b
    spec_name, base_name = pair.names
    a_boots, b_boots = spec.ttft_by_boot(), base.ttft_by_boot()
    a_all, b_all = [x for xs in a_boots for x in xs], [x for xs in b_boots for x in xs]
    rows, lines, verdicts = [], [], []
    one = len(a_boots) == 1 == len(b_boots)
    for label, name in (("p50", "median"), ("p99", "p99")):
        # per round, each side's percentile of that boot's requests (NaN for a boot without any: left out)
        ratios = tuning.round_ratios([[percentiles(xs)[name]] for xs in a_boots],
                                     [[percentiles(xs)[name]] for xs in b_boots])
        judged = tuning.beats(ratios, margin=margin, alpha=policy.alpha, prior=pair.prior if label == "p50" else None,
                              source=pair.prior_source, names=(f"{spec_name} TTFT {label}", base_name),
                              runs=(a_boots[0], b_boots[0]) if one and label == "p50" else None, at_most=True)
        if label == "p99" and judged.verdict == tuning.NOT_JUDGED:  # no recorded spread stands for a p99's
            judged = replace(judged, advice="set [gates] alternate_rounds = 3 or more (each round boots both servers "
                                            "afresh): a p99 is judged on its rounds alone")
        a_ms, b_ms = percentiles(a_all)[name], percentiles(b_all)[name]
        rows.append(_paired_row(f"{spec_name} vs {base_name} ({pair.workload}, TTFT {label})", a_all, b_all, judged,
                                judged.verdict, unit="ms", higher=False,
                                shown=(a_ms, b_ms) if label != "p50" else None))
        lines.append(f"TTFT {label}: {spec_name} {a_ms:.1f} ms, {base_name} {b_ms:.1f} ms over all rounds "
                     f"(allowance +{margin:.0%}, [gates] spec_ttft_margin): {judged.sentence}")
        verdicts.append(judged)
    lines += [verdicts[0].design] + [j.design for j in verdicts[1:] if j.design != verdicts[0].design]
    lines += list(pair.findings)
    if any(j.verdict == "fail" for j in verdicts):
        return Verdict(SPEC_TTFT, Status.FAIL, "speculation inflates the time to first token beyond the allowance:\n"
                       + "\n".join(lines), rows=rows)
    if all(j.verdict == "pass" for j in verdicts):
        return Verdict(SPEC_TTFT, Status.PASS, "\n".join(lines), rows=rows)
    open_ = " and ".join(f"TTFT {label}" for label, j in zip(("p50", "p99"), verdicts, strict=True)
                         if j.verdict != "pass")
    return Verdict(SPEC_TTFT, Status.SKIP, f"{open_} not decided by these rounds:\n" + "\n".join(lines), rows=rows)


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


def tuned_vs_untuned(pair: Pair, gates: Gates, policy: Policy, *, unread: str | None = None) -> Verdict:
    """Tuned ≥ untuned × (1 − tolerance), judged on the rounds as ``specwatch ab`` judges head against
    base (:func:`specwatch.judge.tuning.tuning_rounds`); "no measurable effect" is reported, never
    called a win. With ``gates.expect_tuning_effect`` the tuning must show a significant gain.
    ``pair``: the tuned server's measurement (``a``) and the untuned one's (``b``).

    It skips, saying why, when the rounds cannot decide, and when the two servers differ only in
    settings the server never reads (``unread``, :func:`unread_difference`: NCCL variables at TP=1): the
    measured difference is then boot-to-boot luck, reported but never a failure.
    """
    tuned, untuned = pair.a, pair.b
    t_name, u_name = pair.names
    # decode tok/s: the all-reduces that tuning changes run in every decode step; TTFT only adds noise.
    judged = tuning.tuning_rounds(tuning.round_ratios(tuned.by_boot(DECODE_METRIC), untuned.by_boot(DECODE_METRIC)),
                                  tolerance=gates.tuned_tolerance, min_effect=gates.tuning_min_effect,
                                  alpha=policy.alpha, prior=pair.prior, source=pair.prior_source, names=pair.names)
    row = _paired_row(f"{t_name} vs {u_name} ({pair.workload}, decode tok/s)", tuned.samples(DECODE_METRIC),
                      untuned.samples(DECODE_METRIC), judged, "unread" if unread else judged.verdict, tuned,
                      untuned)
    lines = [judged.message, *pair.findings]
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


def speculation_by_level(levels: Mapping[str, tuple[Measurement, Measurement]], gates: Gates, policy: Policy, *,
                         names: tuple[str, str]) -> Verdict:
    """Speculation against plain decoding at every level of the profile set's sweep, and the
    crossover concurrency: the first concurrency where speculation stops paying. ``levels``: each level's
    measurements of the speculative server and of the baseline, in increasing order; ``names``: theirs.

    Each level is judged like :func:`speculation_beats_baseline` (``spec_margin``, one-sided
    Mann-Whitney) on :data:`LEVEL_METRIC`; an inconclusive level does not pay. The per-level
    verdicts are reported (speculation is expected to stop paying somewhere); the verdict fails only
    when ``gates.min_crossover_concurrency`` is set and the crossover comes below it. How the levels are
    measured (one boot each, or interleaved): :func:`specwatch.run.gatekeeper.speculation_by_level`.
    """
    from specwatch.judge.levels import LEVEL_METRICS, crossover, crossover_ok

    spec_name, base_name = names
    rows, lines, judged = [], [], []
    for level, (spec, base) in levels.items():
        a, b = spec.samples(LEVEL_METRIC), base.samples(LEVEL_METRIC)
        gate = compare.relative_gate(a, b, margin=gates.spec_margin, alpha=policy.alpha, names=names)
        medians = {side: {metric: statistics.median(xs) for metric in LEVEL_METRICS
                          if (xs := m.samples(metric)) and not any(math.isnan(x) for x in xs)}
                   for side, m in (("spec", spec), ("baseline", base))}
        wl = spec.workload
        kind, value = ("request_rate", wl.request_rate) if wl.request_rate is not None else ("concurrency",
                                                                                             wl.concurrency)
        sweep = {"level": level, "kind": kind, "value": value,
                 "spec": spec_name, "baseline": base_name, "metric": LEVEL_METRIC, "margin": gates.spec_margin,
                 "speedup": gate.ratio, "verdict": gate.verdict.value,
                 "spec_metrics": medians["spec"], "baseline_metrics": medians["baseline"]}
        rows.append(ReportRow(key=f"{spec_name} vs {base_name} ({level}, {LEVEL_METRIC})", n=gate.n_a,
                              median=statistics.median(a), unit="tok/s", ci_low=_ci(a)[0], ci_high=_ci(a)[1],
                              baseline_median=statistics.median(b), change=gate.ratio - 1, p=gate.p_pass,
                              verdict=gate.verdict.value, samples=tuple(a), message=gate.message,
                              extra={"sweep": sweep}))
        judged.append((kind, float(value), gate.verdict.value))
        p99 = ", ".join(f"{k} {medians['spec'].get(k, float('nan')):.1f}/{medians['baseline'].get(k, float('nan')):.1f}"
                        for k in ("p99_ttft_ms", "p99_tpot_ms"))
        why = f"; {gate.message}" if gate.verdict.value == "inconclusive" else ""
        lines.append(f"{level}: {gate.verdict.value} ({gate.ratio:.2f}x {LEVEL_METRIC}; {p99} ms spec/baseline){why}")
    by_concurrency = [(v, verdict) for kind, v, verdict in judged if kind == "concurrency"]
    found = crossover(by_concurrency) if by_concurrency else None
    minimum = gates.min_crossover_concurrency
    passed = True
    if found is not None:
        passed = minimum is None or crossover_ok(found, minimum)
        gate_text = "not gated" if minimum is None else "pass" if passed else "fail"
        message = found.message + ("" if minimum is None else f"; min_crossover_concurrency = {minimum}: {gate_text}")
        lines.append(f"crossover concurrency: {message}")
        shown = (gate_text if minimum is not None else "no crossover" if found.level is None
                 else "inconclusive" if found.verdict == "inconclusive" else "crossover")
        rows.append(ReportRow(key=f"{spec_name} vs {base_name} crossover concurrency", n=len(by_concurrency),
                              median=found.level if found.level is not None else math.inf,  # none: "inf"
                              unit="requests",
                              baseline_median=float(minimum) if minimum is not None else None,
                              verdict=shown, message=message,
                              extra={"crossover": {"spec": spec_name, "baseline": base_name,
                                                   "level": found.level, "verdict": found.verdict,
                                                   "minimum": minimum, "gate": gate_text, "message": message,
                                                   "levels": [lv for lv in levels
                                                              if lv.startswith("concurrency-")]}}))
    elif minimum is not None:
        lines.append("min_crossover_concurrency is set but the sweep has no concurrency levels: not judged")
    text = "\n".join(lines)
    return Verdict.of(SPEC_BY_LEVEL, passed, text if passed else "speculation stops paying below "
                      f"min_crossover_concurrency = {minimum}:\n{text}", rows=rows)
