"""Greedy (temperature 0) generation, one request at a time: the same batch shape on every server; or many at once
(:func:`greedy_at_concurrency`), for the checks that compare a request's reply across batch shapes.

What the lossless check compares. Requests are text prompts or input-id lists; with
``top_logprobs`` the server is asked for SGLang's output logprobs and the prompt token ids too, and
a server that rejects those fields (HTTP 4xx) is asked again without them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from specwatch.errors import RequestRejected
from specwatch.load.client import Client, Generation

__all__ = ["generate_greedy", "greedy_at_concurrency", "greedy_generations"]


async def greedy_generations(url: str, requests: Sequence[str | Sequence[int]], max_new_tokens: int | Sequence[int],
                             *, top_logprobs: int | None = None) -> list[Generation]:
    """The greedy, non-streamed reply to each request (``max_new_tokens``: one for all, or one each).

    ``top_logprobs``: also ask for ``return_logprob``, that many ``top_logprobs_num`` and
    ``return_prompt_token_ids``; when the server rejects them, every request is asked again without.
    """
    lens = [max_new_tokens] * len(requests) if isinstance(max_new_tokens, int) else list(max_new_tokens)
    if top_logprobs:
        extra = {"return_logprob": True, "top_logprobs_num": top_logprobs, "return_prompt_token_ids": True}
        try:
            return await _one_at_a_time(url, requests, lens, extra)
        except RequestRejected:
            pass
    return await _one_at_a_time(url, requests, lens, None)


async def _one_at_a_time(url: str, requests: Sequence[str | Sequence[int]], lens: Sequence[int],
                         extra: dict[str, Any] | None) -> list[Generation]:
    out: list[Generation] = []
    async with Client(url) as client:
        for req, n in zip(requests, lens, strict=True):
            text, ids = (req, None) if isinstance(req, str) else (None, req)
            out.append(await client.generate(text, input_ids=ids, max_new_tokens=n, temperature=0.0,
                                             ignore_eos=True, stream=False, extra=extra))
    return out


async def generate_greedy(url: str, prompts: Sequence[str], max_new_tokens: int) -> list[list[int]]:
    """Greedy output ids for each prompt, requested one at a time."""
    return [list(g.output_ids) for g in await greedy_generations(url, prompts, max_new_tokens)]


async def greedy_at_concurrency(url: str, requests: Sequence[str], max_new_tokens: int, concurrency: int,
                                *, top_logprobs: int | None = None) -> list[Generation]:
    """The greedy, non-streamed reply to each request, ``concurrency`` of them in flight at a time (all sent at
    once when there are no more), in the order given. ``top_logprobs`` as :func:`greedy_generations`: when the
    server rejects the logprob fields, every request is asked again without them."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    if top_logprobs:
        extra = {"return_logprob": True, "top_logprobs_num": top_logprobs, "return_prompt_token_ids": True}
        try:
            return await _in_flight(url, requests, max_new_tokens, concurrency, extra)
        except RequestRejected:
            pass
    return await _in_flight(url, requests, max_new_tokens, concurrency, None)


async def _in_flight(url: str, requests: Sequence[str], max_new_tokens: int, concurrency: int,
                     extra: dict[str, Any] | None) -> list[Generation]:
    gate = asyncio.Semaphore(concurrency)
    async with Client(url) as client:

        async def one(text: str) -> Generation:
            async with gate:
                return await client.generate(text, max_new_tokens=max_new_tokens, temperature=0.0, ignore_eos=True,
                                             stream=False, extra=extra)

        return list(await asyncio.gather(*(one(t) for t in requests)))
