"""The aiohttp front end: SGLang-compatible routes (/generate, /health, /server_info, /metrics, ...)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from typing import Any

from aiohttp import web

from specwatch.refserver.dispatch import Dispatcher, QueueFull
from specwatch.refserver.state import RequestState

logger = logging.getLogger("specwatch.refserver.http")
#: How often a non-streamed request checks that its client is still there. aiohttp does not cancel a
#: handler when its client disconnects; SGLang polls on a timeout too (tokenizer_manager).
DISCONNECT_POLL_S = 1.0

VERSION = "0.5.23"
HEALTH_TIMEOUT_S = 20.0
# SGLang's SamplingParams fields (sampling_params.py); the ones the reference honours are marked.
SAMPLING_KEYS = {
    "max_new_tokens", "temperature", "ignore_eos", "stop", "stop_token_ids",  # honoured
    "min_new_tokens", "top_p", "top_k", "min_p", "stop_regex", "frequency_penalty", "presence_penalty",
    "repetition_penalty", "n", "json_schema", "regex", "ebnf", "structural_tag", "skip_special_tokens",
    "no_stop_trim", "stream_interval", "logit_bias", "sampling_seed", "custom_params",
    "spaces_between_special_tokens",
}
GENERATE_KEYS = {
    "text", "input_ids", "sampling_params", "stream", "rid", "return_logprob", "logprob_start_len",
    "top_logprobs_num", "return_text_in_logprobs", "log_metrics", "lora_path", "priority", "custom_labels",
    "return_hidden_states", "return_prompt_token_ids", "modalities", "bootstrap_host", "bootstrap_port",
    "bootstrap_room", "data_parallel_rank", "session_params", "image_data", "audio_data", "video_data",
}


class BadRequest(Exception):
    """A request the server refuses with HTTP 400 and a message."""


def error_json(message: str, status: int = 400) -> web.Response:
    """SGLang's error body: ``{"object":"error","message":...,"type":...,"param":null,"code":...}``."""
    kind = {400: "Bad Request", 404: "Not Found", 429: "Too Many Requests", 500: "Internal Server Error",
            503: "Service Unavailable"}.get(status, "Error")
    body = {"object": "error", "message": message, "type": kind, "param": None, "code": status}
    return web.json_response(body, status=status)


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
        raw = await request.read()
        try:
            return json.loads(raw or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            pos = getattr(exc, "pos", 0)
            raise BadRequest(
                f"1 validation error:\n  {{'type': 'json_invalid', 'loc': ('body', {pos}), 'msg': 'JSON decode "
                f"error', 'input': {{}}, 'ctx': {{'error': {str(exc)!r}}}}}\n\n  {request.method} {request.path}"
            ) from exc

    def _prompts(self, body: dict[str, Any]) -> tuple[list[list[int]], bool]:
        """Token ids of each prompt and whether the input was a batch."""
        text, ids = body.get("text"), body.get("input_ids")
        if (text is None) == (ids is None):
            raise BadRequest("Either text or input_ids should be provided (exactly one of them).")
        if text is not None:
            if isinstance(text, str):
                return [self.tok.encode(text)], False
            if isinstance(text, list) and text and all(isinstance(t, str) for t in text):
                return [self.tok.encode(t) for t in text], True
            raise BadRequest("text must be a string or a non-empty list of strings")
        if isinstance(ids, list) and ids and all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            batch, single = [ids], False
        elif isinstance(ids, list) and ids and all(isinstance(x, list) and x for x in ids):
            batch, single = ids, True
        else:
            raise BadRequest("input_ids must be a non-empty list of ints or a list of such lists")
        vocab = int(self.info.get("vocab_size", 1 << 30))
        for seq in batch:
            for i in seq:
                if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < vocab:
                    raise BadRequest(f"input_ids must be ints in [0, {vocab}); got {i!r}")
        return [list(x) for x in batch], single

    def _sampling(self, sp: Any) -> dict[str, Any]:
        if sp is None:
            sp = {}
        if not isinstance(sp, dict):
            raise BadRequest("sampling_params must be an object")
        unknown = sorted(set(sp) - SAMPLING_KEYS)
        if unknown:
            raise BadRequest(f"Unknown sampling parameter(s): {', '.join(unknown)}")
        mnt = sp.get("max_new_tokens", 128)
        if not isinstance(mnt, int) or isinstance(mnt, bool) or mnt <= 0:
            raise BadRequest(f"max_new_tokens must be a positive integer, got {mnt!r}")
        temp = sp.get("temperature", 1.0)
        if not isinstance(temp, (int, float)) or isinstance(temp, bool) or temp < 0:
            raise BadRequest(f"temperature must be a non-negative number, got {temp!r}")
        stop = sp.get("stop") or ()
        if isinstance(stop, str):
            stop = (stop,)
        if not all(isinstance(s, str) and s for s in stop):
            raise BadRequest("stop must be a string or a list of non-empty strings")
        sti = sp.get("stop_token_ids") or ()
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in sti):
            raise BadRequest("stop_token_ids must be a list of ints")
        ignore_eos = sp.get("ignore_eos", False)
        if not isinstance(ignore_eos, bool):
            raise BadRequest("ignore_eos must be a boolean")
        return {"max_new_tokens": mnt, "temperature": float(temp), "stop": tuple(stop),
                "stop_token_ids": tuple(sti), "ignore_eos": ignore_eos}

    @staticmethod
    def _logprob_opts(body: dict[str, Any]) -> dict[str, Any]:
        """SGLang's logprob request fields (the same for every prompt of a batch)."""
        opts: dict[str, Any] = {}
        for key in ("return_logprob", "return_text_in_logprobs", "return_prompt_token_ids"):
            v = body.get(key)
            if v is not None and not isinstance(v, bool):
                raise BadRequest(f"{key} must be a boolean, got {v!r}")
            opts[key] = bool(v)
        top = body.get("top_logprobs_num")
        top = 0 if top is None else top
        if not isinstance(top, int) or isinstance(top, bool) or top < 0:
            raise BadRequest(f"top_logprobs_num must be a non-negative integer, got {top!r}")
        opts["top_logprobs_num"] = top
        start = body.get("logprob_start_len")
        if start is not None and (not isinstance(start, int) or isinstance(start, bool)):
            raise BadRequest(f"logprob_start_len must be an integer, got {start!r}")
        return opts  # logprob_start_len is accepted, but the reference returns no input logprobs

    def _check_len(self, ids: list[int], max_new_tokens: int) -> None:
        if len(ids) >= self.context_len:
            raise BadRequest(f"The input ({len(ids)} tokens) is longer than the model's context length "
                             f"({self.context_len} tokens).")
        if len(ids) + max_new_tokens > self.context_len:
            raise BadRequest(f"Requested token count exceeds the model's maximum context length of "
                             f"{self.context_len} tokens. You requested a total of {len(ids) + max_new_tokens} "
                             f"tokens: {len(ids)} tokens from the input messages and {max_new_tokens} tokens "
                             "for the completion. Please reduce the number of tokens in the input messages or "
                             "the completion to fit within the limit.")

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
                    waiting.cancel()
                    for st in states:
                        logger.info("Request is disconnected from the client side. Abort request rid=%s", st.rid)
                        self.d.abort(st.rid)
                    return False
            waiting.result()
            return True
        except asyncio.CancelledError:
            waiting.cancel()
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
            body = await self._json(request)
            if not isinstance(body, dict):
                raise BadRequest("The request body must be a JSON object")
            unknown = sorted(set(body) - GENERATE_KEYS)
            if unknown:
                raise BadRequest(f"Unknown field(s) in the request: {', '.join(unknown)}")
            prompts, is_batch = self._prompts(body)
            sp = self._sampling(body.get("sampling_params"))
            logprob = self._logprob_opts(body)
            for ids in prompts:
                self._check_len(ids, sp["max_new_tokens"])
            stream = bool(body.get("stream", False))
            if stream and is_batch:
                raise BadRequest("stream is supported for a single prompt only")
            log_metrics = bool(body.get("log_metrics", True))
            rid = body.get("rid")
            if rid is not None and not isinstance(rid, (str, list)):
                raise BadRequest("rid must be a string")
            rids = rid if isinstance(rid, list) else [rid] * len(prompts)
            if len(rids) != len(prompts) or (len(prompts) > 1 and rid is not None and not isinstance(rid, list)):
                raise BadRequest("rid must be a list with one id per prompt for a batch")
            states: list[RequestState] = []
            try:
                for ids, r in zip(prompts, rids, strict=False):
                    states.append(self._new_state(ids, sp, rid=r, stream=stream, log_metrics=log_metrics,
                                                  logprob=logprob))
            except (QueueFull, BadRequest):
                for st in states:
                    self.d.abort(st.rid)
                raise
        except BadRequest as exc:
            return error_json(str(exc), 400)
        except QueueFull as exc:
            return error_json(str(exc), 503)
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
        body = await self._json(request)
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
            body = await self._json(request)
            if not isinstance(body, dict):
                raise BadRequest("The request body must be a JSON object")
            if body.get("stream"):
                raise BadRequest("stream=true is not supported on /v1/completions by the reference server")
            prompt = body.get("prompt")
            if isinstance(prompt, str):
                ids = self.tok.encode(prompt)
            elif isinstance(prompt, list) and prompt and all(isinstance(i, int) for i in prompt):
                ids = list(prompt)
            else:
                raise BadRequest("prompt must be a string or a list of token ids")
            sp_in = {"max_new_tokens": body.get("max_tokens", 16), "temperature": body.get("temperature", 1.0)}
            if body.get("stop") is not None:
                sp_in["stop"] = body["stop"]
            if body.get("ignore_eos") is not None:
                sp_in["ignore_eos"] = body["ignore_eos"]
            sp = self._sampling(sp_in)
            self._check_len(ids, sp["max_new_tokens"])
            st = self._new_state(ids, sp, rid=None, stream=False, log_metrics=True)
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
        if body.get("return_spec_tokens_details") and self.d.speculative:
            meta = st.meta_info(final=True, **self._spec_kw())
            out["sglext"] = {"spec_tokens_details": {k: v for k, v in meta.items() if k.startswith("spec_")}}
        return web.json_response(out)
