"""The speculation-health gates: the accept length against its baseline (exact under greedy), and the
verify cycle's cost against its baseline, with the break-even accept length beside the measured one.

- :func:`accept_length_vs_baseline`: each prompt of a greedy probe (:data:`specread.PROBE`: six fixed
  prompts, one at a time, twice) must take its recorded verify count; a changed one is a finding naming
  the prompt, the first output token where acceptance diverged and the cause that fits
  (:mod:`specwatch.judge.spechealth`), unless the output moved with the target (the lossless check
  against the plain server, near-tie flips allowed). The aggregate accept length of the single-stream
  runs is judged for drift by throughput's machinery at its own tolerance.
- :func:`cycle_cost_vs_baseline`: the time per draft+verify cycle (a plain server: per decode step),
  over busy time only, and the break-even (cycle / the plain server's step, measured in the same run),
  each for drift. An eager verify shows here as a cycle-cost jump even where no graph counter exists:
  a second path to the case study's root cause.

Both judge evidence (measurements, :class:`~specwatch.run.evidence.References` looked up when needed, the
run's :class:`~specwatch.run.evidence.Policy`); :mod:`specwatch.run.gatekeeper` gathers it from the Session
and records their rows. :func:`summary_lines` prints one line per speculative server from those rows, and
:func:`add_row_results` writes the break-even samples into the results file, so history and change points
see them.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from specwatch.errors import UsageError
from specwatch.judge import compare, cyclecost, spechealth, stats
from specwatch.judge.verdict import ReportRow, Status, Verdict
from specwatch.run import specread
from specwatch.run.evidence import Policy, Reference, References
from specwatch.store.result import Result, ResultSet, make_key

if TYPE_CHECKING:
    from specwatch.load.measure import Measurement

__all__ = ["ACCEPT_GATE", "ACCEPT_KEYS", "CYCLE_GATE", "CYCLE_KEYS", "HEALTH", "RESULT", "Explain",
           "accept_length_vs_baseline", "add_row_results", "cycle_cost_vs_baseline", "gated_keys", "summary_lines"]

ACCEPT_GATE, CYCLE_GATE = "accept length vs baseline", "cycle cost vs baseline"
#: The extra key of these gates' rows that the summary line reads, and of a row that carries a result.
HEALTH, RESULT = "spechealth", "result"
SINGLE = "single-stream"
#: The (workload, metric) keys each gate reads from a speculative profile's baseline (the one list of them):
#: the greedy probe's per-prompt verify counts and the aggregate accept length; the cycle time and the
#: break-even (cycle over the plain server's step, when the profile set has a plain server).
ACCEPT_KEYS = ((specread.PROBE.name, specread.ACCEPT), (SINGLE, specread.ACCEPT))
CYCLE_KEYS = ((SINGLE, specread.CYCLE), (SINGLE, specread.RATIO))


def gated_keys(speculative: bool) -> tuple[tuple[str, str], ...]:
    """The (workload, metric) keys the speculation-health gates compare against a profile's baseline; a plain
    profile's decode step is the break-even's divisor, read from the run itself, so none."""
    return ACCEPT_KEYS + CYCLE_KEYS if speculative else ()


#: What explains changed greedy prompts whose output changed too (the lossless check against the plain server,
#: :func:`specwatch.run.gatekeeper.accept_length_vs_baseline`): the comparison, with each such prompt judged.
Explain = Callable[[spechealth.GreedyComparison], spechealth.GreedyComparison]


def _no_reference(name: str, policy: Policy, profile: str, why: str, rows: list[ReportRow]) -> Verdict:
    """A gate with no reference to judge against: a skip (a failure under --specwatch-require-baseline) whose first
    line says why, the details below it (``-rA`` shows the first line alone)."""
    first, _, rest = why.partition("\n")
    if first.endswith(":") and rest:  # "<profile> accept length:": a title, the reasons on the lines below
        why = f"{first} not judged: {rest.splitlines()[0].strip()}\n{rest}"
    else:
        why = f"{name} on {profile}: not judged: {why}"
    if policy.require_baseline:
        return Verdict(name, Status.FAIL, f"{why} (--specwatch-require-baseline: a gate with nothing to compare "
                                          "against fails)", profile=profile, rows=rows)
    return Verdict(name, Status.SKIP, why, profile=profile, rows=rows)


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


# ----------------------------------------------------------------------------------------------
# Accept length


def _recorded_counts(ref: Reference) -> list[spechealth.PromptCount]:
    try:
        return [spechealth.PromptCount.from_dict(d) for d in ref.extra.get("per_prompt") or []]
    except ValueError as exc:
        raise UsageError(f"{ref.source}: {exc}; re-record it with --update-baselines") from None


def accept_length_vs_baseline(probe: Measurement, single: Measurement, references: References, policy: Policy, *,
                              profile: str, explain: Explain | None = None) -> Verdict:
    """Each greedy prompt's verify count against the recorded one (exact), and the aggregate accept
    length's drift; fails on a changed prompt the target's own output does not explain, or on a drift.
    ``probe``: the greedy probe's measurement (:data:`specread.PROBE`); ``single``: the single-stream one;
    ``explain``: what judges changed prompts whose output changed too (None: they stay findings)."""
    now = specread.counts(probe)
    xs, source = specread.accept_samples(single)
    if not now and not xs:
        return Verdict.skip(ACCEPT_GATE, "the server reports no accept length: no per-request verify counts "
                                         "(meta_info.spec_verify_ct) and no Decode lines with one", profile)
    health: dict[str, Any] = {"profile": profile, "part": "accept", "value": _median(xs), "source": source}
    rows: list[ReportRow] = []
    lines: list[str] = []
    if policy.update_baselines:
        health["verdict"] = "recorded"
        rows.append(ReportRow(key=make_key(profile, SINGLE, specread.ACCEPT), n=len(xs), median=_median(xs) or 0.0,
                              unit=specread.UNITS[specread.ACCEPT][0], samples=tuple(xs), extra={HEALTH: health}))
        return Verdict(ACCEPT_GATE, Status.SKIP, f"--update-baselines: {profile}'s accept length is being recorded "
                       f"({len(now)} greedy prompts)", profile=profile, rows=rows)
    greedy: bool | None = None
    (probe_wl, probe_metric), (single_wl, single_metric) = ACCEPT_KEYS
    ref = references.judged(profile, probe_wl, probe_metric)
    if not now:
        lines.append("greedy: the server reports no per-request verify counts (meta_info.spec_verify_ct): judged "
                     "by the aggregate accept length alone, as under sampling")
    elif isinstance(ref, str):
        lines.append(f"greedy: {ref}")
    else:
        cmp = spechealth.compare_prompts(now, _recorded_counts(ref))
        cmp = explain(cmp) if explain is not None else cmp
        greedy = cmp.ok if cmp.compared else None
        lines += cmp.lines()
        rows.append(ReportRow(key=f"{profile}/{specread.PROBE.name}/verify counts", n=cmp.compared,
                              median=float(cmp.compared - len(cmp.findings)), unit="prompts unchanged",
                              verdict="pass" if cmp.ok else "regression", message=cmp.reason()))
    drifted: bool | None = None
    ref2 = references.judged(profile, single_wl, single_metric) if xs else "no accept length measured"
    if isinstance(ref2, str):
        lines.append(f"aggregate ({SINGLE}): {ref2}")
    else:
        cmp2, basis = spechealth.accept_drift(xs, ref2.samples, alpha=policy.alpha,
                                              sessions=ref2.sessions or None, machine=ref2.machine,
                                              class_spread=ref2.class_spread)
        drifted = cmp2.is_regression
        lines += [f"aggregate ({SINGLE}; {source}) vs {ref2.source}: {cmp2.message}", f"  {basis.note}"]
        rows.append(ReportRow.from_comparison(make_key(profile, SINGLE, specread.ACCEPT), cmp2,
                                              unit=specread.UNITS[specread.ACCEPT][0], samples=xs,
                                              median_ci=stats.bootstrap_median_ci(xs),
                                              extra={"reference": ref2.source, "tolerance_basis": basis.note}))
    health["verdict"] = ("FAIL" if greedy is False or drifted else "pass" if greedy or drifted is False
                         else "not judged")
    health["greedy"] = lines[0].removeprefix("greedy: ")
    if rows:  # the summary line reads the gate's last row
        rows[-1] = replace(rows[-1], extra={**rows[-1].extra, HEALTH: health})
    else:
        rows.append(ReportRow(key=make_key(profile, SINGLE, specread.ACCEPT), n=len(xs), median=_median(xs) or 0.0,
                              unit=specread.UNITS[specread.ACCEPT][0], samples=tuple(xs), extra={HEALTH: health}))
    message = f"{profile} accept length:\n" + "\n".join(lines)
    if greedy is None and drifted is None:
        return _no_reference(ACCEPT_GATE, policy, profile, message, rows)
    failed = greedy is False or bool(drifted)
    reason = lines[0].removeprefix("greedy: ") if greedy is False else next(
        (ln for ln in lines if ln.startswith("aggregate")), lines[0])
    return Verdict(ACCEPT_GATE, Status.FAIL if failed else Status.PASS, message, reason if failed else "",
                   profile=profile, rows=rows)


# ----------------------------------------------------------------------------------------------
# The cycle's cost


def _drift(ref: Reference | str, metric: str, xs: list[float], policy: Policy) -> tuple[compare.Comparison | None, str]:
    """(the drift of a lower-is-better time against its reference, the line that says it)."""
    if isinstance(ref, str):
        return None, f"{metric}: {ref}"
    cmp, basis = compare.drift(xs, ref.samples, higher_is_better=False, requested=policy.tolerance,
                               alpha=policy.alpha, sessions=ref.sessions or None, machine=ref.machine,
                               class_spread=ref.class_spread)
    return cmp, f"{metric} vs {ref.source}: {cmp.message}\n  {basis.note}"


def _change(ref: Reference | str, xs: list[float]) -> float | None:
    """The relative change of a median against its stored reference (None: no reference or samples)."""
    if isinstance(ref, str) or not xs or not ref.samples:
        return None
    return statistics.median(xs) / statistics.median(ref.samples) - 1


def cycle_cost_vs_baseline(measurement: Measurement, references: References, policy: Policy, *, profile: str,
                           workload: str = SINGLE,
                           plain: Callable[[], tuple[str, Measurement] | None] | None = None) -> Verdict:
    """A speculative server's time per draft+verify cycle over busy time, and its break-even (the cycle over
    the plain server's decode step, both measured in this run), against their baselines. Fails on a
    regression of the break-even, which a machine that is slower overall leaves unchanged; without a plain
    server to divide by, on a regression of the cycle time itself. ``plain``: the plain server's name and
    measurement, measured only once the cycle cost can be read (None: the run has no plain server)."""
    m = measurement
    reading = specread.cycle_reading(m)
    xs, source = reading.samples()
    if not xs or not reading.speculative:
        return Verdict.skip(CYCLE_GATE, f"no busy Decode windows with an accept length and no per-request verify "
                                        f"counts ({reading.describe()}): the cycle cost cannot be read", profile)
    base_name, base_m = (plain() if plain is not None else None) or (None, None)
    econ = specread.economics(m, base_m)
    ratio, ratio_source = cyclecost.ratio_samples(reading, econ.step) if econ.step is not None else ([], "")
    health: dict[str, Any] = {"profile": profile, "part": "cycle", "speculative": True, "cycle_ms": _median(xs),
                              "source": source, "break_even": econ.break_even, "step_ms": econ.decode_step_ms,
                              "economics": econ.verdict, "predicted": econ.predicted_speedup,
                              "measured": econ.measured_speedup}
    unit, ci = specread.UNITS[specread.CYCLE][0], stats.bootstrap_median_ci(xs)
    rows = [ReportRow(key=make_key(profile, workload, specread.CYCLE), n=len(xs), median=statistics.median(xs),
                      unit=unit, samples=tuple(xs), higher_is_better=False, ci_low=ci[0], ci_high=ci[1],
                      extra={HEALTH: health})]
    if ratio:
        result = Result.make(profile, workload, specread.RATIO, unit=specread.UNITS[specread.RATIO][0],
                             higher_is_better=False, samples=ratio,
                             extra={"source": ratio_source, "baseline": base_name,
                                    "concurrency": m.workload.concurrency, "max_new_tokens": m.workload.max_new_tokens})
        rows.append(ReportRow(key=result.key, n=len(ratio), median=statistics.median(ratio), unit="x",
                              samples=tuple(ratio), higher_is_better=False, extra={RESULT: result.to_dict()}))
    lines = [f"{profile} {workload}: {reading.describe()}; recorded as {specread.CYCLE} from {source}",
             *econ.lines()]
    if policy.update_baselines:
        health["verdict"] = "recorded"
        return Verdict(CYCLE_GATE, Status.SKIP, "--update-baselines: the cycle cost is being recorded, not "
                       "compared\n" + "\n".join(lines), profile=profile, rows=rows)
    (_, cycle_metric), (_, ratio_metric) = CYCLE_KEYS
    cmp, said = _drift(references.judged(profile, workload, cycle_metric), cycle_metric, xs, policy)
    rcmp = None
    if ratio:
        rcmp, rsaid = _drift(references.judged(profile, workload, ratio_metric), ratio_metric, ratio, policy)
        lines.append(f"break-even (cycle / {base_name or 'plain'} step, {ratio_source}; gated): {rsaid}")
        lines.append(f"cycle time alone (reported; the break-even is gated, a machine slower overall moves both "
                     f"servers): {said}")
    else:
        lines.append(f"{said}\n  (no break-even: no plain server measured in this run to divide by; the cycle time "
                     "is gated alone, and moves with the machine)")
    for i, got in ((0, cmp), (1, rcmp)):  # the table shows each comparison beside its samples
        if got is not None and i < len(rows):
            rows[i] = replace(ReportRow.from_comparison(rows[i].key, got, unit=rows[i].unit, samples=rows[i].samples,
                                                        median_ci=stats.bootstrap_median_ci(list(rows[i].samples))),
                              extra=rows[i].extra)
    judged = rcmp if rcmp is not None else cmp
    # the table asks the gate which row it judged: the other is reported beside it, never a regression
    rows = [replace(r, gated=got is judged) for r, got in zip(rows, (cmp, rcmp), strict=False)]
    if judged is None:
        health["verdict"] = "not judged"
        return _no_reference(CYCLE_GATE, policy, profile, "\n".join(lines), rows)
    failed = judged.is_regression
    cause = ""
    if failed or (cmp is not None and cmp.is_regression):
        step_change = (_change(references.read(base_name, workload, specread.STEP), econ.step.samples()[0])
                       if base_name is not None and econ.step is not None else None)
        cause = cyclecost.cycle_cause(cmp.change if cmp is not None else None, step_change,
                                      _change(references.read(profile, workload, specread.ACCEPT),
                                              specread.accept_samples(m)[0]))
        if not failed:  # a failure says it first
            lines.append(f"not gated: {cause}")
    health["verdict"] = "FAIL" if failed else "pass"
    what = "break-even (cycle / plain step)" if judged is rcmp else specread.CYCLE
    reason = (f"{what} rose {judged.change:+.1%} against the baseline (median {judged.median_current:.3g} vs "
              f"{judged.median_reference:.3g}, p={judged.p:.2g}); {cause}" if failed else "")
    text = "\n".join(([reason] if failed else []) + lines)  # a failure says its cause first
    return Verdict(CYCLE_GATE, Status.FAIL if failed else Status.PASS, text, reason, profile=profile, rows=rows)


# ----------------------------------------------------------------------------------------------
# What the run leaves behind


def add_row_results(rs: ResultSet, rows: Iterable[ReportRow]) -> None:
    """The results these gates' rows carry (the break-even samples), added to the run's results once."""
    for row in rows:
        data = row.extra.get(RESULT)
        if isinstance(data, Mapping) and rs.get(str(data.get("key"))) is None:
            rs.add(Result.from_dict(data))


def _num(x: Any, fmt: str = ".2f") -> str:
    return format(x, fmt) if isinstance(x, (int, float)) else "-"


def summary_lines(rows: Iterable[ReportRow]) -> list[str]:
    """One line per speculative server: accept length, cycle cost, break-even and each verdict."""
    parts: dict[str, dict[str, Mapping[str, Any]]] = {}
    for row in rows:
        h = row.extra.get(HEALTH)
        if isinstance(h, Mapping) and h.get("profile"):
            parts.setdefault(str(h["profile"]), {})[str(h.get("part"))] = h
    out = []
    for name, got in sorted(parts.items()):
        a, c = got.get("accept"), got.get("cycle")
        if a is None and (c is None or not c.get("speculative")):
            continue
        bits = []
        if a is not None:
            bits.append(f"accept length {_num(a.get('value'))} from {a.get('source') or 'no reading'}: "
                        f"{a.get('verdict')}")
        if c is not None:
            bits.append(f"cycle {_num(c.get('cycle_ms'))} ms from {c.get('source')}, step {_num(c.get('step_ms'))} ms: "
                        f"{c.get('verdict')}")
            if c.get("break_even") is not None:
                bits.append(f"break-even {_num(c.get('break_even'))} -> {c.get('economics') or '?'} (predicts "
                            f"{_num(c.get('predicted'))}x, measured {_num(c.get('measured'))}x decode tok/s)")
        out.append(f"specwatch speculation {name}: " + "; ".join(bits))
    return out
