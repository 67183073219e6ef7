"""One run of a load level: at most ``concurrency`` requests in flight, sends at the arrival times,
each request's own length, and bench_serving's metrics of the run."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pytest

from specwatch.load import measure as measure_mod
from specwatch.load.client import Generation
from specwatch.load.workload import resolve

REAL_SLEEP = asyncio.sleep


class FakeClient:
    """Answers each request after 20 ms, streaming nothing; records in-flight counts and send times."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.peak = 0
        self.sent: list[float] = []
        self.lengths: list[int] = []

    async def generate(self, text: str, max_new_tokens: int, ignore_eos: bool,
                       messages: tuple[tuple[str, str], ...] = ()) -> Generation:
        self.sent.append(time.perf_counter())
        self.lengths.append(max_new_tokens)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        await REAL_SLEEP(0.02)
        self.in_flight -= 1
        meta: dict[str, Any] = {"completion_tokens": max_new_tokens, "spec_verify_ct": max_new_tokens // 2,
                                "spec_num_correct_drafts": max_new_tokens // 2}
        return Generation([1] * max_new_tokens, "", meta, e2e_s=0.02, ttft_s=0.005,
                          chunk_gaps_s=[0.015 / (max_new_tokens - 1)] * (max_new_tokens - 1),
                          chunk_tokens=[1] * (max_new_tokens - 1))


def test_a_closed_loop_level_keeps_concurrency_in_flight() -> None:
    wl = resolve("concurrency-4", {"run_requests": 12, "output_len": {"dist": "uniform", "low": 4, "high": 40}})
    client = FakeClient()
    reqs = wl.requests()[: wl.run_size]
    run = asyncio.run(measure_mod._one_run(client, reqs, wl))  # type: ignore[arg-type]
    assert client.peak == 4 and len(client.sent) == 12
    assert sorted(client.lengths) == sorted(r.max_new_tokens for r in reqs)  # each request its own length
    assert run.completion_tokens == sum(r.max_new_tokens for r in reqs)
    assert run.serving["median_ttft_ms"] == pytest.approx(5.0)
    assert run.serving["p99_e2e_latency_ms"] == pytest.approx(20.0)
    assert run.serving["request_throughput"] == pytest.approx(12 / (run.completion_tokens / run.output_tok_s))
    assert run.serving["accept_length"] == pytest.approx(2.0)  # 1 + correct/verify, from meta_info


def test_a_request_rate_level_sends_at_its_poisson_arrival_times(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each send waits until run start + its arrival time (asked of asyncio.sleep; no timing asserted).

    The run reads a virtual clock that ticks 1 us per read, so a loaded machine that starts the sends
    late cannot clamp their waits to zero (as a real clock on a busy 2-core CI host once did)."""
    wl = resolve("request-rate-20", {"output_len": 4})
    client = FakeClient()
    targets: list[float] = []
    reads = iter(range(10**9))

    def clock() -> float:
        return next(reads) * 1e-6

    async def sleep(seconds: float) -> None:
        targets.append(clock() + seconds)
        await REAL_SLEEP(0)

    monkeypatch.setattr(measure_mod, "time", SimpleNamespace(perf_counter=clock))
    monkeypatch.setattr(measure_mod.asyncio, "sleep", sleep)
    asyncio.run(measure_mod._one_run(client, wl.requests()[: wl.run_size], wl))  # type: ignore[arg-type]
    assert len(client.sent) == wl.run_size == 80
    first, rest = wl.arrivals()[1], sorted(targets)  # the first arrival is at 0: sent without a wait
    assert [t - rest[0] for t in rest] == pytest.approx([a - first for a in wl.arrivals()[1:]], abs=1e-3)
    assert client.peak > 1  # an open loop: arrivals do not wait for earlier requests
