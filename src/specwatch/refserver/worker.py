"""One tensor-parallel rank in a spawned process: retitle, join torch.distributed, run the Engine.

Rank 0 receives commands from the main process (add, abort, flush, shutdown), broadcasts them to
every rank over a gloo control group each iteration, all ranks apply them to their Engine in the
same order and call ``engine.step()``; rank 0 sends the step outputs back. Heavy imports (torch,
the engine) happen after ``setproctitle`` so the title is set as early as possible.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

PR_SET_PDEATHSIG = 1
IDLE_WAIT_S = 0.05
CRASH_REPORT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class WorkerConfig:
    """Everything a worker needs (plain data: it is pickled into the spawned process)."""

    tp_rank: int
    tp_size: int
    device: str
    dtype: str
    preset: str
    spec_algorithm: str | None
    num_steps: int
    num_draft_tokens: int
    max_running_requests: int
    context_len: int
    cuda_graph_bs: tuple[int, ...]
    graph_backend: str
    decode_log_interval: int
    log_level: str
    dist_port: int
    parent_pid: int
    seed: int = 0
    fault_eager_verify: bool = False
    fault_slowdown_pct: float = 0.0
    fault_diverge: bool = False
    fault_perturb_draft: float = 0.0
    fault_stale_draft_after: int = -1
    fault_draft_context: int = 0
    fault_batch_draft: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def process_title(tp_rank: int, tp_size: int) -> str:
    """``refserver::scheduler`` at TP=1, ``refserver::scheduler_TP{r}`` at TP>1 (SGLang's rule)."""
    return "refserver::scheduler" + (f"_TP{tp_rank}" if tp_size > 1 else "")


def _die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to SIGKILL us when the main process dies; exit now if it already has."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except OSError:  # pragma: no cover - not Linux
        pass
    if os.getppid() != parent_pid:
        os._exit(0)


def run(cfg: WorkerConfig, cmd_q: Any, out_q: Any) -> None:
    """Entry point of the spawned worker process."""
    import setproctitle

    setproctitle.setproctitle(process_title(cfg.tp_rank, cfg.tp_size))
    _die_with_parent(cfg.parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process coordinates Ctrl-C
    try:
        _Worker(cfg, cmd_q, out_q).main()
    except Exception:  # whatever ends the loop: say why before exiting
        _report_crash(cfg, out_q, traceback.format_exc())
        os._exit(1)
    os._exit(0)


def _report_crash(cfg: WorkerConfig, out_q: Any, tb: str) -> None:
    """Log the traceback to the server log (SGLang's "Scheduler hit an exception: ..."), then hand it
    to the main process and wait until it is in the pipe: ``os._exit`` would drop a queued message."""
    import logging

    try:
        if not logging.getLogger().handlers:  # died before _init_logging
            from specwatch.refserver import logfmt

            logfmt.configure_logging(cfg.log_level, logfmt.rank_prefix(cfg.tp_rank, cfg.tp_size))
        logging.getLogger("specwatch.refserver.scheduler").error("Scheduler hit an exception: %s", tb)
    except Exception:  # logging itself failed: write the traceback as it is
        sys.stderr.write(f"Scheduler hit an exception: {tb}\n")
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    def deliver() -> None:
        with contextlib.suppress(Exception):
            out_q.put(("fatal", cfg.tp_rank, tb))
            out_q.close()
            out_q.join_thread()

    sender = threading.Thread(target=deliver, daemon=True)  # bounded: never hang on a full pipe
    sender.start()
    sender.join(CRASH_REPORT_TIMEOUT_S)


def _gb(nbytes: float) -> float:
    return nbytes / (1 << 30)


class _Worker:
    """The state of one rank."""

    def __init__(self, cfg: WorkerConfig, cmd_q: Any, out_q: Any) -> None:
        self.cfg = cfg
        self.cmd_q = cmd_q
        self.out_q = out_q
        self.rank = cfg.tp_rank
        self.ctrl_group: Any = None
        self.tp_group: Any = None

    # ---- setup -------------------------------------------------------------------------------
    def _init_logging(self) -> None:
        from specwatch.refserver import logfmt

        logfmt.configure_logging(self.cfg.log_level, logfmt.rank_prefix(self.rank, self.cfg.tp_size))

    def _init_device(self) -> None:
        import torch

        if self.cfg.device == "cuda":
            torch.cuda.set_device(self.rank)
        else:
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // self.cfg.tp_size))

    def _init_dist(self) -> None:
        if self.cfg.tp_size == 1:
            return
        import datetime

        import torch.distributed as dist

        backend = "nccl" if self.cfg.device == "cuda" else "gloo"
        kwargs: dict[str, Any] = {}
        if backend == "nccl":
            import torch

            kwargs["device_id"] = torch.device("cuda", self.rank)
        dist.init_process_group(backend=backend, init_method=f"tcp://127.0.0.1:{self.cfg.dist_port}",
                                world_size=self.cfg.tp_size, rank=self.rank,
                                timeout=datetime.timedelta(seconds=600), **kwargs)
        self.tp_group = dist.group.WORLD
        self.ctrl_group = dist.new_group(backend="gloo") if backend != "gloo" else dist.group.WORLD

    def _build_engine(self) -> Any:
        from specwatch.refserver.engine import Engine, EngineConfig

        c = self.cfg
        ecfg = EngineConfig(
            preset=c.preset, device=c.device, dtype=c.dtype, tp_rank=c.tp_rank, tp_size=c.tp_size,
            spec_algorithm=c.spec_algorithm, num_steps=c.num_steps,
            max_running_requests=c.max_running_requests, context_len=c.context_len,
            cuda_graph_bs=c.cuda_graph_bs, fault_eager_verify=c.fault_eager_verify,
            fault_slowdown_pct=c.fault_slowdown_pct, fault_diverge=c.fault_diverge,
            fault_perturb_draft=c.fault_perturb_draft, fault_stale_draft_after=c.fault_stale_draft_after,
            fault_draft_context=c.fault_draft_context, fault_batch_draft=c.fault_batch_draft, seed=c.seed)
        return Engine(ecfg, tp_group=self.tp_group)

    def _avail_mem_gb(self) -> float:
        if self.cfg.device == "cuda":
            import torch

            free, _ = torch.cuda.mem_get_info()
            return _gb(free)
        import psutil

        return _gb(psutil.virtual_memory().available)

    def _capture(self, engine: Any) -> list[dict[str, Any]]:
        """Run engine.capture() with SGLang's Capture lines; returns the captures as dicts."""
        import logging

        log = logging.getLogger("specwatch.refserver.capture")
        c = self.cfg
        graphs = bool(c.cuda_graph_bs)
        kind = "verify" if c.spec_algorithm else "decode"
        ntok = c.num_draft_tokens if c.spec_algorithm else 1
        if graphs:
            log.info("Capture target %s CUDA graph begin. backend=%s, num_tokens_per_req=%d, avail mem=%.2f GB",
                     kind, c.graph_backend, ntok, self._avail_mem_gb())
        else:
            log.info("Disable decode CUDA graph because cuda_graph_config resolved decode.backend='disabled' "
                     "(device=%s)", c.device)
        infos = list(engine.capture() or [])
        out = [dict(role=i.role, kind=i.kind, bs=list(i.bs), num_tokens_per_req=i.num_tokens_per_req,
                    elapsed_s=float(i.elapsed_s), mem_gb=float(i.mem_gb)) for i in infos]
        if not graphs:
            return out
        avail = self._avail_mem_gb()
        for i in out:
            if i["role"] == "target":
                log.info("Capture target %s CUDA graph end. bs=%s, elapsed=%.2f s, mem usage=%.2f GB, "
                         "avail mem=%.2f GB.", i["kind"], i["bs"], i["elapsed_s"], i["mem_gb"], avail)
        if self.rank == 0:
            for i in out:
                if i["role"] == "draft":
                    log.info("Capture draft %s CUDA graph begin. backend=%s, num_tokens_per_req=%d, bs=%s, "
                             "avail mem=%.2f GB", i["kind"], c.graph_backend, i["num_tokens_per_req"], i["bs"],
                             avail)
                    log.info("Capture draft %s CUDA graph end. elapsed=%.2f s, mem usage=%.2f GB, "
                             "avail mem=%.2f GB.", i["kind"], i["elapsed_s"], i["mem_gb"], avail)
        return out

    # ---- loop --------------------------------------------------------------------------------
    def main(self) -> None:
        import faulthandler
        import signal

        faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 <pid>`: dump stacks of a stuck worker
        self._init_logging()
        self._init_device()
        t0 = time.perf_counter()
        self._init_dist()
        engine = self._build_engine()
        load_s = time.perf_counter() - t0
        captures = self._capture(engine)
        if self.rank == 0:
            import logging

            c = self.cfg
            mem_kind = "gpu" if c.device == "cuda" else "cpu"
            logging.getLogger("specwatch.refserver.scheduler").info(
                "max_total_num_tokens=%d, chunked_prefill_size=%d, max_prefill_tokens=%d, max_running_requests=%d, "
                "context_len=%d, available_%s_mem=%.2f GB", engine.max_total_tokens, -1,
                int(getattr(engine, "max_prefill_tokens", 16384)), c.max_running_requests, c.context_len,
                mem_kind, self._avail_mem_gb())
        ready = {"rank": self.rank, "max_total_tokens": int(engine.max_total_tokens),
                 "vocab_size": int(engine.vocab_size), "captures": captures, "load_s": load_s,
                 "pid": os.getpid(), "avail_mem_gb": self._avail_mem_gb()}
        self.out_q.put(("ready", self.rank, ready))
        self._loop(engine)

    def _recv_commands(self, engine: Any) -> list[tuple]:
        """Rank 0 drains its queue (blocking briefly when idle); every rank gets the same list."""
        cmds: list[tuple] = []
        if self.rank == 0:
            try:
                if not engine.has_work():
                    cmds.append(self.cmd_q.get(timeout=IDLE_WAIT_S))
                while True:
                    cmds.append(self.cmd_q.get_nowait())
            except queue.Empty:
                pass
        if self.cfg.tp_size > 1:
            cmds = self._broadcast(cmds)
        return cmds

    def _broadcast(self, cmds: list[tuple]) -> list[tuple]:
        """Rank 0's command list to every rank over the gloo control group (a size, then a payload
        only when there is one: an empty iteration costs one 8-byte broadcast)."""
        import pickle

        import torch
        import torch.distributed as dist

        payload = pickle.dumps(cmds) if (self.rank == 0 and cmds) else b""
        size = torch.tensor([len(payload)], dtype=torch.int64)
        dist.broadcast(size, src=0, group=self.ctrl_group)
        n = int(size.item())
        if n == 0:
            return []
        buf = (torch.frombuffer(bytearray(payload), dtype=torch.uint8) if self.rank == 0
               else torch.empty(n, dtype=torch.uint8))
        dist.broadcast(buf, src=0, group=self.ctrl_group)
        return cmds if self.rank == 0 else pickle.loads(buf.numpy().tobytes())

    def _loop(self, engine: Any) -> None:
        from specwatch.refserver.engine import RequestSpec
        from specwatch.refserver.reporter import Occupancy, StepReporter

        c = self.cfg
        reporter = StepReporter(speculative=bool(c.spec_algorithm), num_draft_tokens=c.num_draft_tokens,
                                interval=c.decode_log_interval, device=c.device, enabled=self.rank == 0)
        occ = Occupancy()
        last_parent_check = time.monotonic()
        while True:
            now = time.monotonic()
            if now - last_parent_check > 0.5:
                last_parent_check = now
                if os.getppid() != c.parent_pid:
                    os._exit(0)
            for cmd in self._recv_commands(engine):
                op = cmd[0]
                if op == "shutdown":
                    return
                if op == "add":
                    spec = cmd[1]
                    try:
                        engine.add_request(RequestSpec(**spec))
                        occ.add(spec["rid"])
                    except (ValueError, TypeError) as exc:  # refused: that request fails, the server serves on
                        if self.rank == 0:
                            self.out_q.put(("add_error", spec["rid"], str(exc)))
                elif op == "abort":
                    if cmd[1] in occ.active:
                        engine.abort(cmd[1])
                        occ.remove(cmd[1])
                elif op == "flush":
                    ok = bool(engine.flush())
                    if ok:
                        reporter.reset_spec_totals()
                    if self.rank == 0:
                        self.out_q.put(("flush", ok))
                elif op == "fault":
                    engine.fault_slowdown_pct = float(cmd[1])
            if not engine.has_work():
                continue
            out = engine.step()
            if out is None or self.rank != 0:
                if out is not None:
                    self._track(out.mode, list(out.new_tokens), list(out.finished), occ)
                continue
            gauges = reporter.on_step(out, occ)
            self._track(out.mode, list(out.new_tokens), list(out.finished), occ)
            self.out_q.put(("step", out, gauges))

    @staticmethod
    def _track(mode: str, rids: list[str], finished: list[str], occ: Any) -> None:
        if mode == "prefill":
            occ.started.update(r for r in rids if r in occ.active)
        for rid in finished:
            occ.remove(rid)
