"""logscan: SGLang 0.5.23 Decode/Prefill/Capture lines, log windows, tail, parse-log output."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from specwatch.errors import UsageError
from specwatch.signals.logscan import (
    CaptureRecord,
    DecodeRecord,
    LogTail,
    LogWindow,
    PrefillRecord,
    parse_line,
    parse_lines,
    parse_log_main,
    tail,
)

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "sglang"


def test_speculative_decode_line_with_tp_prefix():
    rec = parse_line(
        "[2026-10-14 09:12:33 TP0] Decode batch, #running-req: 8, #token: 10240, token usage: 0.02, "
        "accept len: 3.41, accept rate: 0.80, cuda graph: True, gen throughput (token/s): 912.55, #queue-req: 0"
    )
    assert isinstance(rec, DecodeRecord)
    assert rec.ranks == {"TP": 0}
    assert (rec.running, rec.tokens, rec.usage) == (8, 10240, 0.02)
    assert (rec.accept_len, rec.accept_rate) == (3.41, 0.80)
    assert rec.graph is True
    assert rec.graph_label == "cuda graph"
    assert (rec.gen_tput, rec.queue) == (912.55, 0)
    assert rec.speculative


def test_non_speculative_cpu_line_from_real_server():
    rec = parse_line(
        "[2026-11-29 18:54:55] Decode batch, #running-req: 1, #token: 25, token usage: 0.01, cpu graph: False, "
        "gen throughput (token/s): 2.64, #queue-req: 0"
    )
    assert isinstance(rec, DecodeRecord)
    assert rec.accept_len is None
    assert rec.accept_rate is None
    assert not rec.speculative
    assert rec.graph is False
    assert rec.graph_label == "cpu graph"
    assert rec.ranks == {}


def test_ms_timestamp_dp_tp_iter_and_hybrid_pool():
    rec = parse_line(
        "[2026-10-14 09:12:35.250 DP1 TP0] Decode batch [4821], #running-req: 56, #full token: 40960, "
        "full token usage: 0.31, #swa token: 8192, swa token usage: 0.06, accept len: 2.50, accept rate: 0.50, "
        "cuda graph: False, gen throughput (token/s): 2210.10, #queue-req: 3"
    )
    assert isinstance(rec, DecodeRecord)
    assert rec.ts == "2026-10-14 09:12:35.250"
    assert rec.time.microsecond == 250000
    assert rec.ranks == {"DP": 1, "TP": 0}
    assert rec.iter == 4821
    assert rec.tokens is None
    assert rec.usage is None
    assert rec.pool == {"full_tokens": 40960, "full_usage": 0.31, "swa_tokens": 8192, "swa_usage": 0.06}
    assert rec.accept_len == 2.5
    assert rec.graph is False
    assert rec.queue == 3


def test_mfu_suffix():
    rec = parse_line(
        "[2026-10-14 09:12:37 TP0] Decode batch, #running-req: 8, #token: 10304, token usage: 0.02, "
        "accept len: 2.72, accept rate: 0.57, cuda graph: True, gen throughput (token/s): 730.41, #queue-req: 0, "
        "est. decode TFLOPS/s (per GPU): 1.50, est. read BW (GB/s per GPU): 800.12, est. write BW (GB/s per GPU): 3.40"
    )
    assert isinstance(rec, DecodeRecord)
    assert rec.mfu == {"tflops": 1.5, "read_gbps": 800.12, "write_gbps": 3.4}
    assert rec.queue == 0
    assert rec.gen_tput == 730.41


@pytest.mark.parametrize("label", ["cuda graph", "cpu graph", "npu graph", "musa graph"])
def test_graph_labels(label):
    rec = parse_line(
        f"[2026-10-14 09:12:38 TP0] Decode batch, #running-req: 4, #token: 512, token usage: 0.00, {label}: True, "
        "gen throughput (token/s): 99.00, #queue-req: 0"
    )
    assert isinstance(rec, DecodeRecord)
    assert rec.graph_label == label
    assert rec.graph


def test_prefill_line():
    rec = parse_line(
        "[2026-10-14 09:12:30 TP0] Prefill batch, #new-seq: 4, #new-token: 4096, #cached-token: 128, "
        "token usage: 0.01, #running-req: 60, #queue-req: 0, #pending-token: 0, cuda graph: False, "
        "input throughput (token/s): 15321.44"
    )
    assert isinstance(rec, PrefillRecord)
    assert (rec.new_seq, rec.new_tok, rec.cached, rec.running, rec.queue, rec.pending) == (4, 4096, 128, 60, 0, 0)
    assert rec.usage == 0.01
    assert rec.graph is False
    assert rec.in_tput == 15321.44


def test_capture_lines():
    begin = parse_line(
        "[2026-10-14 09:10:02 TP0] Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=16, "
        "avail mem=52.31 GB"
    )
    end = parse_line(
        "[2026-10-14 09:10:15 TP1] Capture target verify CUDA graph end. bs=[1, 2, 3, 4, 48], elapsed=12.84 s, "
        "mem usage=1.05 GB, avail mem=51.26 GB."
    )
    draft = parse_line(
        "[2026-10-14 09:10:15 TP0] Capture draft decode CUDA graph begin. backend=full, num_tokens_per_req=4, "
        "bs=[1, 2, 8], avail mem=51.26 GB"
    )
    assert isinstance(begin, CaptureRecord)
    assert isinstance(end, CaptureRecord)
    assert isinstance(draft, CaptureRecord)
    assert (begin.role, begin.kind, begin.event, begin.backend, begin.num_tokens_per_req) == (
        "target", "verify", "begin", "full", 16)
    assert begin.bs is None
    assert begin.avail_mem_gb == 52.31
    assert end.name == "target verify"
    assert end.event == "end"
    assert end.bs == [1, 2, 3, 4, 48]
    assert end.elapsed_s == 12.84
    assert end.mem_usage_gb == 1.05
    assert end.ranks == {"TP": 1}
    assert draft.role == "draft"
    assert draft.kind == "decode"
    assert draft.bs == [1, 2, 8]


@pytest.mark.parametrize(
    "line",
    [
        "[2026-11-29 18:54:53] INFO:     127.0.0.1:53006 - \"GET /health HTTP/1.1\" 503 Service Unavailable",
        "[2026-11-29 18:54:53] The server is fired up and ready to roll!",
        "[2026-10-14 09:12:39 TP0] Capture cuda graph failed: CUDA out of memory.",
        "Decode batch, #running-req: 1, #token: 25, token usage: 0.01, cuda graph: False, "
        "gen throughput (token/s): 2.64, #queue-req: 0",  # no prefix: not a log line
        "",
    ],
)
def test_unrelated_lines_are_ignored(line):
    assert parse_line(line) is None


def test_sample_fixture_counts_and_carriage_returns():
    recs = parse_lines((FIX / "log-0.5.23-samples.log").read_text(encoding="utf-8").splitlines(keepends=True))
    kinds = [type(r).__name__ for r in recs]
    assert kinds.count("CaptureRecord") == 10  # includes the one after a tqdm '\r'
    assert kinds.count("PrefillRecord") == 3
    assert kinds.count("DecodeRecord") == 10
    spec = [r.accept_len for r in recs if isinstance(r, DecodeRecord) and r.speculative]
    assert spec == [3.41, 1.92, 2.5, 2.72, 1.0]


def test_real_sglang_log():
    recs = parse_lines((FIX / "real" / "log").read_text(encoding="utf-8").splitlines())
    dec = [r for r in recs if isinstance(r, DecodeRecord)]
    pre = [r for r in recs if isinstance(r, PrefillRecord)]
    assert len(dec) == 23
    assert len(pre) == 4
    assert all(r.graph_label == "cpu graph" and not r.graph and not r.speculative for r in dec)
    assert dec[-1].gen_tput == 472.18


def test_log_window_sees_only_new_complete_lines(tmp_path):
    log = tmp_path / "server.log"
    old = "[2026-10-14 09:12:33] Decode batch, #running-req: 1, #token: 1, token usage: 0.00, cuda graph: True, " \
          "gen throughput (token/s): 1.00, #queue-req: 0\n"
    log.write_text(old)
    win = LogWindow(log)
    new = old.replace("#running-req: 1", "#running-req: 7")
    with open(log, "a") as fh:
        fh.write(new)
        fh.write(new[:30])  # half-written line
    lt = LogTail(log)
    lines, off = lt.read_since(win.start_offset)
    assert len(lines) == 1
    assert off == len(old) + len(new)
    assert [r.running for r in win.decode_records()] == [7]
    win.close()
    with open(log, "a") as fh:
        fh.write(new[30:] + new)
    assert [r.running for r in win.decode_records()] == [7]  # closed: later lines are outside


def test_log_tail_restarts_after_truncation(tmp_path):
    log = tmp_path / "x.log"
    log.write_text("a\nb\nc\n")
    lt = LogTail(log)
    off = lt.mark()
    log.write_text("d\n")
    lines, new = lt.read_since(off)
    assert lines == ["d"]
    assert new == 2


def test_tail(tmp_path):
    p = tmp_path / "t.log"
    p.write_text("".join(f"line {i}\n" for i in range(100)))
    assert tail(p, 3) == "line 97\nline 98\nline 99"
    assert tail(tmp_path / "absent.log", 3) == ""


def test_parse_log_main_prints_json_lines():
    out = io.StringIO()
    assert parse_log_main(FIX / "log-0.5.23-samples.log", out) == 0
    objs = [json.loads(x) for x in out.getvalue().splitlines()]
    assert {o["type"] for o in objs} == {"decode", "prefill", "capture"}
    assert len(objs) == 23
    first_spec = next(o for o in objs if o["type"] == "decode" and o["accept_len"] is not None)
    assert first_spec["accept_len"] == 3.41
    assert first_spec["ranks"] == {"TP": 0}


def test_parse_log_main_missing_file(tmp_path):
    with pytest.raises(UsageError, match="cannot read"):
        parse_log_main(tmp_path / "nope.log", io.StringIO())
