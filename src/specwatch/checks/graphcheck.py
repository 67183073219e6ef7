"""Did the verify step run as a CUDA graph? Four signals, strongest first, and the cause when not.

1. ``sglang:cuda_graph_passes_total{mode="decode_cuda_graph"}`` against ``{mode="decode_none"}``
   across the workload (one increment per decode/verify batch);
2. the ``cuda graph:`` field of the Decode batch lines written during the workload;
3. the startup capture lines (``Capture target verify CUDA graph end. bs=[...]``) or
   ``/server_info`` ``decode_cuda_graph_bs``, against the batch sizes the workload ran;
4. timing: the verify-cycle time against the baseline server's decode step time.
Pure: it reads data already collected by :mod:`specwatch.load.measure` and :mod:`specwatch.signals.logscan`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specwatch.signals.logscan import CaptureRecord, DecodeRecord

#: A graphed verify of a few tokens costs about 1.2x a graphed decode step (device-facts: 0.86 vs
#: 0.72 ms); an eager one about 5x. Above this ratio the timing alone points at an eager verify.
EAGER_TIMING_RATIO = 2.5


@dataclass
class GraphReport:
    """The verdict, which signal decided it, the cause when it failed, and every signal's reading."""

    ok: bool | None  # None: no signal could answer
    decided_by: str
    cause: str = ""
    signals: dict[str, str] = field(default_factory=dict)

    def message(self) -> str:
        head = {True: "verify ran as CUDA graphs", False: "verify ran WITHOUT CUDA graphs",
                None: "could not tell whether verify ran as CUDA graphs"}[self.ok]
        lines = [f"{head} (decided by {self.decided_by})"]
        if self.cause:
            lines.append(f"cause: {self.cause}")
        lines += [f"  {name}: {reading}" for name, reading in self.signals.items()]
        return "\n".join(lines)


def _state(server_info: Mapping[str, Any]) -> Mapping[str, Any]:
    states = server_info.get("internal_states") or [{}]
    return states[0] if states else {}


def captured_verify_bs(server_info: Mapping[str, Any], captures: Sequence[CaptureRecord]) -> list[int] | None:
    """Captured target-verify batch sizes: from the capture log lines, else ``/server_info``; None if none."""
    for rec in captures:
        if rec.role == "target" and rec.kind in ("verify", "decode") and rec.event == "end" and rec.bs:
            return list(rec.bs)
    bs = _state(server_info).get("decode_cuda_graph_bs")
    return list(bs) if bs else None


def _disabled_cause(server_info: Mapping[str, Any]) -> str | None:
    if server_info.get("disable_cuda_graph"):
        return "--disable-cuda-graph is set: no verify graph is captured"
    if server_info.get("disable_decode_cuda_graph"):
        return "--disable-decode-cuda-graph is set: no verify graph is captured"
    backend = server_info.get("cuda_graph_backend_decode") or (
        (server_info.get("cuda_graph_config") or {}).get("decode") or {}).get("backend")
    if backend == "disabled":
        return "--cuda-graph-backend-decode=disabled: no verify graph is captured"
    return None


def explain_eager(
    server_info: Mapping[str, Any], captures: Sequence[CaptureRecord], batch_sizes: Sequence[int], graph_label: str,
) -> str:
    """The most specific cause of an eager verify that the outside of the server shows."""
    if graph_label and not graph_label.startswith("cuda"):
        return (f"the server runs on {graph_label.split()[0].upper()} (log label '{graph_label}'), "
                "where no CUDA graphs exist")
    disabled = _disabled_cause(server_info)
    if disabled:
        return disabled
    captured = captured_verify_bs(server_info, captures)
    if not captured:
        return "no 'Capture target verify CUDA graph' line and no decode_cuda_graph_bs: nothing was captured"
    biggest = max(batch_sizes, default=0)
    if biggest > max(captured):
        mrr = server_info.get("max_running_requests")
        return (f"the workload ran batches of up to {biggest} requests but verify graphs were captured only up to "
                f"bs={max(captured)}; batches above it verify eagerly (--max-running-requests {mrr} is above "
                f"the captured maximum: raise --cuda-graph-max-bs-decode or lower --max-running-requests)")
    return ("verify graphs were captured for these batch sizes but did not replay: a server-side switch or "
            "patch runs verify eager (check server flags and local patches)")


def check_verify_graphs(
    *,
    counters: Mapping[str, float] | None,
    decode_records: Sequence[DecodeRecord],
    captures: Sequence[CaptureRecord],
    server_info: Mapping[str, Any],
    batch_sizes: Sequence[int],
    verify_cycle_ms: float | None = None,
    decode_step_ms: float | None = None,
) -> GraphReport:
    """Judge graph use in the verify step from every signal available.

    ``counters`` maps ``decode_cuda_graph`` and ``decode_none`` to their deltas over the workload
    (None without /metrics). ``batch_sizes`` are the running-batch sizes the workload produced.
    """
    signals: dict[str, str] = {}
    verdict: bool | None = None
    decided = "no signal"
    label = next((r.graph_label for r in decode_records), "")
    if counters is not None:
        graphed, eager = counters.get("decode_cuda_graph", 0.0), counters.get("decode_none", 0.0)
        total = graphed + eager
        signals["metrics"] = (f"{eager:.0f} of {total:.0f} verify steps eager (cuda_graph_passes_total "
                              f"decode_none vs decode_cuda_graph)" if total else "no verify steps counted")
        if total:
            verdict, decided = eager == 0, "sglang:cuda_graph_passes_total"
    if decode_records:
        eager_lines = sum(1 for r in decode_records if not r.graph)
        signals["log"] = f"{eager_lines} of {len(decode_records)} Decode batch lines say '{label}: False'"
        if verdict is None:
            verdict, decided = eager_lines == 0, "Decode batch lines"
    captured = captured_verify_bs(server_info, captures)
    signals["capture"] = (f"verify graphs captured for bs={captured}" if captured else "no verify graph captured")
    if captured and batch_sizes and max(batch_sizes) > max(captured):
        signals["capture"] += f"; workload ran bs up to {max(batch_sizes)}: not covered"
    if verify_cycle_ms and decode_step_ms:
        ratio = verify_cycle_ms / decode_step_ms
        signals["timing"] = (f"verify cycle {verify_cycle_ms:.2f} ms vs baseline decode step {decode_step_ms:.2f} ms "
                             f"= {ratio:.1f}x (an eager verify is typically > {EAGER_TIMING_RATIO}x)")
        if verdict is None:
            verdict, decided = ratio <= EAGER_TIMING_RATIO, "timing"
    if verdict is None and captured is not None:
        verdict = bool(max(batch_sizes, default=1) <= max(captured))
        decided = "capture lines"
    cause = "" if verdict is not False else explain_eager(server_info, captures, batch_sizes, label)
    return GraphReport(ok=verdict, decided_by=decided, cause=cause, signals=signals)
