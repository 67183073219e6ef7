"""Workloads: request lengths (seeded, bounded), Poisson arrivals (seeded), sweep levels and what a
profile's [workload] table may say."""

from __future__ import annotations

import itertools
import random
import statistics

import pytest

from specwatch.errors import UsageError
from specwatch.load.dataset import Lengths
from specwatch.load.workload import (
    CONCURRENT_4,
    SINGLE_STREAM,
    Workload,
    level_names,
    poisson_arrivals,
    prompt_set,
    resolve,
)
from specwatch.profiles.loading import parse_profiles


@pytest.mark.parametrize(("spec", "low", "high"), [
    ({"dist": "uniform", "low": 64, "high": 256}, 64, 256),
    ({"dist": "normal", "mean": 128, "std": 64, "low": 16, "high": 200}, 16, 200),
    ({"dist": "lognormal", "median": 100, "sigma": 1.0, "high": 300}, 1, 300),
])
def test_lengths_are_seeded_and_stay_in_bounds(spec: dict, low: int, high: int) -> None:
    lengths = Lengths.parse(spec, "output_len")
    xs = lengths.sample(random.Random(7), 2000)
    assert xs == lengths.sample(random.Random(7), 2000)  # seeded
    assert xs != lengths.sample(random.Random(8), 2000)
    assert all(isinstance(x, int) for x in xs) and low <= min(xs) and max(xs) <= high
    assert min(xs) == low or max(xs) == high or spec["dist"] == "uniform"  # the clip is reached
    assert len(set(xs)) > 20  # a distribution, not a constant
    assert lengths.spec == spec


def test_length_centres_match_their_parameters() -> None:
    normal = Lengths.parse({"dist": "normal", "mean": 128, "std": 8}, "x").sample(random.Random(1), 4000)
    lognormal = Lengths.parse({"dist": "lognormal", "median": 50, "sigma": 0.5}, "x").sample(random.Random(1), 4000)
    uniform = Lengths.parse({"dist": "uniform", "low": 10, "high": 20}, "x").sample(random.Random(1), 4000)
    assert abs(statistics.mean(normal) - 128) < 1 and abs(statistics.median(lognormal) - 50) < 2
    assert set(uniform) == set(range(10, 21))
    assert Lengths.parse(32, "x").sample(random.Random(0), 3) == [32, 32, 32]


@pytest.mark.parametrize(("spec", "message"), [
    (0, "expected an integer ≥ 1 or a distribution table"),
    ({"dist": "zipf"}, "output_len.dist: expected one of 'uniform', 'normal', 'lognormal', got 'zipf'"),
    ({"dist": "uniform", "low": 9, "high": 3}, "output_len.high: must be ≥ low (9), got 3"),
    ({"dist": "normal", "mean": 10}, "output_len: a normal distribution needs std"),
    ({"dist": "uniform", "low": 1, "high": 2, "std": 1}, "unknown key(s) std"),
    ({"dist": "lognormal", "median": 0, "sigma": 1}, "output_len.median: expected a number > 0"),
])
def test_bad_lengths_are_one_line(spec: object, message: str) -> None:
    with pytest.raises(UsageError) as info:
        Lengths.parse(spec, "output_len")  # type: ignore[arg-type]
    assert message in str(info.value) and "\n" not in str(info.value)


def test_poisson_arrivals_are_seeded_with_the_requested_rate() -> None:
    times = poisson_arrivals(5000, rate=8.0, seed=3)
    assert times[0] == 0.0 and times == sorted(times)
    assert times == poisson_arrivals(5000, rate=8.0, seed=3) and times != poisson_arrivals(5000, 8.0, seed=4)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert abs(statistics.mean(gaps) - 1 / 8.0) < 0.01  # exponential gaps, mean 1/rate
    assert abs(statistics.stdev(gaps) - 1 / 8.0) < 0.015  # exponential: sd = mean (not evenly spaced)


def test_single_stream_is_unchanged() -> None:
    """The baselines under baselines/ were recorded with these prompts and shapes."""
    assert SINGLE_STREAM.run_size == 1 and SINGLE_STREAM.arrivals() == [0.0]
    assert SINGLE_STREAM.prompts() == prompt_set(0, 1, 24) * 11
    assert {r.max_new_tokens for r in SINGLE_STREAM.requests()} == {128}
    assert SINGLE_STREAM.describe() == {}
    assert (CONCURRENT_4.concurrency, CONCURRENT_4.run_size, CONCURRENT_4.level) == (4, 8, True)
    assert resolve("single-stream", {"runs": 3}) == Workload("single-stream", runs=3)


def test_levels_from_the_workload_table() -> None:
    table = {"concurrency": (1, 4, 16), "request_rate": (2.0, 0.5), "runs": 3, "output_len": 16}
    assert level_names(table) == ["concurrency-1", "concurrency-4", "concurrency-16", "request-rate-0.5",
                                  "request-rate-2"]
    c16 = resolve("concurrency-16", table)
    assert (c16.concurrency, c16.run_size, c16.runs, c16.level, c16.request_rate) == (16, 16, 3, True, None)
    assert resolve("concurrency-1", table).run_size == 8  # every level mixes at least 8 prompts a run
    assert resolve("concurrency-16", {**table, "run_requests": 4}).run_size == 16  # never below the concurrency
    rate = resolve("request-rate-2", table)
    assert rate.request_rate == 2.0 and rate.run_size == 8 and rate.concurrency == 8
    assert rate.arrivals() == poisson_arrivals(8, 2.0, 0)
    assert {r.max_new_tokens for r in rate.requests()} == {16}
    assert resolve("request-rate-2", {**table, "run_requests": 20}).concurrency == 20
    for bad in ("concurrency-0", "concurrency-2.5", "sweep-4", "burst"):
        with pytest.raises(UsageError, match="unknown workload"):
            resolve(bad, table)


def test_dataset_requests_are_seeded_and_smaller_sets_are_prefixes_of_larger() -> None:
    table = {"dataset": "builtin", "output_len": {"dist": "uniform", "low": 8, "high": 64}, "seed": 5}
    c4, c16 = resolve("concurrency-4", table), resolve("concurrency-16", table)
    assert c4.requests()[:8] == c16.requests()[:8]  # levels share their first prompts
    assert c4.requests() == resolve("concurrency-4", table).requests()
    assert c4.requests()[:8] != resolve("concurrency-4", {**table, "seed": 6}).requests()[:8]
    one_run = c16.requests()[:16]
    assert len({r.category for r in one_run}) >= 3 and len({r.max_new_tokens for r in one_run}) > 4
    words = resolve("concurrency-4", {**table, "input_words": 12, "categories": ["code"]}).requests()
    assert {len(r.text.split()) for r in words} == {12} and {r.category for r in words} == {"code"}
    assert c4.describe()["dataset"]["name"] == "builtin" and c4.describe()["output_len"]["dist"] == "uniform"


def test_the_profile_table_takes_levels_datasets_and_lengths() -> None:
    doc = {"server": [{"name": "a"}], "workload": {"concurrency": [16, 1, 4], "request_rate": 2.5,
                                                   "dataset": "builtin", "output_len": 32,
                                                   "input_words": {"dist": "normal", "mean": 40, "std": 10}},
           "gates": {"min_crossover_concurrency": 4}}
    ps = parse_profiles(doc, "p.toml")
    assert ps.workload["concurrency"] == (1, 4, 16) and ps.workload["request_rate"] == (2.5,)
    assert ps.gates.min_crossover_concurrency == 4
    for workload, message in [
        ({"concurrency": [4, 4]}, "p.toml: workload.concurrency: levels repeat: [4, 4]"),
        ({"concurrency": [0]}, "p.toml: workload.concurrency[0]: expected an integer ≥ 1"),
        ({"request_rate": [-1.0]}, "p.toml: workload.request_rate[0]: expected a number > 0"),
        ({"output_len": {"dist": "uniform", "low": 5}}, "p.toml: workload.output_len: a uniform distribution "
                                                        "needs high"),
        ({"sweep": True}, "p.toml: workload: unknown key(s) sweep"),
    ]:
        with pytest.raises(UsageError) as info:
            parse_profiles({**doc, "workload": workload}, "p.toml")
        assert str(info.value).startswith(message), str(info.value)
