"""specwatch beside SGLang's own ``bench_serving``: its result file read (every bad file one line), the verdict of a
metric (agree, differ, cannot tell) from the two sides' spreads, ``specwatch compare-bench`` and its exit codes,
``specwatch bench-prompts`` (one prompt file both tools send), and the sweep under ``--server-url``.

The real data (tests/unit/data/bench-serving-cpu/, its README says how it was made): one CPU reference server
measured by ``pytest -m perf tests/perf/test_sweep.py --specwatch-server-url`` (specwatch.json, 5 runs at concurrency
1 and 4) and by SGLang 0.5.16's unchanged bench_serving (bench.jsonl, 3 runs a level), the same 8 prompts of 32
tokens written by ``specwatch bench-prompts`` (prompts.jsonl).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from specwatch.cli import main
from specwatch.errors import EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, UsageError
from specwatch.judge.crosscheck import AGREE, CANNOT_TELL, DIFFER, agreement, overall
from specwatch.load.dataset import load_dataset
from specwatch.load.workload import resolve
from specwatch.profiles.loading import load_profiles
from specwatch.store.benchfile import read_bench_runs

DATA = Path(__file__).parent / "data" / "bench-serving-cpu"
RESULTS, BENCH = DATA / "specwatch.json", DATA / "bench.jsonl"


def writer_line(**changes: object) -> str:
    """One result line as bench_serving 0.5.16 writes it: the ``result`` dict of ``benchmark()`` in
    sglang/benchmark/serving.py, key for key in its order, dumped by ``json.dumps`` (so ``request_rate`` inf is
    ``Infinity``); a run of ``--dataset-name random-ids --random-range-ratio 1 --max-concurrency 4`` against a server
    that does not speculate (``accept_length`` null). The numbers are a plausible run's, not a recorded one."""
    result = {
        "tag": None, "backend": "sglang", "dataset_name": "random-ids", "request_rate": float("inf"),
        "max_concurrency": 4, "sharegpt_output_len": None, "random_input_len": 32, "random_output_len": 256,
        "random_range_ratio": 1.0, "server_info": {"model_path": "/tmp/sgl/models8b/target"},
        "duration": 2.15, "completed": 8, "total_input_tokens": 256, "total_input_text_tokens": 256,
        "total_input_vision_tokens": 0, "total_output_tokens": 2048, "total_output_tokens_retokenized": 2040,
        "request_throughput": 3.72, "input_throughput": 119.1, "output_throughput": 952.6, "total_throughput": 1071.7,
        "mean_e2e_latency_ms": 1070.2, "median_e2e_latency_ms": 1068.9, "std_e2e_latency_ms": 4.1,
        "p90_e2e_latency_ms": 1075.0, "p95_e2e_latency_ms": 1076.2, "p99_e2e_latency_ms": 1077.1,
        "mean_ttft_ms": 25.4, "median_ttft_ms": 24.9, "std_ttft_ms": 1.2, "p90_ttft_ms": 26.8, "p95_ttft_ms": 27.0,
        "p99_ttft_ms": 27.3, "mean_tpot_ms": 4.1, "median_tpot_ms": 4.09, "std_tpot_ms": 0.02, "p90_tpot_ms": 4.12,
        "p95_tpot_ms": 4.13, "p99_tpot_ms": 4.14, "mean_itl_ms": 4.1, "median_itl_ms": 4.05, "std_itl_ms": 0.4,
        "p90_itl_ms": 4.3, "p95_itl_ms": 4.4, "p99_itl_ms": 5.2, "concurrency": 3.98, "accept_length": None,
        "max_output_tokens_per_s": 1100.0, "max_concurrent_requests": 4,
    }
    return json.dumps(result | changes) + "\n"


# -- the result file ------------------------------------------------------------------------------


def test_the_recorded_runs_are_read_with_their_shape() -> None:
    runs = read_bench_runs(BENCH)
    assert [r.line for r in runs] == [1, 2, 3, 4, 5, 6]
    assert [r.max_concurrency for r in runs] == [1, 1, 1, 4, 4, 4]
    assert all(r.request_rate == math.inf and r.completed == 8 and r.output_len == 32 for r in runs)
    assert {(r.backend, r.dataset, r.model_path) for r in runs} == {("sglang", "custom", "ref-tiny")}
    assert runs[0].value("accept_length") == pytest.approx(1.7448, abs=1e-4)  # its console said 1.74
    assert runs[3].value("output_throughput") == pytest.approx(968.95, abs=0.01)  # its console said 968.95
    assert math.isnan(runs[0].value("no_such_metric"))


def test_a_line_of_the_writer_without_speculation_is_read(tmp_path: Path) -> None:
    path = tmp_path / "bench.jsonl"
    path.write_text(writer_line() + "\n" + writer_line(max_concurrency=None, request_rate=2.0, random_range_ratio=0.5))
    closed, open_loop = read_bench_runs(path)
    assert (closed.max_concurrency, closed.output_len, closed.model_path) == (4, 256, "/tmp/sgl/models8b/target")
    assert math.isnan(closed.value("accept_length")) and closed.value("p99_itl_ms") == 5.2
    assert (open_loop.max_concurrency, open_loop.request_rate, open_loop.output_len) == (None, 2.0, None)


@pytest.mark.parametrize(("text", "said"), [
    (None, "bench_serving result file {path} does not exist"),
    ("", "is empty: sglang.bench_serving --output-file appends one line a run"),
    ("\n  \n", "is empty"),
    ("{not json\n", ":1: not JSON: "),
    (writer_line() + "[1, 2]\n", ":2: expected a JSON object (one sglang.bench_serving result), got [1, 2]"),
    ('{"completed": 8}\n', ":1: not a sglang.bench_serving result line: it lacks backend, dataset_name, request_rate"),
    (writer_line(completed=0), ":1: the run completed no request"),
    (writer_line(completed="8"), ":1: completed must be a number or null, got '8'"),
    (writer_line(max_concurrency=0), ":1: max_concurrency must be a whole number ≥ 1, got 0"),
    (writer_line(request_rate=-1), ":1: request_rate must be > 0, got -1"),
    (writer_line(median_tpot_ms="fast"), ":1: median_tpot_ms must be a number or null, got 'fast'"),
    (writer_line(backend=3), ":1: backend must be a string, got 3"),
])
def test_every_bad_file_is_one_line(tmp_path: Path, text: str | None, said: str) -> None:
    path = tmp_path / "bench.jsonl"
    if text is not None:
        path.write_text(text)
    with pytest.raises(UsageError) as err:
        read_bench_runs(path)
    assert said.format(path=path) in str(err.value) and "\n" not in str(err.value)


def test_a_file_that_is_no_text_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bench.jsonl"
    path.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(UsageError, match=r"not UTF-8 text"):
        read_bench_runs(path)
    with pytest.raises(UsageError, match="is a directory"):
        read_bench_runs(tmp_path)


# -- the verdict of one metric --------------------------------------------------------------------


def test_tight_spreads_that_overlap_agree_and_a_shift_beyond_them_differs() -> None:
    ours = [270.0, 271.0, 269.5, 270.5, 270.2]
    found = agreement("output_throughput", ours, [270.4, 269.8, 270.9])
    assert found.verdict == AGREE and found.allowance == pytest.approx(0.01)  # the floor: the spreads are tighter
    assert "both spreads: 5 runs of specwatch, 3 of the other tool" in found.basis
    shifted = agreement("output_throughput", ours, [266.0, 266.3, 265.8], floor=0.005)
    assert shifted.verdict == DIFFER and shifted.difference == pytest.approx(266.03 / 270.24 - 1, abs=1e-4)
    assert "differ: -1.56% beyond ±0.50%" in shifted.message


def test_one_run_of_theirs_is_judged_by_our_spread_only() -> None:
    ours = [100.0, 104.0, 98.0, 102.0, 101.0, 99.0]
    found = agreement("median_tpot_ms", ours, [103.0], theirs_name="bench_serving")
    sd = float(__import__("numpy").std(ours, ddof=1))
    from scipy import stats

    expect = stats.t.ppf(0.995, 5) * sd * math.sqrt(1 + 1 / 6) / 100.666666  # a prediction interval of one run
    assert found.allowance == pytest.approx(expect, rel=1e-4) and found.verdict == AGREE
    assert found.basis == "specwatch's spread only (6 runs): one run of bench_serving"


def test_it_cannot_tell_without_numbers_or_with_spreads_too_wide() -> None:
    assert agreement("p99_itl_ms", [], [5.0]).reason == "specwatch recorded no value of it"
    assert agreement("accept_length", [2.0, 2.0], [math.nan]).reason == "the other tool has no value of it"
    assert "1 run of it: no spread" in agreement("x", [3.0], [3.0]).reason
    wide = agreement("p99_ttft_ms", [20.0, 40.0, 30.0], [31.0, 29.0])
    assert wide.verdict == CANNOT_TELL and wide.allowance > 0.1 and "an allowance over ±10%" in wide.reason
    assert agreement("p99_ttft_ms", [20.0, 40.0, 30.0], [300.0, 310.0]).verdict == DIFFER  # still beyond it


def test_the_overall_verdict() -> None:
    a, d = agreement("m", [1.0, 1.0], [1.0]), agreement("m", [1.0, 1.0], [2.0])
    c = agreement("m", [], [1.0])
    assert (a.verdict, d.verdict) == (AGREE, DIFFER)
    assert overall([a, c]) == AGREE and overall([a, d, c]) == DIFFER and overall([c]) == CANNOT_TELL


# -- specwatch compare-bench ----------------------------------------------------------------------


def _rows(out: str) -> dict[tuple[str, str], str]:
    """(workload, metric) -> verdict, from the table's rows."""
    rows = {}
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0].startswith("concurrency-") and len(parts) > 8:
            rows[(parts[0], parts[1])] = " ".join(parts[9:])
    return rows


def test_compare_bench_on_the_recorded_runs(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["compare-bench", str(RESULTS), str(BENCH)])
    out = capsys.readouterr().out
    rows = _rows(out)
    assert len(rows) == 30, out  # 15 metrics at each of two levels
    assert rows[("concurrency-1", "accept_length")] == rows[("concurrency-4", "accept_length")] == "agree", out
    assert "1.75 (5)" in out and "1.74 (3)" in out
    # the table shows the judge's verdict, row for row
    doc = json.loads(RESULTS.read_text())
    samples = {(r["workload"], r["metric"]): r["samples"] for r in doc["results"]}
    runs = read_bench_runs(BENCH)
    for (level, metric), verdict in rows.items():
        theirs = [r.value(metric) for r in runs if f"concurrency-{r.max_concurrency}" == level]
        assert agreement(metric, samples.get((level, metric), []), theirs).verdict == verdict, (level, metric)
    assert code == EXIT_OK and "verdict: agree: none differs" in out


def test_a_difference_beyond_the_spreads_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The recorded runs with bench_serving's accept length raised 10%: its spread and specwatch's are tight."""
    lines = [json.loads(x) for x in BENCH.read_text().splitlines()]
    bench = tmp_path / "bench.jsonl"
    bench.write_text("".join(json.dumps({**d, "accept_length": d["accept_length"] * 1.1}) + "\n" for d in lines))
    code = main(["compare-bench", str(RESULTS), str(bench)])
    out = capsys.readouterr().out
    assert code == EXIT_REGRESSION and _rows(out)[("concurrency-4", "accept_length")] == "DIFFER", out
    assert "concurrency-4 accept_length: differ: +" in out and "verdict: differ" in out


def test_what_cannot_be_compared_is_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = tmp_path / "bench.jsonl"
    bench.write_text(writer_line(max_concurrency=None, request_rate=4.0))
    assert main(["compare-bench", str(RESULTS), str(bench)]) == EXIT_USAGE
    assert "no run of a closed loop" in capsys.readouterr().err
    bench.write_text(writer_line(max_concurrency=16))
    assert main(["compare-bench", str(RESULTS), str(bench)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "has no results of concurrency-16" in err and "it holds concurrency-1, concurrency-4" in err
    assert main(["compare-bench", str(RESULTS), str(bench), "--profile", "nope"]) == EXIT_USAGE
    assert main(["compare-bench", str(RESULTS), str(tmp_path / "missing.jsonl")]) == EXIT_USAGE
    assert "no such file" in capsys.readouterr().err


def test_workloads_that_differ_are_warned(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A random-ids run of 256 tokens beside specwatch's 32-token prompts at concurrency 4: each difference said."""
    bench = tmp_path / "bench.jsonl"
    bench.write_text(writer_line())
    main(["compare-bench", str(RESULTS), str(bench)])
    notes = [x for x in capsys.readouterr().out.splitlines() if x.startswith("note: ")]
    assert any("output length differs: specwatch 32, the benchmark 256" in x for x in notes), notes
    assert any("the benchmark sent random tokens" in x for x in notes), notes
    assert any("another model? specwatch served ref-tiny, the benchmark's server /tmp/sgl/models8b/target" in x
               for x in notes), notes


# -- one prompt file for both tools ---------------------------------------------------------------


def _custom_dataset_prompts(path: Path) -> list[str]:
    """What bench_serving 0.5.16's ``custom`` dataset sends of a file (datasets/custom.py, sample_custom_requests):
    each line's ``conversations`` (or ``conversation``) with at least 2 turns, the first turn's ``content`` or
    ``value``, as it is."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        data = json.loads(line)
        convs = data.get("conversations", data.get("conversation", []))
        if len(convs) >= 2:
            out.append(convs[0].get("content", convs[0].get("value", "")))
    return out


def test_bench_prompts_writes_what_both_tools_send(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "prompts.jsonl"
    assert main(["bench-prompts", str(out), "--profiles", str(DATA / "sweep.toml"), "--url", "http://h:1"]) == 0
    said = capsys.readouterr().out
    wl = resolve("concurrency-4", load_profiles(DATA / "sweep.toml").workload)
    sent = [r.text for r in wl.requests()[:wl.run_size]]
    assert _custom_dataset_prompts(out) == sent == [e.prompt for e in load_dataset(out).entries]
    assert out.read_text() == (DATA / "prompts.jsonl").read_text()  # the file the recorded runs sent
    assert ("--dataset-name custom --dataset-path " + str(out) + " --num-prompts 8 --sharegpt-output-len 32 "
            "--max-concurrency 4 --flush-cache") in said
    assert "concurrency-1: python -m sglang.bench_serving --backend sglang --base-url http://h:1" in said


def test_bench_prompts_refuses_what_the_benchmark_cannot_send(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "p.toml"
    base = (DATA / "sweep.toml").read_text()
    profile.write_text(base.replace("max_new_tokens = 32", 'output_len = { dist = "uniform", low = 8, high = 24 }'))
    assert main(["bench-prompts", str(tmp_path / "x.jsonl"), "--profiles", str(profile)]) == EXIT_USAGE
    assert "asks one length of every request" in capsys.readouterr().err
    profile.write_text(base.replace("concurrency = [1, 4]\n", ""))
    assert main(["bench-prompts", str(tmp_path / "x.jsonl"), "--profiles", str(profile)]) == EXIT_USAGE
    assert "sets no concurrency levels" in capsys.readouterr().err
    assert main(["bench-prompts", str(tmp_path / "x.jsonl"), "--profiles", str(DATA / "sweep.toml"),
                 "--workload", "request-rate-2"]) == EXIT_USAGE
    (tmp_path / "a-file").write_text("")  # a path under a file cannot be written: one line naming it
    assert main(["bench-prompts", str(tmp_path / "a-file" / "x.jsonl"), "--profiles", str(DATA / "sweep.toml")]
                ) == EXIT_USAGE
    assert f"cannot write {tmp_path / 'a-file' / 'x.jsonl'}" in capsys.readouterr().err


# -- the sweep under --server-url -----------------------------------------------------------------


def test_with_server_url_the_sweep_measures_the_running_server_at_every_level() -> None:
    from specwatch.profiles.loading import parse_profiles
    from specwatch.run import gatekeeper

    profiles = parse_profiles({"server": [{"name": "base", "engine": "reference"},
                                          {"name": "spec", "engine": "reference",
                                           "speculative": {"algorithm": "EAGLE3"}}],
                               "workload": {"concurrency": [1, 4]}}, "sweep.toml")
    measured: list[tuple[str, str]] = []
    session = SimpleNamespace(profiles=profiles, config=SimpleNamespace(alpha=0.05, server_url="http://h:1"),
                              measure=lambda name, level: measured.append((name, level)), verdict_rows=[])
    verdict = gatekeeper.speculation_by_level(session)
    assert measured == [("spec", "concurrency-1"), ("spec", "concurrency-4")]
    assert verdict.skipped and "the running server (spec) measured at concurrency-1, concurrency-4" in verdict.message
    assert "needs the plain server base measured beside it" in verdict.message
