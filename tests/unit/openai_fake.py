"""A small OpenAI-compatible server for the tests: streamed /v1/completions and /v1/chat/completions.

Each request streams ``max_tokens`` tokens (``per_chunk`` per SSE chunk) after ``first_delay``
seconds, then one chunk per ``delay`` seconds, a finish chunk, the usage chunk (with
``stream_options.include_usage``) and ``[DONE]``; chat streams a role-only chunk first, as vLLM
does. The served model is ``fake-model``: any other name is a 404, as vLLM answers it. The prompt
picks a fault: ``fail500`` (HTTP 500), ``malformed`` (a data line that is not JSON), ``error`` (an
error chunk), ``cut`` (the stream ends without [DONE] or a finish_reason). ``reject_ignore_eos``:
a 400 for any request with ``ignore_eos``. The bodies received are kept in ``app[BODIES]``.

As a program (the integration test): ``python openai_fake.py PORT [--delay S] [--first-delay S]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from aiohttp import web

MODEL = "fake-model"
BODIES: web.AppKey[list[dict[str, Any]]] = web.AppKey("bodies", list)


def make_app(
    *,
    delay: float = 0.01,
    first_delay: float = 0.03,
    per_chunk: int = 1,
    usage: bool = True,
    reject_ignore_eos: bool = False,
) -> web.Application:
    app = web.Application()
    app[BODIES] = []

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def stream(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        app[BODIES].append(body)
        chat = request.path.endswith("/chat/completions")
        prompt = body["messages"][-1]["content"] if chat else body.get("prompt", "")
        if body.get("model") != MODEL:
            return web.json_response(
                {"error": {"message": f"The model `{body.get('model')}` does not exist."}}, status=404
            )
        if reject_ignore_eos and "ignore_eos" in body:
            return web.json_response(
                {"error": {"message": "Unrecognized request argument supplied: ignore_eos"}}, status=400
            )
        if prompt == "fail500":
            return web.Response(status=500, text="Internal Server Error\n  (engine died)")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)

        async def send(obj: Any) -> None:
            await resp.write(f"data: {json.dumps(obj) if not isinstance(obj, str) else obj}\n\n".encode())

        kind = "chat.completion.chunk" if chat else "text_completion"

        def chunk(text: str | None, finish: str | None = None) -> dict[str, Any]:
            choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
            if chat:
                choice["delta"] = {} if text is None else {"content": text}
            else:
                choice["text"] = text or ""
            return {"id": "x", "object": kind, "model": MODEL, "choices": [choice]}

        await resp.write(b": keep-alive\n\n")
        if chat:
            await send(
                {"id": "x", "object": kind, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
            )
        n = int(body.get("max_tokens", 16))
        sent = 0
        await asyncio.sleep(first_delay)
        while sent < n:
            if prompt == "malformed" and sent == 2:
                await resp.write(b"data: {not json\n\n")
            if prompt == "error" and sent == 2:
                await send({"error": {"message": "out of KV cache", "code": 500}})
            if prompt == "cut" and sent == 2:
                return resp
            k = min(per_chunk, n - sent)
            await send(chunk("".join(f" t{sent + i}" for i in range(k))))
            sent += k
            await asyncio.sleep(delay)
        await send(chunk(None if chat else "", finish="length"))
        if usage and (body.get("stream_options") or {}).get("include_usage"):
            await send(
                {
                    "id": "x",
                    "object": kind,
                    "choices": [],
                    "usage": {
                        "prompt_tokens": len(str(prompt).split()),
                        "completion_tokens": n,
                        "total_tokens": n + len(str(prompt).split()),
                    },
                }
            )
        await send("[DONE]")
        return resp

    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", stream)
    app.router.add_post("/v1/chat/completions", stream)
    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--delay", type=float, default=0.004)
    parser.add_argument("--first-delay", type=float, default=0.01)
    args = parser.parse_args()
    web.run_app(make_app(delay=args.delay, first_delay=args.first_delay), host="127.0.0.1", port=args.port, print=None)


if __name__ == "__main__":
    main()
