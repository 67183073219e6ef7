"""``python -m specwatch.refserver [SGLang flags]``: spawn one worker per TP rank, wait until they
are ready (graphs captured), then open the HTTP port; SIGTERM/SIGINT stop everything.

FAULT SWITCHES (reference-only; see ``specwatch.refserver.args`` and ``--help``):
``--ref-fault-eager-verify``, ``--ref-fault-slowdown PCT``, ``--ref-fault-diverge``, ``--ref-fault-perturb-draft S``,
``--ref-fault-stale-draft [TOKENS]``, ``--ref-fault-draft-context POS``, ``--ref-fault-drop-env PREFIX``.

Top-level imports stay minimal: spawned workers import this module as ``__mp_main__`` before they
run, and they must retitle themselves as early as possible.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

READY_TIMEOUT_S = 900.0
JOIN_TIMEOUT_S = 5.0
READY_LINE = "The server is fired up and ready to roll!"


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Launcher:
    """Owns the worker processes and the HTTP server of one run."""

    def __init__(self, args: Any, context_len: int) -> None:
        import multiprocessing as mp
        import os

        self.args = args
        self.context_len = context_len
        self.ctx = mp.get_context("spawn")
        self.cmd_q = self.ctx.Queue()
        self.out_q = self.ctx.Queue()
        self.procs: list[Any] = []
        self.pid = os.getpid()
        self.exit_code = 0

    def spawn(self) -> None:
        """Start one worker per rank with the parent's environment (minus --ref-fault-drop-env)."""
        import os

        from specwatch.refserver import worker
        from specwatch.refserver.args import worker_env

        a = self.args
        dist_port = _free_port() if a.tp_size > 1 else 0
        saved = dict(os.environ)
        env = worker_env(a)
        try:
            if env != saved:
                os.environ.clear()
                os.environ.update(env)
            for rank in range(a.tp_size):
                cfg = worker.WorkerConfig(
                    tp_rank=rank, tp_size=a.tp_size, device=a.device, dtype=a.dtype, preset=a.model_path,
                    spec_algorithm=a.speculative_algorithm, num_steps=int(a.speculative_num_steps or 0),
                    num_draft_tokens=int(a.speculative_num_draft_tokens or 1),
                    max_running_requests=int(a.max_running_requests), context_len=self.context_len,
                    cuda_graph_bs=tuple(a.cuda_graph_bs), graph_backend=a.cuda_graph_backend_decode,
                    decode_log_interval=a.decode_log_interval, log_level=a.log_level, dist_port=dist_port,
                    parent_pid=self.pid, seed=int(a.random_seed or 0),
                    fault_eager_verify=a.ref_fault_eager_verify, fault_slowdown_pct=a.ref_fault_slowdown,
                    fault_diverge=a.ref_fault_diverge, fault_perturb_draft=a.ref_fault_perturb_draft,
                    fault_stale_draft_after=-1 if a.ref_fault_stale_draft is None else a.ref_fault_stale_draft,
                    fault_draft_context=a.ref_fault_draft_context,
                    fault_batch_draft=a.ref_fault_batch_draft)
                p = self.ctx.Process(target=worker.run, args=(cfg, self.cmd_q if rank == 0 else None, self.out_q),
                                     name=f"scheduler_{rank}", daemon=False)
                p.start()
                self.procs.append(p)
        finally:
            if os.environ != saved:
                os.environ.clear()
                os.environ.update(saved)

    def wait_ready(self) -> dict[str, Any]:
        """Block until every rank reported ready; raises RuntimeError on a failure."""
        import queue
        import time

        deadline = time.monotonic() + READY_TIMEOUT_S
        infos: dict[int, dict[str, Any]] = {}
        while len(infos) < self.args.tp_size:
            if time.monotonic() > deadline:
                raise RuntimeError("the workers did not become ready in time")
            try:
                msg = self.out_q.get(timeout=0.2)
            except queue.Empty:
                dead = [p for p in self.procs if not p.is_alive()]
                if dead:
                    raise RuntimeError(f"worker {dead[0].name} (pid {dead[0].pid}) exited with code "
                                       f"{dead[0].exitcode} during startup") from None
                continue
            if msg[0] == "ready":
                infos[msg[1]] = msg[2]
            elif msg[0] == "fatal":  # the worker logged its traceback itself
                from specwatch.refserver.dispatch import last_line

                raise RuntimeError(f"worker TP{msg[1]} failed during startup: {last_line(msg[2])}")
        return infos[0]

    def stop_workers(self) -> None:
        """Ask the workers to leave, join them, then kill what is left (frees the GPUs)."""
        with contextlib.suppress(OSError, ValueError):
            self.cmd_q.put(("shutdown",))
        import time

        deadline = time.monotonic() + JOIN_TIMEOUT_S
        for p in self.procs:
            p.join(timeout=max(0.0, deadline - time.monotonic()))
        for p in self.procs:
            if p.is_alive():
                p.kill()
                p.join(timeout=2)
        for q in (self.cmd_q, self.out_q):
            q.cancel_join_thread()
            q.close()


async def _serve(launcher: Launcher, info: dict[str, Any], t_start: float) -> int:
    import asyncio
    import logging
    import os
    import shlex
    import signal
    import time

    from aiohttp import web

    from specwatch.refserver import metrics
    from specwatch.refserver.dispatch import Dispatcher
    from specwatch.refserver.http import Frontend
    from specwatch.refserver.state import RequestState
    from specwatch.refserver.tokenizer import ByteTokenizer

    log = logging.getLogger("specwatch.refserver")
    args = launcher.args
    loop = asyncio.get_running_loop()
    tok = ByteTokenizer()
    registry = metrics.Registry(args.served_model_name)
    graph_mem = sum(c["mem_gb"] for c in info.get("captures", []))
    metrics.init_constants(registry, args=args, max_total_tokens=info["max_total_tokens"],
                           context_len=launcher.context_len, graph_mem_gb=graph_mem)
    disp = Dispatcher(args=args, cmd_q=launcher.cmd_q, out_q=launcher.out_q, decode=tok.decode,
                      registry=registry)
    disp.start(loop)
    cuda_graph = {"prefill": 0.0, "decode": 0.0, "target_verify": 0.0, "draft_prefill": 0.0,
                  "draft_decode": 0.0, "draft_extend": 0.0}
    for c in info.get("captures", []):
        key = {("target", "verify"): "target_verify", ("target", "decode"): "decode"}.get(
            (c["role"], c["kind"]), f"{c['role']}_{c['kind']}")
        if key in cuda_graph:
            cuda_graph[key] += c["elapsed_s"]
    info = {**info, "context_len": launcher.context_len,
            "startup_time": {"load_weight": info.get("load_s", 0.0), "cuda_graph": cuda_graph,
                             "scheduler_e2e": time.perf_counter() - t_start}}
    launch = "python -m specwatch.refserver " + shlex.join(sys.argv[1:])
    fe = Frontend(args=args, dispatcher=disp, tokenizer=tok, info=info, launch_command=launch)
    runner = web.AppRunner(fe.app(), access_log=None, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, args.host, args.port, reuse_address=True)
    await site.start()
    log.info("INFO:     Started server process [%d]", os.getpid())
    log.info("INFO:     Uvicorn running on http://%s:%d (Press CTRL+C to quit)", args.host, args.port)

    # Warmup: one 1-token request that is not counted in the metrics (SGLang's warmup).
    warm = RequestState(rid="WARMUP", input_ids=tok.encode("The capital city of France is"), max_new_tokens=1,
                        log_metrics=False)
    disp.submit(warm, temperature=0.0, ignore_eos=True, stop_token_ids=())
    try:
        await asyncio.wait_for(_until_done(warm), 120)
    except asyncio.TimeoutError:
        log.error("warmup request did not finish")
    log.info(READY_LINE)

    stop = asyncio.Event()
    reason: list[str] = []

    def on_signal(name: str) -> None:
        reason.append(name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig.name)

    async def watchdog() -> None:
        while not stop.is_set():
            await asyncio.sleep(0.5)
            dead = [p for p in launcher.procs if not p.is_alive()]
            if dead or disp.fatal:
                who = dead[0] if dead else None
                log.error("Subprocess %s (pid=%s) crashed with exit code %s. Shutting down.",
                          who.name if who else "scheduler", who.pid if who else "?", who.exitcode if who else "?")
                launcher.exit_code = 1
                reason.append("worker failure")
                stop.set()

    wd = asyncio.create_task(watchdog())
    await stop.wait()
    wd.cancel()
    if reason and reason[0] in ("SIGTERM", "SIGINT"):
        log.info("%s received. Draining requests and shutting down...", reason[0])
    fe.shutting_down = True
    await runner.cleanup()
    disp.stop()
    return launcher.exit_code


async def _until_done(st: Any) -> None:
    while not st.done:
        st.event.clear()
        await st.event.wait()


def main(argv: list[str] | None = None) -> int:
    """Parse flags, boot the workers, serve until a signal."""
    import asyncio
    import logging
    import time

    t_start = time.perf_counter()
    from specwatch.refserver import logfmt
    from specwatch.refserver.args import build_parser, parse_args
    from specwatch.refserver.preset import get_preset

    logfmt.configure_logging("info")
    args = parse_args(argv)
    logfmt.configure_logging(args.log_level)
    log = logging.getLogger("specwatch.refserver")
    try:
        preset = get_preset(args.model_path)
    except ValueError as exc:
        build_parser().error(f"--model-path: {exc}")
        return 2
    context_len = int(args.context_length or preset.context_len)
    log.info("server_args=%s", args.resolved_dict())
    launcher = Launcher(args, context_len)
    try:
        launcher.spawn()
        info = launcher.wait_ready()
        return asyncio.run(_serve(launcher, info, t_start))
    except RuntimeError as exc:
        log.error("%s", exc)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        launcher.stop_workers()


if __name__ == "__main__":
    sys.exit(main())
