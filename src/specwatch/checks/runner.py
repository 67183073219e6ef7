"""Execution-path checks against a live server: environment, verify graphs, accept length, lossless.

Each live check gathers its evidence from what any server offers (the process tree and ``/proc``,
the probe records, the log file, ``/metrics``, ``/server_info``, ``/generate``), hands it to the
pure judge (:mod:`specwatch.checks.envcheck`, :mod:`specwatch.checks.graphcheck`, :mod:`specwatch.judge.speculative`,
:mod:`specwatch.checks.lossless`) through an ``evaluate_*`` function that works on recorded data too, and
returns a :class:`CheckResult`. A verdict (pass or fail) is also recorded on the session with
``session.note`` so a later perf failure can cite it; a check that cannot answer (for example
``--server-url`` servers, where ``/proc`` and the log may be out of reach) returns a skip reason.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specwatch.checks import envcheck, graphcheck
from specwatch.checks import lossless as _lossless
from specwatch.judge import speculative
from specwatch.profiles.profile import TUNED_NCCL, ServerProfile
from specwatch.signals import ncclenv, probe, procenv
from specwatch.signals.logscan import CaptureRecord, DecodeRecord, LogWindow

if TYPE_CHECKING:
    from specwatch.load.measure import Measurement
    from specwatch.run.session import Session
    from specwatch.server.pool import RunningServer
    from specwatch.signals.promtext import Exposition

__all__ = [
    "CheckResult",
    "accept_length",
    "accept_length_estimates",
    "environment",
    "environment_expectation",
    "evaluate_accept_length",
    "evaluate_environment",
    "evaluate_verify_graphs",
    "explain_value",
    "generate_greedy",
    "generate_scored",
    "graph_counters",
    "greedy_outputs",
    "lossless",
    "scored_outputs",
    "verify_graphs",
    "views_by_process",
]

CHECK_ENV = "environment"
CHECK_GRAPHS = "verify graphs"
CHECK_ACCEPT = "accept length"
CHECK_LOSSLESS = "lossless"
#: Population slack between Decode-line windows and whole requests (see evaluate_accept_length).
WINDOW_SLACK = 0.1


@dataclass
class CheckResult:
    """One check's outcome on one server.

    ``ok``: True pass, False fail, None could not answer (``reason`` says why: a skip reason).
    ``reason``: one line (the cause of a failure, the reason for a skip). ``message``: the full
    explanation with every view's reading. ``detail``: the judge's report object.
    """

    check: str
    profile: str
    ok: bool | None
    reason: str
    message: str
    detail: Any = None

    @property
    def skipped(self) -> bool:
        return self.ok is None

    @property
    def failed(self) -> bool:
        return self.ok is False

    def __str__(self) -> str:
        return self.message


def _record(session: Session | None, result: CheckResult) -> CheckResult:
    """Note a verdict on the session (first line: the reason; then the full message), once."""
    if session is not None and result.ok is not None:
        summary = f"{result.reason}\n{result.message}"
        if not any(f.check == result.check and f.profile == result.profile and f.summary == summary
                   for f in session.findings):
            session.note(result.check, result.profile, result.ok, summary)
    return result


def _skip(check: str, profile: str, reason: str) -> CheckResult:
    return CheckResult(check, profile, None, reason, f"{check} on {profile}: not checked: {reason}")


# --------------------------------------------------------------------------------------------
# Environment propagation


def environment_expectation(profile: ServerProfile) -> tuple[str, dict[str, str]]:
    """(mode, variables): a tuned profile must carry its variables; an untuned one none of TUNED_NCCL."""
    if profile.env_vars:
        return "tuned", dict(profile.env_vars)
    return "untuned", dict(TUNED_NCCL)


def views_by_process(
    report: envcheck.EnvReport,
    procs: Iterable[procenv.ProcInfo],
    probe_records: Mapping[int, probe.ProcessRecords],
    nccl: Mapping[tuple[int, int], ncclenv.NcclProcess],
) -> dict[int, str]:
    """Per checked pid: which views could answer and which one the verdicts came from."""
    by_pid = {p.pid: p for p in procs}
    nccl_pids = {np_.pid for np_ in nccl.values()}
    out: dict[int, str] = {}
    pids = sorted({f.pid for f in report.findings if f.pid})
    for pid in pids:
        p = by_pid.get(pid)
        parts = [f"/proc environ {p.environ.describe()}" if p else "/proc environ not read (not in the tree)"]
        recs = probe_records.get(pid)
        if recs is None:
            parts.append("no probe record")
        else:
            phases = [name for name, rec in (("start", recs.start), ("later", recs.later)) if rec is not None]
            parts.append(f"probe {'+'.join(phases) or 'none'}")
        parts.append("NCCL lines" if pid in nccl_pids else "no NCCL lines")
        used = sorted({f.view for f in report.findings
                       if f.pid == pid and f.view and f.status not in ("note", "unreadable")})
        parts.append(f"verdict from {', '.join(used) if used else 'no view'}")
        out[pid] = "; ".join(parts)
    return out


def _short(title: str, width: int = 50) -> str:
    """A process title without the interpreter's directory, cut to ``width``."""
    if not title:
        return "?"
    first, _, rest = title.partition(" ")
    text = (first.rsplit("/", 1)[-1] + (" " + rest if rest else "")).strip()
    return text if len(text) <= width else text[: width - 3] + "..."


def _environment_cause(
    report: envcheck.EnvReport,
    procs: Sequence[procenv.ProcInfo],
    probe_records: Mapping[int, probe.ProcessRecords],
    mode: str,
) -> str:
    """Where the failing variables came from or got lost, when the views show it."""
    failing = report.failures
    bad_vars = {f.variable for f in failing if f.variable}
    if mode == "untuned":
        setters = sorted(pid for pid, recs in probe_records.items()
                         if recs.start and any(v is not None and k in bad_vars
                                               for k, v in recs.start.set_by_sitecustomize.items()))
        if setters:
            return ("set at interpreter start by a sitecustomize.py on PYTHONPATH (probe: set_by_sitecustomize) "
                    f"in pid {', '.join(str(p) for p in setters)}")
        return ""
    roles = {p.pid: p.role.role if p.role else "" for p in procs}
    failing_pids = {f.pid for f in failing}
    mains = [pid for pid, role in roles.items() if role == "main"]
    main_ok = bool(mains) and all(report.verdict_for(pid, v) == "ok" for pid in mains for v in bad_vars)
    if main_ok and failing_pids and not failing_pids & set(mains):
        return ("the main server process carries them but its workers do not: they were lost when the workers "
                "were spawned (an environment filtered or rebuilt for the children)")
    return ""


def evaluate_environment(
    profile: ServerProfile,
    procs: Sequence[procenv.ProcInfo],
    probe_records: Mapping[int, probe.ProcessRecords] | None = None,
    nccl: Mapping[tuple[int, int], ncclenv.NcclProcess] | None = None,
    launch_env: Mapping[str, str] | None = None,
) -> CheckResult:
    """Judge environment propagation for ``profile`` from already collected views."""
    probe_records = probe_records or {}
    nccl = nccl or {}
    mode, expected = environment_expectation(profile)
    launched = None
    if mode == "untuned" and launch_env is not None:
        launched = {k: launch_env[k] for k in expected if k in launch_env}
    report = envcheck.check_environment(procs, expected, mode, probe=probe_records, nccl=nccl, launched=launched)
    titles = {f.pid: f.title for f in report.findings}
    views = views_by_process(report, procs, probe_records, nccl)
    lines = [report.message(), "views per process:"]
    lines += [f"  pid {pid} ({_short(titles.get(pid, ''))}): {text}" for pid, text in views.items()]
    message = "\n".join(lines)
    if report.verdict == "fail":
        failing = report.failures
        var_names = sorted({f.variable for f in failing if f.variable})
        who = sorted({f"{_short(f.title)} (pid {f.pid})" for f in failing})
        kind = "leaked into" if mode == "untuned" else "missing or wrong in"
        reason = f"{', '.join(var_names)} {kind} {', '.join(who)}"
        cause = _environment_cause(report, procs, probe_records, mode)
        if cause:
            reason += f"; {cause}"
            message += f"\ncause: {cause}"
        return CheckResult(CHECK_ENV, profile.name, False, reason, message, report)
    if report.verdict == "unknown":
        reason = "no view could answer for: " + "; ".join(
            sorted({f"{_short(f.title)} (pid {f.pid}): {f.detail}" for f in report.unknowns}))
        return CheckResult(CHECK_ENV, profile.name, None, reason, message, report)
    return CheckResult(CHECK_ENV, profile.name, True, f"{mode} environment as expected in every process",
                       message, report)


def _wait_for_probe(records_dir: Path | None, pids: Iterable[int], wait_s: float) -> dict[int, probe.ProcessRecords]:
    """Probe records, waiting up to ``wait_s`` for every pid's ``later`` record to appear."""
    if records_dir is None:
        return {}
    want = set(pids)
    deadline = time.monotonic() + wait_s
    while True:
        recs = probe.read_records(records_dir)
        have_later = {pid for pid, r in recs.items() if r.later is not None}
        if want <= have_later or time.monotonic() >= deadline:
            return recs
        time.sleep(0.2)


def environment(session: Session | None, server: RunningServer, wait_s: float = 5.0) -> CheckResult:
    """Environment propagation on a live server: /proc of its process tree, probe records, NCCL lines."""
    prof = server.profile
    pid = server.pid
    if pid is None:
        return _skip(CHECK_ENV, prof.name, f"no local process listens for {server.url}: the /proc, probe and "
                                           "log views are unavailable")
    procs = procenv.walk(pid)
    if not procs:
        return _skip(CHECK_ENV, prof.name, f"process {pid} of {server.url} could not be read")
    checked = [p.pid for p in procs if p.role and p.role.role in envcheck.CHECKED_ROLES]
    records = _wait_for_probe(server.probe_records, checked, wait_s)
    nccl: dict[tuple[int, int], ncclenv.NcclProcess] = {}
    if server.log_path is not None:
        nccl = ncclenv.parse_nccl_lines(LogWindow(server.log_path, start=0).lines())
    launch_env = server.launch.env if server.launch is not None else None
    return _record(session, evaluate_environment(prof, procs, records, nccl, launch_env))


# --------------------------------------------------------------------------------------------
# CUDA graphs in the verify step


def graph_counters(delta: Exposition | None) -> dict[str, float] | None:
    """``sglang:cuda_graph_passes_total`` deltas by mode (summed over ranks); None without /metrics."""
    if delta is None:
        return None
    out: dict[str, float] = {}
    for labels, value in delta.find("sglang:cuda_graph_passes_total"):
        mode = labels.get("mode", "")
        out[mode] = out.get(mode, 0.0) + value
    return out if out else None


def evaluate_verify_graphs(
    profile: str,
    *,
    counters: Mapping[str, float] | None,
    decode_records: Sequence[DecodeRecord],
    captures: Sequence[CaptureRecord],
    server_info: Mapping[str, Any],
    batch_sizes: Sequence[int],
    verify_cycle_ms: float | None = None,
    decode_step_ms: float | None = None,
) -> CheckResult:
    """Judge verify-graph use from collected signals (see :func:`graphcheck.check_verify_graphs`)."""
    rep = graphcheck.check_verify_graphs(
        counters=counters, decode_records=decode_records, captures=captures, server_info=server_info,
        batch_sizes=batch_sizes, verify_cycle_ms=verify_cycle_ms, decode_step_ms=decode_step_ms)
    message = rep.message()
    if rep.ok is None:
        return CheckResult(CHECK_GRAPHS, profile, None, "no signal could answer (no /metrics counters, no Decode "
                                                        "lines, no capture lines, no timing)", message, rep)
    reason = rep.cause if rep.ok is False else f"verify graphs replayed (decided by {rep.decided_by})"
    return CheckResult(CHECK_GRAPHS, profile, rep.ok, reason, message, rep)


def _baseline_measurement(session: Session | None, workload: str) -> Measurement | None:
    if session is None:
        return None
    base = session.profiles.for_role("baseline")
    return session.measurements.get((base.name, workload)) if base else None


def verify_graphs(session: Session | None, server: RunningServer, measurement: Measurement) -> CheckResult:
    """Did the verify step of ``measurement`` replay CUDA graphs? Fails with the cause when not."""
    from specwatch.judge.diagnose import median_gap_ms

    prof = server.profile
    if prof.speculative is None:
        return _skip(CHECK_GRAPHS, prof.name, "not a speculative server: there is no verify step")
    decodes = measurement.decode_records
    captures: list[CaptureRecord] = []
    if server.log_path is not None:
        captures = LogWindow(server.log_path, start=0).capture_records()
    sizes = [r.running for r in decodes] or [measurement.workload.concurrency]
    base = _baseline_measurement(session, measurement.workload.name)
    cycle = median_gap_ms(g.chunk_gaps_s for g in measurement.generations)
    step = median_gap_ms(g.chunk_gaps_s for g in base.generations) if base is not None else None
    result = evaluate_verify_graphs(
        prof.name, counters=graph_counters(measurement.metrics_delta), decode_records=decodes, captures=captures,
        server_info=measurement.server_info_after, batch_sizes=sizes, verify_cycle_ms=cycle, decode_step_ms=step)
    return _record(session, result)


# --------------------------------------------------------------------------------------------
# Accept length


def explain_value(value: float, num_steps: int | None = None, num_draft_tokens: int | None = None,
                  profile: str = "", source: str = "accept length") -> CheckResult:
    """Is ``value`` a canonical accept length? Fails with what it probably is instead.

    ``explain_value(0.92, 2, 3)`` fails with "0.92 < 1: looks like extra tokens per cycle;
    canonical value 1.92 (if it is an accept rate instead: ...)".
    """
    probs = speculative.bounds_problems(value, num_steps, num_draft_tokens, name=source)
    if probs:
        msg = f"{source} {value:g} is not a canonical accept length: " + "; ".join(probs)
        return CheckResult(CHECK_ACCEPT, profile, False, "; ".join(probs), msg)
    top = f", ≤ num_steps+1 = {num_steps + 1}" if num_steps is not None else ""
    return CheckResult(CHECK_ACCEPT, profile, True, "within bounds",
                       f"{source} {value:g} is a plausible canonical accept length (≥ 1{top})")


def _num_steps(profile: ServerProfile, server_info: Mapping[str, Any]) -> int | None:
    if profile.speculative is not None:
        return profile.speculative.num_steps
    steps = server_info.get("speculative_num_steps")
    return int(steps) if steps else None


def _cumulative(info: Mapping[str, Any]) -> float | None:
    states = info.get("internal_states") or [{}]
    val = (states[0] if states else {}).get("avg_spec_accept_length", info.get("avg_spec_accept_length"))
    return float(val) if val is not None else None


def accept_length_estimates(
    *,
    num_steps: int,
    decode_records: Sequence[DecodeRecord] = (),
    metrics_delta: Exposition | None = None,
    metas: Sequence[Mapping[str, Any]] = (),
    info_before: Mapping[str, Any] | None = None,
    info_after: Mapping[str, Any] | None = None,
    flushed_before: bool = False,
) -> tuple[list[speculative.Estimate], list[str], list[str]]:
    """(canonical estimates per source, problems, notes) from every accept-length source.

    Sources: the Decode-line windows (their bs-weighted mean, each line rounded to 2 decimals);
    the /metrics delta (Δgeneration_tokens / Δspec_verify_calls with Δnum_requests); the
    cumulative /server_info value (the window itself when flushed before it); the requests'
    meta_info summed (exact: 1 + Σcorrect / Σverify). Per request, the histogram identities, the
    bounds and the agreement of the exact value with completion_tokens/verify_ct's interval are
    problems when they fail.
    """
    ests: list[speculative.Estimate] = []
    problems: list[str] = []
    notes: list[str] = []
    windows = [r for r in decode_records if r.accept_len is not None]
    if windows:
        for r in windows:
            problems += [f"Decode line {r.ts}: {p}" for p in speculative.bounds_problems(
                r.accept_len, num_steps, name="log accept len")]
        weights = [max(r.running, 1) for r in windows]
        mean = sum(r.accept_len * w for r, w in zip(windows, weights, strict=True)) / sum(weights)
        ests.append(speculative.Estimate(mean, mean - speculative.LOG_ROUNDING, mean + speculative.LOG_ROUNDING,
                                         f"Decode lines ({len(windows)} windows)", speculative.Convention.WINDOW,
                                         f"bs-weighted mean; windows {min(r.accept_len for r in windows):.2f}"
                                         f"..{max(r.accept_len for r in windows):.2f}"))
    if metrics_delta is not None:
        gen = metrics_delta.value("sglang:generation_tokens_total", default=0.0)
        ver = metrics_delta.value("sglang:spec_verify_calls_total", default=0.0)
        nreq = metrics_delta.value("sglang:num_requests_total", default=0.0) or float(len(metas))
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
    total_c = total_v = 0
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
        if meta.get("spec_num_correct_drafts") is not None:
            c = int(meta["spec_num_correct_drafts"])
            total_c, total_v = total_c + c, total_v + v
            ratio = speculative.from_completion_ratio(int(meta["completion_tokens"]), v, num_steps)
            rec = speculative.reconcile([exact, ratio])
            if rec.disagreements:
                problems.append(f"request {i}: exact {exact.value:.4f} outside completion_tokens/verify_ct's "
                                f"interval [{ratio.low:.4f}, {ratio.high:.4f}]")
            hist = meta.get("spec_correct_drafts_histogram")
            if hist is not None:
                problems += [f"request {i} histogram: {p}" for p in
                             speculative.check_histogram([int(h) for h in hist], v, c, num_steps)]
    if total_v:
        val = 1.0 + total_c / total_v
        ests.append(speculative.Estimate(val, val, val, f"meta_info of {len(metas)} requests",
                                         speculative.Convention.WINDOW, "exact: 1 + Σcorrect/Σverify_ct"))
    return ests, problems, notes


def evaluate_accept_length(
    profile: str,
    num_steps: int,
    estimates: Sequence[speculative.Estimate],
    problems: Sequence[str] = (),
    notes: Sequence[str] = (),
    slack: float = WINDOW_SLACK,
    claimed: float | None = None,
    num_draft_tokens: int | None = None,
) -> CheckResult:
    """Reconcile the estimates (widened by ``slack``: Decode-line windows cover the verify cycles
    of the log windows, not exactly the finished requests) plus a ``claimed`` value if given."""
    ests = list(estimates)
    extra: list[str] = []
    if claimed is not None:
        ests.append(speculative.from_window(claimed, rounded=False, source="claimed value"))
        why = explain_value(claimed, num_steps, num_draft_tokens, profile, "claimed value")
        if why.failed:
            extra.append(why.reason)
    if not ests and not problems:
        return CheckResult(CHECK_ACCEPT, profile, None, "no accept-length source answered: " + "; ".join(notes),
                           "no accept-length source answered", None)
    rec = speculative.reconcile(ests, num_steps=num_steps, slack=slack)
    lines = [rec.message()]
    lines += [f"  problem: {p}" for p in problems]
    lines += [f"  explanation: {e}" for e in extra]
    lines += [f"  note: {n}" for n in notes]
    message = "\n".join(lines)
    bad = bool(problems) or not rec.agree
    if bad:
        reasons = list(extra) + list(rec.out_of_bounds) + [
            f"{a} vs {b} apart by {gap:.4f}" for a, b, gap in rec.disagreements] + list(problems)
        return CheckResult(CHECK_ACCEPT, profile, False, "; ".join(dict.fromkeys(reasons)), message, rec)
    mid = statistics.median(e.value for e in ests)
    return CheckResult(CHECK_ACCEPT, profile, True,
                       f"{len(ests)} sources agree on {mid:.3f} (≤ num_steps+1 = {num_steps + 1})", message, rec)


def accept_length(
    session: Session | None,
    server: RunningServer,
    measurement: Measurement,
    slack: float = WINDOW_SLACK,
    claimed: float | None = None,
) -> CheckResult:
    """Reconcile every accept-length source of one measured workload (and a ``claimed`` value)."""
    prof = server.profile
    info = measurement.server_info_after or {}
    steps = _num_steps(prof, info)
    if steps is None:
        return _skip(CHECK_ACCEPT, prof.name, "not a speculative server: no accept length")
    ests, problems, notes = accept_length_estimates(
        num_steps=steps, decode_records=measurement.decode_records, metrics_delta=measurement.metrics_delta,
        metas=[g.meta_info for g in measurement.generations], info_before=measurement.server_info_before,
        info_after=info, flushed_before=measurement.workload.flush_after_warmup)
    if server.log_path is None:
        notes.append("no log file (--server-url): Decode-line windows not read")
    ndt = prof.speculative.draft_tokens if prof.speculative else None
    result = evaluate_accept_length(prof.name, steps, ests, problems, notes, slack, claimed, ndt)
    return _record(session, result)


# --------------------------------------------------------------------------------------------
# Lossless greedy output


async def generate_greedy(url: str, prompts: Sequence[str], max_new_tokens: int) -> list[list[int]]:
    """Greedy output ids for each prompt, requested one at a time (the same batch shape everywhere)."""
    return [list(o.ids) for o in await generate_scored(url, prompts, max_new_tokens, logprobs=False)]


async def generate_scored(url: str, requests: Sequence[str | Sequence[int]], max_new_tokens: int | Sequence[int],
                          *, logprobs: bool = True) -> list[_lossless.Scored]:
    """Greedy outputs of text prompts or input-id lists, one request at a time (the same batch shape
    on both servers), with SGLang's output logprobs (top ``TOP_LOGPROBS``) and prompt token ids.
    A server that rejects those fields (HTTP 4xx) is asked again without them: its outputs are
    then compared exactly."""
    from specwatch.errors import RequestRejected

    lens = [max_new_tokens] * len(requests) if isinstance(max_new_tokens, int) else list(max_new_tokens)
    if logprobs:
        extra = {"return_logprob": True, "top_logprobs_num": _lossless.TOP_LOGPROBS, "return_prompt_token_ids": True}
        try:
            return await _greedy_requests(url, requests, lens, extra)
        except RequestRejected:
            pass
    return await _greedy_requests(url, requests, lens, None)


async def _greedy_requests(url: str, requests: Sequence[str | Sequence[int]], lens: Sequence[int],
                           extra: dict[str, Any] | None) -> list[_lossless.Scored]:
    from specwatch.load.client import Client

    out: list[_lossless.Scored] = []
    async with Client(url) as client:
        for req, n in zip(requests, lens, strict=True):
            text, ids = (req, None) if isinstance(req, str) else (None, req)
            gen = await client.generate(text, input_ids=ids, max_new_tokens=n, temperature=0.0, ignore_eos=True,
                                        stream=False, extra=extra)
            prompt_ids = gen.prompt_token_ids if gen.prompt_token_ids is not None else ids
            out.append(_lossless.Scored.from_response(gen.output_ids, gen.meta_info, prompt_ids))
    return out


def _resolve(session: Session, profile: ServerProfile | str) -> ServerProfile:
    return profile if isinstance(profile, ServerProfile) else session.profile_for(profile)


def scored_outputs(session: Session, profile: ServerProfile | str, prompts: Sequence[str],
                   max_new_tokens: int) -> list[_lossless.Scored]:
    """Greedy (temperature 0) outputs of ``profile`` for ``prompts`` with logprobs, memoised in the session."""
    from specwatch.load.client import run_sync

    prof = _resolve(session, profile)
    key = (prof.name, tuple(prompts), max_new_tokens)
    if key not in session.greedy_outputs:
        server = session.server_for_profile(prof)
        session.greedy_outputs[key] = run_sync(generate_scored(server.url, prompts, max_new_tokens))
    return session.greedy_outputs[key]


def greedy_outputs(session: Session, profile: ServerProfile | str, prompts: Sequence[str],
                   max_new_tokens: int) -> list[list[int]]:
    """Greedy output ids of ``profile`` for ``prompts`` (from the session's memo)."""
    return [list(o.ids) for o in scored_outputs(session, profile, prompts, max_new_tokens)]


def _live_first(session: Session, *profiles: ServerProfile) -> list[ServerProfile]:
    live = set(session.pool.live) if session._pool is not None else set()
    return sorted(profiles, key=lambda p: p.name not in live)


def _trace_outputs(session: Session, base: ServerProfile, spec: ServerProfile, first: dict[str, list],
                   max_new_tokens: int) -> tuple[list[_lossless.PromptTrace], tuple[float, int] | None]:
    """Compare prompt by prompt; after each near-tie flip ask both servers to continue from the
    same prefix (all pending prompts of a round on one server, then the other)."""
    from specwatch.load.client import run_sync

    noise = _lossless.agreement_noise(zip(first[base.name], first[spec.name], strict=True))
    bound = _lossless.tie_bound(noise)
    traces = [_lossless.PromptTrace(b.prompt_ids, max_new_tokens) for b in first[base.name]]
    for t, b, s in zip(traces, first[base.name], first[spec.name], strict=True):
        t.advance(b, s, bound)
    while pending := [t for t in traces if t.anchor is not None]:
        anchors, lens = [t.anchor for t in pending], [t.remaining for t in pending]
        seg = {p.name: run_sync(generate_scored(session.server_for_profile(p).url, anchors, lens))  # type: ignore[arg-type]
               for p in _live_first(session, base, spec)}
        for t, b, s in zip(pending, seg[base.name], seg[spec.name], strict=True):
            t.advance(b, s, bound)
    return traces, noise


def lossless(
    session: Session,
    baseline_profile: ServerProfile | str,
    spec_profile: ServerProfile | str,
    prompts: Sequence[str],
    max_new_tokens: int,
    min_identical: float = 1.0,
    min_common_prefix: int | None = None,
) -> CheckResult:
    """Greedy outputs of the speculative server must equal the baseline's, token for token.

    Exact by default: right for float32 servers (the reference server on CPU), where the verify
    forward and the baseline's decode step compute the same logits. bf16/fp16 GPU servers verify
    several positions per request in one batch while the baseline decodes one: different batch
    shapes select different kernels and reduction orders, the logits differ in the last bits, and
    a near-tie can flip the argmax, after which the continuations legitimately diverge. For those
    pass ``min_identical`` (fraction of prompts that must be identical) and/or
    ``min_common_prefix`` (tokens every prompt must share from the start). Outputs are memoised
    per profile in the session, so each server is booted (one at a time) at most once for them;
    the server that is already live is asked first.
    """
    base, spec = _resolve(session, baseline_profile), _resolve(session, spec_profile)
    if session.config.server_url:
        return _skip(CHECK_LOSSLESS, spec.name, f"--server-url: only one server ({session.config.server_url}) is "
                                                "reachable; the comparison needs the baseline and the speculative one")
    first = {p.name: scored_outputs(session, p, prompts, max_new_tokens) for p in _live_first(session, base, spec)}
    traces, noise = _trace_outputs(session, base, spec, first, max_new_tokens)
    rep = _lossless.compare_outputs([t.base_ids for t in traces], [t.spec_ids for t in traces], prompts,
                                    min_identical, min_common_prefix, names=(base.name, spec.name), traces=traces,
                                    noise=noise)
    if rep.ok:
        reason = f"{len(rep.diffs) - len(rep.differing)}/{len(rep.diffs)} prompts identical"
        if rep.ties:
            where = ", ".join(f"position {t.position} ({t.baseline_margin:.3g}+{t.spec_margin:.3g} ≤ {t.bound:.3g} "
                              "nats)" for t in rep.ties)
            reason += f", across {len(rep.ties)} near-tie flip(s) re-anchored: {where}"
    else:
        firsts = ", ".join(f"prompt {d.index} at position {d.first_diff}" for d in rep.differing)
        reason = "; ".join(rep.problems) + f"; first differing positions: {firsts}"
    return _record(session, CheckResult(CHECK_LOSSLESS, spec.name, rep.ok, reason, rep.message(), rep))
