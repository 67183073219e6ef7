"""Speculation's time to first token against plain decoding's, judged on the relative gate's rounds.

The draft prefills the prompt too, so a speculative server may take longer to its first token; the gate
allows ``[gates] spec_ttft_margin`` (25 % by default) and judges TTFT p50 and p99 per round (each a fresh boot
of both servers) with :func:`specwatch.judge.tuning.beats` (``at_most``), as the throughput gate judges decode
tok/s. Rounds that cannot decide skip, saying which percentile and what would decide it; never a silent pass.

Recorded data: real SGLang 0.5.16 on one H200 (``docs/validation/data/``), single-stream, one request per run
(so each run's ``ttft_ms`` is one request's TTFT):
- ``2026-12-04-sglang-8b-perf-x1``: EAGLE-3 (``sgl8b-eagle3``) and plain (``sgl8b-plain``) at Llama-3.1-8B's
  shape, one boot each, 12 requests each;
- ``2026-12-03-sglang-perf-x1``, ``-x1-2``, ``-x1-3``: the small model's ``sgl-eagle3`` and ``sgl-plain`` with the
  same flags in three sessions, each a fresh boot of both: three real rounds.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from specwatch.errors import UsageError
from specwatch.judge import tuning
from specwatch.judge.verdict import Status
from specwatch.load.client import Generation
from specwatch.load.measure import Measurement, RunSample
from specwatch.load.workload import Workload
from specwatch.profiles.loading import parse_profiles
from specwatch.run import gatekeeper, gates
from specwatch.run.evidence import Pair, Policy

DATA = Path(__file__).resolve().parents[2] / "docs" / "validation" / "data"
POLICY = Policy(alpha=0.01)


def _recorded(session: str, key: str) -> list[float]:
    results = json.loads((DATA / session / "results-latest.json").read_text())["results"]
    return [float(x) for x in next(r["samples"] for r in results if r["key"] == key)]


EIGHT_B = "2026-12-04-sglang-8b-perf-x1/sgl8b-perf"
SPEC_8B = _recorded(EIGHT_B, "sgl8b-eagle3/single-stream/ttft_ms")
PLAIN_8B = _recorded(EIGHT_B, "sgl8b-plain/single-stream/ttft_ms")
SMALL = [f"2026-12-03-sglang-perf-x1{s}/sgl-perf" for s in ("", "-2", "-3")]


def _measurement(profile: str, boots: list[list[float]]) -> Measurement:
    """Runs of one request each whose TTFT (ms) is given, boot by boot (the requests themselves not kept)."""
    runs = [RunSample(output_tok_s=300.0, decode_tok_s=300.0, ttft_ms=x, mean_itl_ms=3.0, e2e_s=1.0,
                      completion_tokens=256, client_overhead=0.001) for boot in boots for x in boot]
    return Measurement(profile=profile, workload=Workload("single-stream", runs=len(runs)), runs=runs,
                       metrics_delta=None, metrics_after=None, server_info_before={}, server_info_after={},
                       log_records=[], wall_s=1.0, boots=tuple(len(b) for b in boots))


def _judge(spec: list[list[float]], plain: list[list[float]], margin: float = 0.25, **pair: Any) -> Any:
    return gates.speculation_ttft(Pair(_measurement("eagle3", spec), _measurement("plain", plain),
                                       ("eagle3", "plain"), **pair), POLICY, margin=margin)


#: boot-to-boot luck of four rounds, one factor per boot: the 8B session's requests replayed as fresh boots
LUCK_SPEC, LUCK_PLAIN = (1.00, 1.03, 0.98, 1.01), (1.01, 0.99, 1.02, 1.00)


def _rounds(requests: list[float], luck: tuple[float, ...], scale: float = 1.0) -> list[list[float]]:
    return [[x * scale * f for x in requests] for f in luck]


# -- the rule: beats, at most ----------------------------------------------------------------------------


def test_at_most_mirrors_beats_on_the_rounds() -> None:
    ok = tuning.beats([1.05, 1.08, 1.06], margin=0.25, alpha=0.01, names=("spec", "plain"), at_most=True)
    assert ok.verdict == "pass" and ok.high < 1.25 and "spec ≤ plain×1.25" in ok.sentence, ok.message
    bad = tuning.beats([1.40, 1.42, 1.39], margin=0.25, alpha=0.01, names=("spec", "plain"), at_most=True)
    assert bad.verdict == "fail" and bad.low > 1.25 and "that it exceeds it" in bad.sentence, bad.message
    assert bad.p is not None and bad.p < 0.01
    wobbly = tuning.beats([0.9, 1.8], margin=0.25, alpha=0.01, at_most=True)
    assert wobbly.verdict == tuning.UNSURE and "more rounds would decide" in wobbly.sentence
    # the same rounds, asked the other way, give the other verdicts
    assert tuning.beats([1.40, 1.42, 1.39], margin=0.25, alpha=0.01).verdict == "pass"
    assert tuning.beats([1.05, 1.08, 1.06], margin=0.25, alpha=0.01).verdict == "fail"


def test_at_most_in_one_round_is_judged_against_the_first_round_noise() -> None:
    plain = [20.0, 20.2, 19.8, 20.1, 19.9, 20.0]
    far = tuning.beats([2.0], margin=0.25, alpha=0.01, runs=([40.0, 40.4, 39.6, 40.2, 39.8, 40.0], plain),
                       at_most=True)
    assert far.verdict == "fail" and "first-round boot-to-boot term" in far.design, far.message
    near = tuning.beats([0.8], margin=0.25, alpha=0.01, runs=([16.0, 16.2, 15.8, 16.1, 15.9, 16.0], plain),
                        at_most=True)
    assert near.verdict == "pass", near.message
    assert tuning.beats([1.3], margin=0.25, alpha=0.01, at_most=True).verdict == tuning.NOT_JUDGED


# -- the measurement keeps each request's TTFT, boot by boot -----------------------------------------


def test_ttft_by_boot_reads_every_request_of_every_run() -> None:
    def run(*ttfts_s: float) -> RunSample:
        gens = [Generation([1, 2], "ab", {}, e2e_s=1.0, ttft_s=t) for t in ttfts_s]
        return RunSample(output_tok_s=1.0, decode_tok_s=1.0, ttft_ms=1000 * statistics.median(ttfts_s),
                         mean_itl_ms=1.0, e2e_s=1.0, completion_tokens=4, client_overhead=0.0, generations=gens)

    m = Measurement("s", Workload("concurrency-2", runs=3), [run(0.010, 0.030), run(0.020, 0.040), run(0.050, 0.070)],
                    None, None, {}, {}, [], 1.0, boots=(2, 1))
    got = m.ttft_by_boot()
    assert [[round(x, 6) for x in b] for b in got] == [[10.0, 30.0, 20.0, 40.0], [50.0, 70.0]]
    # a run read back without its requests counts once, as its ttft_ms (the single-stream results: one request)
    assert _measurement("s", [[1.0, 2.0], [3.0]]).ttft_by_boot() == [[1.0, 2.0], [3.0]]


# -- the gate on recorded numbers ---------------------------------------------------------------------


def test_healthy_speculation_passes_on_the_8b_sessions_requests_over_four_rounds() -> None:
    """The real 8B session's request TTFTs (EAGLE-3 16.2 ms, plain 19.4 ms at p50), replayed as four rounds."""
    verdict = _judge(_rounds(SPEC_8B, LUCK_SPEC), _rounds(PLAIN_8B, LUCK_PLAIN))
    assert verdict.status is Status.PASS, verdict.message
    assert [r.verdict for r in verdict.rows] == ["pass", "pass"]
    assert "TTFT p50: eagle3 16.4 ms, plain 19.6 ms" in verdict.message  # the four rounds' requests pooled
    assert "0.785, 0.825, 0.762, 0.801" in verdict.message  # each round's p50 ratio
    assert "over 4 round(s)" in verdict.message and "allowance +25%" in verdict.message


def test_speculation_that_inflates_ttft_by_40_percent_fails_naming_both_percentiles() -> None:
    """The plain server's real 8B request TTFTs, and a speculative server 40 % slower to its first token
    (what vLLM PR 23041 removed: the first token waited for the draft's prefill)."""
    verdict = _judge(_rounds(PLAIN_8B, LUCK_SPEC, scale=1.4), _rounds(PLAIN_8B, LUCK_PLAIN))
    assert verdict.status is Status.FAIL, verdict.message
    msg = verdict.message
    assert msg.startswith("speculation inflates the time to first token beyond the allowance")
    spec_p50, plain_p50 = (statistics.median(x for b in _rounds(PLAIN_8B, luck, k) for x in b)
                           for luck, k in ((LUCK_SPEC, 1.4), (LUCK_PLAIN, 1.0)))
    assert f"TTFT p50: eagle3 {spec_p50:.1f} ms, plain {plain_p50:.1f} ms" in msg, msg
    assert "TTFT p99: eagle3 " in msg and "allowance +25%, [gates] spec_ttft_margin" in msg
    assert "fail: not eagle3 TTFT p50 ≤ plain×1.25" in msg and "fail: not eagle3 TTFT p99 ≤ plain×1.25" in msg
    assert [r.verdict for r in verdict.rows] == ["fail", "fail"]
    # a larger allowance lets the same rounds through
    assert _judge(_rounds(PLAIN_8B, LUCK_SPEC, scale=1.4), _rounds(PLAIN_8B, LUCK_PLAIN), margin=0.6).passed


def test_one_real_8b_round_passes_p50_but_skips_for_p99_never_a_silent_pass() -> None:
    verdict = _judge([SPEC_8B], [PLAIN_8B])
    assert verdict.status is Status.SKIP, verdict.message
    assert verdict.reason.startswith("TTFT p99 not decided by these rounds"), verdict.reason
    p50, p99 = verdict.rows
    assert p50.verdict == "pass" and "in one round" in p50.message
    assert p99.verdict == tuning.NOT_JUDGED and "a p99 is judged on its rounds alone" in p99.message
    assert "record-rounds" not in p99.message  # no recorded spread stands for a p99: advice that cannot help


def test_three_real_sessions_of_the_small_model_are_unsure() -> None:
    """Real per-session ratios 0.945, 1.411, 1.168 (one boot of each per session): a boot-to-boot spread of
    20 % that three rounds cannot tell from a 25 % allowance either way."""
    spec = [_recorded(s, "sgl-eagle3/single-stream/ttft_ms") for s in SMALL]
    plain = [_recorded(s, "sgl-plain/single-stream/ttft_ms") for s in SMALL]
    verdict = _judge(spec, plain)
    assert verdict.status is Status.SKIP, verdict.message
    assert verdict.reason.startswith("TTFT p50 and TTFT p99 not decided by these rounds"), verdict.reason
    assert "0.945, 1.411, 1.168" in verdict.message and "more rounds would decide" in verdict.message
    assert all(r.verdict == tuning.UNSURE for r in verdict.rows)


def test_the_rows_agree_with_the_gate() -> None:
    spec, plain = _rounds(PLAIN_8B, LUCK_SPEC, scale=1.4), _rounds(PLAIN_8B, LUCK_PLAIN)
    verdict = _judge(spec, plain)
    p50, p99 = verdict.rows
    assert p50.key == "eagle3 vs plain (single-stream, TTFT p50)" and p99.key.endswith("TTFT p99)")
    ratios = [statistics.median(a) / statistics.median(b) for a, b in zip(spec, plain, strict=True)]
    assert math.isclose(p50.change + 1, math.exp(statistics.fmean(math.log(r) for r in ratios)), rel_tol=1e-9)
    for row in verdict.rows:
        assert row.unit == "ms" and not row.higher_is_better and row.n == 4 * len(PLAIN_8B)
        assert row.change > 0.25 and row.extra["rounds"] == 4
    assert math.isclose(p50.median, statistics.median(x for b in spec for x in b))
    assert math.isclose(p99.baseline_median, float(np.percentile([x for b in plain for x in b], 99)))
    assert p99.ci_low is None and p50.ci_low is not None  # a percentile's row shows no median interval


# -- the gatekeeper and the profile's setting ----------------------------------------------------------


def _session(tmp_path: Path, ttft: dict[str, list[list[float]]], gate_table: dict[str, Any] | None = None,
             servers: list[dict[str, Any]] | None = None) -> SimpleNamespace:
    servers = servers or [{"name": "plain"}, {"name": "eagle3", "speculative": {"algorithm": "EAGLE3"}}]
    profiles = parse_profiles({"server": servers, "fixtures": {"baseline": "plain", "spec": "eagle3"},
                               "gates": gate_table or {}}, "p.toml")
    config = SimpleNamespace(alpha=0.01, baseline_dir=str(tmp_path / "baselines"), path=Path)
    session = SimpleNamespace(profiles=profiles, config=config, verdict_rows=[], machine_class=lambda: "ci-cpu",
                              findings_for=lambda name: [],
                              fingerprint=lambda: {"engine": "reference", "engine_version": "0.0-test"})
    session.measure_pair = lambda a, b, workload: (_measurement(a, ttft[a]), _measurement(b, ttft[b]))
    session.engine_of = lambda server: "reference"
    return session


def test_the_gatekeeper_judges_at_the_profiles_margin_and_records_the_rows(tmp_path: Path) -> None:
    ttft = {"eagle3": _rounds(PLAIN_8B, LUCK_SPEC, scale=1.4), "plain": _rounds(PLAIN_8B, LUCK_PLAIN)}
    session = _session(tmp_path, ttft)
    verdict = gatekeeper.speculation_ttft(session)
    assert verdict.failed and verdict.message.endswith("engine: reference 0.0-test"), verdict.message
    assert [r.key for r in session.verdict_rows] == [r.key for r in verdict.rows]
    assert gatekeeper.speculation_ttft(_session(tmp_path, ttft, {"spec_ttft_margin": 0.6})).passed
    alone = _session(tmp_path, ttft, servers=[{"name": "plain"}, {"name": "eagle3"}])
    alone.profiles = parse_profiles({"server": [{"name": "plain"}]}, "p.toml")
    assert gatekeeper.speculation_ttft(alone).skipped


def test_the_p50_pools_the_round_spread_of_the_ttft_key_never_decode_throughputs(tmp_path: Path) -> None:
    folder = tmp_path / "baselines" / "ci-cpu"
    folder.mkdir(parents=True)
    runs = [{"metric": "ttft_ms", "key": "eagle3/single-stream/ttft_ms", "ratios": [1.0, 1.02, 0.99, 1.01],
             "recorded": "", "label": f"ttft {i}"} for i in range(3)]
    runs += [{"metric": "decode_tok_s", "key": "eagle3/single-stream/decode_tok_s", "ratios": [1.0, 1.6, 0.6],
              "recorded": "", "label": "decode"}]
    (folder / "round-spread.json").write_text(json.dumps({"version": 1, "machine_class": "ci-cpu", "runs": runs}))
    verdict = gatekeeper.speculation_ttft(_session(tmp_path, {"eagle3": [SPEC_8B], "plain": [PLAIN_8B]}))
    p50, p99 = verdict.rows
    assert "3 earlier A/B run(s) of this key on ci-cpu" in p50.extra["round_design"], p50.extra
    assert p50.verdict == "pass" and p99.verdict == tuning.NOT_JUDGED  # the p99 borrows no median's spread
    assert verdict.skipped


def test_the_margin_is_a_profile_setting_with_a_default() -> None:
    assert parse_profiles({"server": [{"name": "a"}]}, "p.toml").gates.spec_ttft_margin == 0.25
    got = parse_profiles({"server": [{"name": "a"}], "gates": {"spec_ttft_margin": 0.1}}, "p.toml")
    assert got.gates.spec_ttft_margin == pytest.approx(0.1)
    for bad in (-0.1, "x", True, math.inf):
        with pytest.raises(UsageError, match=r"gates\.spec_ttft_margin"):
            parse_profiles({"server": [{"name": "a"}], "gates": {"spec_ttft_margin": bad}}, "p.toml")
