"""The readers on each SGLang version's own line formats: 0.5.16 and 0.5.17 (GPU), 0.5.23 (CPU and GPU).

Every line is a format string of the version's wheel filled in, with the file and line cited;
docs/reference/sglang-versions.md lists what differs between the versions.
"""

from __future__ import annotations

import pytest

from specwatch.checks import accept_length, graphcheck, verify_graphs
from specwatch.run.summary import results_of, summary_lines
from specwatch.signals import logscan, promtext
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
