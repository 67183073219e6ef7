"""Load levels judged: bench_serving's metrics of a run, the crossover, the sweep gate, its table and
its results."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from specwatch.judge.levels import LEVEL_METRICS, RequestTiming, crossover, crossover_ok, percentiles, serving_metrics
from specwatch.load.measure import Measurement, RunSample
from specwatch.load.workload import resolve
from specwatch.profiles.loading import parse_profiles
from specwatch.run import gatekeeper
from specwatch.run.record import RunRecord
from specwatch.run.summary import annotate_results, results_of, summary_lines, table_rows


def test_metric_names_are_bench_serving_s() -> None:
    for name in ("output_throughput", "request_throughput", "median_ttft_ms", "p90_ttft_ms", "p99_ttft_ms",
                 "median_itl_ms", "p99_itl_ms", "median_tpot_ms", "p99_tpot_ms", "median_e2e_latency_ms",
                 "p90_e2e_latency_ms", "p99_e2e_latency_ms", "accept_length"):
        assert name in LEVEL_METRICS
    assert LEVEL_METRICS["p99_ttft_ms"] == ("ms", False) and LEVEL_METRICS["output_throughput"] == ("tok/s", True)


def test_percentiles_are_numpy_s_linear_ones() -> None:
    xs = [0.010, 0.020, 0.030, 0.040, 1.000]
    p = percentiles(xs, scale=1000)
    assert p["median"] == pytest.approx(30.0)
    assert p["p90"] == pytest.approx(float(np.percentile(xs, 90)) * 1000) == pytest.approx(616.0)
    assert p["p99"] == pytest.approx(961.6)
    assert all(math.isnan(v) for v in percentiles([]).values())


def test_serving_metrics_of_a_run() -> None:
    reqs = [RequestTiming(ttft_s=0.1, e2e_s=1.1, output_tokens=11, itl_s=[0.1] * 10),
            RequestTiming(ttft_s=0.3, e2e_s=2.3, output_tokens=21, itl_s=[0.05, 0.15] * 10),
            RequestTiming(ttft_s=0.2, e2e_s=0.2, output_tokens=1)]  # one token: no TPOT, no ITL
    m = serving_metrics(reqs, duration_s=2.5)
    assert m["output_throughput"] == pytest.approx(33 / 2.5) and m["request_throughput"] == pytest.approx(3 / 2.5)
    assert m["median_ttft_ms"] == pytest.approx(200.0) and m["p99_ttft_ms"] == pytest.approx(298.0)
    assert m["median_tpot_ms"] == pytest.approx(100.0)  # (1.1-0.1)/10 and (2.3-0.3)/20: both 100 ms
    assert m["median_itl_ms"] == pytest.approx(100.0) and m["p99_itl_ms"] == pytest.approx(150.0)
    assert m["p90_e2e_latency_ms"] == pytest.approx(float(np.percentile([1100, 2300, 200], 90)))
    assert set(m) == set(LEVEL_METRICS) - {"accept_length"}
    with pytest.raises(ValueError):
        serving_metrics([], 1.0)


def test_crossover_is_the_first_level_that_does_not_pay() -> None:
    found = crossover([(16, "no_effect"), (1, "pass"), (4, "pass"), (64, "fail")])
    assert (found.level, found.verdict, found.levels) == (16.0, "no_effect", (1.0, 4.0, 16.0, 64.0))
    assert "stops paying at 16" in found.message
    assert crossover([(1, "pass"), (4, "inconclusive")]).level == 4  # a speedup not shown does not pay
    first = crossover([(16, "no_effect"), (48, "no_effect")])  # the 8B sweep with a varying draft, 2026-12-06
    assert first.level == 16 and first.message.startswith(
        "speculation is not shown to pay at the lowest level measured, 16 (no measurable effect")
    assert "does not pay" not in first.message  # 1.12x at p = 0.075: a gain not shown, not a loss shown
    assert "does not pay at the lowest level measured, 1 (fail)" in crossover([(1, "fail")]).message
    none = crossover([(1, "pass"), (4, "pass")])
    assert none.level is None and "no crossover up to 4" in none.message
    assert crossover([(1, "fail"), (4, "pass")]).level == 1
    assert crossover_ok(found, 16) and not crossover_ok(found, 32) and crossover_ok(none, 1000)
    with pytest.raises(ValueError, match="levels repeat"):
        crossover([(4, "pass"), (4, "fail")])


def _run(tok_s: float, ttft_ms: float, accept: float | None = None) -> RunSample:
    serving = {m: ttft_ms for m in LEVEL_METRICS if m.endswith("_ms")}
    serving |= {"output_throughput": tok_s, "request_throughput": tok_s / 16}
    if accept is not None:
        serving["accept_length"] = accept
    return RunSample(output_tok_s=tok_s, decode_tok_s=tok_s, ttft_ms=ttft_ms, mean_itl_ms=1.0, e2e_s=1.0,
                     completion_tokens=16, client_overhead=0.001, serving=serving)


def _measurement(profile: str, level: str, table: dict[str, Any], tok_s: list[float], ttft_ms: float,
                 accept: float | None = None) -> Measurement:
    return Measurement(profile=profile, workload=resolve(level, table), runs=[_run(x, ttft_ms, accept) for x in tok_s],
                       metrics_delta=None, metrics_after=None, server_info_before={}, server_info_after={},
                       log_records=[], wall_s=1.0)


PROFILES = {"server": [{"name": "base", "engine": "reference"},
                       {"name": "spec", "engine": "reference", "speculative": {"algorithm": "EAGLE3"}}],
            "workload": {"concurrency": [1, 4, 16], "output_len": 16}}
#: speculation pays at 1 and 4 (twice the baseline), not at 16 (the same)
SPEEDS = {"concurrency-1": (200.0, 100.0), "concurrency-4": (400.0, 200.0), "concurrency-16": (300.0, 300.0)}


def _session(gate_table: dict[str, Any]) -> SimpleNamespace:
    profiles = parse_profiles({**PROFILES, "gates": gate_table}, "sweep.toml")
    session = SimpleNamespace(profiles=profiles, config=SimpleNamespace(alpha=0.05, server_url=None),
                              measurements={},
                              verdict_rows=[], fingerprint=lambda: {"engine": "reference"})

    def measure(name: str, level: str) -> Measurement:
        spec_tok_s, base_tok_s = SPEEDS[level]
        tok_s = spec_tok_s if name == "spec" else base_tok_s
        session.measurements[(name, level)] = _measurement(
            name, level, profiles.workload, [tok_s * (1 + k / 100) for k in range(6)], ttft_ms=10.0 + tok_s / 100,
            accept=2.5 if name == "spec" else None)
        return session.measurements[(name, level)]

    session.measure = measure
    return session


def test_the_sweep_gate_judges_every_level_and_finds_the_crossover() -> None:
    session = _session({})
    verdict = gatekeeper.speculation_by_level(session)
    assert verdict.passed, verdict.message  # not gated: reported only
    level_rows = [r for r in verdict.rows if "sweep" in r.extra]
    assert [r.extra["sweep"]["verdict"] for r in level_rows] == ["pass", "pass", "no_effect"]
    assert level_rows[1].extra["sweep"]["speedup"] == pytest.approx(2.0)
    assert level_rows[0].extra["sweep"]["spec_metrics"]["p99_ttft_ms"] == pytest.approx(12.0)
    cross = verdict.rows[-1]
    assert cross.extra["crossover"]["level"] == 16 and cross.verdict == "crossover"
    assert "concurrency-16: no_effect" in verdict.message and "stops paying at 16" in verdict.message
    assert session.verdict_rows == verdict.rows  # recorded for the table and the results file


def test_an_interleaved_sweep_measures_each_level_as_a_pair() -> None:
    """gates.interleave_runs: each level's two servers are measured together (runs interleaved),
    baseline first, levels in order; the verdicts are the same as from separate measurements."""
    session = _session({"interleave_runs": True})
    pairs: list[tuple[str, str, str]] = []
    single = session.measure

    def measure_pair(first: str, second: str, workload: str) -> tuple[Measurement, Measurement]:
        pairs.append((first, second, workload))
        return single(first, workload), single(second, workload)

    session.measure_pair = measure_pair
    verdict = gatekeeper.speculation_by_level(session)
    assert pairs == [("base", "spec", level) for level in ("concurrency-1", "concurrency-4", "concurrency-16")]
    assert [r.extra["sweep"]["verdict"] for r in verdict.rows if "sweep" in r.extra] == ["pass", "pass", "no_effect"]


def test_the_crossover_gate_fails_below_its_minimum() -> None:
    assert gatekeeper.speculation_by_level(_session({"min_crossover_concurrency": 16})).passed
    SPEEDS["concurrency-16"] = (600.0, 300.0)
    try:
        never = gatekeeper.speculation_by_level(_session({"min_crossover_concurrency": 32}))
    finally:
        SPEEDS["concurrency-16"] = (300.0, 300.0)
    assert never.passed and never.rows[-1].median == math.inf and never.rows[-1].verdict == "pass"
    assert "no crossover up to 16" in never.message
    failed = gatekeeper.speculation_by_level(_session({"min_crossover_concurrency": 32}))
    assert failed.failed and "min_crossover_concurrency = 32: fail" in failed.message
    assert failed.rows[-1].verdict == "fail"


def test_without_levels_the_sweep_skips_saying_how_to_ask_for_one() -> None:
    session = _session({})
    session.profiles = parse_profiles({"server": PROFILES["server"]}, "plain.toml")
    verdict = gatekeeper.speculation_by_level(session)
    assert verdict.skipped and "add concurrency = [1, 4, 16, 64]" in verdict.message


def test_table_and_results_file_show_p99_metrics_and_per_level_verdicts() -> None:
    session = _session({"min_crossover_concurrency": 4})
    verdict = gatekeeper.speculation_by_level(session)
    record = RunRecord(results=results_of(session.measurements, {"machine_class": "x"}, None),
                       rows=list(verdict.rows))
    keys = {r.key for r in record.results.results}
    assert "spec/concurrency-16/p99_ttft_ms" in keys and "base/concurrency-1/p99_e2e_latency_ms" in keys
    assert "spec/concurrency-4/accept_length" in keys and "base/concurrency-4/accept_length" not in keys
    assert "spec/concurrency-4/output_tok_s" not in keys  # a level records bench_serving's names only
    annotate_results(record.results, table_rows(record))
    by_key = {r.key: r for r in record.results.results}
    assert by_key["spec/concurrency-4/p99_itl_ms"].extra["vs_baseline"]["verdict"] == "pass"
    assert by_key["spec/concurrency-16/output_throughput"].extra["vs_baseline"]["verdict"] == "no_effect"
    assert by_key["spec/concurrency-1/output_throughput"].extra["crossover"]["level"] == 16
    assert by_key["spec/concurrency-1/output_throughput"].extra["output_len"] == 16
    text = "\n".join(summary_lines(table_rows(record), []))
    assert "specwatch sweep: spec vs base" in text
    assert "p99 TTFT ms" in text and "p99 ITL ms" in text and "p99 TPOT ms" in text and "p99 e2e ms" in text
    line16 = next(ln for ln in text.splitlines() if ln.startswith("concurrency-16 "))
    assert "1.00x" in line16 and "no effect" in line16 and "13.00 / 13.00" in line16
    assert "crossover: speculation stops paying at 16" in text and "min_crossover_concurrency = 4: pass" in text
    assert "spec vs base (concurrency-4, output_throughput)" in text  # the verdict rows in the main table


def test_single_stream_results_keep_their_keys() -> None:
    m = Measurement(profile="a", workload=resolve("single-stream"), runs=[_run(100.0, 5.0)], metrics_delta=None,
                    metrics_after=None, server_info_before={}, server_info_after={}, log_records=[], wall_s=1.0)
    rs = results_of({("a", "single-stream"): m}, {}, None)
    assert sorted(r.metric for r in rs.results) == ["decode_tok_s", "e2e_s", "mean_itl_ms", "output_tok_s", "ttft_ms"]
    assert set(rs.results[0].extra) == {"client_overhead", "shared_host", "runs", "concurrency", "max_new_tokens"}


#: output tok/s of the 8B sweep's three runs at concurrency 1 (real SGLang 0.5.16 on an H100, 2026-12-05,
#: docs/validation/data/2026-12-05-sglang-8b-sweep-x1/sgl8b-sweep-exact.json): EAGLE-3 (accept length 2.00), plain
SWEEP_8B_C1 = ([255.09061605619786, 255.25507177415935, 254.61770365589734],
               [169.81356317156602, 167.59817033325234, 168.90071219650557])


def test_a_sweep_of_too_few_runs_is_inconclusive_and_says_so_not_that_speculation_loses() -> None:
    """1.51x with no overlap, but three runs a side cannot reach p < 0.01 one-sided: the level is inconclusive,
    its line says how many runs would judge it, and the crossover says "not shown to pay", never "does not pay"."""
    from specwatch.judge import compare

    spec, plain = SWEEP_8B_C1
    gate = compare.relative_gate(spec, plain, margin=0.0, alpha=0.01)
    assert gate.verdict.value == "inconclusive" and gate.ratio == pytest.approx(1.51, abs=0.01)
    assert "cannot reach p<0.01" in gate.message and "need ≥" in gate.message
    found = crossover([(1, "inconclusive"), (4, "inconclusive"), (16, "inconclusive")])
    assert found.level == 1  # the gate's rule is unchanged: a speedup not shown does not count
    assert found.message.startswith("speculation is not shown to pay at the lowest level measured, 1 (inconclusive")
    assert "does not pay" not in found.message
    assert crossover([(1, "pass"), (4, "inconclusive")]).message.startswith(
        "speculation is not shown to pay from 4 on (inconclusive")


def test_a_sweep_whose_runs_cannot_reach_alpha_says_so_before_it_measures() -> None:
    """Three runs a side (the first 8B sweep's workload) cannot reach p < 0.01: the sweep says so first, naming the
    runs it needs, so that no GPU time is spent on levels that can only be inconclusive; five runs say nothing."""
    for runs, said in ((3, True), (5, False)):
        table = {**PROFILES["workload"], "runs": runs}
        profiles = parse_profiles({**PROFILES, "workload": table}, "sweep.toml")
        lines: list[str] = []
        session = SimpleNamespace(profiles=profiles, config=SimpleNamespace(alpha=0.01, server_url=None),
                                  measurements={}, verdict_rows=[], progress=lines.append,
                                  fingerprint=lambda: {"engine": "reference"})

        def measure(name: str, level: str, session: SimpleNamespace = session, table: dict[str, Any] = table,
                    runs: int = runs) -> None:
            spec_tok_s, base_tok_s = SPEEDS[level]
            tok_s = spec_tok_s if name == "spec" else base_tok_s
            session.measurements[(name, level)] = _measurement(name, level, table,
                                                               [tok_s * (1 + k / 100) for k in range(runs)], 10.0)

        session.measure = measure
        verdict = gatekeeper.speculation_by_level(session)
        warned = [ln for ln in lines if "cannot reach p < 0.01" in ln]
        assert bool(warned) is said, lines
        if said:
            assert "set [workload] runs = 5 or more" in warned[0] and "every level will be inconclusive" in warned[0]
            assert all(r.extra["sweep"]["verdict"] == "inconclusive" for r in verdict.rows if "sweep" in r.extra)
        else:
            assert [r.extra["sweep"]["verdict"] for r in verdict.rows if "sweep" in r.extra][:2] == ["pass", "pass"]
