"""The main process's request manager (SGLang's TokenizerManager): admission, the command queue to
rank 0, and a reader thread that turns worker outputs into request updates and metrics."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from typing import Any

from specwatch.refserver import metrics
from specwatch.refserver.state import RequestState

logger = logging.getLogger("specwatch.refserver.dispatch")


def last_line(text: str) -> str:
    """The last non-empty line of a traceback: the exception itself."""
    lines = [ln for ln in str(text).splitlines() if ln.strip()]
    return lines[-1].strip() if lines else "unknown error"


class QueueFull(Exception):
    """More requests than the server admits (running + bounded waiting queue)."""


class Dispatcher:
    """Owns the in-flight requests; all state changes run on the event loop thread."""

    def __init__(self, *, args: Any, cmd_q: Any, out_q: Any, decode: Any, registry: metrics.Registry) -> None:
        self.args = args
        self.cmd_q = cmd_q
        self.out_q = out_q
        self.decode = decode
        self.registry = registry
        self.speculative = bool(args.is_speculative)
        self.num_draft_tokens = int(args.speculative_num_draft_tokens or 1)
        self.limit = int(args.max_running_requests) + int(args.max_queued_requests)
        self.reqs: dict[str, RequestState] = {}
        self.gauges: dict[str, Any] = {}
        self.avg_spec_accept_length: float | None = None
        self.last_gen_throughput = 0.0
        self.flush_waiters: list[asyncio.Future[bool]] = []
        self.fatal: str | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- reader thread -----------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the thread that feeds worker messages into the event loop."""
        self.loop = loop
        self._thread = threading.Thread(target=self._read, name="refserver-reader", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the reader thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def _read(self) -> None:
        assert self.loop is not None
        while not self._stop.is_set():
            try:
                msg = self.out_q.get(timeout=0.2)
            except queue.Empty:
                continue
            except (EOFError, OSError):
                return
            try:
                self.loop.call_soon_threadsafe(self._handle, msg)
            except RuntimeError:  # loop closed
                return

    def _handle(self, msg: tuple) -> None:
        kind = msg[0]
        if kind == "step":
            self._on_step(msg[1], msg[2])
        elif kind == "add_error":
            st = self.reqs.get(msg[1])
            if st is not None:
                st.error = (400, msg[2])
                st.event.set()
                self._drop(st)
        elif kind == "flush":
            waiters, self.flush_waiters = self.flush_waiters, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(bool(msg[1]))
        elif kind == "fatal":
            self.fatal = f"worker TP{msg[1]} failed:\n{msg[2]}"
            # The worker logged its whole traceback already; name the exception once more here.
            logger.error("Scheduler TP%s failed: %s", msg[1], last_line(msg[2]))
            for st in list(self.reqs.values()):
                st.error = (500, "the scheduler process failed")
                st.event.set()

    def _on_step(self, view: Any, gauges: dict[str, Any] | None) -> None:
        metrics.on_step(self.registry, view, gauges, self.speculative)
        if gauges:
            self.gauges.update({k: v for k, v in gauges.items() if v is not None})
            self.last_gen_throughput = float(gauges.get("gen_throughput", self.last_gen_throughput))
            if self.speculative:
                self.avg_spec_accept_length = gauges.get("avg_spec_accept_length")
        if view.mode == "prefill" and len(view.new_tokens) == 1 and view.cached_token:
            st = self.reqs.get(next(iter(view.new_tokens)))
            if st is not None:
                st.cached_tokens = view.cached_token
        for rid, n in view.accept_lens.items():
            st = self.reqs.get(rid)
            if st is not None and st.finish_reason is None:
                st.add_verify(n)
        now = time.perf_counter()
        for rid, ids in view.new_tokens.items():
            st = self.reqs.get(rid)
            if st is None:
                continue
            if ids and st.finish_reason is None:
                since, first = st.token_timing(now)
                if st.log_metrics and first:
                    metrics.on_first_token(self.registry, since, st.stream)
                elif st.log_metrics:
                    metrics.on_new_tokens(self.registry, since, len(ids))
            if st.add_tokens(ids, self.decode, view.logprobs.get(rid)):
                self.cmd_q.put(("abort", rid))
            st.event.set()
        for rid, reason in view.finished.items():
            st = self.reqs.get(rid)
            if st is None:
                continue
            st.finish(reason)
            st.event.set()
        for rid in list(view.new_tokens) + list(view.finished):
            st = self.reqs.get(rid)
            if st is not None and st.finish_reason is not None:
                self._complete(st)

    # ---- requests ----------------------------------------------------------------------------
    def submit(self, st: RequestState, *, temperature: float, ignore_eos: bool,
               stop_token_ids: tuple[int, ...]) -> None:
        """Admit a request or raise QueueFull."""
        if len(self.reqs) >= self.limit:
            raise QueueFull(
                f"The request queue is full: {len(self.reqs)} requests in flight, the server admits "
                f"{self.args.max_running_requests} running + {self.args.max_queued_requests} queued "
                "(--max-running-requests, --max-queued-requests)")
        if self.speculative:
            st.histogram = [0] * self.num_draft_tokens
        self.reqs[st.rid] = st
        self.cmd_q.put(("add", {"rid": st.rid, "input_ids": list(st.input_ids),
                                "max_new_tokens": st.max_new_tokens, "temperature": temperature,
                                "ignore_eos": ignore_eos, "stop_token_ids": tuple(stop_token_ids),
                                "top_logprobs_num": st.top_logprobs_num if st.return_logprob else -1}))

    def abort(self, rid: str) -> None:
        """Client went away: stop generating and forget the request."""
        st = self.reqs.get(rid)
        if st is None:
            return
        self.cmd_q.put(("abort", rid))
        if st.finish_reason is None:
            st.finish({"type": "abort", "message": "client disconnected"})
            if st.log_metrics:
                self.registry.inc("sglang:num_aborted_requests_total", 1, self.registry.tok())
        self._drop(st)

    def _complete(self, st: RequestState) -> None:
        if st.rid not in self.reqs:
            return
        if st.log_metrics:
            metrics.on_finish(self.registry, prompt_tokens=len(st.input_ids),
                              completion_tokens=len(st.output_ids), cached_tokens=st.cached_tokens,
                              verify_ct=st.verify_ct, streaming=st.stream, speculative=self.speculative,
                              aborted=False, e2e_latency_s=(st.finished_at or time.perf_counter()) - st.created)
        self._drop(st)

    def _drop(self, st: RequestState) -> None:
        self.reqs.pop(st.rid, None)

    @property
    def idle(self) -> bool:
        """No request in flight."""
        return not self.reqs

    async def flush(self, timeout: float = 10.0) -> bool:
        """Ask the workers to flush; True on success."""
        assert self.loop is not None
        fut: asyncio.Future[bool] = self.loop.create_future()
        self.flush_waiters.append(fut)
        self.cmd_q.put(("flush",))
        try:
            return await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            return False

    def set_fault_slowdown(self, pct: float) -> None:
        """Reference-only: change ``--ref-fault-slowdown`` on every rank while serving."""
        self.cmd_q.put(("fault", float(pct)))

    def shutdown_workers(self) -> None:
        """Tell rank 0 (and through it every rank) to leave its loop."""
        with contextlib.suppress(OSError, ValueError):
            self.cmd_q.put(("shutdown",))
