"""The aiohttp front end: SGLang-compatible routes (/generate, /health, /server_info, /metrics, ...)."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
import uuid
from typing import Any

from aiohttp import web

from specwatch.refserver import validate
from specwatch.refserver.dispatch import Dispatcher, QueueFull
from specwatch.refserver.state import RequestState
from specwatch.refserver.validate import GENERATE_KEYS, SAMPLING_KEYS, BadRequest

__all__ = ["GENERATE_KEYS", "SAMPLING_KEYS", "BadRequest", "Frontend", "error_json"]

logger = logging.getLogger("specwatch.refserver.http")
#: How often a non-streamed request checks that its client is still there. aiohttp does not cancel a
#: handler when its client disconnects; SGLang polls on a timeout too (tokenizer_manager).
DISCONNECT_POLL_S = 1.0

VERSION = "0.5.23"
HEALTH_TIMEOUT_S = 20.0
MAX_FLUSH_TIMEOUT_S = 3600.0


def error_json(message: str, status: int = 400) -> web.Response:
    """SGLang's error body: ``{"object":"error","message":...,"type":...,"param":null,"code":...}``."""
    kind = {400: "Bad Request", 404: "Not Found", 429: "Too Many Requests", 500: "Internal Server Error",
            503: "Service Unavailable"}.get(status, "Error")
    body = {"object": "error", "message": message, "type": kind, "param": None, "code": status}
    return web.json_response(body, status=status)


def _cancel_quietly(fut: asyncio.Future[Any]) -> None:
    """Cancel ``fut`` and retrieve its outcome, so asyncio does not log "exception was never retrieved"."""
    fut.cancel()
    fut.add_done_callback(lambda f: f.cancelled() or f.exception())


class Frontend:
    """Route handlers over one Dispatcher."""

    def __init__(self, *, args: Any, dispatcher: Dispatcher, tokenizer: Any, info: dict[str, Any],
                 launch_command: str) -> None:
        self.args = args
        self.d = dispatcher
        self.tok = tokenizer
        self.info = info  # max_total_tokens, context_len, captures, startup_time, ...
        self.launch_command = launch_command
        self.shutting_down = False
        self.context_len = int(info["context_len"])

    # ---- app ---------------------------------------------------------------------------------
    def app(self) -> web.Application:
        """The aiohttp application with every route."""
        app = web.Application(client_max_size=64 << 20)
        r = app.router
        r.add_get("/health", self.health)
        r.add_get("/health_generate", self.health)
        r.add_get("/ready", self.ready)
        r.add_get("/ping", self.ready)
        r.add_get("/server_info", self.server_info)
        r.add_get("/get_server_info", self.server_info)
        r.add_get("/model_info", self.model_info)
        r.add_get("/get_model_info", self.model_info)
        r.add_post("/generate", self.generate)
        r.add_put("/generate", self.generate)
        r.add_route("*", "/flush_cache", self.flush_cache)
        r.add_post("/v1/completions", self.completions)
        r.add_post("/ref/fault", self.ref_fault)  # reference-only (SGLang has no such route)
        r.add_get("/v1/models", self.models)
        if self.args.enable_metrics:
            r.add_get("/metrics", self.metrics)
        return app

    # ---- helpers -----------------------------------------------------------------------------
    def _spec_kw(self) -> dict[str, Any]:
        return {"speculative": self.d.speculative, "num_draft_tokens": self.d.num_draft_tokens}

    async def _json(self, request: web.Request) -> Any:
        """The checked JSON body (see ``validate.parse_json``); BadRequest when it is not one."""
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge as exc:
            raise BadRequest(f"The request body is too large: {exc.text}") from exc
        return validate.parse_json(raw, request.method, request.path)

    @property
    def _vocab_size(self) -> int:
        return int(self.info.get("vocab_size", validate.MAX_TOKEN_ID))

    def _new_state(self, ids: list[int], sp: dict[str, Any], *, rid: str | None, stream: bool,
                   log_metrics: bool, logprob: dict[str, Any] | None = None) -> RequestState:
        st = RequestState(rid=rid or uuid.uuid4().hex, input_ids=ids, max_new_tokens=sp["max_new_tokens"],
                          stop=sp["stop"], log_metrics=log_metrics, stream=stream, **(logprob or {}))
        if st.rid in self.d.reqs:
            raise BadRequest(f"Duplicate request id {st.rid!r}")
        self.d.submit(st, temperature=sp["temperature"], ignore_eos=sp["ignore_eos"],
                      stop_token_ids=sp["stop_token_ids"])
        return st

    async def _wait_connected(self, request: web.Request, states: list[RequestState]) -> bool:
        """Wait for every request of a non-streamed call; False (all aborted) when the client went
        away first, so that an abandoned request stops taking the GPU."""
        waiting = asyncio.ensure_future(asyncio.gather(*(self._wait(st) for st in states)))
        try:
            while not waiting.done():
                await asyncio.wait({waiting}, timeout=DISCONNECT_POLL_S)
                transport = request.transport
                if not waiting.done() and (transport is None or transport.is_closing()):
                    _cancel_quietly(waiting)
                    for st in states:
                        logger.info("Request is disconnected from the client side. Abort request rid=%s", st.rid)
                        self.d.abort(st.rid)
                    return False
            waiting.result()
            return True
        except asyncio.CancelledError:
            _cancel_quietly(waiting)
            for st in states:
                self.d.abort(st.rid)
            raise

    async def _wait(self, st: RequestState) -> None:
        while not st.done:
            st.event.clear()
            if st.done:
                break
            await st.event.wait()

    def _unavailable(self) -> web.Response | None:
        if self.shutting_down:
            return error_json("The server is shutting down.", 503)
        if self.d.fatal:
            return error_json("The scheduler process failed; see the server log.", 503)
        return None

    # ---- routes ------------------------------------------------------------------------------
    async def generate(self, request: web.Request) -> web.StreamResponse:
        """POST /generate: single or batch, optionally streamed (SSE)."""
        if (resp := self._unavailable()) is not None:
            return resp
        try:
            req = validate.generate_request(await self._json(request), encode=self.tok.encode,
                                            vocab_size=self._vocab_size, context_len=self.context_len,
                                            max_batch=self.d.limit)
            states: list[RequestState] = []
            try:
                for ids, sp, rid in zip(req.prompts, req.sampling, req.rids, strict=True):
                    states.append(self._new_state(ids, sp, rid=rid, stream=req.stream, log_metrics=req.log_metrics,
                                                  logprob=req.logprob))
            except (QueueFull, BadRequest):
                for st in states:
                    self.d.abort(st.rid)
                raise
        except BadRequest as exc:
            return error_json(str(exc), 400)
        except QueueFull as exc:
            return error_json(str(exc), 503)
        stream, is_batch = req.stream, req.is_batch
        if stream:
            return await self._stream(request, states[0])
        if not await self._wait_connected(request, states):
            return error_json("client disconnected", 499)
        for st in states:
            if st.error is not None:
                return error_json(st.error[1], st.error[0])
        out = [st.response(final=True, **self._spec_kw()) for st in states]
        return web.json_response(out if is_batch else out[0])

    async def _stream(self, request: web.Request, st: RequestState) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        sent = 0
        try:
            while True:
                st.event.clear()
                if st.error is not None:
                    err = {"error": {"message": st.error[1], "code": st.error[0]}}
                    await resp.write(f"data: {json.dumps(err)}\n\n".encode())
                    break
                final = st.finish_reason is not None
                if len(st.output_ids) > sent or final:
                    sent = len(st.output_ids)
                    chunk = st.response(final=final, **self._spec_kw())
                    await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
                if final:
                    break
                await st.event.wait()
            await resp.write(b"data: [DONE]\n\n")
        except (asyncio.CancelledError, ConnectionResetError):
            self.d.abort(st.rid)
            raise
        await resp.write_eof()
        return resp

    async def health(self, request: web.Request) -> web.Response:
        """A real 1-token generate (input_ids=[0], log_metrics=False); 200 when any output arrives."""
        if self._unavailable() is not None:
            return web.Response(status=503)
        sp = {"max_new_tokens": 1, "temperature": 0.0, "stop": (), "stop_token_ids": (), "ignore_eos": False}
        try:
            st = self._new_state([0], sp, rid=f"HEALTH_CHECK_{uuid.uuid4().hex}", stream=False, log_metrics=False)
        except QueueFull:
            return web.Response(status=503)
        try:
            while not (st.output_ids or st.done):
                st.event.clear()
                await asyncio.wait_for(st.event.wait(), HEALTH_TIMEOUT_S)
        except asyncio.TimeoutError:
            self.d.abort(st.rid)
            return web.Response(status=503)
        if st.error is not None:
            return web.Response(status=503)
        if not st.done:
            self.d.abort(st.rid)
        return web.Response(status=200)

    async def ready(self, request: web.Request) -> web.Response:
        """200 when serving, 503 otherwise (no generation)."""
        return web.Response(status=503 if self._unavailable() is not None else 200)

    def _internal_state(self) -> dict[str, Any]:
        caps = self.info.get("captures", [])
        graph = {"prefill": 0.0, "decode": 0.0, "target_verify": 0.0, "draft_prefill": 0.0,
                 "draft_decode": 0.0, "draft_extend": 0.0}
        for c in caps:
            key = "target_verify" if (c["role"], c["kind"]) == ("target", "verify") else f"{c['role']}_{c['kind']}"
            key = "decode" if key == "target_decode" else key
            if key in graph:
                graph[key] += round(float(c["mem_gb"]), 6)
        target = [c for c in caps if c["role"] == "target"]
        st: dict[str, Any] = {
            **self.args.resolved_dict(),
            "world_size": self.args.tp_size,
            "startup_time": self.info.get("startup_time", {}),
            "effective_max_running_requests_per_dp": self.args.max_running_requests,
            "last_gen_throughput": self.d.last_gen_throughput,
            "memory_usage": {"weight": 0.0, "kvcache": 0.0, "startup_available": self.info.get("avail_mem_gb", 0.0),
                             "token_capacity": self.info["max_total_tokens"], "token_capacity_swa": None,
                             "graph": graph},
            "disaggregation_mode": "null",
            "decode_cuda_graph_bs": list(target[0]["bs"]) if target else [],
            "decode_cuda_graph_memory_gb": sum(c["mem_gb"] for c in target),
        }
        if self.d.speculative and self.d.avg_spec_accept_length is not None:
            st["avg_spec_accept_length"] = self.d.avg_spec_accept_length
        return st

    async def server_info(self, request: web.Request) -> web.Response:
        """Resolved args flat, scheduler info, and internal_states[0]."""
        body = {
            **self.args.resolved_dict(),
            "launch_command": self.launch_command,
            "status": "ready" if self._unavailable() is None else "not_ready",
            "max_total_num_tokens": self.info["max_total_tokens"],
            "max_req_input_len": self.context_len - 1,
            "startup_time": self.info.get("startup_time", {}),
            "kv_events": None,
            "internal_states": [self._internal_state()],
            "version": VERSION,
            "frontend": "python",
        }
        return web.json_response(body)

    async def model_info(self, request: web.Request) -> web.Response:
        """GET /model_info."""
        a = self.args
        return web.json_response({
            "model_path": a.model_path, "served_model_name": a.served_model_name, "tokenizer_path": a.model_path,
            "is_generation": True, "preferred_sampling_params": None, "weight_version": "default",
            "load_format": "auto", "reasoning_parser": None, "tool_call_parser": None,
            "disaggregation_mode": "null", "has_image_understanding": False, "has_audio_understanding": False,
            "model_type": "refserver", "architectures": ["RefServerForCausalLM"]})

    async def models(self, request: web.Request) -> web.Response:
        """GET /v1/models."""
        return web.json_response({"object": "list", "data": [
            {"id": self.args.served_model_name, "object": "model", "created": int(time.time()),
             "owned_by": "sglang", "root": self.args.served_model_name, "max_model_len": self.context_len}]})

    async def flush_cache(self, request: web.Request) -> web.Response:
        """Only when idle: reset KV/radix state and the accept-length totals."""
        try:
            timeout = float(request.query.get("timeout", "0"))
        except ValueError:
            return web.Response(status=400, text="timeout must be a number\n")
        if not (math.isfinite(timeout) and 0 <= timeout <= MAX_FLUSH_TIMEOUT_S):
            return web.Response(status=400, text=f"timeout must be in [0, {MAX_FLUSH_TIMEOUT_S:g}] seconds\n")
        deadline = time.monotonic() + timeout
        while not self.d.idle and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if not self.d.idle:
            return web.Response(status=400, text="Cache not flushed. Please check the server log for detail "
                                                 "(there are running or queued requests).\n")
        if await self.d.flush():
            self.d.avg_spec_accept_length = None
            logger.info("Cache flushed successfully!")
            return web.Response(status=200, text="Cache flushed.\nPlease check backend logs for more details. "
                                                 "(When there are running or waiting requests, the operation "
                                                 "will not be performed.)\n")
        return web.Response(status=400, text="Cache not flushed. Please check the server log for detail.\n")

    async def ref_fault(self, request: web.Request) -> web.Response:
        """Reference-only: set ``--ref-fault-slowdown`` while serving, ``{"slowdown_pct": PCT}``.

        Lets a validation run measure several slowdowns in one boot (docs/validation/).
        """
        try:
            body = await self._json(request)
        except BadRequest as exc:
            return web.json_response({"error": str(exc)}, status=400)
        pct = body.get("slowdown_pct") if isinstance(body, dict) else None
        if isinstance(pct, bool) or not isinstance(pct, (int, float)) or not 0 <= pct <= 10000:
            return web.json_response({"error": f"slowdown_pct must be a number in [0, 10000], got {pct!r}"},
                                     status=400)
        self.d.set_fault_slowdown(float(pct))
        self.args.ref_fault_slowdown = float(pct)
        logger.info("Reference fault: slowdown set to %g%%", pct)
        return web.json_response({"slowdown_pct": float(pct)})

    async def metrics(self, request: web.Request) -> web.Response:
        """Prometheus text."""
        return web.Response(text=self.d.registry.render(), content_type="text/plain",
                            headers={"X-Content-Type-Options": "nosniff"})

    async def completions(self, request: web.Request) -> web.Response:
        """POST /v1/completions (non-streaming)."""
        if (resp := self._unavailable()) is not None:
            return resp
        try:
            req = validate.completion_request(await self._json(request), encode=self.tok.encode,
                                              vocab_size=self._vocab_size, context_len=self.context_len)
            ids = req.ids
            st = self._new_state(ids, req.sampling, rid=None, stream=False, log_metrics=True)
        except BadRequest as exc:
            return error_json(str(exc), 400)
        except QueueFull as exc:
            return error_json(str(exc), 503)
        if not await self._wait_connected(request, [st]):
            return error_json("client disconnected", 499)
        if st.error is not None:
            return error_json(st.error[1], st.error[0])
        fr = st.finish_reason or {}
        choice: dict[str, Any] = {"index": 0, "text": st.text, "logprobs": None,
                                  "finish_reason": fr.get("type"), "matched_stop": fr.get("matched")}
        out: dict[str, Any] = {
            "id": st.rid, "object": "text_completion", "created": int(time.time()),
            "model": self.args.served_model_name, "choices": [choice],
            "usage": {"prompt_tokens": len(ids), "completion_tokens": len(st.output_ids),
                      "total_tokens": len(ids) + len(st.output_ids), "prompt_tokens_details": None,
                      "reasoning_tokens": 0}}
        if req.spec_details and self.d.speculative:
            meta = st.meta_info(final=True, **self._spec_kw())
            out["sglext"] = {"spec_tokens_details": {k: v for k, v in meta.items() if k.startswith("spec_")}}
        return web.json_response(out)
