"""The prefix-reuse gate: its pure judgement (the public report's numbers replayed), the multi-turn workload's
prompts and sizes, and the workload run against a small server whose prefix cache evicts least-recently-used
sequences when its KV pool is full (so the gate is shown to see what a pool under pressure does)."""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from specwatch.checks.prefix_reuse import probe_of
from specwatch.errors import InfraError, UsageError
from specwatch.judge.prefixreuse import Allowance, ReuseRun, TurnSample, deep_stats, judge, probe, turn_stats
from specwatch.load.client import Generation
from specwatch.load.multiturn import TOKEN_HIGH, TOKEN_LOW, MultiTurn, run_multi_turn, turn_sample

ROOT = Path(__file__).resolve().parents[2]


def _run(name: str, wl: MultiTurn, hit: dict[int, float], ttft: dict[int, float], input_tok_s: dict[int, float],
         pool: int | None = None) -> ReuseRun:
    """A run of ``wl`` whose turn ``t`` caches ``hit[t]`` of its prompt tokens, with TTFT ``ttft[t]`` for every
    request and a wall time that gives ``input_tok_s[t]``."""
    samples, walls = [], {}
    for t in range(wl.turns):
        n = wl.prompt_tokens(t)
        samples += [TurnSample(s, t, n, round(hit.get(t, 0.0) * n), ttft.get(t, 0.1)) for s in range(wl.sessions)]
        walls[t] = wl.sessions * n / input_tok_s.get(t, 1000.0)
    return ReuseRun(name, tuple(samples), walls, pool)


#: the shape of the public report's runs (multi-turn agent traffic, deep prompts): the numbers are its aggregates
REPORT = MultiTurn(sessions=64, turns=6, concurrency=32, first_tokens=2048, user_tokens=256, output_tokens=256)
DEEP = range(2, REPORT.turns)


def _plain() -> ReuseRun:
    """The report's plain server: 97% of deep prompts cached, TTFT p50 0.54 s, 43,981 input tok/s."""
    return _run("plain", REPORT, {0: 0.0, 1: 0.9, **{t: 0.97 for t in DEEP}}, {t: 0.54 for t in range(6)},
                {t: 43981.0 for t in range(6)})


def _eagle(hit: float, ttft: float, tok_s: float) -> ReuseRun:
    return _run("eagle3", REPORT, {0: 0.0, 1: 0.9, **{t: hit for t in DEEP}},
                {0: 0.54, 1: 0.6, **{t: ttft for t in DEEP}}, {t: tok_s for t in range(6)})


@pytest.mark.parametrize(("hit", "ttft", "tok_s"), [(0.40, 2.68, 12881.0), (0.53, 2.15, 16811.0)])
def test_the_public_reports_numbers_fail_naming_both_servers(hit: float, ttft: float, tok_s: float) -> None:
    """SGLang 0.5.16 with EAGLE on multi-turn traffic (the public report): 97% of deep prompts cached without
    speculation, 40-53% with it; TTFT p50 0.54 s against 2.15-2.68 s; 43,981 against 12,881-16,811 input tok/s."""
    v = judge(_plain(), _eagle(hit, ttft, tok_s), live_tokens=REPORT.live_tokens())
    assert v.failed
    first = v.message.splitlines()[0]
    assert f"{100 * hit:.1f}% on eagle3 against 97.0% on plain" in first
    assert "they part at turn 2" in first
    assert f"TTFT p50 {ttft:.3g} s against 0.54 s" in first
    assert f"input {tok_s:,.0f} against 43,981 tok/s" in first
    assert "loses reusable prefixes" in v.reason and "TTFT p50 of deep turns" in v.reason
    assert f"live prefixes need {REPORT.live_tokens():,} tokens" in v.message
    hit_row = next(r for r in v.rows if "hit rate" in r.key)
    assert hit_row.is_bad and hit_row.median == pytest.approx(100 * hit, abs=0.1)


def test_equal_rates_pass() -> None:
    v = judge(_plain(), _eagle(0.97, 0.54, 43981.0))
    assert v.passed, v.message
    assert "no turn parts by more than 10 points" in v.message
    assert [r.verdict for r in v.rows] == ["pass", "pass"]  # the table says what the gate said


def test_a_drop_within_the_allowance_passes_and_one_beyond_it_fails() -> None:
    assert judge(_plain(), _eagle(0.90, 0.6, 40000.0)).passed
    assert judge(_plain(), _eagle(0.90, 0.6, 40000.0), Allowance(hit_points=0.05)).failed


def test_ttft_alone_fails_beyond_its_allowance() -> None:
    v = judge(_plain(), _eagle(0.97, 1.2, 43000.0))  # 2.2x the plain server's TTFT p50, hits kept
    assert v.failed and "TTFT p50 of deep turns is 2.22x" in v.reason and "loses" not in v.reason
    assert judge(_plain(), _eagle(0.97, 1.2, 43000.0), Allowance(ttft_rise=1.5)).passed


def test_the_turn_where_they_part_is_the_first_beyond_the_allowance() -> None:
    spec = _run("eagle3", REPORT, {1: 0.9, 2: 0.96, 3: 0.93, 4: 0.5, 5: 0.3}, {}, {})
    v = judge(_plain(), spec)
    assert v.failed and "they part at turn 4" in v.message
    assert v.details.parted_at == 4


def test_a_plain_server_without_reuse_skips_saying_the_workload_cannot_tell() -> None:
    plain = _run("plain", REPORT, {t: 0.2 for t in range(6)}, {}, {}, pool=50_000)
    v = judge(plain, _eagle(0.1, 1.0, 1000.0), live_tokens=REPORT.live_tokens())
    assert v.skipped
    assert "the plain server plain itself reuses 20.0%" in v.reason
    assert "no prefix cache, or a KV pool too small" in v.reason and "50,000 tokens" in v.reason
    assert f"need {REPORT.live_tokens():,} tokens" in v.reason
    roomy = _run("plain", REPORT, {t: 0.0 for t in range(6)}, {}, {}, pool=2 * REPORT.live_tokens())
    v = judge(roomy, _eagle(0.0, 1.0, 1000.0), live_tokens=REPORT.live_tokens())
    assert v.skipped and f"no prefix cache (its KV pool of {2 * REPORT.live_tokens():,} tokens holds" in v.reason


def test_a_server_that_reports_no_cached_tokens_skips() -> None:
    plain = _plain()
    blind = ReuseRun("eagle3", tuple(TurnSample(s.session, s.turn, s.prompt_tokens, None, s.ttft_s)
                                     for s in plain.samples), plain.turn_wall_s)
    v = judge(plain, blind)
    assert v.skipped and "eagle3 reports no cached prompt tokens" in v.reason


def test_the_probe_skips_a_server_that_caches_nothing_of_a_resent_prompt() -> None:
    wl = probe_of(REPORT)
    assert (wl.sessions, wl.turns, wl.concurrency, wl.first_tokens) == (1, 2, 1, REPORT.first_tokens)
    none = _run("plain", wl, {1: 0.0}, {}, {})
    v = probe(none, "eagle3")
    assert v is not None and v.skipped and v.profile == "eagle3"
    assert f"plain cached none of the {wl.prompt_tokens(1):,} tokens of a resent prompt" in v.reason
    assert probe(_run("plain", wl, {1: 0.9}, {}, {}), "eagle3") is None
    blind = ReuseRun("plain", tuple(TurnSample(s.session, s.turn, s.prompt_tokens, None, s.ttft_s)
                                    for s in none.samples))
    assert "reports no cached prompt tokens" in probe(blind, "eagle3").reason  # type: ignore[union-attr]


def test_too_few_turns_skip() -> None:
    wl = MultiTurn(sessions=2, turns=2)
    run = _run("plain", wl, {1: 0.9}, {}, {})
    assert judge(run, run).skipped


def test_turn_and_deep_stats() -> None:
    run = _plain()
    turns = turn_stats(run)
    assert [t.turn for t in turns] == list(range(6))
    assert turns[2].hit_rate == pytest.approx(0.97, abs=1e-3) and turns[2].ttft_p50_s == 0.54
    deep = deep_stats(run)
    assert deep.requests == 4 * REPORT.sessions
    assert deep.input_tok_s == pytest.approx(43981.0)


# -- the workload ---------------------------------------------------------------------------------------------


def test_the_workload_is_deterministic_and_sized() -> None:
    wl = MultiTurn(sessions=3, turns=3, concurrency=2, first_tokens=10, user_tokens=4, output_tokens=5, seed=7)
    assert wl.message(1, 0) == wl.message(1, 0) and len(wl.message(1, 0)) == 10 and len(wl.message(1, 2)) == 4
    assert wl.message(0, 1) != wl.message(1, 1) and wl.message(0, 1) != MultiTurn(seed=8).message(0, 1)[:4]
    assert all(TOKEN_LOW <= t < TOKEN_HIGH for t in wl.message(2, 0))
    assert [wl.prompt_tokens(t) for t in range(3)] == [10, 19, 28]
    assert wl.live_tokens() == 3 * (28 + 5)
    assert wl.pool_need() == 99 + 2 and wl.pool_need(8) == 99 + 16
    assert "live prefixes need 99 KV tokens" in wl.describe()


def test_the_workload_parses_from_one_option() -> None:
    wl = MultiTurn.parse("sessions=96, turns=4,concurrency=32,first_tokens=256,user_tokens=32,output_tokens=64")
    assert (wl.sessions, wl.turns, wl.concurrency, wl.first_tokens, wl.user_tokens, wl.output_tokens) == (
        96, 4, 32, 256, 32, 64)
    assert MultiTurn.parse("") == MultiTurn()
    with pytest.raises(UsageError, match="unknown key 'session'"):
        MultiTurn.parse("session=3")
    with pytest.raises(UsageError, match="turns must be a whole number"):
        MultiTurn.parse("turns=x")
    with pytest.raises(UsageError, match="concurrency must be ≥ 1"):
        MultiTurn.parse("concurrency=0")


def test_a_real_sglang_reply_gives_its_cached_tokens() -> None:
    """``fixtures/sglang/real/generate_ids.json``: a real SGLang reply to ``input_ids`` (5 prompt tokens, none
    cached, 64 output ids)."""
    reply = json.loads((ROOT / "fixtures" / "sglang" / "real" / "generate_ids.json").read_text())
    gen = Generation(reply["output_ids"], reply["text"], reply["meta_info"], 0.14, 0.009)
    s = turn_sample(MultiTurn(), 3, 1, [1, 2, 3, 4, 5], gen)
    assert (s.session, s.turn, s.prompt_tokens, s.cached_tokens, s.ttft_s) == (3, 1, 5, 0, 0.009)
    cut = Generation(reply["output_ids"][:1], "", reply["meta_info"], 0.14, 0.009)  # incremental streaming
    with pytest.raises(InfraError, match="output_ids hold 1 tokens of its 64"):
        turn_sample(MultiTurn(), 0, 0, [1], cut)


# -- against a server with an LRU prefix cache ---------------------------------------------------------------


def _lru_app(pool: int, reserve: int) -> web.Application:
    """``/generate`` with a prefix cache of whole sequences in a pool of ``pool`` tokens: a request's cached
    tokens are its longest common prefix with a kept sequence; a finished one keeps prompt + output and evicts
    the least recently used sequences until they fit beside ``reserve`` tokens (what the running batch holds
    beyond its sequences)."""
    kept: OrderedDict[tuple[int, ...], None] = OrderedDict()

    def lcp(a: tuple[int, ...], b: list[int]) -> int:
        n = 0
        for x, y in zip(a, b, strict=False):
            if x != y:
                break
            n += 1
        return n

    async def info(request: web.Request) -> web.Response:
        return web.json_response({"max_total_num_tokens": pool})

    async def flush(request: web.Request) -> web.Response:
        kept.clear()
        return web.Response(text="ok")

    async def generate(request: web.Request) -> web.StreamResponse:
        body: dict[str, Any] = await request.json()
        ids, n = body["input_ids"], body["sampling_params"]["max_new_tokens"]
        hit = max(((seq, lcp(seq, ids)) for seq in kept), key=lambda x: x[1], default=((), 0))
        if hit[1]:
            kept.move_to_end(hit[0])
        await asyncio.sleep(0.002)
        out = [TOKEN_LOW + (sum(ids) + i) % (TOKEN_HIGH - TOKEN_LOW) for i in range(n)]
        full = (*ids, *out)
        for seq in [s for s in kept if full[:len(s)] == s]:
            del kept[seq]  # the new sequence extends it
        kept[full] = None
        while sum(map(len, kept)) + reserve > pool and len(kept) > 1:
            kept.popitem(last=False)
        resp = web.StreamResponse()
        await resp.prepare(request)
        meta = {"prompt_tokens": len(ids), "cached_tokens": hit[1], "completion_tokens": n}
        await resp.write(f"data: {json.dumps({'output_ids': out[:1], 'meta_info': {'completion_tokens': 1}})}\n\n"
                         .encode())
        await resp.write(f"data: {json.dumps({'output_ids': out, 'meta_info': meta})}\n\ndata: [DONE]\n\n".encode())
        return resp

    app = web.Application()
    app.router.add_get("/server_info", info)
    app.router.add_post("/flush_cache", flush)
    app.router.add_post("/generate", generate)
    return app


async def _served(wl: MultiTurn, name: str, pool: int, reserve: int) -> ReuseRun:
    server = TestServer(_lru_app(pool, reserve))
    await server.start_server()
    try:
        return await run_multi_turn(str(server.make_url("")), wl, name)
    finally:
        await server.close()


def test_a_pool_that_holds_the_prefixes_for_plain_decoding_but_not_a_larger_reservation_fails_the_gate() -> None:
    """The same pool (the workload's live prefixes plus one token per request in flight): a server that reserves
    one token per request in flight keeps every prefix; one that reserves 40 (more than the pool's room beyond the
    prefixes of turn 2) evicts the least recently used sequence, which is the next session's, turn after turn."""
    wl = MultiTurn(sessions=6, turns=4, concurrency=3, first_tokens=40, user_tokens=8, output_tokens=6)
    pool = wl.pool_need(1)
    plain = asyncio.run(_served(wl, "plain", pool, wl.concurrency))
    spec = asyncio.run(_served(wl, "eagle3", pool, 40 * wl.concurrency))
    prompts = {(s.session, s.turn): s.prompt_tokens for s in plain.samples}
    assert all(prompts[(s, t)] == wl.prompt_tokens(t) for s in range(6) for t in range(4))  # output resent
    assert all(s.cached_tokens == wl.prompt_tokens(s.turn) - wl.user_tokens for s in plain.samples if s.turn)
    v = judge(plain, spec, live_tokens=wl.live_tokens())
    assert v.failed and "loses reusable prefixes" in v.reason, v.message
    assert deep_stats(plain).hit_rate == pytest.approx(1 - 2 * wl.user_tokens / (82 + 68))  # turns 2 and 3
    assert deep_stats(spec).hit_rate < deep_stats(plain).hit_rate - 0.1
    roomy = asyncio.run(_served(wl, "eagle3", wl.pool_need(40), 40 * wl.concurrency))
    assert judge(plain, roomy, Allowance(ttft_rise=100.0)).passed
