"""Time torch.distributed all-reduce between this host's GPUs (gloo between CPU processes without
one), one process per rank, spawned from a parent whose environment is a server profile's, so that
NCCL reads the variables the server's workers would read.

Run by :mod:`specwatch.checks.allreduce`, which owns the timeout and the process group::

    python -m specwatch.checks.allreduce_ranks --world 2 --device cuda --sizes 2048,14336 --out times.json

Graphed mode follows the recipe measured on the H200 pair (shared/ref/device-facts.md): one eager
all-reduce on the default stream creates the communicator, three warm-up calls run on a side
stream, then ``calls`` all-reduces are captured in one CUDA graph per size and replayed. No
barrier between sizes (a probe that had one hung there).

Each rank writes everything it prints, NCCL's own lines included (its stdout and stderr at the file
descriptor level), to ``rank-<r>.log`` in ``--log-dir``, with a progress line before every step
that can block; when the parent kills a hung probe it reports what each rank printed last.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

#: What each rank prints once its timings are done (the parent then accepts a hang in the teardown).
TIMINGS_DONE = "all sizes timed"
#: Version of the JSON this writes.
FORMAT_VERSION = 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _log_to_file(rank: int, log_dir: str) -> None:
    """Send this process's stdout and stderr (C level too, so NCCL's lines) to ``rank-<rank>.log``."""
    fd = os.open(os.path.join(log_dir, f"rank-{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _say(rank: int, msg: str) -> None:
    print(f"[rank {rank}] {msg}", flush=True)


def _rank(rank: int, a: argparse.Namespace, port: int, launcher_pid: int) -> None:
    from specwatch.server.process import exit_with_parent

    exit_with_parent(parent_pid=launcher_pid)  # a rank hung in NCCL must not outlive its launcher
    if a.log_dir:
        _log_to_file(rank, a.log_dir)
    if rank == a.hang_rank:  # a fault for the tests: a rank that never joins
        _say(rank, "hanging before init_process_group (--hang-rank)")
        time.sleep(3600)
    import torch
    import torch.distributed as dist

    cuda = a.device == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
    _say(rank, f"init_process_group {'nccl' if cuda else 'gloo'}, world {a.world}, tcp://127.0.0.1:{port}")
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=a.world)
    _say(rank, "joined; first all-reduce (creates the communicator)")
    dev = torch.device("cuda", rank) if cuda else torch.device("cpu")
    dtype = torch.bfloat16 if cuda else torch.float32

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    dist.all_reduce(torch.zeros(1, device=dev))  # the communicator, on the default stream
    times: dict[str, list[float]] = {}
    graphs: list[Any] = []  # captured all-reduces hold the communicator: released before it is destroyed
    for size in a.sizes:
        _say(rank, f"size {size} B: {'warm-up on a side stream, then capture' if a.graphed else 'warm-up'}")
        x = torch.zeros(max(1, size // dtype.itemsize), dtype=dtype, device=dev)
        if a.graphed:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    dist.all_reduce(x)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(a.calls):
                    dist.all_reduce(x)
            graphs.append(graph)
            step = graph.replay
        else:
            def step(x: Any = x) -> None:
                for _ in range(a.calls):
                    dist.all_reduce(x)
        step()  # warm-up
        sync()
        samples = []
        for _ in range(a.samples):
            sync()
            t0 = time.perf_counter()
            step()
            sync()
            samples.append((time.perf_counter() - t0) / a.calls * 1e6)
        times[str(size)] = samples
        _say(rank, f"size {size} B: {a.samples} samples done")
    if rank == 0:
        doc = {"version": FORMAT_VERSION, "backend": dist.get_backend(), "world": a.world, "graphed": a.graphed,
               "dtype": str(dtype).removeprefix("torch."), "calls": a.calls, "samples_us": times}
        tmp = Path(a.out).with_suffix(".tmp")
        tmp.write_text(json.dumps(doc))
        tmp.replace(a.out)  # whole or absent: the parent may read it while a rank hangs in the teardown
    _say(rank, f"{TIMINGS_DONE}; releasing {len(graphs)} CUDA graph(s), then destroy_process_group")
    sync()
    graphs.clear()
    sync()
    if a.hang_teardown:  # a fault for the tests: the teardown never returns, as NCCL's did once here
        _say(rank, "hanging in the teardown (--hang-teardown)")
        time.sleep(3600)
    dist.destroy_process_group()
    _say(rank, "process group destroyed")


def _rank_entry(rank: int, a: argparse.Namespace, port: int, launcher_pid: int) -> None:
    """A rank's process: a failure's traceback goes to the launcher's output (the rank's log keeps
    its own last lines), then exit 1."""
    launcher_err = os.dup(2)
    try:
        _rank(rank, a, port, launcher_pid)
    except BaseException:
        import traceback

        os.write(launcher_err, f"rank {rank} failed:\n{traceback.format_exc()}".encode(errors="replace"))
        raise SystemExit(1) from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--device", choices=("cuda", "cpu"), required=True)
    ap.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], required=True,
                    help="bytes, comma-separated")
    ap.add_argument("--calls", type=int, default=20, help="all-reduces per timed sample (per graph when graphed)")
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--graphed", action="store_true")
    ap.add_argument("--out", required=True)
    ap.add_argument("--log-dir", default="", help="write each rank's output to rank-<r>.log here")
    ap.add_argument("--hang-rank", type=int, default=-1, help=argparse.SUPPRESS)  # a fault for the tests
    ap.add_argument("--hang-teardown", action="store_true", help=argparse.SUPPRESS)  # a fault for the tests
    a = ap.parse_args(argv)
    return _spawn(a)


def _spawn(a: argparse.Namespace) -> int:
    """One spawned process per rank; the first rank to fail kills the others (exit 1). The stdlib's
    spawn, not torch.multiprocessing's: the launcher itself never imports torch (seconds a launch
    on a loaded CPU), only the ranks do."""
    import multiprocessing as mp
    from multiprocessing.connection import wait

    ctx = mp.get_context("spawn")  # CUDA in the ranks needs spawn
    port = _free_port()
    procs = [ctx.Process(target=_rank_entry, args=(r, a, port, os.getpid()), name=f"rank-{r}")
             for r in range(a.world)]
    for p in procs:
        p.start()
    pending = list(procs)
    while pending:
        wait([p.sentinel for p in pending])
        for p in [p for p in pending if p.exitcode is not None]:
            pending.remove(p)
            if p.exitcode != 0:
                for q in pending:
                    q.kill()
                for q in pending:
                    q.join()
                print(f"rank {procs.index(p)} exited with code {p.exitcode}", file=sys.stderr, flush=True)
                return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
