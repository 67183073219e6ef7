"""Acceptance over the prefix cache's life, on a live speculative server; and the acceptance soak.

:func:`check` flushes the server's cache, then sends a fixed greedy set (:class:`GreedySet`: prompts of exact
input ids, one request at a time) three times: ``before``; ``after eviction``, once unrelated long prompts
(:class:`Eviction`, sized from the KV pool ``/server_info`` reports: ``max_total_num_tokens``) have pushed the
set's prefixes out of the cache; and ``after /flush_cache``. :func:`specwatch.judge.cachelife.judge` holds each
later pass's accept length (Σ completion_tokens / Σ spec_verify_ct, and each request's) and output against the
first; an output that differs is told apart from a near-tie flip with the server's logprobs, as the lossless check
does (:mod:`specwatch.checks.lossless`). :func:`soak` repeats the set after a share of the pool's worth of
unrelated traffic each time and asks :func:`specwatch.judge.cachelife.soak` whether its accept length fell.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from specwatch.checks import lossless
from specwatch.checks.host import LiveHost
from specwatch.checks.verdictlog import record
from specwatch.judge import cachelife
from specwatch.judge.verdict import Verdict
from specwatch.load.client import Client, Generation, run_sync
from specwatch.load.greedy import greedy_generations
from specwatch.load.multiturn import seeded_ids
from specwatch.profiles.profile import ServerProfile

__all__ = ["EVICT_FACTOR", "GREEDY_SET", "NAME", "NEEDS", "SOAK_CHURN", "Eviction", "GreedySet",
           "check", "soak"]

NAME = cachelife.NAME
#: what the live check reads (:data:`specwatch.engines.protocol.CAPABILITIES`): input ids and ``/flush_cache`` of
#: the native API, ``max_total_num_tokens`` of ``/server_info``, each reply's ``meta_info``
NEEDS = ("native_api", "meta_info")
#: the eviction sends this many times the KV pool's size in unrelated prompt tokens
EVICT_FACTOR = 1.25
#: a soak repetition sends this share of the pool's size in unrelated prompt tokens before the set
SOAK_CHURN = 0.5
#: unrelated prompts in flight at once
EVICT_CONCURRENCY = 8
#: tokens left between an eviction prompt and the server's input limit
_MARGIN = 8


@dataclass(frozen=True)
class GreedySet:
    """The fixed greedy set: ``prompts`` prompts of ``prompt_tokens`` input ids each (seeded, in the ordinary-token
    range of :mod:`specwatch.load.multiturn`), each run to ``output_tokens`` (``ignore_eos``)."""

    prompts: int = 8
    prompt_tokens: int = 512
    output_tokens: int = 128
    seed: int = 0

    def ids(self) -> list[list[int]]:
        """Every prompt's input ids."""
        return [seeded_ids(f"cache-life:{self.seed}:{i}", self.prompt_tokens) for i in range(self.prompts)]

    def describe(self) -> str:
        return (f"a greedy set of {self.prompts} prompts x {self.prompt_tokens:,} input ids, {self.output_tokens} "
                "output tokens each, one request at a time")


#: the set by default (a GPU server's; the reference server's CI tests pass a smaller one)
GREEDY_SET = GreedySet()


@dataclass(frozen=True)
class Eviction:
    """Unrelated prompts that push the set out of a KV pool of ``pool`` tokens: ``prompts`` of ``prompt_tokens``
    random ids each (one output token), ``factor`` times the pool in all."""

    prompts: int
    prompt_tokens: int
    pool: int
    factor: float = EVICT_FACTOR

    @classmethod
    def for_pool(cls, pool: int, max_input: int, factor: float = EVICT_FACTOR) -> Eviction:
        """The fewest prompts of the longest input the server takes (``max_input``) that hold ``factor`` pools."""
        length = max(1, min(max_input - _MARGIN, pool))
        return cls(max(1, math.ceil(factor * pool / length)), length, pool, factor)

    @property
    def tokens(self) -> int:
        return self.prompts * self.prompt_tokens

    def ids(self, tag: str) -> list[list[int]]:
        """The prompts' ids (``tag``: which traffic, so that no two rounds share a prefix)."""
        return [seeded_ids(f"cache-life-evict:{tag}:{i}", self.prompt_tokens) for i in range(self.prompts)]

    def describe(self) -> str:
        return (f"{self.prompts} unrelated prompts x {self.prompt_tokens:,} tokens = {self.tokens:,} prompt tokens, "
                f"{self.tokens / self.pool:.2f}x the KV pool of {self.pool:,} (max_total_num_tokens)")


class _Unable(Exception):
    """The server cannot be asked what the check needs: a skip, with the reason."""


def _unable(spec: ServerProfile) -> str | None:
    if why := spec.unable(NAME, NEEDS):
        return why
    if spec.speculative is None:
        return f"{spec.name} is not a speculative server"
    return None


async def _pool(client: Client) -> tuple[int, int]:
    """The KV pool (tokens) and the longest input the server takes, from ``/server_info``."""
    info: dict[str, Any] = await client.server_info()
    pool, limit = info.get("max_total_num_tokens"), info.get("max_req_input_len")
    if not isinstance(pool, (int, float)) or pool <= 0:
        raise _Unable(f"/server_info says no max_total_num_tokens ({pool!r}): the eviction cannot be sized")
    if not isinstance(limit, (int, float)) or limit <= 0:
        limit = info.get("context_length") or pool
    return int(pool), int(limit)


async def _flush(client: Client, when: str) -> None:
    if not await client.flush_cache():
        raise _Unable(f"POST /flush_cache {when} answered that it did not flush (the server was not idle?)")


async def _evict(client: Client, ev: Eviction, tag: str) -> None:
    gate = asyncio.Semaphore(EVICT_CONCURRENCY)

    async def one(ids: list[int]) -> Generation:
        async with gate:
            return await client.generate(input_ids=ids, max_new_tokens=1, temperature=0.0, stream=False)

    await asyncio.gather(*(one(ids) for ids in ev.ids(tag)))


def _readings(name: str, gens: Sequence[Generation]) -> cachelife.Pass:
    def reading(g: Generation) -> cachelife.Reading:
        cached, prompt = g.meta_info.get("cached_tokens"), g.meta_info.get("prompt_tokens")
        return cachelife.Reading(g.completion_tokens, g.verify_ct, int(prompt) if isinstance(prompt, int) else 0,
                                 int(cached) if isinstance(cached, int) else None)

    return cachelife.Pass(name, tuple(reading(g) for g in gens))


def _changes(first: Sequence[Generation], later: Sequence[Generation]) -> list[cachelife.OutputChange]:
    """Requests whose output differs from the first pass's, each classified with both passes' logprobs."""
    a = [lossless.Scored.from_response(g.output_ids, g.meta_info) for g in first]
    b = [lossless.Scored.from_response(g.output_ids, g.meta_info) for g in later]
    bound = lossless.tie_bound(lossless.agreement_noise(zip(a, b, strict=True)))
    out = []
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        pos = lossless.first_difference(x.ids, y.ids)
        if pos is not None:
            d = lossless.classify(x, y, pos, bound)
            out.append(cachelife.OutputChange(i, pos, d.near_tie, _margins(d)))
    return out


def _margins(d: lossless.Divergence) -> str:
    """Both passes' tokens at the first difference and their logprob margins, in words."""
    head = f"token {d.baseline_token} before, {d.spec_token} now"
    if d.baseline_margin is None or d.spec_margin is None:
        return f"{head}; no logprob of the other token: not a near-tie"
    bound = "exact comparison" if d.bound is None else f"near-tie bound {d.bound:.3g}"
    return f"{head}; margins {d.baseline_margin:.3g} + {d.spec_margin:.3g} nats vs {bound}"


async def _life(url: str, the_set: GreedySet, progress: Callable[[str], None]
                ) -> tuple[list[tuple[str, list[Generation]]], Eviction]:
    prompts = the_set.ids()

    async def run_set() -> list[Generation]:
        return await greedy_generations(url, prompts, the_set.output_tokens, top_logprobs=lossless.TOP_LOGPROBS)

    async with Client(url) as client:
        pool, limit = await _pool(client)
        if the_set.prompt_tokens + the_set.output_tokens > limit:
            raise _Unable(f"the set's prompts ({the_set.prompt_tokens:,} + {the_set.output_tokens} output tokens) do "
                          f"not fit the server's input limit of {limit:,} tokens")
        ev = Eviction.for_pool(pool, limit)
        progress(f"{NAME}: {the_set.describe()}; eviction: {ev.describe()}")
        await _flush(client, "before the first pass")
        passes = [("before", await run_set())]
        await _evict(client, ev, "life")
        passes.append(("after eviction", await run_set()))
        await _flush(client, "after the eviction")
        passes.append(("after /flush_cache", await run_set()))
    return passes, ev


def check(host: LiveHost, spec: ServerProfile, the_set: GreedySet = GREEDY_SET,
          allowance: cachelife.Allowance = cachelife.DEFAULT_ALLOWANCE) -> Verdict:
    """The set before, after eviction and after ``/flush_cache`` on ``spec``'s server: accept length and output
    must hold (:func:`specwatch.judge.cachelife.judge`). A pass or fail is kept in the host's log."""
    if why := _unable(spec):
        return Verdict.skip(NAME, why, spec.name)
    url = host.server_for_profile(spec).url
    try:
        passes, ev = run_sync(_life(url, the_set, host.progress))
    except _Unable as exc:
        return Verdict.skip(NAME, str(exc), spec.name)
    first = passes[0][1]
    changes = {name: _changes(first, gens) for name, gens in passes[1:]}
    verdict = cachelife.judge([_readings(name, gens) for name, gens in passes], changes, allowance, spec.name)
    if not verdict.skipped:
        verdict.message += f"\n  {the_set.describe()}; eviction: {ev.describe()}"
    return record(host, verdict)


async def _soak(url: str, the_set: GreedySet, repetitions: int, churn: float,
                progress: Callable[[str], None]) -> tuple[list[float | None], Eviction]:
    prompts = the_set.ids()
    series: list[float | None] = []
    async with Client(url) as client:
        pool, limit = await _pool(client)
        ev = Eviction.for_pool(pool, limit, churn)
        await _flush(client, "before the soak")
        for k in range(repetitions):
            await _evict(client, ev, f"soak-{k}")
            gens = await greedy_generations(url, prompts, the_set.output_tokens)
            series.append(_readings(f"repetition {k + 1}", gens).accept_length)
            progress(f"{cachelife.SOAK}: repetition {k + 1}/{repetitions}: accept length {series[-1]}")
    return series, ev


def soak(host: LiveHost, spec: ServerProfile, repetitions: int, the_set: GreedySet = GREEDY_SET,
         churn: float = SOAK_CHURN) -> Verdict:
    """``repetitions`` times: ``churn`` times the KV pool of unrelated prompt tokens, then the set; the set's accept
    length per repetition must not fall (:func:`specwatch.judge.cachelife.soak`). Kept in the host's log."""
    if why := _unable(spec):
        return Verdict.skip(cachelife.SOAK, why, spec.name)
    url = host.server_for_profile(spec).url
    try:
        series, ev = run_sync(_soak(url, the_set, repetitions, churn, host.progress))
    except _Unable as exc:
        return Verdict.skip(cachelife.SOAK, str(exc), spec.name)
    if any(x is None for x in series):
        return Verdict.skip(cachelife.SOAK, "a repetition's replies carry no meta_info.spec_verify_ct", spec.name)
    verdict = cachelife.soak([x for x in series if x is not None], profile=spec.name)
    if not verdict.skipped:
        verdict.message += f"\n  {the_set.describe()}; before each: {ev.describe()}"
    return record(host, verdict)
