"""The recorded SGLang 0.5.23 fixtures parse and are mutually consistent."""

from __future__ import annotations

import json
from pathlib import Path

from specwatch.judge.speculative import from_request_meta
from specwatch.signals.logscan import CaptureRecord, parse_lines
from specwatch.signals.promtext import parse_text

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "sglang"


def test_real_captures_are_present_and_parse():
    real = FIX / "real"
    info = json.loads((real / "server_info.json").read_text())
    assert info["version"] == "0.5.23"
    assert info["speculative_algorithm"] is None
    assert "avg_spec_accept_length" not in info["internal_states"][0]
    for name in ("generate.json", "generate_ids.json"):
        meta = json.loads((real / name).read_text())["meta_info"]
        assert meta["completion_tokens"] == meta["finish_reason"]["length"]
        assert "spec_verify_ct" not in meta
    assert json.loads((real / "badjson.txt").read_text())["code"] == 400
    assert len(json.loads((real / "proctree.json").read_text())) == 5


def test_speculative_server_info_is_consistent_with_generate_and_log():
    info = json.loads((FIX / "server_info-spec.json").read_text())
    st = info["internal_states"][0]
    assert (info["speculative_algorithm"], info["speculative_num_steps"], info["speculative_eagle_topk"],
            info["speculative_num_draft_tokens"]) == ("EAGLE3", 3, 1, 4)
    assert st["memory_usage"]["graph"]["target_verify"] > 0
    resps = json.loads((FIX / "generate-spec.json").read_text())
    rows = sum(r["meta_info"]["spec_verify_ct"] for r in resps)
    acc = sum(from_request_meta(r["meta_info"], 3).value * r["meta_info"]["spec_verify_ct"] for r in resps)
    assert abs(st["avg_spec_accept_length"] - acc / rows) < 1e-9
    caps = [r for r in parse_lines((FIX / "log-0.5.23-samples.log").read_text().splitlines())
            if isinstance(r, CaptureRecord) and r.name == "target verify" and r.event == "end"]
    assert caps
    assert all(c.bs == st["decode_cuda_graph_bs"] for c in caps)


def test_speculative_metrics_match_generate_responses():
    expo = parse_text((FIX / "metrics-spec.txt").read_text())
    resps = json.loads((FIX / "generate-spec.json").read_text())
    assert expo.value("sglang:generation_tokens_total") == sum(r["meta_info"]["completion_tokens"] for r in resps)
    assert expo.value("sglang:spec_verify_calls_total") == sum(r["meta_info"]["spec_verify_ct"] for r in resps)
    passes = expo.value("sglang:cuda_graph_passes_total", mode={"decode_cuda_graph", "decode_none"})
    assert passes == expo.value("sglang:spec_verify_calls_total")


def test_flag_list():
    lines = (FIX / "flags-0.5.23.txt").read_text().splitlines()
    flags = [x for x in lines if x and not x.startswith("#")]
    assert flags == sorted(flags)
    assert len(flags) == len(set(flags)) > 500
    have = set(flags)
    for flag in ("--tp-size", "--tensor-parallel-size", "--cuda-graph-max-bs-decode", "--cuda-graph-bs-decode",
                 "--disable-cuda-graph", "--speculative-algorithm", "--speculative-draft-model-path",
                 "--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens",
                 "--enable-metrics", "--decode-log-interval", "--config"):
        assert flag in have, flag
    assert "--cuda-graph-max-bs" not in have
    assert "--cuda-graph-bs" not in have
