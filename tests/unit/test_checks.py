"""The checks on recorded data: environment views, graph signals, accept-length sources, kept verdicts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specwatch.checks import accept_length, environment, graphcheck, lossless_live, verify_graphs
from specwatch.checks.verdictlog import record
from specwatch.judge.verdict import Status
from specwatch.profiles.profile import TUNED_NCCL, ServerProfile, Speculative
from specwatch.run.session import Session
from specwatch.signals import logscan, ncclenv, procenv, promtext
from specwatch.signals.logscan import CaptureRecord, DecodeRecord

SGLANG = Path(__file__).resolve().parents[2] / "fixtures" / "sglang"
REAL = SGLANG / "real"
TUNED = ServerProfile("tuned", env="tuned", env_vars=dict(TUNED_NCCL))
UNTUNED = ServerProfile("untuned")


def _proctree() -> list[procenv.ProcInfo]:
    return procenv.load_proctree(REAL / "proctree.json")


def _records() -> list[logscan.Record]:
    return logscan.parse_lines((SGLANG / "log-0.5.23-samples.log").read_text().splitlines())


def _decode(graph: bool, label: str = "cuda graph", running: int = 8, accept: float | None = 2.0) -> DecodeRecord:
    return DecodeRecord(ts="2026-10-14 09:12:33", ranks={}, running=running, graph_label=label, graph=graph,
                        gen_tput=100.0, queue=0, accept_len=accept)


# -- environment --------------------------------------------------------------------------------


def test_expectation_by_profile() -> None:
    assert environment.expectation(TUNED) == ("tuned", TUNED_NCCL)
    assert environment.expectation(UNTUNED) == ("untuned", TUNED_NCCL)


def test_retitled_sglang_workers_without_probe_are_unknown_not_missing() -> None:
    """The recorded SGLang tree: the main process answers from /proc, the retitled workers cannot."""
    result = environment.evaluate(TUNED, _proctree())
    assert result.skipped and not result.failed
    assert "sglang::scheduler (pid 19299)" in result.reason and "unreadable (retitled)" in result.reason
    assert "pid 19275 (python -m sglang.launch_server" in result.message
    assert "verdict from /proc environ (start)" in result.message
    assert "pid 19299 (sglang::scheduler): /proc environ unreadable (retitled); no probe record; no NCCL lines; " \
           "verdict from no view" in result.message


def test_tuned_variables_in_an_untuned_server_are_leaks_naming_process_and_view() -> None:
    result = environment.evaluate(UNTUNED, _proctree())
    assert result.failed
    for var in TUNED_NCCL:
        assert var in result.reason
    assert "leaked into python -m sglang.launch_server" in result.reason and "(pid 19275)" in result.reason
    assert "[/proc environ (start)]" in result.message


def test_explicitly_launched_variable_is_not_a_leak() -> None:
    launch_env = dict(TUNED_NCCL)
    result = environment.evaluate(UNTUNED, _proctree(), launch_env=launch_env)
    assert not result.failed


def test_nccl_lines_answer_for_retitled_workers() -> None:
    nccl = ncclenv.parse_nccl_lines((REAL / "nccl-debug-sample.log").read_text().splitlines())
    assert nccl
    result = environment.evaluate(TUNED, [], nccl=nccl)
    views = environment.views_by_process(result.details, [], {}, nccl)
    pids = {pid for pid, _ in nccl}
    assert set(views) == pids
    for pid in pids:
        assert "NCCL lines" in views[pid] and "no NCCL lines" not in views[pid]


# -- verify graphs ----------------------------------------------------------------------------


def test_graph_counters_by_mode() -> None:
    expo = promtext.parse_text((SGLANG / "metrics-spec.txt").read_text())
    assert verify_graphs.graph_counters(expo) == {"prefill_cuda_graph": 4.0, "decode_none": 2.0,
                                                  "decode_cuda_graph": 37.0}
    assert verify_graphs.graph_counters(None) is None
    assert verify_graphs.graph_counters(promtext.parse_text("x_total 1\n")) is None


def test_graphed_verify_passes_on_recorded_gpu_log() -> None:
    recs = _records()
    captures = [r for r in recs if isinstance(r, CaptureRecord)]
    decodes = [r for r in recs if isinstance(r, DecodeRecord) and r.speculative and r.graph]
    info = json.loads((SGLANG / "server_info-spec.json").read_text())
    result = verify_graphs.evaluate("p", counters={"decode_cuda_graph": 40.0, "decode_none": 0.0},
                                           decode_records=decodes, captures=captures, server_info=info,
                                           batch_sizes=[r.running for r in decodes])
    assert result.ok, result.message
    assert "verify graphs captured for bs=[1, 2" in result.message


def test_eager_verify_names_the_cause() -> None:
    recs = _records()
    captures = [r for r in recs if isinstance(r, CaptureRecord)]
    info = json.loads((SGLANG / "server_info-spec.json").read_text())
    covered = verify_graphs.evaluate("p", counters={"decode_cuda_graph": 0.0, "decode_none": 30.0},
                                            decode_records=[_decode(False)], captures=captures, server_info=info,
                                            batch_sizes=[8])
    assert covered.failed and "did not replay" in covered.reason
    too_big = verify_graphs.evaluate("p", counters=None, decode_records=[_decode(False, running=56)],
                                            captures=captures, server_info=info, batch_sizes=[56])
    assert too_big.failed and "captured only up to bs=48" in too_big.reason
    cpu = verify_graphs.evaluate("p", counters=None, decode_records=[_decode(False, "cpu graph")],
                                        captures=[], server_info={}, batch_sizes=[1])
    assert cpu.failed and "runs on CPU" in cpu.reason and "no CUDA graphs exist" in cpu.reason
    nothing = verify_graphs.evaluate("p", counters=None, decode_records=[], captures=[], server_info={},
                                            batch_sizes=[1])
    assert nothing.skipped and "no signal" in nothing.reason


def _graph_log(captured: str, batches: list[tuple[int, bool]]) -> tuple[list[CaptureRecord], list[DecodeRecord]]:
    """Capture and Decode records parsed from SGLang 0.5.23-format log text (one line per batch)."""
    lines = [
        "[2026-11-30 10:00:00 TP0] Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=3, "
        "avail mem=120.00 GB",
        f"[2026-11-30 10:00:01 TP0] Capture target verify CUDA graph end. bs=[{captured}], elapsed=0.50 s, "
        "mem usage=0.10 GB, avail mem=119.90 GB.",
    ]
    lines += [f"[2026-11-30 10:00:{10 + i:02d} TP0] Decode batch, #running-req: {bs}, #token: {bs * 40}, token usage: "
              f"0.01, accept len: 2.10, accept rate: 0.55, cuda graph: {graph}, gen throughput (token/s): 900.00, "
              "#queue-req: 0" for i, (bs, graph) in enumerate(batches)]
    recs = logscan.parse_lines(lines)
    return ([r for r in recs if isinstance(r, CaptureRecord)], [r for r in recs if isinstance(r, DecodeRecord)])


#: the fault row's server: captured sizes 1-4, up to 16 running (--max-running-requests 16)
BS4_INFO = {"max_running_requests": 16, "cuda_graph_max_bs_decode": 4, "cuda_graph_bs_decode": None,
            "cuda_graph_config": {"decode": {"backend": "full", "max_bs": 4, "bs": [1, 2, 3, 4]}}}


def test_batches_past_the_captured_sizes_name_the_capture_limit_flag() -> None:
    """The fault row on synthetic lines: captured 1-4, load at concurrency 16, batches of 16 verify eagerly."""
    captures, decodes = _graph_log("1, 2, 3, 4", [(2, True), (4, True), (9, False), (16, False), (16, False)])
    result = verify_graphs.evaluate("p", counters={"decode_cuda_graph": 12.0, "decode_none": 38.0},
                                    decode_records=decodes, captures=captures, server_info=BS4_INFO,
                                    batch_sizes=[r.running for r in decodes], concurrency=16)
    assert result.failed and result.details.decided_by == "sglang:cuda_graph_passes_total"
    assert result.reason.startswith("--cuda-graph-max-bs-decode 4 is below the running batch: batches of up to 16 "
                                    "requests ran (--max-running-requests 16, load concurrency 16)"), result.reason
    assert "captured only up to bs=4 (bs 1-4)" in result.reason
    assert "raise --cuda-graph-max-bs-decode to at least 16 or lower --max-running-requests to 4" in result.reason
    assert "batches: Decode lines ran graphed at bs 2, 4 and eager at bs 9, 16; bs 9, 16 above the largest " \
           "captured bs=4" in result.message
    # without /metrics the Decode lines decide, and name the same cause
    logged = verify_graphs.evaluate("p", counters=None, decode_records=decodes, captures=captures,
                                    server_info=BS4_INFO, batch_sizes=[r.running for r in decodes], concurrency=16)
    assert logged.failed and logged.details.decided_by == "Decode batch lines" and logged.reason == result.reason


def test_batches_within_the_captured_sizes_pass() -> None:
    """A healthy server at concurrency 16: every batch it ran was captured, every verify graphed."""
    captures, decodes = _graph_log(", ".join(map(str, [*range(1, 9), *range(10, 17, 2)])),
                                   [(1, True), (7, True), (15, True), (16, True)])
    info = {**BS4_INFO, "cuda_graph_max_bs_decode": None}
    result = verify_graphs.evaluate("p", counters={"decode_cuda_graph": 50.0, "decode_none": 0.0},
                                    decode_records=decodes, captures=captures, server_info=info,
                                    batch_sizes=[r.running for r in decodes], concurrency=16)
    assert result.ok, result.message
    assert "every batch within the captured sizes (largest bs=16)" in result.message
    assert graphcheck.batch_use(decodes) == [graphcheck.BatchUse(1, 1, 0), graphcheck.BatchUse(7, 1, 0),
                                              graphcheck.BatchUse(15, 1, 0), graphcheck.BatchUse(16, 1, 0)]


def test_capture_limit_cause_names_the_flag_the_server_used() -> None:
    captures, decodes = _graph_log("1, 2, 4", [(12, False)])
    listed = {**BS4_INFO, "cuda_graph_max_bs_decode": None, "cuda_graph_bs_decode": [1, 2, 4]}
    by_list = verify_graphs.evaluate("p", counters=None, decode_records=decodes, captures=captures,
                                     server_info=listed, batch_sizes=[12], concurrency=12)
    assert by_list.reason.startswith("--cuda-graph-bs-decode 1 2 4 is below the running batch"), by_list.reason
    assert "raise --cuda-graph-bs-decode to at least 12" in by_list.reason
    # unset: SGLang's memory-based default; with --max-running-requests unset, the scheduler's value
    default = {"cuda_graph_config": {"decode": {"max_bs": 4}}, "max_running_requests": None,
               "internal_states": [{"effective_max_running_requests_per_dp": 48}]}
    by_default = verify_graphs.evaluate("p", counters=None, decode_records=decodes, captures=captures,
                                        server_info=default, batch_sizes=[12], concurrency=64)
    assert by_default.reason.startswith("--cuda-graph-max-bs-decode (unset: SGLang's default, from GPU memory, "
                                        "gave 4) is below the running batch"), by_default.reason
    assert "(--max-running-requests 48, load concurrency 64)" in by_default.reason
    assert "at least 48" in by_default.reason  # the batch can grow to min(48, 64)


def test_eager_verify_without_a_telling_decode_line_infers_from_the_concurrency() -> None:
    """The counters saw eager verifies, the sampled Decode lines did not: the load could outgrow bs 4."""
    captures, decodes = _graph_log("1, 2, 3, 4", [(3, True)])
    result = verify_graphs.evaluate("p", counters={"decode_cuda_graph": 5.0, "decode_none": 20.0},
                                    decode_records=decodes, captures=captures, server_info=BS4_INFO,
                                    batch_sizes=[3], concurrency=16)
    assert result.failed
    assert result.reason.startswith("no Decode line says which batches verified eagerly; --cuda-graph-max-bs-decode "
                                    "4 is below the running batch: batches of up to 16 requests could run")
    # at concurrency 4 nothing outgrew the captured sizes: another cause
    within = verify_graphs.evaluate("p", counters={"decode_cuda_graph": 5.0, "decode_none": 20.0},
                                    decode_records=decodes, captures=captures, server_info=BS4_INFO,
                                    batch_sizes=[3], concurrency=4)
    assert "captured for these batch sizes but did not replay" in within.reason


def test_eager_inside_and_outside_the_captured_sizes_says_both() -> None:
    captures, decodes = _graph_log("1, 2, 3, 4", [(2, False), (16, False)])
    result = verify_graphs.evaluate("p", counters=None, decode_records=decodes, captures=captures,
                                    server_info=BS4_INFO, batch_sizes=[2, 16], concurrency=16)
    assert result.reason.startswith("--cuda-graph-max-bs-decode 4 is below the running batch")
    assert "batches within the captured sizes (bs 2) also verified eagerly" in result.reason
    only_inside = verify_graphs.evaluate("p", counters=None, decode_records=decodes[:1], captures=captures,
                                         server_info=BS4_INFO, batch_sizes=[2], concurrency=2)
    assert "did not replay (eager at bs 2)" in only_inside.reason


# -- accept length ------------------------------------------------------------------------------


def test_explain_value() -> None:
    bad = accept_length.explain_value(0.92, num_steps=2, num_draft_tokens=3)
    assert bad.failed and "0.92 < 1: looks like extra tokens per cycle; canonical value 1.92" in bad.reason
    assert "accept rate instead: 1 + 0.92·(3−1) = 2.84" in bad.message
    assert accept_length.explain_value(1.92, num_steps=2).ok
    over = accept_length.explain_value(3.5, num_steps=2)
    assert over.failed and "num_steps+1 = 3" in over.reason


def test_recorded_request_meta_identities_hold() -> None:
    gens = json.loads((SGLANG / "generate-spec.json").read_text())
    metas = [g["meta_info"] for g in gens]
    ests, problems, notes = accept_length.estimates(num_steps=3, metas=metas)
    assert problems == [] and notes == []
    (est,) = ests
    c = sum(m["spec_num_correct_drafts"] for m in metas)
    v = sum(m["spec_verify_ct"] for m in metas)
    assert est.value == pytest.approx(1 + c / v)


def test_broken_histogram_is_a_problem() -> None:
    meta = {"completion_tokens": 48, "spec_verify_ct": 16, "spec_num_correct_drafts": 33,
            "spec_correct_drafts_histogram": [2, 3, 3, 7]}
    _, problems, _ = accept_length.estimates(num_steps=3, metas=[meta])
    assert any("sum(histogram)=15 != spec_verify_ct=16" in p for p in problems)
    result = accept_length.evaluate("p", 3, [], problems)
    assert result.failed and "sum(histogram)=15" in result.reason  # nothing to reconcile, still a failure
    assert accept_length.evaluate("p", 3, [], []).skipped
    ests, problems, _ = accept_length.estimates(num_steps=3, metas=[meta, dict(meta, **{
        "spec_correct_drafts_histogram": [2, 3, 3, 8]})])
    result = accept_length.evaluate("p", 3, ests, problems)
    assert result.failed and "histogram" in result.reason


def test_sources_reconcile_and_a_claimed_092_does_not() -> None:
    expo = promtext.parse_text("sglang:generation_tokens_total 96\nsglang:spec_verify_calls_total 48\n"
                               "sglang:num_requests_total 2\n")
    metas = [{"completion_tokens": 48, "spec_verify_ct": 24, "spec_num_correct_drafts": 23}] * 2
    info = {"internal_states": [{"avg_spec_accept_length": 1.95}]}
    ests, problems, notes = accept_length.estimates(
        num_steps=2, decode_records=[_decode(True, running=1, accept=1.93), _decode(True, running=1, accept=1.99)],
        metrics_delta=expo, metas=metas, info_before={}, info_after=info, flushed_before=True)
    assert len(ests) == 4 and not problems
    good = accept_length.evaluate("p", 2, ests, problems, notes)
    assert good.ok, good.message
    bad = accept_length.evaluate("p", 2, ests, problems, notes, claimed=0.92, num_draft_tokens=3)
    assert bad.failed
    assert "looks like extra tokens per cycle; canonical value 1.92" in bad.reason
    assert "claimed value 0.92 vs meta_info of 2 requests 1.9583: apart by 1.0333" in bad.reason, bad.reason
    apart = accept_length.evaluate("p", 2, ests, problems, notes, slack=0.0, claimed=1.5)
    assert apart.failed and "claimed value 1.5 vs Decode lines" in apart.reason
    near = accept_length.evaluate("p", 2, ests, problems, notes, claimed=1.95)
    assert near.ok and "the claimed value 1.95 agrees with them" in near.reason, near.message


def test_cumulative_without_flush_is_a_note_not_a_source() -> None:
    ests, _, notes = accept_length.estimates(num_steps=2, info_before={"avg_spec_accept_length": 2.0},
                                                    info_after={"avg_spec_accept_length": 2.1})
    assert ests == [] and any("cumulative" in n for n in notes)


def _spec_measurement(before: dict, after: dict, flush: bool = True) -> object:
    from types import SimpleNamespace

    return SimpleNamespace(workload=SimpleNamespace(flush_after_warmup=flush), server_info_before=before,
                           server_info_after=after, decode_records=[], metrics_delta=None, generations=[])


def test_a_refused_flush_is_honoured_not_assumed() -> None:
    """SGLang 0.5.23 answers /flush_cache with 400 while busy and resets nothing: the lifetime
    avg_spec_accept_length then is still there after the flush, and is not read as the window."""
    from specwatch.server.pool import RunningServer

    spec = ServerProfile("s", speculative=Speculative(num_steps=2))
    server = RunningServer(profile=spec, url="http://127.0.0.1:1")
    after = {"speculative_num_steps": 2, "internal_states": [{"avg_spec_accept_length": 2.4}]}
    refused = {"internal_states": [{"avg_spec_accept_length": 1.3}]}  # warm-up's value survived the flush
    assert accept_length.flush_took({"internal_states": [{}]}) and not accept_length.flush_took(refused)
    kept = accept_length.check(None, server, _spec_measurement(refused, after))  # type: ignore[arg-type]
    assert kept.skipped and "no accept-length source answered" in kept.reason  # the lifetime value is no source
    assert "/flush_cache did not take before the window" in kept.reason, kept.message
    took = accept_length.check(None, server, _spec_measurement({"internal_states": [{}]}, after))  # type: ignore[arg-type]
    assert [e.source for e in took.details.estimates] == ["/server_info avg_spec_accept_length"]
    assert took.ok and "/flush_cache" not in took.message


def test_num_steps_left_to_the_engine_comes_from_server_info() -> None:
    prof = ServerProfile("s", speculative=Speculative())
    assert accept_length.num_steps(prof, {"speculative_num_steps": 3}) == 3
    assert accept_length.num_steps(prof, {}) is None


# -- verdicts kept in the caller's log -----------------------------------------------------------


def test_verdicts_are_noted_once_and_skips_not_at_all() -> None:
    """The run's Session is a VerdictLog: a pass or fail is kept once, a skip never."""
    from specwatch.run.options import Config

    session = Session(Config(), progress=lambda m: None)
    result = record(session, accept_length.explain_value(0.92, 2, 3, profile="eagle3"))
    record(session, result)
    record(session, environment.evaluate(TUNED, _proctree()))  # unknown: skipped
    assert record(None, result) is result  # no log: nothing kept, the verdict comes back
    (finding,) = session.findings_for("eagle3")
    assert finding.check == "accept length" and finding.ok is False
    assert finding.summary.splitlines()[0] == result.reason
    assert session.findings_for("tuned") == []


def test_every_check_answers_with_the_shared_verdict() -> None:
    """One Verdict type: name, status, one-line reason, full message, the judge's report as details."""
    env = environment.evaluate(UNTUNED, _proctree())
    assert (env.name, env.status, env.profile) == ("environment", Status.FAIL, "untuned")
    assert env.details.verdict == "fail" and env.ok is False and str(env) == env.message
    graphs = verify_graphs.evaluate("p", counters=None, decode_records=[], captures=[], server_info={},
                                    batch_sizes=[1])
    assert (graphs.name, graphs.status, graphs.ok) == ("verify graphs", "skip", None)
    good = accept_length.explain_value(1.92, num_steps=2, profile="p")
    assert (good.name, good.passed, good.ok, good.profile) == ("accept length", True, True, "p")


class _OneServer:
    """A ServerHost of a --server-url run: one reachable server, nothing to boot."""

    class config:  # the Session's attribute: its Config
        server_url = "http://gpu-box:30000"

    def __init__(self) -> None:
        self.notes: list[tuple[object, ...]] = []
        self.greedy_outputs = None

    def profile_for(self, name: str) -> ServerProfile:
        return ServerProfile(name)

    def server_for_profile(self, profile: ServerProfile) -> object:
        raise AssertionError("no server may be asked")

    def live_profiles(self) -> list[str]:
        return []

    def note(self, *args: object) -> None:
        self.notes.append(args)


def test_live_checks_skip_what_they_cannot_reach() -> None:
    """No verify step on a plain server, and with --server-url only one server to compare."""
    from specwatch.server.pool import RunningServer

    plain = RunningServer(profile=UNTUNED, url="http://127.0.0.1:1")
    skipped = verify_graphs.check(None, plain, measurement=None)  # type: ignore[arg-type]
    assert skipped.skipped and "not a speculative server" in skipped.reason
    assert skipped.message == "verify graphs on untuned: not checked: not a speculative server: there is no verify step"
    host = _OneServer()
    lossless = lossless_live.check(host, "baseline", "spec", ["a"], 4)  # type: ignore[arg-type]
    assert lossless.skipped and "only one server (http://gpu-box:30000)" in lossless.reason
    assert lossless.profile == "spec" and host.notes == []


def test_speculative_profile_steps() -> None:
    prof = ServerProfile("s", speculative=Speculative(num_steps=3))
    assert accept_length.num_steps(prof, {}) == 3
    assert accept_length.num_steps(UNTUNED, {"speculative_num_steps": 2}) == 2
    assert accept_length.num_steps(UNTUNED, {}) is None


def test_generate_scored_asks_again_without_logprobs_when_rejected() -> None:
    """A server that refuses return_logprob (HTTP 400) still gets compared, exactly."""
    import asyncio

    from aiohttp import web
    from aiohttp.test_utils import TestServer

    bodies: list[dict] = []

    async def generate(request: web.Request) -> web.Response:
        body = await request.json()
        bodies.append(body)
        if body.get("return_logprob"):
            return web.Response(status=400, text="return_logprob is not supported here")
        return web.json_response({"text": "", "output_ids": [5, 6, 7], "meta_info": {"completion_tokens": 3}})

    async def run() -> list:
        app = web.Application()
        app.router.add_post("/generate", generate)
        async with TestServer(app) as srv:
            return await lossless_live.generate_scored(str(srv.make_url("")).rstrip("/"), ["a", [1, 2]], 3)

    out = asyncio.run(run())
    assert [o.ids for o in out] == [(5, 6, 7), (5, 6, 7)]
    assert all(o.logprobs is None for o in out) and out[1].prompt_ids == (1, 2)
    assert bodies[0]["return_logprob"] is True and bodies[0]["top_logprobs_num"] == 5
    assert [("return_logprob" in b) for b in bodies[1:]] == [False, False]
    assert bodies[2]["input_ids"] == [1, 2]


def test_checks_never_import_the_run() -> None:
    """The checks get their caller as a Protocol (VerdictLog, ServerHost): no import of specwatch.run,
    not even inside a function; the shared Verdict lives in judge, which imports no other part."""
    import ast

    import specwatch.checks as pkg
    import specwatch.judge.verdict as verdict_module

    def imported(path: Path) -> set[str]:
        tree = ast.parse(path.read_text())
        names = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        return names | {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}

    folder = Path(pkg.__file__).parent
    for name in ("verdictlog", "environment", "envcheck", "verify_graphs", "graphcheck", "accept_length",
                 "lossless_live", "lossless"):
        bad = sorted(m for m in imported(folder / f"{name}.py") if m.startswith("specwatch.run"))
        assert not bad, f"checks/{name}.py imports {bad}"
    own = sorted(m for m in imported(Path(verdict_module.__file__)) if m.startswith("specwatch"))
    assert own == [], own
