"""The readers on each SGLang version's own line formats: 0.5.16 and 0.5.17 (GPU), 0.5.23 (CPU and GPU), and
0.5.12, 0.5.13, 0.5.14 and 0.5.15.post1 (the GPU ab-ladder below 0.5.16).

Every line is a format string of the version's wheel filled in, with the file and line cited;
docs/reference/sglang-versions.md lists what differs between the versions.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from specwatch.checks import accept_length, graphcheck, phasegraphs, verify_graphs
from specwatch.engines import sglang
from specwatch.judge import speculative
from specwatch.judge.cyclecost import window_cycle_ms
from specwatch.profiles.loading import load_profiles
from specwatch.run.summary import results_of, summary_lines
from specwatch.server.launch import build_launch
from specwatch.signals import logscan, procenv, promtext
from specwatch.signals.logscan import CaptureRecord, DecodeRecord
from specwatch.store.machine import engine_text

# sglang 0.5.16 srt/model_executor/model_runner_components/cuda_graph_setup.py:311-315 (begin, bs here) and
# :337-341 (end: elapsed and memory only); the same strings in 0.5.17 at :429-433 and :452-456. The numbers
# are the real 0.5.16 EAGLE-3 server's on an H200 (device-facts.md, "Real SGLang on the one-GPU H200 machine").
CAPTURE_0_5_16 = [
    "[2026-12-03 10:01:02] Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=3, "
    "bs=[1, 2, 3, 4, 5, 6, 7, 8], avail mem=131.20 GB",
    "[2026-12-03 10:01:05] Capture target verify CUDA graph end. elapsed=3.48 s, mem usage=0.21 GB, "
    "avail mem=130.99 GB.",
    # srt/speculative/eagle_worker_v2.py:397-402 (0.5.17: :362-367): the draft's list, on its begin line
    "[2026-12-03 10:01:05] Capture draft decode CUDA graph begin. backend=full, num_tokens_per_req=1, "
    "bs=[1, 2, 3, 4, 5, 6, 7, 8], avail mem=130.99 GB",
    "[2026-12-03 10:01:13] Capture draft decode CUDA graph end. elapsed=8.01 s, mem usage=0.12 GB, "
    "avail mem=130.87 GB.",
]
# sglang 0.5.23 cuda_graph_setup.py:758-762 (begin: no bs) and :787-792 (end: bs=runner.capture_bs)
CAPTURE_0_5_23 = [
    "[2026-12-03 10:01:02] Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=3, "
    "avail mem=131.20 GB",
    "[2026-12-03 10:01:05] Capture target verify CUDA graph end. bs=[1, 2, 3, 4], elapsed=3.48 s, "
    "mem usage=0.21 GB, avail mem=130.99 GB.",
]
# sglang 0.5.16 srt/managers/scheduler_components/metrics_reporter.py:753 (head), :796 (accept fields),
# :830-834 (graph flag, throughput, queue), :857 (", fwd occupancy" with the metrics device timer); the
# pool part from pool_stats_observer.py:116. The accept fields are the real server's (random draft).
DECODE_0_5_16 = ("[2026-12-03 10:02:00] Decode batch, #running-req: {bs}, #token: 96, token usage: 0.00, "
                 "accept len: 1.00, accept rate: 0.00, cuda graph: {graph}, gen throughput (token/s): 243.91, "
                 "#queue-req: 0, fwd occupancy: 71.20%")


def _captures(lines: list[str]) -> list[CaptureRecord]:
    return [r for r in logscan.parse_lines(lines) if isinstance(r, CaptureRecord)]


def test_0_5_16_capture_lines_carry_bs_on_the_begin_line() -> None:
    begin, end, draft_begin, draft_end = _captures(CAPTURE_0_5_16)
    assert (begin.name, begin.event, begin.bs, begin.num_tokens_per_req) == (
        "target verify", "begin", [1, 2, 3, 4, 5, 6, 7, 8], 3)
    assert end.bs is None and end.elapsed_s == 3.48 and end.mem_usage_gb == 0.21
    assert draft_begin.bs == [1, 2, 3, 4, 5, 6, 7, 8] and draft_end.bs is None


@pytest.mark.parametrize(("lines", "want"), [(CAPTURE_0_5_16, [1, 2, 3, 4, 5, 6, 7, 8]),
                                            (CAPTURE_0_5_23, [1, 2, 3, 4])], ids=["0.5.16", "0.5.23"])
def test_captured_verify_bs_reads_each_versions_line(lines: list[str], want: list[int]) -> None:
    """0.5.16/0.5.17 print the list on the begin line, 0.5.23 on the end line; /server_info has none before 0.5.23."""
    assert graphcheck.captured_verify_bs({}, _captures(lines)) == want


def test_the_end_lines_list_wins_and_the_draft_list_is_never_the_targets() -> None:
    """An end line's bs is the runner's own list (0.5.23); a draft begin line's list never stands for the target."""
    both = _captures([CAPTURE_0_5_16[0].replace("bs=[1, 2, 3, 4, 5, 6, 7, 8]", "bs=[1, 2, 3, 4, 5, 6]"),
                      CAPTURE_0_5_23[1]])
    assert graphcheck.captured_verify_bs({}, both) == [1, 2, 3, 4]
    assert graphcheck.captured_verify_bs({}, _captures(CAPTURE_0_5_16[2:])) is None


def test_a_0_5_16_eager_batch_above_its_begin_line_sizes_names_the_flag() -> None:
    """The capture-limit fault on 0.5.16 lines: the limit is read from the begin line, its flag named."""
    caps = _captures([line.replace("bs=[1, 2, 3, 4, 5, 6, 7, 8]", "bs=[1, 2]") for line in CAPTURE_0_5_16])
    decodes = [r for r in logscan.parse_lines([DECODE_0_5_16.format(bs=2, graph=True),
                                               DECODE_0_5_16.format(bs=8, graph=False)])
               if isinstance(r, DecodeRecord)]
    assert [d.extra.get("fwd occupancy") for d in decodes] == ["71.20%", "71.20%"]  # 0.5.16's suffix kept aside
    assert decodes[0].accept_len == 1.00 and decodes[1].graph is False
    info = {"version": "0.5.16", "cuda_graph_max_bs_decode": 2, "max_running_requests": 8}
    result = verify_graphs.evaluate("p", counters={"decode_cuda_graph": 10.0, "decode_none": 30.0},
                                    decode_records=decodes, captures=caps, server_info=info,
                                    batch_sizes=[2, 8], concurrency=8)
    assert result.failed, result.message
    assert result.reason.startswith("--cuda-graph-max-bs-decode 2 is below the running batch"), result.reason
    assert "captured only up to bs=2" in result.reason


# -- the accept length on the real 0.5.16 EAGLE-3 server's random draft, and a claimed 0.92 ------------------


def _random_draft_0_5_16() -> tuple[list, list[str], list[str]]:
    """The real run's sources: 3 requests of 64 tokens, 189 verify calls, accept len 1.00 (issue 29).

    meta_info as sglang 0.5.16 srt/managers/tokenizer_manager.py:2397-2445 fills it (with the
    spec_accepted_drafts/spec_proposed_drafts aliases that 0.5.23 dropped); the histogram as
    schedule_batch.py:1123-1133 counts it; the /metrics counters' deltas as metrics_collector.py:1662-1665.
    """
    meta = {"completion_tokens": 64, "spec_verify_ct": 63, "spec_accept_length": 64 / 63, "spec_accept_rate": 0.0,
            "spec_num_correct_drafts": 0, "spec_num_proposed_drafts": 126, "spec_accepted_drafts": 0,
            "spec_proposed_drafts": 126, "spec_correct_drafts_histogram": [63]}
    delta = promtext.parse_text(
        'sglang:generation_tokens_total{engine_type="unified",model_name="m"} 192.0\n'
        'sglang:spec_verify_calls_total{engine_type="unified",model_name="m"} 189.0\n'
        'sglang:num_requests_total{engine_type="unified",model_name="m"} 3.0\n')
    decodes = [r for r in logscan.parse_lines([DECODE_0_5_16.format(bs=1, graph=True)] * 4)
               if isinstance(r, DecodeRecord)]
    info = {"version": "0.5.16", "internal_states": [{"avg_spec_accept_length": 1.0}]}
    return accept_length.estimates(num_steps=2, decode_records=decodes, metrics_delta=delta, metas=[meta] * 3,
                                   info_before={}, info_after=info, flushed_before=True)


def test_the_real_random_draft_sources_agree_on_1() -> None:
    ests, problems, notes = _random_draft_0_5_16()
    assert len(ests) == 4 and not problems, (ests, problems)
    result = accept_length.evaluate("eagle3", 2, ests, problems, notes)
    assert result.ok and "4 sources agree on 1.000" in result.reason, result.message


def test_a_claimed_092_is_compared_with_every_live_source_at_accept_length_1() -> None:
    """Issue 29: live 1.00 and a claimed 0.92 were within the window slack, so no source was named apart."""
    ests, problems, notes = _random_draft_0_5_16()
    result = accept_length.evaluate("eagle3", 2, ests, problems, notes, claimed=0.92, num_draft_tokens=3)
    assert result.failed, result.message
    assert "looks like extra tokens per cycle; canonical value 1.92" in result.reason, result.reason
    for source in ("Decode lines", "/metrics delta", "/server_info avg_spec_accept_length", "meta_info of 3 requests"):
        assert f"claimed value 0.92 vs {source}" in result.reason, (source, result.reason)
    assert "claimed value 0.92 vs meta_info of 3 requests 1.0000: apart by 0.0750" in result.reason
    assert accept_length.claim_disagreements(1.0, ests) == []  # the live value itself is no disagreement
    assert accept_length.claim_disagreements(1.01, ests) == []  # within the span and a 2-decimal rounding


# -- decode passes against verify calls (issue 29: 192 passes for 189 verify calls, three requests) -------------


def test_the_overlap_schedulers_one_pass_per_request_is_no_failure() -> None:
    """Real 0.5.16 EAGLE-3, single stream, 3 requests of 64 tokens: 63 verify calls each, 64 passes each."""
    real = {"prefill_cuda_graph": 3.0, "decode_cuda_graph": 192.0, "prefill_none": 0.0}
    assert graphcheck.verify_pass_problem(real, 189.0, 3, overlap=True) is None
    problem = graphcheck.verify_pass_problem(real, 189.0, 3, overlap=False)  # --disable-overlap-schedule
    assert problem is not None and "192 decode passes" in problem and "189 verify calls" in problem
    assert graphcheck.overlap_scheduled({"version": "0.5.16"})  # SGLang's default
    assert not graphcheck.overlap_scheduled({"disable_overlap_schedule": True})


def test_verify_steps_the_counter_never_saw_still_fail() -> None:
    """Fewer passes than verify calls, or far more, is a counter that does not cover the verify step."""
    missed = graphcheck.verify_pass_problem({"decode_cuda_graph": 150.0}, 189.0, 3, overlap=True)
    assert missed is not None and "up to one more per request (3 requests)" in missed
    assert graphcheck.verify_pass_problem({"decode_cuda_graph": 200.0}, 189.0, 3, overlap=True) is not None


def test_an_eager_verify_on_0_5_16_counters_still_fails_the_check() -> None:
    """The overlap passes change the count, not the verdict: any decode_none pass is an eager verify."""
    counters = {"decode_cuda_graph": 0.0, "decode_none": 192.0}
    assert graphcheck.verify_pass_problem(counters, 189.0, 3, overlap=True) is None  # every step counted...
    rep = graphcheck.check_verify_graphs(counters=counters, decode_records=[], captures=_captures(CAPTURE_0_5_16),
                                         server_info={"version": "0.5.16"}, batch_sizes=[1])
    assert rep.ok is False and rep.decided_by == "sglang:cuda_graph_passes_total"  # ...and eager
    assert "192 of 192 verify steps eager" in rep.signals["metrics"]


# -- the engine version in the results and the end-of-run summary ----------------------------------------------


def test_the_summary_names_the_engine_version_the_results_record() -> None:
    """The fingerprint written into every results file carries engine_version; the summary's title says it."""
    machine = {"machine_class": "h200-x1", "engine": "sglang", "engine_version": "0.5.16"}
    rs = results_of({}, machine, None)
    assert rs.to_dict()["machine"]["engine_version"] == "0.5.16"
    assert engine_text(rs.machine) == "sglang 0.5.16"
    assert summary_lines([], [], engine_text(rs.machine))[0] == "specwatch results (sglang 0.5.16): no results"
    assert summary_lines([], [], engine_text({"engine": "sglang"}))[0] == "specwatch results (sglang): no results"
    assert summary_lines([], [])[0] == "specwatch results: no results"


# -- 0.5.12, 0.5.13, 0.5.14 and 0.5.15.post1: the releases below 0.5.16 on the ab-ladder -------------------------
# Paths are inside each version's wheel (sglang/srt/...); the numbers filled in are the real 0.5.16 run's above.

OLD = ("0.5.12", "0.5.13", "0.5.14", "0.5.15.post1")
TS = "[2026-12-03 10:01:02] "
#: 0.5.12 and 0.5.13 name no phase. 0.5.12: model_runner.py:2945 (begin) and :2963-2964 (end) of
#: ``init_device_graphs``, cuda_graph_runner.py:658 (the target's sizes, rank 0 only), eagle_worker_v2.py:286 and
#: :294 (draft decode), :328 and :336 (draft extend); 0.5.13: the same strings at model_runner.py:2895 and
#: :2913-2914, cuda_graph_runner.py:532, eagle_worker_v2.py:342, :350, :389 and :397.
CAPTURE_0_5_12 = [TS + line for line in (
    "Capture cuda graph begin. This can take up to several minutes. avail mem=131.20 GB",
    "Capture cuda graph bs [1, 2, 3, 4, 5, 6, 7, 8]",
    "Capture cuda graph end. Time elapsed: 3.48 s. mem usage=0.21 GB. avail mem=130.99 GB.",
    "Capture draft cuda graph begin. This can take up to several minutes. avail mem=130.99 GB",
    "Capture draft cuda graph end. Time elapsed: 8.01 s. mem usage=0.12 GB. avail mem=130.87 GB.",
    "Capture draft extend cuda graph begin. This can take up to several minutes. avail mem=130.87 GB",
    "Capture draft extend cuda graph end. Time elapsed: 1.13 s. mem usage=0.05 GB. avail mem=130.82 GB.",
)]
#: 0.5.14: model_runner.py:2563-2565 (begin: ``num_tokens_per_bs``, not 0.5.16's ``num_tokens_per_req``) and
#: :2588-2590 (end), eagle_worker_v2.py:395-397 and :405-408 (draft decode), :451-453 and :463-466 (draft extend);
#: 0.5.15.post1: model_runner.py:2667-2669 and :2693-2695, eagle_worker_v2.py:419-421, :429-432, :487-489, :499-502.
CAPTURE_0_5_14 = [TS + line for line in (
    "Capture target verify CUDA graph begin. backend=full, num_tokens_per_bs=3, bs=[1, 2, 3, 4, 5, 6, 7, 8], "
    "avail mem=131.20 GB",
    "Capture target verify CUDA graph end. elapsed=3.48 s, mem usage=0.21 GB, avail mem=130.99 GB.",
    "Capture draft decode CUDA graph begin. backend=full, num_tokens_per_bs=1, bs=[1, 2, 3, 4, 5, 6, 7, 8], "
    "avail mem=130.99 GB",
    "Capture draft decode CUDA graph end. elapsed=8.01 s, mem usage=0.12 GB, avail mem=130.87 GB.",
    "Capture draft extend CUDA graph begin. backend=full, num_tokens_per_bs=3, bs=[1, 2, 3, 4, 5, 6, 7, 8], "
    "avail mem=130.87 GB",
    "Capture draft extend CUDA graph end. elapsed=1.13 s, mem usage=0.05 GB, avail mem=130.82 GB.",
)]
CAPTURES = {"0.5.12": CAPTURE_0_5_12, "0.5.13": CAPTURE_0_5_12, "0.5.14": CAPTURE_0_5_14,
            "0.5.15.post1": CAPTURE_0_5_14}
#: The Decode line's format string is 0.5.16's in all four: the head, the accept fields, the graph flag, throughput
#: and queue at 0.5.12 observability/scheduler_metrics_mixin.py:675, :694, :710-712 (the pool part from
#: managers/scheduler_runtime_checker_mixin.py:115); 0.5.13 and 0.5.14 managers/scheduler_components/
#: metrics_reporter.py:703, :726, :751-753; 0.5.15.post1 :725, :748, :773-775 (pool_stats_observer.py:116).
DECODE_OLD = ("[2026-12-03 10:02:00] Decode batch, #running-req: {bs}, #token: 96, token usage: 0.00, "
              "accept len: 2.00, accept rate: 0.50, cuda graph: {graph}, gen throughput (token/s): 346.10, "
              "#queue-req: 0")
EIGHT = [1, 2, 3, 4, 5, 6, 7, 8]


def _eagle3(version: str, lines: list[str], argv: tuple[str, ...] = ("--attention-backend", "triton"),
            env: dict[str, str] | None = None) -> phasegraphs.PhaseReport:
    """The phase check of the ab-ladder's server (EAGLE-3, 2 steps, topk 1) on ``version``'s facts and lines."""
    facts = sglang.release(version).phase_graphs
    return phasegraphs.check_phase_graphs(facts, _captures(lines), algorithm="EAGLE3", num_steps=2, topk=1,
                                          argv=argv, env=env, gpus=["NVIDIA H200"])


@pytest.mark.parametrize("version", OLD)
def test_each_old_releases_capture_lines_give_every_phase_and_the_verify_sizes(version: str) -> None:
    """0.5.12/0.5.13's unnamed lines are read as target verify, draft decode and draft extend, their sizes from the
    ``bs [...]`` line; 0.5.14/0.5.15.post1's begin line carries them, with ``num_tokens_per_bs``."""
    caps = _captures(CAPTURES[version])
    assert [c.name for c in caps if c.event != "bs"] == ["target verify"] * 2 + ["draft decode"] * 2 + [
        "draft extend"] * 2
    assert {c.device for c in caps} == {"CUDA"}
    end = next(c for c in caps if c.name == "target verify" and c.event == "end")
    assert (end.elapsed_s, end.mem_usage_gb, end.avail_mem_gb) == (3.48, 0.21, 130.99)
    assert graphcheck.captured_verify_bs({"version": version}, caps) == EIGHT  # no decode_cuda_graph_bs before 0.5.23
    rep = _eagle3(version, CAPTURES[version])
    assert rep.ok, rep.message()
    assert rep.captured["target verify"] == EIGHT
    if version in ("0.5.14", "0.5.15.post1"):
        assert caps[0].num_tokens_per_req == 3 and caps[2].num_tokens_per_req == 1


def test_old_lines_that_capture_nothing_are_not_captures() -> None:
    """0.5.12's failure line, the piecewise runner's token list and the frozen-KV MTP worker's line parse to
    nothing (cuda_graph_runner.py:739, piecewise_cuda_graph_runner.py:224, frozen_kv_mtp_worker.py); its piecewise
    prefill capture (model_runner.py:3077, :3089) is the target's prefill."""
    lines = [TS + "Capture cuda graph failed: CUDA out of memory", TS + "Capture cuda graph num tokens [4, 8, 16]",
             TS + "Capture Frozen-KV MTP draft cuda graph begin."]
    assert logscan.parse_lines(lines) == []
    pw = _captures([TS + "Capture piecewise CUDA graph begin. avail mem=60.24 GB",
                    TS + "Capture piecewise CUDA graph end. Time elapsed: 11.07 s. mem usage=1.55 GB. "
                         "avail mem=58.69 GB."])
    assert [(c.name, c.event, c.elapsed_s) for c in pw] == [("target prefill", "begin", None),
                                                           ("target prefill", "end", 11.07)]


@pytest.mark.parametrize(("version", "cause"), [
    ("0.5.12", "captured only for triton, trtllm_mla"),  # eagle_worker_v2.py:313-316: Triton, TRTLLMMLA
    ("0.5.13", "captured only for triton, trtllm_mha, trtllm_mla, cutedsl_mla, tokenspeed_mla"),  # :369-377
    ("0.5.14", ""),  # eagle_worker_v2.py:427-436 adds FlashInferAttnBackend: flashinfer's draft extend is graphed
    ("0.5.15.post1", ""),  # :452-471, DeepseekSparseAttnBackend too
])
def test_an_ungraphed_draft_extend_is_explained_by_each_releases_backend_list(version: str, cause: str) -> None:
    """The same eager draft extend under --attention-backend flashinfer: 0.5.12/0.5.13 never graph it (named), from
    0.5.14 on they do, so nothing shown explains it."""
    lines = [line for line in CAPTURES[version] if "extend" not in line]
    rep = _eagle3(version, lines, argv=("--attention-backend", "flashinfer"))
    assert rep.ok is False and [m.phase for m in rep.missing] == ["draft extend"], rep.message()
    if cause:
        assert "--attention-backend flashinfer, whose draft extend is not captured" in rep.reason()
        assert cause in rep.reason(), rep.reason()
    else:
        assert rep.missing[0].cause == "", rep.reason()


@pytest.mark.parametrize("version", OLD)
def test_no_old_release_has_the_draft_extend_switch(version: str) -> None:
    """SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH exists from 0.5.16 on (environ.py:780): before it the variable does
    nothing, so the check never names it, and 0.5.12/0.5.13 turn graphs off only with --disable-cuda-graph."""
    facts = sglang.release(version).phase_graphs
    assert facts.extend_switch is None and sglang.release("0.5.16").phase_graphs.extend_switch
    lines = [line for line in CAPTURES[version] if "extend" not in line]
    rep = _eagle3(version, lines, env={"SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH": "1"})
    assert rep.ok is False and "SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH" not in rep.reason(), rep.reason()
    off = [flag for flag, _ in facts.graphs_off]
    assert off == (["--disable-cuda-graph"] if version in ("0.5.12", "0.5.13") else
                   ["--disable-cuda-graph", "--disable-decode-cuda-graph", "--cuda-graph-backend-decode"])


@pytest.mark.parametrize("version", OLD)
def test_each_old_releases_decode_line_reads_as_0_5_16s(version: str) -> None:
    """accept len, cuda graph, #running-req and gen throughput: what accept_length and cycle_ms read."""
    rec = logscan.parse_line(DECODE_OLD.format(bs=1, graph=True))
    assert isinstance(rec, DecodeRecord) and rec.speculative
    assert (rec.running, rec.accept_len, rec.accept_rate, rec.graph, rec.gen_tput) == (1, 2.0, 0.5, True, 346.10)
    assert rec.graph_label == "cuda graph" and rec.extra == {}
    assert window_cycle_ms(rec.accept_len, rec.running, rec.gen_tput) == pytest.approx(1000 * 2.0 / 346.10)
    eager = logscan.parse_line(DECODE_OLD.format(bs=8, graph=False))
    assert isinstance(eager, DecodeRecord) and eager.graph is False and eager.running == 8


#: meta_info as each release's tokenizer_manager.py fills it, with 0.5.16's keys: 0.5.12 :2114-2155, 0.5.13
#: :2280-2321, 0.5.14 :2312-2353, 0.5.15.post1 :2345-2386 (the aliases spec_accepted_drafts, spec_proposed_drafts,
#: spec_accept_histogram in all four); the values are the real 0.5.16 random-draft run's above.
META_OLD = {"completion_tokens": 64, "spec_verify_ct": 63, "spec_accept_length": 64 / 63, "spec_accept_rate": 0.0,
            "spec_num_correct_drafts": 0, "spec_num_proposed_drafts": 126, "spec_accepted_drafts": 0,
            "spec_proposed_drafts": 126, "spec_correct_drafts_histogram": [63], "spec_accept_histogram": [63]}
#: observability/metrics_collector.py: generation_tokens_total at 0.5.12 :1275, 0.5.13 :1434, 0.5.14 :1434,
#: 0.5.15.post1 :1435; spec_verify_calls_total at 0.5.13 :1439, 0.5.14 :1439, 0.5.15.post1 :1440, none in 0.5.12;
#: num_requests_total at :1350, :1514, :1514, :1515; cuda_graph_passes_total at :500, :586, :586, :586.
VERIFY_CALLS = {"0.5.12": False, "0.5.13": True, "0.5.14": True, "0.5.15.post1": True}


def _delta(version: str) -> promtext.Exposition:
    labels = '{engine_type="unified",model_name="m"}'
    text = (f"sglang:generation_tokens_total{labels} 192.0\nsglang:num_requests_total{labels} 3.0\n"
            f'sglang:cuda_graph_passes_total{{engine_type="unified",model_name="m",mode="decode_cuda_graph"}} 192.0\n')
    if VERIFY_CALLS[version]:
        text += f"sglang:spec_verify_calls_total{labels} 189.0\n"
    return promtext.parse_text(text)


@pytest.mark.parametrize("version", OLD)
def test_each_old_releases_accept_length_sources_agree(version: str) -> None:
    """Every source agrees on 1.000; 0.5.12 has no verify-call counter, and the check says so instead of reading
    the /metrics delta as 0 verify calls."""
    assert sglang.release(version).verify_calls_metric is VERIFY_CALLS[version]
    decodes = [r for r in logscan.parse_lines([DECODE_OLD.format(bs=1, graph=True).replace(
        "accept len: 2.00, accept rate: 0.50", "accept len: 1.00, accept rate: 0.00")] * 4)
        if isinstance(r, DecodeRecord)]
    info = {"version": version, "internal_states": [{"avg_spec_accept_length": 1.0}]}  # scheduler.get_internal_state
    ests, problems, notes = accept_length.estimates(num_steps=2, decode_records=decodes, metrics_delta=_delta(version),
                                                    metas=[META_OLD] * 3, info_before={}, info_after=info,
                                                    flushed_before=True)
    assert not problems, problems
    sources = {e.source for e in ests}
    assert ("/metrics delta" in sources) is VERIFY_CALLS[version]
    if not VERIFY_CALLS[version]:
        assert "/metrics delta: the server exposes no sglang:spec_verify_calls_total counter: not a source" in notes
    result = accept_length.evaluate("eagle3", 2, ests, problems, notes)
    assert result.ok and f"{len(ests)} sources agree on 1.000" in result.reason, result.message
    assert speculative.from_requests([META_OLD] * 3).value == 1.0  # the results' accept_length key
    assert verify_graphs.graph_counters(_delta(version)) == {"decode_cuda_graph": 192.0}


@pytest.mark.parametrize(("version", "key", "flag"), [
    ("0.5.12", "cuda_graph_max_bs", "--cuda-graph-max-bs"),  # server_args.py:707 (resolved by :1401-1495)
    ("0.5.13", "cuda_graph_max_bs", "--cuda-graph-max-bs"),  # server_args.py:735
    ("0.5.14", "cuda_graph_max_bs_decode", "--cuda-graph-max-bs-decode"),  # server_args.py:1939
    ("0.5.15.post1", "cuda_graph_max_bs_decode", "--cuda-graph-max-bs-decode"),  # server_args.py:1424
])
def test_an_eager_batch_above_the_captured_sizes_names_the_flag_the_release_accepts(version: str, key: str,
                                                                                    flag: str) -> None:
    """The capture-limit fault on each release's own lines and /server_info key: the flag named is one it accepts
    (0.5.12/0.5.13 reject --cuda-graph-max-bs-decode)."""
    lines = [line.replace("1, 2, 3, 4, 5, 6, 7, 8", "1, 2") for line in CAPTURES[version]]
    decodes = [r for r in logscan.parse_lines([DECODE_OLD.format(bs=2, graph=True),
                                               DECODE_OLD.format(bs=8, graph=False)]) if isinstance(r, DecodeRecord)]
    info = {"version": version, key: 2, "max_running_requests": 8}
    result = verify_graphs.evaluate("p", counters={"decode_cuda_graph": 10.0, "decode_none": 30.0},
                                    decode_records=decodes, captures=_captures(lines), server_info=info,
                                    batch_sizes=[2, 8], concurrency=8)
    assert result.failed, result.message
    assert result.reason.startswith(f"{flag} 2 is below the running batch"), result.reason
    assert f"raise {flag} to at least 8" in result.reason and flag in sglang.release(version).graph_limit_flags
    assert graphcheck.capture_limit(info) == (2, flag)


@pytest.mark.parametrize("version", OLD)
def test_each_old_releases_process_titles_are_recognised(version: str) -> None:
    """setproctitle: managers/scheduler.py (0.5.12 :3966, 0.5.13 :3983, 0.5.14 :4148, 0.5.15.post1 :4262) and
    detokenizer_manager.py (:425, :479, :487, :489), the same strings as 0.5.16's."""
    for title, role in (("sglang::scheduler", "scheduler"), ("sglang::scheduler_TP1", "scheduler"),
                        ("sglang::detokenizer", "detokenizer")):
        found = procenv.classify(procenv.ProcInfo(7, 1, "python3", [title, ""]))
        assert (found.engine, found.role) == ("sglang", role), (version, title, found)


ROOT = Path(__file__).resolve().parents[2]
#: The flags the ab-ladder's command lines hold, as each release declares them: 0.5.12/0.5.13 in
#: ``ServerArgs.add_cli_args`` (server_args.py, e.g. 0.5.12 "--model-path" :4530, "--cuda-graph-max-bs" :6428;
#: 0.5.13 :4490, :6507); 0.5.14 and 0.5.15.post1 as ``ServerArgs`` fields (arg_groups/arg_utils.py
#: ``add_cli_args_from_dataclass``: model_path :417 / :410, cuda_graph_max_bs_decode :1939 / :1424) with
#: --cuda-graph-max-bs its deprecated alias (:6358-6364 / :6243-6249). Their values: triton in
#: ATTENTION_BACKEND_CHOICES, pytorch in SAMPLING_BACKEND_CHOICES, none in GRAMMAR_BACKEND_CHOICES in all four.
COMMON_FLAGS = {"--model-path", "--host", "--port", "--enable-metrics", "--decode-log-interval",
                "--speculative-algorithm", "--speculative-draft-model-path", "--speculative-num-steps",
                "--speculative-eagle-topk", "--speculative-num-draft-tokens", "--attention-backend",
                "--sampling-backend", "--grammar-backend", "--mem-fraction-static", "--max-total-tokens"}
RELEASE_FLAGS = {"0.5.12": {"--cuda-graph-max-bs"}, "0.5.13": {"--cuda-graph-max-bs"},
                 "0.5.14": {"--cuda-graph-max-bs-decode", "--cuda-graph-max-bs"},
                 "0.5.15.post1": {"--cuda-graph-max-bs-decode", "--cuda-graph-max-bs"}}


@pytest.mark.parametrize("version", OLD)
def test_each_ladder_profile_boots_with_flags_its_release_accepts(version: str, tmp_path: Path) -> None:
    """docs/validation/sglang/eagle3-8b-<version>.toml, launched as the pool launches it (``build_launch``: the
    server's interpreter asked which SGLang its ``pythonpath`` holds; here a site with that release's metadata
    stands for the kit's overlay): every flag of its command line exists in that release, the capture limit is
    set with the release's own spelling, and the limit is the base profile's (8). The same holds when the limit
    is the profile's ``cuda_graph_max_bs`` (0.5.14 and 0.5.15.post1's way) instead of an ``extra_args`` flag
    (0.5.12 and 0.5.13's, written before the version was asked)."""
    info = tmp_path / "site" / f"sglang-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    ps = load_profiles(ROOT / "docs" / "validation" / "sglang" / f"eagle3-8b-{version}.toml")
    ladder = replace(ps.get("sgl8b-eagle3"), python=sys.executable, pythonpath=(str(tmp_path / "site"),))
    extra = list(ladder.extra_args)
    at = extra.index("--cuda-graph-max-bs") if "--cuda-graph-max-bs" in extra else len(extra)  # 0.5.12/0.5.13's way
    by_field = replace(ladder, extra_args=tuple(extra[:at] + extra[at + 2:]), cuda_graph_max_bs=8)
    limit = sglang.release(version).graph_limit_flag
    for n, prof in enumerate((ladder, by_field)):
        argv = list(build_launch(prof, port=30000, run_dir=tmp_path / f"run-{n}", managed=set(), base_env={}).argv)
        unknown = [a for a in argv if a.startswith("--") and a not in COMMON_FLAGS | RELEASE_FLAGS[version]]
        assert not unknown, f"flags SGLang {version} rejects: {unknown}"
        assert argv[argv.index(limit) + 1] == "8" and argv.count(limit) == 1, argv
