"""The session's side of the gates: each function here gathers a gate's evidence from the run's Session
(its measurements, the reference they are compared against, the round spread, the checks' findings, the
policy of its options), asks the gate (:mod:`specwatch.run.gates`, :mod:`specwatch.run.specgates`), and
records the verdict's rows in the session (summary table, results, benchmark.json, JUnit through the
plugin), so a user's test that calls one needs no helper fixture::

    enforce(gatekeeper.drift(specwatch_session, "eagle3-tuned", metric="decode_tok_s"))

The skips decided before any evidence exists (a profile without a floor, a profile set without the servers
a relative gate compares, a plain server asked for its accept length) are said here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from specwatch.judge.verdict import Status, Verdict
from specwatch.run import gates, specgates, specread
from specwatch.run.evidence import Pair, Policy, Reference, References
from specwatch.store.result import make_key

if TYPE_CHECKING:
    from specwatch.judge.paired import RoundPrior
    from specwatch.judge.spechealth import GreedyComparison
    from specwatch.load.measure import Measurement
    from specwatch.load.workload import Workload
    from specwatch.profiles.profile import ServerProfile
    from specwatch.run.session import Session

__all__ = ["accept_length_vs_baseline", "context_length", "cycle_cost_vs_baseline", "drift", "floor", "prefix_reuse",
           "probe", "speculation_beats_baseline", "speculation_by_level", "speculation_ttft", "tuned_vs_untuned"]


def recorded(gate: Callable[..., Verdict]) -> Callable[..., Verdict]:
    """The verdict's rows go to the session's ``verdict_rows`` (the run's record) as the gate returns."""

    @functools.wraps(gate)
    def run(session: Session, *args: Any, **kwargs: Any) -> Verdict:
        verdict = gate(session, *args, **kwargs)
        session.verdict_rows.extend(verdict.rows)
        return _with_engine(session, verdict)

    return run


def _with_engine(session: Session, verdict: Verdict) -> Verdict:
    """A judged verdict's message ends with the engine and version it judged (``engine: sglang 0.5.16``), as
    the fingerprint records them; a skip is left as it is."""
    from specwatch.store.machine import engine_text

    if verdict.status is Status.SKIP:
        return verdict
    engine = engine_text(session.fingerprint())
    return replace(verdict, message=f"{verdict.message}\nengine: {engine}") if engine else verdict


def _policy(session: Session, prof: ServerProfile) -> Policy:
    """The run's options for a gate that compares against a reference: the profile's tolerance, else the run's."""
    cfg = session.config
    return Policy(alpha=cfg.alpha, tolerance=prof.tolerance or cfg.tolerance, require_baseline=cfg.require_baseline,
                  update_baselines=cfg.update_baselines, explain=session.verbosity > 0)


def _findings(session: Session, *profiles: str) -> tuple[str, ...]:
    """The checks' conclusions about these servers, one line each, said beside a relative or failing verdict."""
    return tuple(f"[{f.check} on {name}: {'ok' if f.ok else 'FAILED'}] {f.summary.splitlines()[0]}"
                 for name in profiles for f in session.findings_for(name))


def _references(session: Session) -> References:
    """The session's reference lookups: a missing one of a judged key is remembered for the summary."""
    def judged(profile: str, workload: str, metric: str) -> Reference | str:
        ref = session.reference_samples(profile, workload, metric)
        if isinstance(ref, str):
            session.missing_baseline(make_key(profile, workload, metric), ref)
        return ref

    return References(judged=judged, read=session.reference_samples)


def _round_prior(session: Session, server: str, workload: str, measured: Measurement,
                 metric: str = gates.DECODE_METRIC) -> tuple[RoundPrior | None, str]:
    """The round spread earlier A/B runs recorded for this machine class, and where it comes from: the
    boot-to-boot term a relative gate pools with its own rounds (None: none recorded). The runs of ``server``'s
    key of ``metric`` and of its twins, which served what ``measured`` served (:meth:`RoundSpread.prior_for`, the
    rule ``specwatch ab`` uses: another model's boot-to-boot luck is none of this one's)."""
    from specwatch.store.roundspread import RoundSpread

    spread = RoundSpread.for_class(session.config.path(session.config.baseline_dir), session.machine_class())
    engine = session.engine_of(server)
    return spread.prior_for(f"{server}/{workload}/{metric}", engine, measured.served())


# -- throughput -----------------------------------------------------------------------------------


@recorded
def floor(session: Session, profile: str, workload: str = "single-stream") -> Verdict:
    """:func:`specwatch.run.gates.floor` on the profile's measurement (skips when it sets no ``floor_tok_s``)."""
    prof = session.profile_for(profile)
    if prof.floor_tok_s is None:
        return Verdict(gates.FLOOR, Status.SKIP, f"profile {prof.name} sets no floor_tok_s", profile=prof.name)
    m = session.measure(prof.name, workload, pooled=True)
    return gates.floor(m, prof.floor_tok_s, profile=prof.name, workload=workload)


@recorded
def drift(session: Session, profile: str, workload: str = "single-stream", metric: str = gates.METRIC) -> Verdict:
    """:func:`specwatch.run.gates.drift` of the profile's measurement against its reference (the stored
    baseline, or ``--specwatch-reference``); a missing one is remembered for the summary. A speculative
    server's regression is diagnosed against the plain server's measurement, when the run has one."""
    prof = session.profile_for(profile)
    m = session.measure(prof.name, workload, pooled=True)
    policy = _policy(session, prof)
    ref: Reference | str = ""
    if not policy.update_baselines:  # recording, not comparing: nothing to look up
        ref = session.reference_samples(prof.name, workload, metric)
        if isinstance(ref, str):
            session.missing_baseline(f"{prof.name}/{workload}/{metric}", ref)
    diagnosis = None
    if prof.role == "spec":
        base = session.profiles.for_role("baseline")
        diagnosis = (session.measurements.get((base.name, workload)) if base else None, _findings(session, prof.name))
    return gates.drift(m, ref, policy, profile=prof.name, workload=workload, metric=metric, diagnosis=diagnosis)


# -- relative gates --------------------------------------------------------------------------------


@recorded
def speculation_beats_baseline(session: Session, workload: str = "single-stream") -> Verdict:
    """:func:`specwatch.run.gates.speculation_beats_baseline` on the spec and baseline servers' measurements
    (:meth:`Session.measure_pair`: in alternating rounds when the profile set asks for them)."""
    spec_p, base_p = session.profiles.for_role("spec"), session.profiles.for_role("baseline")
    if not spec_p or not base_p:
        return Verdict(gates.SPEC_VS_BASELINE, Status.SKIP,
                       "the profile set has no spec and baseline servers to compare")
    base, spec = session.measure_pair(base_p.name, spec_p.name, workload)
    prior, source = _round_prior(session, spec_p.name, workload, spec)
    pair = Pair(spec, base, (spec_p.name, base_p.name), workload, prior, source,
                _findings(session, spec_p.name, base_p.name), _draft_dead(spec_p, spec))
    return gates.speculation_beats_baseline(pair, Policy(alpha=session.config.alpha),
                                            margin=session.profiles.gates.spec_margin)


def _draft_dead(prof: ServerProfile, spec: Measurement) -> str:
    """The draft-alive check's failure on the speculative server's own measurement ("": alive, or it cannot
    tell): speculation off, or a draft that accepts nothing, said before the gate calls the server slow."""
    from specwatch.checks import draft_alive

    if prof.unable(draft_alive.NAME, draft_alive.NEEDS):
        return ""
    verdict = draft_alive.evaluate_measurement(prof, spec)
    return f"[{verdict.name} on {prof.name}: FAILED] {verdict.reason}" if verdict.failed else ""


@recorded
def speculation_ttft(session: Session, workload: str = "single-stream") -> Verdict:
    """:func:`specwatch.run.gates.speculation_ttft` on the same measurements as
    :func:`speculation_beats_baseline` (no extra boot), at ``[gates] spec_ttft_margin``; the p50's boot-to-boot
    term is the round spread recorded for the speculative server's own ``ttft_ms`` key (``specwatch ab --metric
    ttft_ms --record-rounds``), never decode throughput's."""
    spec_p, base_p = session.profiles.for_role("spec"), session.profiles.for_role("baseline")
    if not spec_p or not base_p:
        return Verdict(gates.SPEC_TTFT, Status.SKIP, "the profile set has no spec and baseline servers to compare")
    base, spec = session.measure_pair(base_p.name, spec_p.name, workload)
    prior, source = _round_prior(session, spec_p.name, workload, spec, metric="ttft_ms")
    pair = Pair(spec, base, (spec_p.name, base_p.name), workload, prior, source,
                _findings(session, spec_p.name, base_p.name))
    return gates.speculation_ttft(pair, Policy(alpha=session.config.alpha),
                                  margin=session.profiles.gates.spec_ttft_margin)


@recorded
def tuned_vs_untuned(session: Session, workload: str = "single-stream") -> Verdict:
    """:func:`specwatch.run.gates.tuned_vs_untuned` on the tuned and untuned servers' measurements."""
    t_p, u_p = session.profiles.for_role("tuned"), session.profiles.for_role("untuned")
    if not t_p or not u_p:
        return Verdict(gates.TUNED_VS_UNTUNED, Status.SKIP,
                       "the profile set has no tuned and untuned servers to compare")
    untuned, tuned = session.measure_pair(u_p.name, t_p.name, workload)
    prior, source = _round_prior(session, t_p.name, workload, tuned)
    pair = Pair(tuned, untuned, (t_p.name, u_p.name), workload, prior, source, _findings(session, t_p.name, u_p.name))
    return gates.tuned_vs_untuned(pair, session.profiles.gates, Policy(alpha=session.config.alpha),
                                  unread=gates.unread_difference(t_p, u_p))


def _runs_too_few(wl: Workload, alpha: float) -> str:
    """Why ``wl``'s runs cannot give a sweep level a verdict at ``alpha`` ("" when they can): the level gate's
    one-sided Mann-Whitney needs more runs a side than it has, and no ``min_duration_s`` adds any."""
    from specwatch.judge.stats import min_attainable_p, runs_to_reach_p

    if wl.min_duration_s or min_attainable_p(wl.runs, wl.runs, "greater") < alpha:
        return ""
    need = runs_to_reach_p(alpha, alternative="greater")
    return (f"{wl.runs} runs a side cannot reach p < {alpha:g} (the least p of {wl.runs} against {wl.runs} is "
            f"{min_attainable_p(wl.runs, wl.runs, 'greater'):.3g}), so every level will be inconclusive; set "
            f"[workload] runs = {need} or more")


@recorded
def speculation_by_level(session: Session) -> Verdict:
    """:func:`specwatch.run.gates.speculation_by_level` over the profile set's sweep. With ``--server-url`` the
    running server alone is measured at every level (what ``specwatch compare-bench`` reads) and the gate skips,
    saying so. Each server runs every
    level on one boot (baseline first), levels in increasing order; with ``gates.interleave_runs`` both
    servers are up at once and each level's runs are interleaved (:meth:`Session.measure_pair`: a fresh boot
    of both per level and round), so a machine that drifts during the sweep moves both sides of a level alike."""
    from specwatch.load.workload import level_names, resolve

    spec_p, base_p = session.profiles.for_role("spec"), session.profiles.for_role("baseline")
    levels = level_names(session.profiles.workload)
    if levels and session.config.server_url:  # one running server: its levels measured (results file), not judged
        running = spec_p or next(iter(session.profiles.servers.values()))
        for level in levels:
            session.measure(running.name, level)
        return Verdict(gates.SPEC_BY_LEVEL, Status.SKIP,
                       f"--server-url: the running server ({running.name}) measured at {', '.join(levels)}, its "
                       "bench_serving metrics in the results file; judging speculation by level needs the plain "
                       f"server{' ' + base_p.name if base_p else ''} measured beside it (boot both from profiles)")
    if not spec_p or not base_p:
        return Verdict(gates.SPEC_BY_LEVEL, Status.SKIP, "the profile set has no spec and baseline servers to compare")
    if not levels:
        return Verdict(gates.SPEC_BY_LEVEL, Status.SKIP,
                       f"{session.profiles.source}: [workload] sets no sweep levels; "
                       "add concurrency = [1, 4, 16, 64] (or request_rate = [2.0, 8.0])")
    too_few = _runs_too_few(resolve(levels[0], session.profiles.workload), session.config.alpha)
    if too_few:
        session.progress(f"speculation by level: {too_few}")
    if session.profiles.gates.interleave_runs:
        for level in levels:
            session.measure_pair(base_p.name, spec_p.name, level)
    else:
        for name in (base_p.name, spec_p.name):
            for level in levels:
                session.measure(name, level)
    measured = {level: (session.measurements[(spec_p.name, level)], session.measurements[(base_p.name, level)])
                for level in levels}
    return gates.speculation_by_level(measured, session.profiles.gates, Policy(alpha=session.config.alpha),
                                      names=(spec_p.name, base_p.name))


# -- speculation health ----------------------------------------------------------------------------


def probe(session: Session, name: str) -> Measurement:
    """The greedy probe's measurement of server ``name`` (once per session; kept with the session's
    measurements, so its per-prompt counts reach the results file and the baselines), its length the
    profile set's ``[workload] max_new_tokens`` when it sets one."""
    from specwatch.load.measure import measure

    key = (name, specread.PROBE.name)
    if key not in session.measurements:
        length = session.profiles.workload.get("max_new_tokens", specread.PROBE.max_new_tokens)
        wl = replace(specread.PROBE, max_new_tokens=int(length))
        session.measurements[key] = measure(session.server(name), wl, session.progress)
    return session.measurements[key]


def _lossless(session: Session, prof: ServerProfile) -> specgates.Explain:
    """Changed prompts whose output changed too, judged by the lossless check against the plain server."""
    def explain(cmp: GreedyComparison) -> GreedyComparison:
        from specwatch.checks import lossless_live
        from specwatch.judge import spechealth

        moved = [c for c in cmp.changes if not c.output_same]
        base = session.profiles.for_role("baseline")
        if not moved or base is None or base.name == prof.name or session.config.server_url:
            return cmp
        verdict = lossless_live.check(session, base, prof, [c.now.prompt for c in moved], moved[0].now.max_new_tokens)
        diffs = getattr(verdict.details, "diffs", None)
        if diffs is None:
            return cmp
        return spechealth.explain(cmp, {c.now.key: d.identical for c, d in zip(moved, diffs, strict=True)})

    return explain


@recorded
def accept_length_vs_baseline(session: Session, profile: str) -> Verdict:
    """:func:`specwatch.run.specgates.accept_length_vs_baseline` on the greedy probe and the single-stream
    measurement of a speculative server; changed prompts are explained by the lossless check."""
    prof = session.profile_for(profile)
    if prof.speculative is None:
        return Verdict.skip(specgates.ACCEPT_GATE, "not a speculative server: no accept length", prof.name)
    probed = probe(session, prof.name)
    single = session.measure(prof.name, specgates.SINGLE, pooled=True)
    return specgates.accept_length_vs_baseline(probed, single, _references(session), _policy(session, prof),
                                               profile=prof.name, explain=_lossless(session, prof))


@recorded
def cycle_cost_vs_baseline(session: Session, profile: str, workload: str = specgates.SINGLE) -> Verdict:
    """:func:`specwatch.run.specgates.cycle_cost_vs_baseline` on a speculative server's measurement, divided by
    the plain server's (measured once the cycle cost can be read)."""
    prof = session.profile_for(profile)
    if prof.speculative is None:
        return Verdict.skip(specgates.CYCLE_GATE, f"a plain server: its decode step is recorded ({prof.name}/"
                            f"{workload}/{specread.STEP}) as the break-even's divisor; its own drift is the "
                            "throughput drift gate's (decode_tok_s: the same time, inverted)", prof.name)
    m = session.measure(prof.name, workload, pooled=True)

    def plain() -> tuple[str, Measurement] | None:
        base_p = session.profiles.for_role("baseline")
        if base_p is None or base_p.name == prof.name or base_p.speculative is not None:
            return None
        return base_p.name, session.measure(base_p.name, workload, pooled=True)

    return specgates.cycle_cost_vs_baseline(m, _references(session), _policy(session, prof), profile=prof.name,
                                            workload=workload, plain=plain)


@recorded
def prefix_reuse(session: Session) -> Verdict:
    """:func:`specwatch.checks.prefix_reuse.check` on the spec and baseline servers: the multi-turn workload of
    ``--specwatch-prefix-workload`` on each, judged with the run's prefix-reuse allowances."""
    from specwatch.checks import prefix_reuse as reuse
    from specwatch.judge.prefixreuse import Allowance
    from specwatch.load.multiturn import MultiTurn

    spec_p, base_p = session.profiles.for_role("spec"), session.profiles.for_role("baseline")
    if not spec_p or not base_p:
        return Verdict(reuse.NAME, Status.SKIP, "the profile set has no spec and baseline servers to compare")
    cfg = session.config
    allowance = Allowance(hit_points=cfg.prefix_hit_allowance, ttft_rise=cfg.prefix_ttft_allowance)
    return reuse.check(session, base_p, spec_p, MultiTurn.parse(cfg.prefix_workload or ""), allowance)


@recorded
def context_length(session: Session) -> Verdict:
    """:func:`specwatch.checks.context_length.check` on the spec and baseline servers: the input lengths of
    ``--specwatch-context-lengths`` (``--specwatch-runs`` prompts each, default 3), judged by the run's
    context-length gate (``--specwatch-context-gate-until``: report only when unset)."""
    from specwatch.checks import context_length as ctx
    from specwatch.judge.contextlen import ContextGate

    spec_p, base_p = session.profiles.for_role("spec"), session.profiles.for_role("baseline")
    if not spec_p or not base_p:
        return Verdict(ctx.NAME, Status.SKIP, "the profile set has no spec and baseline servers to compare")
    cfg = session.config
    sweep = replace(ctx.SWEEP, lengths=cfg.context_lengths or ctx.SWEEP.lengths,
                    output_tokens=cfg.context_output_tokens, prompts=cfg.runs or ctx.SWEEP.prompts)
    gate = ContextGate(cfg.context_gate_until, cfg.context_min_speedup, cfg.context_accept_drop)
    return ctx.check(session, base_p, spec_p, sweep, gate)
