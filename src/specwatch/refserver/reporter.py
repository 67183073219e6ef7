"""Scheduler-side statistics of rank 0: Decode/Prefill log lines and accept-length windows.

Formulas follow SGLang 0.5.23 (metrics_reporter.py, batch_result_processor.py):
  window accept len  = sum(num_correct_drafts + bs) / sum(bs)   (raw accept_lens, bonus included)
  window accept rate = sum(num_correct_drafts) / (sum(bs) * (num_draft_tokens - 1))
  gen throughput     = decode tokens since the last Decode line / time since the last Decode line
  avg_spec_accept_length (server_info) = the same as accept len, folded in at each Decode line,
  cumulative since start or the last successful flush; absent before the first line.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from specwatch.refserver import logfmt
from specwatch.refserver.step import StepOutput

logger = logging.getLogger("specwatch.refserver.scheduler")


@dataclass
class Occupancy:
    """Running and waiting requests as the scheduler sees them (tracked from commands and outputs)."""

    active: set[str] = field(default_factory=set)
    started: set[str] = field(default_factory=set)

    def add(self, rid: str) -> None:
        self.active.add(rid)

    def remove(self, rid: str) -> None:
        self.active.discard(rid)
        self.started.discard(rid)

    @property
    def running(self) -> int:
        return len(self.started)

    @property
    def queued(self) -> int:
        return len(self.active) - len(self.started)


class StepReporter:
    """Accumulates decode windows and prints the Decode/Prefill lines; returns the gauges."""

    def __init__(self, *, speculative: bool, num_draft_tokens: int, interval: int, device: str,
                 enabled: bool = True) -> None:
        self.speculative = speculative
        self.num_draft_tokens = num_draft_tokens
        self.interval = interval
        self.graph_label = logfmt.graph_label(device)
        self.enabled = enabled
        self.forward_ct_decode = 0
        self.last_decode_tic = time.perf_counter()
        self.last_prefill_tic = time.perf_counter()
        self.win_gen_tokens = 0
        self.win_accept = 0
        self.win_bs = 0
        self.win_correct = 0
        self.total_accept = 0
        self.total_forward = 0
        self.last_gen_throughput = 0.0

    def reset_spec_totals(self) -> None:
        """What a successful /flush_cache resets (scheduler.reset_metrics)."""
        self.total_accept = 0
        self.total_forward = 0

    def avg_spec_accept_length(self) -> float | None:
        """Cumulative accept length, None until the first Decode line since start or flush."""
        if not self.speculative or self.total_forward == 0:
            return None
        return self.total_accept / self.total_forward

    def on_step(self, view: StepOutput, occ: Occupancy) -> dict[str, Any] | None:
        """Account one batch; returns the gauge update when a Decode line fired."""
        if view.mode == "prefill":
            self._on_prefill(view, occ)
            return None
        return self._on_decode(view, occ)

    def _on_prefill(self, view: StepOutput, occ: Occupancy) -> None:
        now = time.perf_counter()
        tput = view.new_token / max(now - self.last_prefill_tic, 1e-9)
        self.last_prefill_tic = now
        if self.enabled:
            logger.info(logfmt.prefill_line(
                new_seq=view.new_seq or view.bs, new_token=view.new_token, cached_token=view.cached_token,
                token_usage=view.token_usage, running=occ.running,
                queue=max(0, occ.queued - len(view.new_tokens)), graph_label=self.graph_label,
                graph=view.can_run_cuda_graph, input_throughput=tput))

    def _on_decode(self, view: StepOutput, occ: Occupancy) -> dict[str, Any] | None:
        self.forward_ct_decode += 1
        if self.speculative and view.accept_lens:
            accepted = sum(view.accept_lens.values())
            self.win_accept += accepted
            self.win_bs += view.bs
            self.win_correct += accepted - len(view.accept_lens)
            self.win_gen_tokens += accepted
        else:
            self.win_gen_tokens += view.bs
        if self.forward_ct_decode % self.interval != 0:
            return None
        now = time.perf_counter()
        self.last_gen_throughput = self.win_gen_tokens / max(now - self.last_decode_tic, 1e-9)
        self.last_decode_tic = now
        gauges: dict[str, Any] = {
            "gen_throughput": self.last_gen_throughput, "num_running_reqs": view.bs,
            "num_used_tokens": view.num_used_tokens, "token_usage": view.token_usage,
            "num_queue_reqs": occ.queued,
        }
        accept_len = accept_rate = None
        if self.speculative:
            accept_len = self.win_accept / self.win_bs if self.win_bs else 0.0
            denom = self.win_bs * (self.num_draft_tokens - 1)
            accept_rate = self.win_correct / denom if denom else 0.0
            self.total_accept += self.win_accept
            self.total_forward += self.win_bs
            gauges["spec_accept_length"] = accept_len
            gauges["spec_accept_rate"] = accept_rate
        gauges["avg_spec_accept_length"] = self.avg_spec_accept_length()
        if self.enabled:
            logger.info(logfmt.decode_line(
                running=view.bs, num_tokens=view.num_used_tokens, token_usage=view.token_usage,
                graph_label=self.graph_label, graph=view.can_run_cuda_graph,
                gen_throughput=self.last_gen_throughput, queue=occ.queued,
                accept_len=accept_len, accept_rate=accept_rate))
        self.win_gen_tokens = self.win_accept = self.win_bs = self.win_correct = 0
        return gauges
