"""CUDA graph runners: one captured graph per batch size for a fixed-width step function.

A runner holds static input buffers (tokens [bs, T], start positions [bs], slots [bs]) and the
static logits of each captured batch size. A batch is padded up to the next captured size (padding
rows write only the KV cache's scratch slot) and the graph is replayed. Batches larger than the
largest captured size cannot run here; the engine runs them eager, as SGLang does.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable

import torch

StepFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class GraphRunner:
    """Captures ``fn(tokens, start_pos, slots) -> logits`` for each batch size in ``bs_list``."""

    def __init__(self, fn: StepFn, *, role: str, kind: str, num_tokens_per_req: int, bs_list: list[int],
                 device: torch.device, scratch_slot: int, pool=None) -> None:
        self.fn, self.role, self.kind = fn, role, kind
        self.num_tokens_per_req = num_tokens_per_req
        self.bs_list = sorted(set(bs_list))
        self.device, self.scratch_slot, self.pool = device, scratch_slot, pool
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.inputs: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        self.outputs: dict[int, torch.Tensor] = {}

    @property
    def max_bs(self) -> int:
        """Largest captured batch size (0 before capture)."""
        return max(self.graphs) if self.graphs else 0

    def capture(self) -> tuple[float, float]:
        """Warm up and capture every batch size, largest first; returns (elapsed_s, mem_gb)."""
        t0 = time.perf_counter()
        free0 = torch.cuda.mem_get_info(self.device)[0]
        stream = torch.cuda.Stream(device=self.device)
        for bs in sorted(self.bs_list, reverse=True):
            t = self.num_tokens_per_req
            tokens = torch.zeros((bs, t), dtype=torch.long, device=self.device)
            pos = torch.zeros((bs,), dtype=torch.long, device=self.device)
            slots = torch.full((bs,), self.scratch_slot, dtype=torch.long, device=self.device)
            stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(stream):
                for _ in range(3):
                    self.fn(tokens, pos, slots)
            torch.cuda.current_stream(self.device).wait_stream(stream)
            torch.cuda.synchronize(self.device)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool, stream=stream):
                out = self.fn(tokens, pos, slots)
            torch.cuda.synchronize(self.device)
            self.graphs[bs], self.inputs[bs], self.outputs[bs] = graph, (tokens, pos, slots), out
        free1 = torch.cuda.mem_get_info(self.device)[0]
        return time.perf_counter() - t0, max(0.0, (free0 - free1) / 2**30)

    def can_run(self, bs: int) -> bool:
        """True when a captured size can hold a batch of ``bs`` requests."""
        return 0 < bs <= self.max_bs

    def padded_bs(self, bs: int) -> int:
        """The captured size that a batch of ``bs`` replays."""
        return self.bs_list[bisect.bisect_left(self.bs_list, bs)]

    def replay(self, tokens: torch.Tensor, start_pos: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """Logits [B, T, V] of the batch, computed by replaying the padded graph."""
        b = tokens.shape[0]
        pb = self.padded_bs(b)
        st, sp, ss = self.inputs[pb]
        st[:b].copy_(tokens)
        sp[:b].copy_(start_pos)
        ss[:b].copy_(slots)
        if pb > b:
            st[b:].zero_()
            sp[b:].zero_()
            ss[b:].fill_(self.scratch_slot)
        self.graphs[pb].replay()
        return self.outputs[pb][:b]
