"""Pooling the runs of alternating boots, and the per-run metrics."""

from __future__ import annotations

import pytest

from specwatch.errors import UsageError
from specwatch.load.measure import Measurement, RunSample, merge
from specwatch.load.workload import Workload
from specwatch.served import Setup


def _m(profile: str, tok_s: list[float]) -> Measurement:
    runs = [RunSample(output_tok_s=x, decode_tok_s=x * 1.1, ttft_ms=9.0, mean_itl_ms=1.0, e2e_s=0.2,
                      completion_tokens=128, client_overhead=0.001) for x in tok_s]
    return Measurement(profile=profile, workload=Workload("single-stream", runs=len(runs)), runs=runs,
                       metrics_delta=None, metrics_after=None, server_info_before={}, server_info_after={"a": 1},
                       log_records=[], wall_s=1.0)


def test_merge_pools_runs_in_order_and_keeps_the_first_rounds_counters() -> None:
    merged = merge(_m("x", [1.0, 2.0]), _m("x", [3.0]))
    assert merged.samples("output_tok_s") == [1.0, 2.0, 3.0]
    assert merged.samples("decode_tok_s") == pytest.approx([1.1, 2.2, 3.3])
    assert merged.workload.runs == 3 and merged.wall_s == 2.0 and merged.server_info_after == {"a": 1}


def test_merge_refuses_different_servers() -> None:
    with pytest.raises(ValueError, match="cannot merge x/single-stream with y/single-stream"):
        merge(_m("x", [1.0]), _m("y", [1.0]))


def test_same_prompt_every_run_by_default() -> None:
    wl = Workload("w", runs=3, warmup=1)
    prompts = wl.prompts()
    assert len(prompts) == 4 and len(set(prompts)) == 1
    varied = Workload("w", runs=3, warmup=1, same_prompts_each_run=False).prompts()
    assert len(set(varied)) == 4


def test_warmup_seconds_must_be_sane() -> None:
    assert Workload("w", warmup_s=2.5).warmup_s == 2.5
    with pytest.raises(UsageError, match="warmup_s"):
        Workload("w", warmup_s=-1)


def test_interleaved_runs_go_abba_and_each_side_keeps_its_own_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from specwatch.load import measure as measure_mod

    order: list[str] = []

    class FakeClient:
        def __init__(self, url: str) -> None:
            self.url = url
            self.notes: list[str] = []

        async def __aenter__(self) -> FakeClient:
            return self

        async def __aexit__(self, *exc: object) -> None:
            return None

        async def flush_cache(self) -> bool:
            return True

        async def server_info(self) -> dict:
            return {"url": self.url}

        async def metrics(self) -> None:
            return None

    async def fake_run(client: FakeClient, prompts: list[str], wl: Workload) -> RunSample:
        order.append(client.url)
        return RunSample(output_tok_s=100.0, decode_tok_s=110.0, ttft_ms=1.0, mean_itl_ms=1.0, e2e_s=0.1,
                         completion_tokens=8, client_overhead=0.0)

    class FakeServer:
        def __init__(self, name: str) -> None:
            self.url, self.log_path, self.shared_host = name, None, False
            self.profile = type("P", (), {"name": name,
                                          "setup": lambda self: Setup("reference", f"ref-tiny-{name}", 1)})()

        def log_size(self) -> int:
            return 0

    monkeypatch.setattr(measure_mod, "client_for", lambda profile, url: FakeClient(url))
    monkeypatch.setattr(measure_mod, "_one_run", fake_run)
    wl = Workload("w", runs=4, warmup=1)
    a, b = asyncio.run(measure_mod.measure_interleaved_async([FakeServer("A"), FakeServer("B")], wl))
    assert order[:2] == ["A", "B"]  # warm-up: A's, then B's
    assert "".join(order[2:]) == "ABBAABBA"
    assert (a.profile, len(a.runs), b.profile, len(b.runs)) == ("A", 4, "B", 4)
    assert a.server_info_after == {"url": "A"} and b.server_info_after == {"url": "B"}


def test_a_refused_flush_is_asked_again_then_said(monkeypatch: pytest.MonkeyPatch) -> None:
    """SGLang 0.5.23 answers /flush_cache with 400 while not idle: asked once more, then reported."""
    import asyncio

    from specwatch.load import measure as measure_mod

    answers = {"A": [False, True], "B": [False, False]}
    asked: list[str] = []

    class Refusing:
        def __init__(self, url: str) -> None:
            self.url = url
            self.notes: list[str] = []

        async def flush_cache(self) -> bool:
            asked.append(self.url)
            return answers[self.url].pop(0)

        async def server_info(self) -> dict:
            return {}

        async def metrics(self) -> None:
            return None

    class FakeServer:
        def __init__(self, name: str) -> None:
            self.url = name
            self.profile = type("P", (), {"name": name,
                                          "setup": lambda self: Setup("reference", f"ref-tiny-{name}", 1)})()

        def log_size(self) -> int:
            return 0

    async def no_run(*args: object) -> None:
        return None

    async def no_sleep(seconds: float) -> None:
        return None

    monkeypatch.setattr(measure_mod, "_one_run", no_run)
    monkeypatch.setattr(measure_mod.asyncio, "sleep", no_sleep)
    notes: list[str] = []
    for name in ("A", "B"):
        side = measure_mod._Measuring(FakeServer(name), Workload("w", runs=2, warmup=1), Refusing(name))
        asyncio.run(side.warm_up(notes.append))
    assert asked == ["A", "A", "B", "B"]
    assert len(notes) == 1 and notes[0].startswith("B: /flush_cache was refused twice")
