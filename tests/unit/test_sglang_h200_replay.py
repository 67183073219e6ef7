"""Real SGLang 0.5.16 with EAGLE-3 on an H200, replayed on the CPU: the server logs of the harness's
sglang-x1 run (docs/validation/data/2026-12-03-sglang-x1) read by specwatch's readers, as the live checks read
them. The draft was built to an accept length of 2.00 (docs/validation/sglang_models.py), so every reader must
say 2.00; the plain server and the healthy EAGLE-3 server ran every decode as a CUDA graph, and the server booted
with --disable-cuda-graph ran none.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specwatch.checks import graphcheck
from specwatch.judge import speculative
from specwatch.signals.logscan import LogWindow

RUN = Path(__file__).resolve().parents[2] / "docs" / "validation" / "data" / "2026-12-03-sglang-x1"


def _log(lane: str, server: str) -> Path:
    found = sorted(RUN.glob(f"{lane}/servers/*/{server}/server.log"))
    assert found, f"no {server} log under {RUN}/{lane}"
    return found[0]


def test_the_verify_capture_sizes_come_from_the_begin_line() -> None:
    """0.5.16 prints bs=[...] on the verify capture's begin line only; the end line has the elapsed time."""
    captures = LogWindow(_log("sgl-perf", "sgl-eagle3-1"), start=0).capture_records()
    verify = [c for c in captures if c.role == "target" and c.kind == "verify"]
    assert {c.event for c in verify} == {"begin", "end"}
    assert next(c for c in verify if c.event == "end").bs in (None, [], ())
    assert graphcheck.captured_verify_bs({}, captures) == [1, 2, 3, 4, 5, 6, 7, 8]


def test_every_decode_line_of_the_healthy_servers_ran_a_cuda_graph() -> None:
    for server in ("sgl-plain-1", "sgl-eagle3-1", "sgl-eagle3-untuned-1"):
        records = LogWindow(_log("sgl-perf", server), start=0).decode_records()
        assert len(records) > 50, server
        assert all(r.graph and r.graph_label == "cuda graph" for r in records), server
        assert all(r.speculative for r in records) == ("eagle3" in server), server


@pytest.mark.parametrize("server", ["sgl-eagle3-1", "sgl-eagle3-untuned-1"])
def test_the_decode_lines_read_the_built_accept_length(server: str) -> None:
    records = LogWindow(_log("sgl-perf", server), start=0).decode_records()
    assert {r.accept_len for r in records} == {2.0}
    assert {r.accept_rate for r in records} == {0.5}
    estimate = speculative.from_windows([(r.accept_len, r.running) for r in records])
    assert estimate is not None and estimate.value == pytest.approx(2.0)
    # the case study's misreading: 1.00 "extra tokens per cycle" is this same 2.00
    assert speculative.from_extra_per_cycle(1.0) == pytest.approx(2.0)


def test_graphs_off_shows_on_every_decode_line_and_names_the_flag() -> None:
    log = _log("sgl-correctness", "sgl-eagle3-eager-verify-1")
    records = LogWindow(log, start=0).decode_records()
    assert records and not any(r.graph for r in records)
    captures = LogWindow(log, start=0).capture_records()
    assert not [c for c in captures if c.kind == "verify"]  # nothing captured
    report = graphcheck.check_verify_graphs(
        counters={"decode_cuda_graph": 0.0, "decode_none": float(len(records) * 10)}, decode_records=records,
        captures=captures, server_info={"disable_cuda_graph": True}, batch_sizes=[r.running for r in records])
    assert report.ok is False and report.decided_by == "sglang:cuda_graph_passes_total"
    assert report.cause == "--disable-cuda-graph is set: no verify graph is captured"
    assert f"{len(records)} of {len(records)} Decode batch lines say 'cuda graph: False'" in report.signals["log"]


def test_the_healthy_verify_is_judged_graphed_from_its_own_log() -> None:
    log = _log("sgl-perf", "sgl-eagle3-1")
    records = LogWindow(log, start=0).decode_records()
    report = graphcheck.check_verify_graphs(
        counters=None, decode_records=records, captures=LogWindow(log, start=0).capture_records(), server_info={},
        batch_sizes=[r.running for r in records])
    assert report.ok is True and report.decided_by == "Decode batch lines"
    assert report.signals["capture"] == "verify graphs captured for bs=[1, 2, 3, 4, 5, 6, 7, 8]"


CAPTURE = RUN.parent / "2026-12-03-sglang-faults-x1" / "capture" / "capture"
PROFILE = RUN.parents[3] / "fixtures" / "profiles" / "sglang-0.5.16-h200.toml"


def test_inspect_of_the_live_h200_capture_passes_every_check(capsys: pytest.CaptureFixture[str]) -> None:
    """`specwatch capture` of the live EAGLE-3 server on the H200, judged offline as a user would."""
    from specwatch.cli import main

    assert main(["inspect", str(CAPTURE), "--profile", str(PROFILE), "--server", "sgl-eagle3", "-v"]) == 0
    out = capsys.readouterr().out
    assert "sglang 0.5.16 EAGLE3" in out
    assert "environment:   pass" in out and "verify graphs: pass" in out and "accept length: pass" in out, out
    # setproctitle overwrote the front of two workers' /proc environ: said, and never read as "missing"
    assert out.count("partly overwritten") >= 2 and "missing" not in out, out
    assert "verify graphs captured for bs=[1, 2, 3, 4, 5, 6, 7, 8]" in out or "replayed" in out, out
