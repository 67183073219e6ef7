"""The reference server's HTTP API, metrics and log lines, seen from outside (CPU, ref-tiny, EAGLE3)."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import refharness
from refharness import ACCEPT, DECODE, PREFILL, Server, boot, decode_lines, metric_sum, parse_metrics

NUM_STEPS = 2
NUM_DRAFT = 3
INTERVAL = 5
ARGS = ["--model-path", "ref-tiny", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps",
        str(NUM_STEPS), "--speculative-num-draft-tokens", str(NUM_DRAFT), "--enable-metrics",
        "--decode-log-interval", str(INTERVAL)]
GREEDY = {"temperature": 0.0}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = boot(ARGS, tmp_path_factory.mktemp("http") / "server.log")
    # Before any decode window: the cumulative accept length must be absent.
    server.extra["initial_info"] = server.get_json("/server_info")
    yield server
    server.stop()


def _spec_identities(meta: dict) -> None:
    ct = meta["spec_verify_ct"]
    hist = meta["spec_correct_drafts_histogram"]
    assert ct > 0
    assert sum(hist) == ct
    assert sum(k * h for k, h in enumerate(hist)) == meta["spec_num_correct_drafts"]
    assert meta["spec_num_proposed_drafts"] == ct * (NUM_DRAFT - 1)
    assert meta["spec_accept_length"] == pytest.approx(meta["completion_tokens"] / ct)
    assert meta["spec_accept_rate"] == pytest.approx(meta["spec_num_correct_drafts"] / meta["spec_num_proposed_drafts"])
    assert 0.0 <= meta["spec_accept_rate"] <= 1.0
    assert 1.0 <= meta["spec_accept_length"] <= NUM_DRAFT + 1


def test_avg_accept_length_absent_before_first_window(srv: Server) -> None:
    info = srv.extra["initial_info"]
    state = info["internal_states"][0]
    assert "avg_spec_accept_length" not in state
    assert info["speculative_algorithm"] == "EAGLE3"
    assert info["speculative_num_draft_tokens"] == NUM_DRAFT
    assert info["max_running_requests"] == 48
    assert state["decode_cuda_graph_bs"] == []  # CPU: nothing captured
    assert state["memory_usage"]["graph"]["target_verify"] == 0.0
    assert state["last_gen_throughput"] == 0.0


def test_generate_spec_fields_and_identities(srv: Server) -> None:
    out = srv.generate({"text": "The quick brown fox", "sampling_params": {"max_new_tokens": 40, **GREEDY}})
    meta = out["meta_info"]
    assert meta["completion_tokens"] == len(out["output_ids"]) == 40
    assert meta["finish_reason"] == {"type": "length", "length": 40}
    assert meta["prompt_tokens"] == len(b"The quick brown fox") + 1  # BOS
    assert meta["e2e_latency"] > 0
    assert isinstance(out["text"], str)
    _spec_identities(meta)
    # Greedy is deterministic: the same request gives the same tokens.
    again = srv.generate({"text": "The quick brown fox", "sampling_params": {"max_new_tokens": 40, **GREEDY}})
    assert again["output_ids"] == out["output_ids"]


def test_generate_input_ids_and_batch(srv: Server) -> None:
    one = srv.generate({"input_ids": [256, 72, 105], "sampling_params": {"max_new_tokens": 8, **GREEDY}})
    assert one["meta_info"]["prompt_tokens"] == 3
    batch = srv.generate({"input_ids": [[256, 72, 105], [256, 65]], "sampling_params": {"max_new_tokens": 8, **GREEDY}})
    assert isinstance(batch, list)
    assert len(batch) == 2
    assert batch[0]["output_ids"] == one["output_ids"]
    assert [b["meta_info"]["prompt_tokens"] for b in batch] == [3, 2]


def test_stop_string_and_ignore_eos(srv: Server) -> None:
    base = srv.generate({"text": "abc", "sampling_params": {"max_new_tokens": 30, "ignore_eos": True, **GREEDY}})
    text = base["text"]
    stop = next((c for c in text[3:] if c.isprintable() and c != "\ufffd"), None)
    if stop is None:
        pytest.skip("greedy output has no printable character to stop on")
    cut = srv.generate({"text": "abc", "sampling_params": {"max_new_tokens": 30, "stop": [stop], **GREEDY}})
    assert cut["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    assert stop not in cut["text"]
    assert text.startswith(cut["text"])
    assert cut["meta_info"]["completion_tokens"] < 30


def test_streaming_is_cumulative(srv: Server) -> None:
    import urllib.request

    body = json.dumps({"text": "Stream me", "stream": True, "sampling_params": {"max_new_tokens": 24, **GREEDY}})
    req = urllib.request.Request(srv.url + "/generate", data=body.encode(), method="POST")
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        raw = resp.read().decode()
    events = [e[len("data: "):] for e in raw.split("\n\n") if e.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert len(chunks) >= 2
    counts = [c["meta_info"]["completion_tokens"] for c in chunks]
    assert counts == sorted(counts)
    assert counts[-1] == 24
    for a, b in itertools.pairwise(chunks):
        assert b["output_ids"][: len(a["output_ids"])] == a["output_ids"]
        assert len(c := b["output_ids"]) == b["meta_info"]["completion_tokens"]
        assert c
    assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "length"
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])
    _spec_identities(chunks[-1]["meta_info"])
    plain = srv.generate({"text": "Stream me", "sampling_params": {"max_new_tokens": 24, **GREEDY}})
    assert plain["output_ids"] == chunks[-1]["output_ids"]


def test_server_info_cumulative_accept_length_and_flush(srv: Server) -> None:
    assert srv.request("POST", "/flush_cache")[0] == 200
    assert "avg_spec_accept_length" not in srv.get_json("/server_info")["internal_states"][0]
    start = srv.log_size()
    for prompt in ("alpha", "beta gamma"):
        srv.generate({"text": prompt, "sampling_params": {"max_new_tokens": 60, "ignore_eos": True, **GREEDY}})
    windows = [float(re.search(ACCEPT, m.group(0)).group("accept_len")) for m in decode_lines(srv.log()[start:])]
    assert len(windows) >= 2
    state = srv.get_json("/server_info")["internal_states"][0]
    # bs is 1 in every window, so the cumulative value is the mean of the window values.
    assert state["avg_spec_accept_length"] == pytest.approx(sum(windows) / len(windows), abs=0.01)
    assert state["last_gen_throughput"] > 0
    # /get_server_info is the deprecated alias of the same thing.
    assert srv.get_json("/get_server_info")["internal_states"][0]["avg_spec_accept_length"] == pytest.approx(
        state["avg_spec_accept_length"])
    status, text = srv.request("GET", "/flush_cache")
    assert status == 200
    assert text.startswith(b"Cache flushed.")
    assert "avg_spec_accept_length" not in srv.get_json("/server_info")["internal_states"][0]


def test_flush_refused_while_busy(srv: Server) -> None:
    import urllib.request

    body = json.dumps({"text": "busy", "stream": True,
                       "sampling_params": {"max_new_tokens": 900, "ignore_eos": True, **GREEDY}}).encode()
    with urllib.request.urlopen(urllib.request.Request(srv.url + "/generate", data=body), timeout=120) as resp:
        assert resp.readline().startswith(b"data: ")  # the request is running now
        status, text = srv.request("POST", "/flush_cache")
        rest = resp.read()
    assert rest.rstrip().endswith(b"data: [DONE]")
    assert status == 400, text
    assert srv.request("POST", "/flush_cache")[0] == 200


def test_metrics_names_and_deltas(srv: Server) -> None:
    before = parse_metrics(srv.request("GET", "/metrics")[1].decode())
    assert srv.request("GET", "/health")[0] == 200
    assert srv.request("GET", "/health_generate")[0] == 200
    mid = parse_metrics(srv.request("GET", "/metrics")[1].decode())
    # Health checks are not requests in the metrics (log_metrics=False).
    assert metric_sum(mid, "sglang:num_requests_total") == metric_sum(before, "sglang:num_requests_total")
    out = srv.generate({"text": "metrics", "sampling_params": {"max_new_tokens": 32, "ignore_eos": True, **GREEDY}})
    meta = out["meta_info"]
    after = parse_metrics(srv.request("GET", "/metrics")[1].decode())

    def delta(name: str, **labels: str) -> float:
        return metric_sum(after, name, **labels) - metric_sum(mid, name, **labels)

    assert delta("sglang:num_requests_total") == 1
    assert delta("sglang:generation_tokens_total") == meta["completion_tokens"]
    assert delta("sglang:prompt_tokens_total") == meta["prompt_tokens"]
    assert delta("sglang:spec_verify_calls_total") == meta["spec_verify_ct"]
    assert delta("sglang:cuda_graph_passes_total", mode="decode_none") == meta["spec_verify_ct"]
    assert delta("sglang:cuda_graph_passes_total", mode="decode_cuda_graph") == 0
    assert delta("sglang:cuda_graph_passes_total", mode="prefill_none") == 1
    assert delta("sglang:realtime_tokens_total", mode="prefill_compute") == meta["prompt_tokens"]
    assert delta("sglang:realtime_tokens_total", mode="decode") >= meta["completion_tokens"] - 1
    labels = {k for (n, lab) in after if n == "sglang:cuda_graph_passes_total" for k, _ in lab}
    assert labels == {"model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank", "mode"}
    assert metric_sum(after, "sglang:cuda_graph_passes_total", engine_type="unified", tp_rank="0") > 0
    for gauge in ("sglang:gen_throughput", "sglang:spec_accept_length", "sglang:spec_accept_rate"):
        assert any(n == gauge for n, _ in after), gauge
    assert metric_sum(after, "sglang:spec_accept_length") >= 1.0  # a window has been logged


def test_log_lines_match_sglang_regexes(srv: Server) -> None:
    # its own decode windows (several --decode-log-interval windows): it must not rely on the module's other tests
    srv.generate({"text": "log lines", "sampling_params": {"max_new_tokens": 40, "ignore_eos": True, **GREEDY}})
    log = srv.log()
    decodes = decode_lines(log)
    assert decodes, "no Decode batch line"
    for m in decodes:
        line = m.string
        assert m.group("ranks") == ""  # TP=1: no rank prefix
        assert "cpu graph: False" in line
        acc = re.search(ACCEPT, line)
        assert acc, line
        assert 1.0 <= float(acc.group("accept_len")) <= NUM_DRAFT
        assert 0.0 <= float(acc.group("accept_rate")) <= 1.0
    assert any(re.match(PREFILL, ln) for ln in log.splitlines())
    assert re.search(r"max_total_num_tokens=\d+, .*max_running_requests=48, context_len=\d+", log)
    assert "server_args=" in log
    assert "Max running requests is reset to 48 for speculative decoding" in log
    assert re.search(r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\] The server is fired up", log, re.M)
    # Every Decode line is one --decode-log-interval window: its #running-req is an int >= 1.
    assert all(int(m.group("running")) >= 1 for m in decodes)
    assert all(re.match(DECODE, m.string) for m in decodes)


def test_bad_inputs_get_4xx_and_server_keeps_serving(srv: Server) -> None:
    status, body = srv.request("POST", "/generate", raw=b"{bad json")
    err = json.loads(body)
    assert status == 400
    assert err["object"] == "error"
    assert err["type"] == "Bad Request"
    assert err["code"] == 400
    assert "JSON decode error" in err["message"]

    status, body = srv.request("POST", "/generate", {"text": "x", "sampling_params": {"max_new_token": 3}})
    assert status == 400
    assert "max_new_token" in json.loads(body)["message"]

    status, body = srv.request("POST", "/generate", {"text": "x", "sampling_params": {"max_new_tokens": 0}})
    assert status == 400
    assert "max_new_tokens" in json.loads(body)["message"]

    status, body = srv.request("POST", "/generate", {"text": "x" * 5000, "sampling_params": {"max_new_tokens": 4}})
    assert status == 400
    assert "context length" in json.loads(body)["message"]

    status, body = srv.request("POST", "/generate", {"sampling_params": {}})
    assert status == 400

    out = srv.generate({"text": "still alive", "sampling_params": {"max_new_tokens": 4, **GREEDY}})
    assert out["meta_info"]["completion_tokens"] == 4


LOGPROB_KEYS = {"input_token_logprobs", "output_token_logprobs", "output_token_logprobs_length",
                "input_top_logprobs", "output_top_logprobs"}


def _check_logprobs(out: dict, top_k: int, with_text: bool) -> None:
    meta = out["meta_info"]
    n = meta["completion_tokens"]
    assert meta["input_token_logprobs"] == []
    assert meta["output_token_logprobs_length"] == len(meta["output_token_logprobs"]) == n == len(out["output_ids"])
    assert [e[1] for e in meta["output_token_logprobs"]] == out["output_ids"]
    for lp, _, text in meta["output_token_logprobs"]:
        assert lp <= 0.0
        assert isinstance(text, str) if with_text else text is None
    if top_k == 0:
        assert "output_top_logprobs" not in meta
        assert "input_top_logprobs" not in meta
        return
    assert meta["input_top_logprobs"] == []
    assert len(meta["output_top_logprobs"]) == n
    for (lp, _, _), top in zip(meta["output_token_logprobs"], meta["output_top_logprobs"], strict=True):
        assert len(top) == top_k
        assert [e[0] for e in top] == sorted((e[0] for e in top), reverse=True)
        assert all(isinstance(e[2], str) if with_text else e[2] is None for e in top)
        assert lp <= top[0][0]


def test_generate_logprobs_and_prompt_token_ids(srv: Server) -> None:
    sp = {"max_new_tokens": 10, **GREEDY}
    plain = srv.generate({"text": "Hi", "sampling_params": sp})
    assert not LOGPROB_KEYS & set(plain["meta_info"])  # absent by default
    assert "prompt_token_ids" not in plain
    out = srv.generate({"text": "Hi", "sampling_params": sp, "return_logprob": True, "top_logprobs_num": 3,
                        "return_text_in_logprobs": True, "return_prompt_token_ids": True})
    assert out["output_ids"] == plain["output_ids"]
    assert out["prompt_token_ids"] == [256, 72, 105]  # BOS + bytes
    _check_logprobs(out, 3, with_text=True)
    for (lp, tok, text), top in zip(out["meta_info"]["output_token_logprobs"], out["meta_info"]["output_top_logprobs"],
                                    strict=True):
        assert top[0] == [lp, tok, text]  # greedy: the chosen token is the most likely one
    # Only the chosen tokens' logprobs; batch input applies the fields to every prompt.
    batch = srv.generate({"input_ids": [[256, 72, 105], [256, 65]], "sampling_params": sp, "return_logprob": True,
                          "return_prompt_token_ids": True})
    assert [b["prompt_token_ids"] for b in batch] == [[256, 72, 105], [256, 65]]
    for b in batch:
        _check_logprobs(b, 0, with_text=False)
    first, ref = batch[0]["meta_info"]["output_token_logprobs"], out["meta_info"]["output_token_logprobs"]
    assert [e[0] for e in first] == pytest.approx([e[0] for e in ref], abs=1e-5)


def test_logprobs_streamed_and_with_stop_string(srv: Server) -> None:
    import urllib.request

    body = json.dumps({"text": "Stream me", "stream": True, "return_logprob": True, "top_logprobs_num": 2,
                       "sampling_params": {"max_new_tokens": 12, **GREEDY}})
    req = urllib.request.Request(srv.url + "/generate", data=body.encode(), method="POST")
    with urllib.request.urlopen(req, timeout=60) as resp:
        raw = resp.read().decode()
    chunks = [json.loads(e[len("data: "):]) for e in raw.split("\n\n") if e.startswith("data: {")]
    assert chunks
    for c in chunks:  # accumulated so far on every chunk
        _check_logprobs(c, 2, with_text=False)
    assert chunks[-1]["meta_info"]["completion_tokens"] == 12
    base = srv.generate({"text": "abc", "sampling_params": {"max_new_tokens": 30, "ignore_eos": True, **GREEDY}})
    stop = next((c for c in base["text"][3:] if c.isprintable() and c != "\ufffd"), None)
    cut = srv.generate({"text": "abc", "return_logprob": True,
                        "sampling_params": {"max_new_tokens": 30, "stop": [stop] if stop else [], **GREEDY}})
    _check_logprobs(cut, 0, with_text=False)  # trimmed at the stop string with the tokens


@pytest.mark.parametrize(("field", "value"), [
    ("top_logprobs_num", -1), ("top_logprobs_num", "3"), ("top_logprobs_num", 1.5), ("return_logprob", "yes"),
    ("logprob_start_len", "0"), ("return_text_in_logprobs", 1), ("return_prompt_token_ids", "true"),
])
def test_logprob_fields_are_validated(srv: Server, field: str, value: object) -> None:
    status, body = srv.request("POST", "/generate", {"text": "x", "return_logprob": True, field: value,
                                                     "sampling_params": {"max_new_tokens": 2}})
    assert status == 400
    assert field in json.loads(body)["message"]


def test_openai_completions_and_model_info(srv: Server) -> None:
    status, body = srv.request("POST", "/v1/completions",
                               {"model": "ref-tiny", "prompt": "Once", "max_tokens": 12, "temperature": 0})
    assert status == 200
    out = json.loads(body)
    assert out["object"] == "text_completion"
    assert out["usage"] == {**out["usage"], "prompt_tokens": 5, "completion_tokens": 12, "total_tokens": 17}
    same = srv.generate({"text": "Once", "sampling_params": {"max_new_tokens": 12, **GREEDY}})
    assert out["choices"][0]["text"] == same["text"]
    info = srv.get_json("/model_info")
    assert info["model_path"] == "ref-tiny"
    assert info["is_generation"] is True


def test_ref_fault_route_slows_serving_and_shows_in_server_info(srv: Server) -> None:


    def gen_s() -> float:
        t0 = time.perf_counter()
        srv.generate({"text": "The quick brown fox", "sampling_params": {"max_new_tokens": 60, **GREEDY}})
        return time.perf_counter() - t0

    status, body = srv.request("POST", "/ref/fault", {"slowdown_pct": "fast"})
    assert status == 400 and "slowdown_pct" in json.loads(body)["error"]
    status, _ = srv.request("POST", "/ref/fault", {"slowdown_pct": -1})
    assert status == 400
    healthy = min(gen_s() for _ in range(3))
    status, body = srv.request("POST", "/ref/fault", {"slowdown_pct": 400})
    assert status == 200 and json.loads(body) == {"slowdown_pct": 400.0}
    try:
        assert srv.get_json("/server_info")["ref_fault_slowdown"] == 400.0
        slowed = min(gen_s() for _ in range(3))
    finally:
        srv.request("POST", "/ref/fault", {"slowdown_pct": 0})
    # 400% of every step period added: about 5x the time; 2x leaves room for a busy CI machine.
    assert slowed > 2 * healthy, (slowed, healthy)
    assert "Reference fault: slowdown set to 400%" in srv.log()
    assert srv.get_json("/server_info")["ref_fault_slowdown"] == 0.0


def test_a_non_streamed_request_whose_client_left_is_aborted(srv: Server) -> None:
    """aiohttp does not cancel a handler when its client disconnects: the server polls, as SGLang
    does, and aborts the request instead of generating for nobody."""
    import socket

    def metric(name: str, **labels: str) -> float:
        samples = parse_metrics(srv.request("GET", "/metrics")[1].decode())
        return metric_sum(samples, name, **labels)

    def aborted() -> float:
        return metric(name="sglang:num_aborted_requests_total")

    def decoded() -> float:
        return metric("sglang:realtime_tokens_total", mode="decode")

    before, decoded_before = aborted(), decoded()
    body = json.dumps({"text": "The quick brown fox", "sampling_params": {"max_new_tokens": 400, **GREEDY}}).encode()
    srv.request("POST", "/ref/fault", {"slowdown_pct": 2000})  # ~20x slower steps: the request outlives the client
    try:
        with socket.create_connection(("127.0.0.1", srv.port)) as s:
            s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            # the client leaves once the server is generating for it (a condition, not a sleep: a loaded
            # host may not have read the request yet after any fixed wait); 60 s is a hang guard only
            deadline = time.monotonic() + 60
            while decoded() == decoded_before and time.monotonic() < deadline:
                time.sleep(0.05)
            assert decoded() > decoded_before, "the request never started decoding"
        deadline = time.monotonic() + 60
        while aborted() == before and time.monotonic() < deadline:
            time.sleep(0.2)
        assert aborted() == before + 1
        assert "Request is disconnected from the client side. Abort request" in srv.log()
    finally:
        srv.request("POST", "/ref/fault", {"slowdown_pct": 0})
    out = srv.generate({"text": "The quick brown fox", "sampling_params": {"max_new_tokens": 8, **GREEDY}})
    assert out["meta_info"]["completion_tokens"] == 8  # still serving


def test_latency_histograms_count_each_request_and_agree_with_the_client(srv: Server) -> None:
    """SGLang's TTFT, inter-token and end-to-end histograms: one observation per request (one per
    output token after the first for ITL), buckets cumulative up to +Inf, sums near the client's clock."""
    text = srv.request("GET", "/metrics")[1].decode()
    for family in ("time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_request_latency_seconds"):
        assert f"# TYPE sglang:{family} histogram" in text
    before = parse_metrics(text)
    t0 = time.perf_counter()
    out = srv.generate({"text": "histograms", "sampling_params": {"max_new_tokens": 24, "ignore_eos": True, **GREEDY}})
    client_s = time.perf_counter() - t0
    after = parse_metrics(srv.request("GET", "/metrics")[1].decode())

    def delta(name: str, **labels: str) -> float:
        return metric_sum(after, name, **labels) - metric_sum(before, name, **labels)

    n = out["meta_info"]["completion_tokens"]
    assert delta("sglang:time_to_first_token_seconds_count", is_streaming="false") == 1
    assert delta("sglang:e2e_request_latency_seconds_count", is_streaming="false") == 1
    assert delta("sglang:inter_token_latency_seconds_count") == n - 1
    e2e = delta("sglang:e2e_request_latency_seconds_sum")
    assert e2e == pytest.approx(out["meta_info"]["e2e_latency"], abs=0.05) and e2e <= client_s
    assert 0 < delta("sglang:time_to_first_token_seconds_sum") < e2e
    itl = delta("sglang:inter_token_latency_seconds_sum")
    assert itl + delta("sglang:time_to_first_token_seconds_sum") == pytest.approx(e2e, abs=0.05)
    buckets = sorted(((float(dict(lab)["le"]), v) for (name, lab), v in after.items()
                      if name == "sglang:e2e_request_latency_seconds_bucket" and ("is_streaming", "false") in lab))
    assert buckets[-1][0] == float("inf")
    assert [v for _, v in buckets] == sorted(v for _, v in buckets)  # cumulative
    assert buckets[-1][1] == metric_sum(after, "sglang:e2e_request_latency_seconds_count", is_streaming="false")


def test_a_crashing_scheduler_logs_its_traceback(tmp_path: Path) -> None:
    """A worker that dies says why in the server log (SGLang's "Scheduler hit an exception: ...")
    before the main process reports the exit. Forced here with --device cuda and no GPU visible."""
    log = tmp_path / "crash.log"
    cmd = [sys.executable, "-m", "specwatch.refserver", "--model-path", "ref-tiny", "--device", "cuda",
           "--port", str(refharness.free_port())]
    env = refharness.server_env({"CUDA_VISIBLE_DEVICES": ""})
    with open(log, "wb") as out:
        rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=120, check=False).returncode
    text = log.read_text(errors="replace")
    assert rc == 1, text[-3000:]
    crash = text.index("Scheduler hit an exception: Traceback (most recent call last):")
    tb = text[crash:]
    assert 'File "' in tb and "in _init_device" in tb, tb[:3000]
    failed = re.search(r"worker TP0 failed during startup: (\w+)", text)
    assert failed and failed.start() > crash, text[-3000:]
    assert failed.group(1) in tb  # the exception the traceback ends with
