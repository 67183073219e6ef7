"""The load's client for OpenAI-compatible servers: streamed ``/v1/completions`` and ``/v1/chat/completions``.

Any server that speaks the OpenAI routes (vLLM, TensorRT-LLM, SGLang, a remote endpoint) is measured
like SGLang's ``/generate``: each request streams (``stream_options.include_usage``), TTFT is the
time to the first chunk that carries text, the gaps between later text chunks are the inter-token
latencies, and the completion tokens come from the final usage chunk (else each text chunk counts as
one token, and ``meta_info["completion_tokens_from"]`` says ``"chunks"``). A chunk may carry several
tokens (a speculative server's accepted run): the usage count is spread over the chunks in proportion
to their text. A reasoning model's thinking (``delta.reasoning_content``, or vLLM's ``reasoning``)
is text too: its tokens are decoded and counted like the answer's. Requests ask for ``ignore_eos``
(vLLM and SGLang accept it), so every run has the same length; a server that answers 400 or 422 to
it (``transformers serve`` refuses unknown fields with a 422) is asked once more without, and the
client then stops sending it and keeps a note (:attr:`Client.notes`). The result is the same
:class:`Generation` the rest of the load code consumes, and every failure is the one-line error
``/generate`` raises (:class:`~specwatch.errors.RequestRejected` for a 4xx,
:class:`~specwatch.errors.InfraError` otherwise), with the server's own message when its error body
is JSON (``detail``, ``error.message`` or ``message``).

:func:`client_for` picks the client a profile's ``load_api`` needs.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from typing import Any

import aiohttp

from specwatch.errors import InfraError, RequestRejected
from specwatch.load.client import Client, Generation
from specwatch.profiles.profile import ServerProfile

#: load API -> the route it posts to
ROUTES = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
#: the statuses of a server that refuses a field it does not know (FastAPI's validation error is 422)
REFUSED_FIELD = (400, 422)
#: an error chunk whose message was not escaped (not JSON): ``{"error": "... "quoted" ..."}``, or one
#: cut at the first newline of its message (the rest of it is not a ``data:`` line)
_BROKEN_ERROR = re.compile(rb'\{\s*"error"\s*:\s*"?(.*?)"?\s*\}?\s*$', re.DOTALL)
#: the fields of a chat delta that carry generated text: a reasoning model's thinking, then the answer
DELTA_TEXT = ("reasoning_content", "reasoning", "content")


def _message(data: Any) -> Any:
    """The message of a parsed error body: FastAPI's ``detail``, OpenAI's and vLLM's
    ``error.message``, a bare ``error`` string or a ``message``; None when it has none."""
    if not isinstance(data, dict):
        return None
    error = data.get("error")
    for said in (data.get("detail"), error.get("message") if isinstance(error, dict) else error, data.get("message")):
        if said:
            return said
    return None


def error_text(body: str, limit: int = 300) -> str:
    """One line of an error body: the server's message when the body is JSON that has one, else the
    body itself; whitespace folded, at most ``limit`` characters."""
    try:
        said = _message(json.loads(body)) or body
    except (ValueError, RecursionError):
        said = body
    text = said if isinstance(said, str) else json.dumps(said, sort_keys=True)
    return " ".join(text.split())[:limit]


def spread(total: int, weights: Sequence[int]) -> list[int]:
    """``total`` tokens over chunks in proportion to ``weights`` (their text lengths), at least one
    each while there are enough, rounded by largest remainders so that they add up to ``total``."""
    k = len(weights)
    if k == 0 or total <= 0:
        return [0] * k
    if total == k:
        return [1] * k
    floor = [1 if total >= k else 0] * k
    rest = total - sum(floor)
    weight = sum(weights)
    shares = [rest * w / weight for w in weights] if weight > 0 else [rest / k] * k
    counts = [int(s) for s in shares]
    for i in sorted(range(k), key=lambda i: shares[i] - counts[i], reverse=True)[: rest - sum(counts)]:
        counts[i] += 1
    return [a + b for a, b in zip(floor, counts, strict=True)]


def _chunk_text(chunk: dict[str, Any]) -> tuple[str, str | None]:
    """(text, finish_reason) of one streamed chunk, completions (``text``) or chat (``delta.content``)."""
    pieces, finish = [], None
    for choice in chunk.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        for piece in [delta.get(k) for k in DELTA_TEXT] if isinstance(delta, dict) else [choice.get("text")]:
            if isinstance(piece, str):
                pieces.append(piece)
        finish = choice.get("finish_reason") or finish
    return "".join(pieces), finish


class OpenAIClient(Client):
    """A :class:`Client` whose requests go to an OpenAI route (``api``: ``completions`` or ``chat``).

    ``model``: the served model name; None asks ``GET /v1/models`` (its first id) once. ``native``:
    the server is SGLang behind its OpenAI routes, so ``/server_info``, ``/flush_cache`` and
    ``/health_generate`` stay SGLang's; otherwise ``server_info`` is what the server says of itself
    (the API, the model and ``GET /version`` when it answers), there is no cache flush (the server's
    prefix cache stays as it is) and health is ``GET /v1/models``.
    """

    def __init__(
        self,
        base_url: str,
        api: str = "completions",
        model: str | None = None,
        *,
        native: bool = False,
        timeout: float = 600.0,
    ) -> None:
        if api not in ROUTES:
            raise ValueError(f"api must be one of {', '.join(ROUTES)}, got {api!r}")
        super().__init__(base_url, timeout)
        self.api, self.model, self.native = api, model or None, native
        self.route = ROUTES[api]
        self.send_ignore_eos = True

    async def model_name(self) -> str:
        """The served model name: the profile's, else the first id of ``GET /v1/models`` (kept)."""
        if self.model is None:
            where = f"GET {self.base_url}/v1/models"
            try:
                async with self.session.get(self.base_url + "/v1/models") as resp:
                    if resp.status != 200:
                        raise InfraError(
                            f"{where} -> HTTP {resp.status}: {error_text(await resp.text())}; set model "
                            "in the profile to the served model name"
                        )
                    data = await resp.json(content_type=None)
            except aiohttp.ClientError as exc:
                raise InfraError(f"{where} failed: {exc}") from exc
            except ValueError as exc:
                raise InfraError(f"{where}: the answer is not JSON ({exc})") from exc
            models = data.get("data") if isinstance(data, dict) else None
            first = models[0] if isinstance(models, list) and models else None
            if not isinstance(first, dict) or not isinstance(first.get("id"), str):
                raise InfraError(f"{where} lists no model id (got {str(data)[:200]}); set model in the profile")
            self.model = first["id"]
        return self.model

    def _body(
        self,
        model: str,
        prompt: str | Sequence[int],
        max_new_tokens: int,
        temperature: float,
        ignore_eos: bool,
        stream: bool,
        messages: Sequence[tuple[str, str]] = (),
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": model,
            "max_tokens": max_new_tokens,
            "temperature": temperature,
            "stream": stream,
        }
        if self.api == "chat":  # a dataset's chat as its turns; a plain prompt as one user message
            turns = messages or (("user", prompt),)
            body["messages"] = [{"role": role, "content": content} for role, content in turns]
        else:
            body["prompt"] = prompt
        if stream:
            body["stream_options"] = {"include_usage": True}
        if ignore_eos and self.send_ignore_eos:
            body["ignore_eos"] = True
        return body

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
        """One request on the OpenAI route; streamed requests record TTFT and the gaps between chunks.

        ``sampling``: more sampling parameters (``stop``, ``stop_token_ids``), sent as fields of the body.

        ``input_ids`` go as the completions prompt (token ids); chat takes text only. ``messages``:
        a chat's turns, sent as they are to ``/v1/chat/completions`` (the server applies its own chat
        template); ``/v1/completions`` takes the rendered ``prompt``.
        """
        if input_ids is not None and self.api == "chat":
            raise ValueError("/v1/chat/completions takes text, not input_ids")
        text_or_ids: str | Sequence[int] = list(input_ids) if input_ids is not None else (prompt or "")
        model = await self.model_name()

        async def post() -> tuple[int, str, Generation | None, bool]:
            more = {k: v for k, v in (sampling or {}).items() if k not in ("max_new_tokens", "ignore_eos")}
            body = {**self._body(model, text_or_ids, max_new_tokens, temperature, ignore_eos, stream, messages),
                    **more, **(extra or {})}
            where = f"POST {self.base_url}{self.route}"
            start = time.perf_counter()
            try:
                async with self.session.post(self.base_url + self.route, json=body) as resp:
                    if resp.status == 200:
                        read = self._read_sse if stream else self._read_json
                        return 200, "", await read(resp, start, where), "ignore_eos" in body
                    text = f"{where} -> HTTP {resp.status}: {error_text(await resp.text(), 500)}"
                    return resp.status, text, None, "ignore_eos" in body
            except aiohttp.ClientError as exc:
                raise InfraError(f"{where} failed: {exc}") from exc

        status, text, gen, sent = await post()
        if gen is None and status in REFUSED_FIELD and sent:  # once more without ignore_eos
            self.send_ignore_eos = False
            again, text_again, gen, _ = await post()
            why = text.split(" -> ", 1)[-1][:200]
            if gen is None:
                self.send_ignore_eos = True  # not (only) ignore_eos: say what the server said without it
                if text_again != text:
                    status, text = again, f"{text_again} (asked with ignore_eos first: {why})"
            else:
                self.notes.append(
                    f"{self.base_url}{self.route} refused ignore_eos ({why}); requests go without it, "
                    "so they may stop at the model's end of sequence"
                )
        if gen is None:
            raise RequestRejected(text, status) if 400 <= status < 500 else InfraError(text)
        if ignore_eos and not self.send_ignore_eos:
            gen.meta_info["ignore_eos"] = False
        return gen

    async def _read_json(self, resp: aiohttp.ClientResponse, start: float, where: str) -> Generation:
        try:
            data = await resp.json(content_type=None)
        except ValueError as exc:
            raise InfraError(f"{where}: the answer is not JSON ({exc})") from exc
        end = time.perf_counter()
        text, finish = _chunk_text(data if isinstance(data, dict) else {})
        usage = data.get("usage") if isinstance(data, dict) else None
        tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
        meta = {
            "completion_tokens": int(tokens) if isinstance(tokens, int) else int(bool(text)),
            "completion_tokens_from": "usage" if isinstance(tokens, int) else "chunks",
            "finish_reason": finish,
        }
        return Generation([], text, meta, end - start, end - start)

    async def _read_sse(self, resp: aiohttp.ClientResponse, start: float, where: str) -> Generation:
        """Parse ``data:`` lines until ``[DONE]``; a line that is not JSON, an ``error`` chunk, or a
        stream that ends without ``[DONE]`` and without a finish_reason is an InfraError."""
        ttft: float | None = None
        prev_t = start
        gaps: list[float] = []
        chars: list[int] = []  # text length of each text chunk, the first included
        texts: list[str] = []
        usage: dict[str, Any] | None = None
        finish: str | None = None
        done = False
        client_s = 0.0
        async for raw in resp.content:
            now = time.perf_counter()
            line = raw.strip()
            if not line.startswith(b"data:"):  # blank lines, ": keep-alive" comments, event:/id: fields
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                done = True
                break
            try:
                chunk = json.loads(payload)
            except ValueError:
                broken = _BROKEN_ERROR.match(payload)  # transformers serve writes its message unescaped
                if broken:
                    said = " ".join(broken[1].decode(errors="replace").split())[:300]
                    raise InfraError(f"{where}: the stream reported an error: {said}") from None
                raise InfraError(f"{where}: malformed stream line {payload[:120]!r} (not JSON)") from None
            if not isinstance(chunk, dict):
                raise InfraError(f"{where}: malformed stream line {payload[:120]!r} (not a JSON object)")
            if chunk.get("error"):
                said = error_text(json.dumps(chunk, sort_keys=True))
                raise InfraError(f"{where}: the stream reported an error: {said}")
            if isinstance(chunk.get("usage"), dict):
                usage = chunk["usage"]
            text, fin = _chunk_text(chunk)
            finish = fin or finish
            if text:
                if ttft is None:
                    ttft = now - start
                else:
                    gaps.append(now - prev_t)
                prev_t = now
                chars.append(len(text))
                texts.append(text)
            client_s += time.perf_counter() - now
        end = time.perf_counter()
        if not done and finish is None:
            raise InfraError(
                f"{where}: the stream ended without [DONE] or a finish_reason after {len(texts)} text "
                "chunk(s) (the server closed it early)"
            )
        counted = usage.get("completion_tokens") if usage else None
        from_usage = isinstance(counted, int) and not isinstance(counted, bool) and counted >= 0
        tokens = int(counted) if from_usage else len(texts)  # type: ignore[arg-type]
        per_chunk = spread(tokens, chars)
        meta: dict[str, Any] = {
            "completion_tokens": tokens,
            "finish_reason": finish,
            "completion_tokens_from": "usage" if from_usage else "chunks",
        }
        if usage and isinstance(usage.get("prompt_tokens"), int):
            meta["prompt_tokens"] = usage["prompt_tokens"]
        return Generation(
            [],
            "".join(texts),
            meta,
            end - start,
            ttft if ttft is not None else end - start,
            gaps,
            per_chunk[1:],
            client_s,
        )

    async def server_info(self) -> dict[str, Any]:
        """SGLang's ``/server_info`` behind its OpenAI routes; else the API, the model, and the
        ``version`` of ``GET /version`` (vLLM) when the server answers it."""
        if self.native:
            return await super().server_info()
        info: dict[str, Any] = {"api": self.api, "model": await self.model_name()}
        try:
            async with self.session.get(self.base_url + "/version") as resp:
                data = await resp.json(content_type=None) if resp.status == 200 else None
        except (aiohttp.ClientError, ValueError):
            data = None
        if isinstance(data, dict) and isinstance(data.get("version"), str):
            info["version"] = data["version"]
        return info

    async def flush_cache(self, timeout: float = 30.0) -> bool:
        """SGLang's flush behind its OpenAI routes; an OpenAI-compatible server has none (a no-op)."""
        return await super().flush_cache(timeout) if self.native else True

    async def healthy(self) -> bool:
        if self.native:
            return await super().healthy()
        try:
            async with self.session.get(self.base_url + "/v1/models") as resp:
                return resp.status == 200
        except aiohttp.ClientError:
            return False


def client_for(profile: ServerProfile, url: str) -> Client:
    """The client for ``profile``'s load API: SGLang's ``/generate`` or an OpenAI route."""
    if profile.load_api == "generate":
        return Client(url)
    native = profile.engine_kind.capabilities.native_api
    return OpenAIClient(url, profile.load_api, profile.model or None, native=native)
