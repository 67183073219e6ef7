"""The accept-length check: every source of a measured workload, converted to the canonical value, must agree.

Sources, each read by its own definition (:data:`specwatch.judge.speculative.SOURCES`): the Decode-line
windows (each covers its window), the ``sglang:spec_accept_length`` gauge (the last log interval only:
it must equal the last Decode line's value), the ``/metrics`` counter deltas, ``/server_info``'s value
(cumulative since boot or the last ``/flush_cache``: the window's only when a flush took before it), the
requests' ``meta_info`` (exact, and ``spec_accept_length`` = ``completion_tokens / spec_verify_ct`` per
request). Every verdict names the sources it used and the averaging each uses (:mod:`specwatch.judge.averaging`:
pooled over verify cycles, over requests, over log windows; they part when acceptance varies by request, and a
claimed value that is one of them is reconciled as such). The definitions and conversions are
:mod:`specwatch.judge.speculative`'s (it also owns "the accept length of a measurement");
:func:`estimates` gathers the sources, :func:`averages` their averagings, :func:`evaluate` reconciles them
(recorded data too),
:func:`check` does both for a live measurement, :func:`explain_value` tells what a claimed number
probably is. Each returns a :class:`~specwatch.judge.verdict.Verdict` named ``accept length``.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from specwatch.checks.verdictlog import VerdictLog, record
from specwatch.engines.protocol import MetricNames
from specwatch.engines.registry import native_metrics
from specwatch.judge import averaging, speculative
from specwatch.judge.verdict import Verdict
from specwatch.profiles.profile import ServerProfile
from specwatch.signals.logscan import DecodeRecord

if TYPE_CHECKING:
    from specwatch.load.measure import Measurement
    from specwatch.server.pool import RunningServer
    from specwatch.signals.promtext import Exposition

__all__ = ["NAME", "NEEDS", "WINDOW_SLACK", "averages", "check", "claim_disagreements", "estimates", "evaluate",
           "explain_value", "flush_took", "measured_estimates", "num_steps"]

NAME = "accept length"
#: what the live check reads (:data:`specwatch.engines.protocol.CAPABILITIES`)
NEEDS = ("native_api", "meta_info", "metrics", "decode_lines")
#: Population slack between Decode-line windows and whole requests (see evaluate).
WINDOW_SLACK = 0.1


def explain_value(value: float, num_steps: int | None = None, num_draft_tokens: int | None = None,
                  profile: str = "", source: str = "accept length") -> Verdict:
    """Is ``value`` a canonical accept length? Fails with what it probably is instead.

    ``explain_value(0.92, 2, 3)`` fails with "0.92 < 1: looks like extra tokens per cycle;
    canonical value 1.92 (if it is an accept rate instead: ...)".
    """
    probs = speculative.bounds_problems(value, num_steps, num_draft_tokens, name=source)
    if probs:
        msg = f"{source} {value:g} is not a canonical accept length: " + "; ".join(probs)
        return Verdict.of(NAME, False, msg, "; ".join(probs), profile=profile)
    top = f", ≤ num_steps+1 = {num_steps + 1}" if num_steps is not None else ""
    return Verdict.of(NAME, True, f"{source} {value:g} is a plausible canonical accept length (≥ 1{top})",
                      "within bounds", profile=profile)


def num_steps(profile: ServerProfile, server_info: Mapping[str, Any]) -> int | None:
    """The speculative num_steps of a server: its profile's, else what its /server_info says (a profile may leave
    it to the engine); None: not speculative, or the server does not say."""
    if profile.speculative is not None and profile.speculative.num_steps is not None:
        return profile.speculative.num_steps
    steps = server_info.get("speculative_num_steps")
    return int(steps) if steps else None


def flush_took(info_before: Mapping[str, Any] | None) -> bool:
    """Whether the ``/flush_cache`` just before ``info_before`` was taken: a successful one resets the
    lifetime ``avg_spec_accept_length``, absent until the next Decode line (scheduler.py flush_cache ->
    reset_metrics); SGLang 0.5.23 answers 400 and resets nothing while requests are in flight."""
    return _cumulative(info_before or {}) is None


def _cumulative(info: Mapping[str, Any]) -> float | None:
    states = info.get("internal_states") or [{}]
    val = (states[0] if states else {}).get("avg_spec_accept_length", info.get("avg_spec_accept_length"))
    return float(val) if val is not None else None


def _request_problems(metas: Sequence[Mapping[str, Any]], num_steps: int) -> tuple[list[str], list[str]]:
    """(problems, notes) per request: bounds, exact value against completion_tokens/verify_ct, histogram."""
    problems: list[str] = []
    notes: list[str] = []
    for i, meta in enumerate(metas):
        if meta.get("spec_verify_ct") is None:
            continue
        v = int(meta["spec_verify_ct"])
        if v <= 0:
            continue
        try:
            exact = speculative.from_request_meta(meta, num_steps, source=f"request {i} meta_info")
        except speculative.CannotDeriveError as exc:
            notes.append(f"request {i}: {exc}")
            continue
        problems += [f"request {i}: {p}" for p in speculative.bounds_problems(exact.value, num_steps)]
        if (wrong := speculative.meta_ratio_problem(meta)) is not None:
            problems.append(f"request {i}: {wrong}")
        if meta.get("spec_num_correct_drafts") is not None:
            c = int(meta["spec_num_correct_drafts"])
            ratio = speculative.from_completion_ratio(int(meta["completion_tokens"]), v, num_steps)
            rec = speculative.reconcile([exact, ratio])
            if rec.disagreements:
                problems.append(f"request {i}: exact {exact.value:.4f} outside completion_tokens/verify_ct's "
                                f"interval [{ratio.low:.4f}, {ratio.high:.4f}]")
            hist = meta.get("spec_correct_drafts_histogram")
            if hist is not None:
                problems += [f"request {i} histogram: {p}" for p in
                             speculative.check_histogram([int(h) for h in hist], v, c, num_steps)]
    return problems, notes


def estimates(
    *,
    num_steps: int,
    decode_records: Sequence[DecodeRecord] = (),
    metrics_delta: Exposition | None = None,
    metas: Sequence[Mapping[str, Any]] = (),
    info_before: Mapping[str, Any] | None = None,
    info_after: Mapping[str, Any] | None = None,
    flushed_before: bool = False,
    metrics_after: Exposition | None = None,
    metrics: MetricNames | None = None,
) -> tuple[list[speculative.Estimate], list[str], list[str]]:
    """(canonical estimates per source, problems, notes) from every accept-length source.

    Sources: the Decode-line windows (their bs-weighted mean, each line rounded to 2 decimals:
    :func:`speculative.from_windows`); the /metrics delta (Δgeneration_tokens / Δspec_verify_calls
    with Δnum_requests); the cumulative /server_info value (the window itself when flushed before
    it); the requests' meta_info summed (exact: :func:`speculative.from_requests`; without
    spec_num_correct_drafts, their completion_tokens/spec_verify_ct summed, bounded); the gauge of
    ``metrics_after`` (the last log interval: it must equal the last Decode line's value, and stands in
    for the windows when there are no Decode lines). Per request, the histogram identities, the bounds,
    SGLang's definition of meta_info.spec_accept_length and the agreement of the exact value with
    completion_tokens/verify_ct's interval are problems when they fail. ``metrics``: the engine's metric
    names (default: the native engine's).
    """
    names = metrics or native_metrics()
    ests: list[speculative.Estimate] = []
    problems: list[str] = []
    notes: list[str] = []
    windows = [r for r in decode_records if r.accept_len is not None]
    for r in windows:
        problems += [f"Decode line {r.ts}: {p}" for p in speculative.bounds_problems(
            r.accept_len, num_steps, name="log accept len")]  # type: ignore[arg-type]
    logged = speculative.from_windows([(r.accept_len, r.running) for r in windows],  # type: ignore[misc]
                                      source=f"Decode lines ({len(windows)} windows, each its own)")
    if logged is not None:
        ests.append(logged)
    gauge_est, gauge_problems, gauge_notes = _gauge(metrics_after, windows, names.accept_length)
    ests += gauge_est
    problems += gauge_problems
    notes += gauge_notes
    if metrics_delta is not None and not metrics_delta.has(names.verify_calls):
        notes.append(f"/metrics delta: the server exposes no {names.verify_calls} counter: not a source")
    elif metrics_delta is not None:
        gen = metrics_delta.value(names.generation_tokens, default=0.0)
        ver = metrics_delta.value(names.verify_calls, default=0.0)
        nreq = metrics_delta.value(names.requests, default=0.0) or float(len(metas))
        try:
            ests.append(speculative.from_metrics_delta(gen, ver, nreq, num_steps, source="/metrics delta"))
        except speculative.CannotDeriveError as exc:
            notes.append(f"/metrics delta: {exc}")
    if info_after is not None:
        try:
            ests.append(speculative.window_from_cumulative(
                _cumulative(info_before or {}), _cumulative(info_after), flushed_before=flushed_before,
                source="/server_info avg_spec_accept_length"))
        except speculative.CannotDeriveError as exc:
            notes.append(f"/server_info: {exc}")
    per_request, request_notes = _request_problems(metas, num_steps)
    problems += per_request
    notes += request_notes
    exact = speculative.from_requests(metas, source=f"meta_info of {len(metas)} requests (exact)")
    if exact is None:
        exact = _completion_ratios(metas, num_steps)
    if exact is not None:
        ests.append(exact)
    return ests, problems, notes


def _gauge(metrics_after: Exposition | None, windows: Sequence[DecodeRecord], name: str
           ) -> tuple[list[speculative.Estimate], list[str], list[str]]:
    """The accept-length gauge ``name`` by its definition, the last log interval: (estimates,
    problems, notes). With Decode lines it must equal the last one's value (the same window); without
    them it is the only window reading, of the last interval."""
    found = metrics_after.find(name) if metrics_after is not None else []
    if len(found) != 1:  # none, or one per data-parallel replica: not one window's value
        notes = [f"{name}: {len(found)} gauges (one per replica), not read"] if found else []
        return [], [], notes
    value = float(found[0][1])
    if value <= 0:
        return [], [], [f"{name} gauge reads {value:g}: no Decode-line window yet (it holds "
                        "the last one only)"]
    if not windows:
        return [speculative.from_gauge(value, f"{name} gauge (the last log interval)")], [], []
    last = windows[-1].accept_len
    if last is not None and abs(value - last) > speculative.LOG_ROUNDING + 1e-9:
        return [], [f"{name} gauge {value:.4f} is not the last Decode line's accept len "
                    f"{last:.2f}: the gauge holds the last log interval, the same window"], []
    return [], [], [f"{name} gauge {value:.4f} equals the last Decode line's {last:.2f} (the "
                    "last log interval only: not a reading of the whole measurement)"]


def _completion_ratios(metas: Sequence[Mapping[str, Any]], num_steps: int) -> speculative.Estimate | None:
    """The requests' completion_tokens / spec_verify_ct summed (meta_info without spec_num_correct_drafts)."""
    done = [m for m in metas if isinstance(m.get("spec_verify_ct"), int) and m["spec_verify_ct"] > 0
            and isinstance(m.get("completion_tokens"), int)]
    if not done:
        return None
    return speculative.from_metrics_delta(
        sum(m["completion_tokens"] for m in done), sum(m["spec_verify_ct"] for m in done), len(done), num_steps,
        source=f"meta_info completion_tokens/spec_verify_ct of {len(done)} requests (bounded)")


def averages(decode_records: Sequence[DecodeRecord] = (), metas: Sequence[Mapping[str, Any]] = ()
             ) -> averaging.Means | None:
    """Every averaging of the same measurement (:mod:`specwatch.judge.averaging`): the requests' counts pooled and
    per request, the Decode lines batch-weighted and unweighted; None when neither is there."""
    windows = averaging.of_windows([(r.accept_len, r.running) for r in decode_records if r.accept_len is not None])
    per_request = averaging.of_requests(metas)
    if per_request is None:
        return averaging.Means(tuple(windows)) if windows else None
    return averaging.Means((*per_request.means, *windows), per_request.requests, per_request.lowest,
                           per_request.highest)


def _averaging_lines(ests: Sequence[speculative.Estimate], means: averaging.Means | None) -> list[str]:
    """Which averaging each source uses, then every averaging of the same counts (when known)."""
    kinds = {e.source or e.convention.value: averaging.averaging_of(e.source) for e in ests}
    if kinds and all(k is averaging.Averaging.POOLED for k in kinds.values()):
        lines = ["  averaging: every source above is pooled over verify cycles (Σ committed / Σ verify rows)"]
    else:
        lines = [f"  averaging of {name}: {k.value if k else 'unknown'}" for name, k in kinds.items()]
    return lines + [f"  averaging: {line}" for line in (means.lines() if means is not None else [])]


def evaluate(
    profile: str,
    num_steps: int,
    estimates: Sequence[speculative.Estimate],
    problems: Sequence[str] = (),
    notes: Sequence[str] = (),
    slack: float = WINDOW_SLACK,
    claimed: float | None = None,
    num_draft_tokens: int | None = None,
    means: averaging.Means | None = None,
) -> Verdict:
    """Reconcile the estimates (widened by ``slack``: Decode-line windows cover the verify cycles
    of the log windows, not exactly the finished requests); a ``claimed`` value is explained
    (:func:`explain_value`) and compared with each live source (:func:`claim_disagreements`); one that is another
    averaging of the same counts (``means``, :func:`averages`: a mean over requests, over log windows) is
    reconciled as that averaging, not a disagreement."""
    ests = list(estimates)
    extra: list[str] = []
    apart: list[str] = []
    reconciled = ""
    if claimed is not None:
        why = explain_value(claimed, num_steps, num_draft_tokens, profile, "claimed value")
        if why.failed:
            extra.append(why.reason)
        apart = claim_disagreements(claimed, ests)
        hit = averaging.explain(claimed, means.means) if apart and means is not None and not extra else None
        if hit is not None:
            reconciled = (f"the claimed value {claimed:g} is the {hit.averaging.value}, {hit.describe()}: apart from "
                          "the pooled sources by averaging only")
            apart = []
    if not ests and not problems:
        unjudged = "; the claimed value had nothing to be compared with" if claimed is not None else ""
        return Verdict.of(NAME, None, "no accept-length source answered", "no accept-length source answered"
                          + unjudged + ": " + "; ".join(notes), profile=profile)
    rec = speculative.reconcile(ests, num_steps=num_steps, slack=slack)
    lines = [rec.message(), *_averaging_lines(ests, means)]
    lines += [f"  problem: {p}" for p in problems]
    lines += [f"  explanation: {e}" for e in extra]
    lines += [f"  claim: {a}" for a in apart]
    lines += [f"  claim: {reconciled}"] if reconciled else []
    lines += [f"  note: {n}" for n in notes]
    message = "\n".join(lines)
    if problems or not rec.agree or extra or apart:
        reasons = list(extra) + apart + list(rec.out_of_bounds) + [
            f"{a} vs {b} apart by {gap:.4f}" for a, b, gap in rec.disagreements] + list(problems)
        return Verdict.of(NAME, False, message, "; ".join(dict.fromkeys(reasons)), profile=profile, details=rec)
    mid = statistics.median(e.value for e in ests)  # the middle of the agreeing sources, for the one-line reason
    agreed = f"{len(ests)} sources agree on" if len(ests) > 1 else "its one source reads"
    used = "; ".join(_source_name(e) for e in ests)
    claim = f"; the claimed value {claimed:g} agrees with them" if claimed is not None and not reconciled else ""
    claim += f"; {reconciled}" if reconciled else ""
    spread = ""
    if means is not None and means.varies and (per := means.of(averaging.Averaging.PER_REQUEST)):
        spread = (f"; per request {means.lowest:.2f} to {means.highest:.2f}, their mean {per[0].value:.3f}: apart "
                  "from the pooled value by averaging only")
    return Verdict.of(NAME, True, message, f"{agreed} {mid:.3f} pooled over verify cycles (≤ num_steps+1 = "
                      f"{num_steps + 1}; {used}){spread}{claim}", profile=profile, details=rec)


def claim_disagreements(claimed: float, ests: Sequence[speculative.Estimate]) -> list[str]:
    """Each live source a claimed accept length is apart from, and by how much ([]: it agrees).

    The claim (± the rounding of a 2-decimal figure) agrees when it lies within the live sources' span:
    from the lowest allowed value of any source to the highest. The population slack between a
    log window and the finished requests is for two live sources, not for a claim: a claimed 0.92
    is apart from live sources reading 1.00 (a random draft) as it is from ones reading 1.92.
    """
    tol = speculative.LOG_ROUNDING
    if not ests or min(e.low for e in ests) - tol <= claimed <= max(e.high for e in ests) + tol:
        return []
    out = []
    for e in ests:
        gap = (e.low - claimed if claimed < e.low else claimed - e.high) - tol
        out.append(f"claimed value {claimed:g} vs {_source_name(e)} {e.value:.4f}: apart by {gap:.4f}")
    return out


def _source_name(est: speculative.Estimate) -> str:
    """The source of an estimate without its counts, for the one-line reason."""
    return (est.source or est.convention.value).split(" (", 1)[0]


def measured_estimates(profile: ServerProfile, measurement: Measurement, steps: int
                       ) -> tuple[list[speculative.Estimate], list[str], list[str]]:
    """:func:`estimates` of every source of one live measurement (the cumulative /server_info value as the
    window's only when the /flush_cache before it took)."""
    m = measurement
    asked, flushed = m.workload.flush_after_warmup, flush_took(m.server_info_before)
    ests, problems, notes = estimates(
        num_steps=steps, decode_records=m.decode_records, metrics_delta=m.metrics_delta,
        metas=[g.meta_info for g in m.generations], info_before=m.server_info_before,
        info_after=m.server_info_after or {}, flushed_before=asked and flushed,
        metrics_after=getattr(m, "metrics_after", None), metrics=profile.engine_kind.metrics)
    if asked and not flushed:
        notes.append("/flush_cache did not take before the window (avg_spec_accept_length was still there after "
                     "it): the cumulative /server_info value is not read as the window's")
    return ests, problems, notes


def check(
    log: VerdictLog | None,
    server: RunningServer,
    measurement: Measurement,
    slack: float = WINDOW_SLACK,
    claimed: float | None = None,
) -> Verdict:
    """Reconcile every accept-length source of one measured workload (and a ``claimed`` value).

    A pass or fail is kept in ``log`` (None: kept nowhere).
    """
    prof = server.profile
    if why := prof.unable(NAME, NEEDS):
        return Verdict.skip(NAME, why, prof.name)
    info = measurement.server_info_after or {}
    steps = num_steps(prof, info)
    if steps is None and prof.speculative is not None:
        return Verdict.skip(NAME, "num_steps is unknown: the profile leaves it to the engine and /server_info has "
                                  "no speculative_num_steps", prof.name)
    if steps is None:
        return Verdict.skip(NAME, "not a speculative server: no accept length", prof.name)
    ests, problems, notes = measured_estimates(prof, measurement, steps)
    if server.log_path is None:
        notes.append("no log file (--server-url): Decode-line windows not read")
    ndt = prof.speculative.draft_tokens if prof.speculative else None
    ndt = ndt or info.get("speculative_num_draft_tokens")
    means = averages(measurement.decode_records, [g.meta_info for g in measurement.generations])
    return record(log, evaluate(prof.name, steps, ests, problems, notes, slack, claimed, ndt, means))
