"""Async HTTP client for SGLang-compatible servers (aiohttp), with per-token timing.

Only the public API of a server is used: ``/generate`` (streamed, so TTFT and inter-token
latency are measured at the client), ``/server_info``, ``/metrics``, ``/flush_cache`` and
``/health_generate``. A finished request keeps the server's per-request counters (``meta_info``:
``spec_verify_ct``, ``completion_tokens``) and where its streamed chunks ended. The client's own
processing time is measured too, so a report can show that it stays a negligible part of what is measured.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp

from specwatch.errors import InfraError, RequestRejected
from specwatch.judge.levels import DecodeWindow

T = TypeVar("T")
_COMPLETION_TOKENS = re.compile(rb'"completion_tokens":\s*(\d+)')


@dataclass
class Generation:
    """One finished request as seen by the client."""

    output_ids: list[int]
    text: str
    meta_info: dict[str, Any]
    e2e_s: float
    ttft_s: float
    chunk_gaps_s: list[float] = field(default_factory=list)  # time between streamed chunks
    chunk_tokens: list[int] = field(default_factory=list)  # tokens delivered by each chunk after the first
    client_s: float = 0.0  # time the client spent parsing, inside e2e_s
    prompt_token_ids: list[int] | None = None  # with return_prompt_token_ids (non-streamed replies)
    first_chunk_tokens: int = 0  # tokens the first streamed chunk delivered (0: not streamed)
    prompt: str = ""  # what was asked: the prompt text (or the input ids, comma-separated)
    max_new_tokens: int = 0

    @property
    def completion_tokens(self) -> int:
        return int(self.meta_info.get("completion_tokens", len(self.output_ids)))

    @property
    def verify_ct(self) -> int | None:
        """The server's own count of the verify cycles this request took (SGLang's ``meta_info.spec_verify_ct``,
        final chunk only, speculative servers only); None when it does not say."""
        v = self.meta_info.get("spec_verify_ct")
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    @property
    def chunk_ends(self) -> list[int]:
        """The output length after each streamed chunk (empty when not streamed). A speculative server
        sends a chunk per verify cycle unless the client reads late (SGLang then merges them), so these
        are some of the ends of the request's cycles: all of them when ``len == verify_ct + 1``."""
        if not self.first_chunk_tokens:
            return []
        ends, total = [self.first_chunk_tokens], self.first_chunk_tokens
        for n in self.chunk_tokens:
            total += n
            ends.append(total)
        return ends

    @property
    def output_tok_s(self) -> float:
        """Completion tokens per second of end-to-end time (the single-stream tok/s of the case study)."""
        return self.completion_tokens / self.e2e_s if self.e2e_s > 0 else 0.0

    @property
    def decode_tok_s(self) -> float:
        """Tokens after the first per second after the first token (TTFT excluded)."""
        span = self.e2e_s - self.ttft_s
        return (self.completion_tokens - 1) / span if span > 0 and self.completion_tokens > 1 else 0.0

    @property
    def decode_window(self) -> DecodeWindow | None:
        """Its decode window (:class:`~specwatch.judge.levels.DecodeWindow`); None when it was not streamed."""
        if not self.first_chunk_tokens:
            return None
        reads = sum(1 for n in self.chunk_tokens if n)
        return DecodeWindow(self.e2e_s - self.ttft_s, self.completion_tokens - 1, reads)

    @property
    def itl_s(self) -> list[float]:
        """Per-token inter-token latency: each chunk gap spread over the tokens it delivered."""
        out: list[float] = []
        for gap, n in zip(self.chunk_gaps_s, self.chunk_tokens, strict=False):
            out.extend([gap / n] * n if n > 0 else [])
        return out


class Client:
    """An aiohttp session bound to one server's base URL. Use as ``async with Client(url) as c``."""

    def __init__(self, base_url: str, timeout: float = 600.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None
        self.notes: list[str] = []  # what the client had to change about its requests (said once by measure)

    async def __aenter__(self) -> Client:
        self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("Client used outside 'async with'")
        return self._session

    async def generate(
        self,
        prompt: str | None = None,
        input_ids: Sequence[int] | None = None,
        max_new_tokens: int = 128,
        temperature: float = 0.0,
        ignore_eos: bool = True,
        stream: bool = True,
        extra: dict[str, Any] | None = None,
        messages: Sequence[tuple[str, str]] = (),
        sampling: dict[str, Any] | None = None,
    ) -> Generation:
        """Run one request; streamed requests record TTFT and the gaps between chunks. ``messages``
        (a chat's turns) go unused: ``/generate`` takes the chat rendered into ``prompt``. ``sampling``: more
        sampling parameters (``stop``, ``stop_token_ids``; they override the arguments')."""
        params = {"max_new_tokens": max_new_tokens, "temperature": temperature, "ignore_eos": ignore_eos}
        body: dict[str, Any] = {"sampling_params": {**params, **(sampling or {})}, "stream": stream}
        if input_ids is not None:
            body["input_ids"] = list(input_ids)
        else:
            body["text"] = prompt or ""
        body.update(extra or {})
        gen = await self._post(body, stream)
        gen.prompt = (prompt or "") if input_ids is None else ",".join(str(int(t)) for t in input_ids)
        gen.max_new_tokens = max_new_tokens
        return gen

    async def _post(self, body: dict[str, Any], stream: bool) -> Generation:
        start = time.perf_counter()
        try:
            async with self.session.post(self.base_url + "/generate", json=body) as resp:
                if resp.status != 200:
                    text = f"POST /generate -> HTTP {resp.status}: {(await resp.text())[:500]}"
                    if 400 <= resp.status < 500:
                        raise RequestRejected(text, resp.status)
                    raise InfraError(text)
                if not stream:
                    data = await resp.json()
                    end = time.perf_counter()
                    return Generation(data.get("output_ids", []), data.get("text", ""), data.get("meta_info", {}),
                                      end - start, end - start, prompt_token_ids=data.get("prompt_token_ids"))
                return await self._read_stream(resp, start)
        except aiohttp.ClientError as exc:
            raise InfraError(f"POST {self.base_url}/generate failed: {exc}") from exc

    async def _read_stream(self, resp: aiohttp.ClientResponse, start: float) -> Generation:
        last_payload = b"{}"
        ttft = None
        prev_t = start
        prev_tokens = 0
        gaps: list[float] = []
        counts: list[int] = []
        first = 0
        client_s = 0.0
        async for raw in resp.content:
            now = time.perf_counter()
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                break
            # Intermediate chunks are only scanned for the token count; the last one is parsed fully.
            found = _COMPLETION_TOKENS.search(payload)
            tokens = int(found.group(1)) if found else len(json.loads(payload).get("output_ids", []))
            if tokens > prev_tokens:
                if ttft is None:
                    ttft, first = now - start, tokens
                else:
                    gaps.append(now - prev_t)
                    counts.append(tokens - prev_tokens)
                prev_t, prev_tokens = now, tokens
            last_payload = payload
            client_s += time.perf_counter() - now
        end = time.perf_counter()
        parse_start = time.perf_counter()
        last = json.loads(last_payload)
        client_s += time.perf_counter() - parse_start
        meta = last.get("meta_info", {})
        ids = last.get("output_ids", [])
        return Generation(ids, last.get("text", ""), meta, end - start, ttft if ttft is not None else end - start,
                          gaps, counts, client_s, first_chunk_tokens=first)

    async def get_json(self, path: str) -> dict[str, Any]:
        async with self.session.get(self.base_url + path) as resp:
            if resp.status != 200:
                raise InfraError(f"GET {path} -> HTTP {resp.status}: {(await resp.text())[:300]}")
            return await resp.json(content_type=None)

    async def server_info(self) -> dict[str, Any]:
        """``/server_info`` (falls back to the deprecated ``/get_server_info``)."""
        try:
            return await self.get_json("/server_info")
        except InfraError:
            return await self.get_json("/get_server_info")

    async def metrics(self) -> str | None:
        """Prometheus text of ``/metrics``, or None when metrics are not enabled."""
        async with self.session.get(self.base_url + "/metrics") as resp:
            return await resp.text() if resp.status == 200 else None

    async def flush_cache(self, timeout: float = 30.0) -> bool:
        """Flush caches and accept-length totals; waits for the server to go idle (SGLang semantics)."""
        async with self.session.post(self.base_url + f"/flush_cache?timeout={timeout:g}") as resp:
            return resp.status == 200

    async def healthy(self) -> bool:
        try:
            async with self.session.get(self.base_url + "/health_generate") as resp:
                return resp.status == 200
        except aiohttp.ClientError:
            return False


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from synchronous code (tests, CLI)."""
    return asyncio.run(coro)
