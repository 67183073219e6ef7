"""Did the verify step run as a CUDA graph? Four signals, strongest first, and the cause when not.

1. ``sglang:cuda_graph_passes_total{mode="decode_cuda_graph"}`` against ``{mode="decode_none"}``
   across the workload (one increment per decode/verify batch);
2. the ``cuda graph:`` field of the Decode batch lines written during the workload;
3. the startup capture lines (``bs=[...]`` on the ``Capture target verify CUDA graph end.`` line in SGLang
   0.5.23, on the ``begin.`` line in 0.5.16/0.5.17) or ``/server_info`` ``decode_cuda_graph_bs`` (0.5.23),
   against the batch sizes the workload ran;
4. timing: the verify-cycle time against the baseline server's decode step time.

When the verify ran eagerly, the batch sizes of the Decode lines (``#running-req``, each line with
its ``cuda graph`` flag) are set against the captured ones: SGLang 0.5.23 replays a verify graph
only for a batch no larger than the largest captured size (decode_cuda_graph_runner.py
``can_run_graph``), so a batch above it names the capture limit (``--cuda-graph-max-bs-decode``
or ``--cuda-graph-bs-decode``) as below the running batch (``--max-running-requests``, the load's
concurrency).
Pure: it reads data already collected by :mod:`specwatch.load.measure` and :mod:`specwatch.signals.logscan`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specwatch.engines.registry import native_metrics
from specwatch.engines.sglang import CAPTURE_LIMIT_KEYS
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
    """Captured target-verify batch sizes: from the capture log lines, else ``/server_info``; None if none.

    SGLang 0.5.23 prints ``bs=[...]`` on the ``end`` line (the runner's own list), 0.5.14 to 0.5.17 on the
    ``begin`` line only (cuda_graph_setup.py ``capture_decode_graph``), 0.5.12 and 0.5.13 on a line of its own
    (event ``bs``: cuda_graph_runner.py); an ``end`` line's list wins, then the first other one.
    ``/server_info`` ``internal_states[0].decode_cuda_graph_bs`` exists from 0.5.23 on.
    """
    target = [r for r in captures if r.role == "target" and r.kind in ("verify", "decode") and r.bs]
    rec = next((r for r in target if r.event == "end"), target[0] if target else None)
    if rec is not None:
        return list(rec.bs or ())
    bs = _state(server_info).get("decode_cuda_graph_bs")
    return list(bs) if bs else None


def overlap_scheduled(server_info: Mapping[str, Any]) -> bool:
    """Whether SGLang's overlap scheduler runs: ``--disable-overlap-schedule`` unset (its default, 0.5.16-0.5.23)."""
    return not server_info.get("disable_overlap_schedule", False)


def verify_pass_problem(counters: Mapping[str, float], verify_calls: float, requests: int, *, overlap: bool,
                        edge: float = 1.0) -> str | None:
    """Why the decode passes of a single-stream workload do not cover its verify calls (None: they do).

    SGLang 0.5.16-0.5.23 count a ``cuda_graph_passes_total`` ``decode_*`` pass per decode batch whose
    result is processed (batch_result_processor.py, ``increment_decode_cuda_graph_pass``), and a
    ``spec_verify_calls_total`` call per verify that committed tokens to a request still running
    (``req.spec_verify_ct += 1``, skipped once ``req.finished()``). The overlap scheduler launches the
    next batch before it processes the result that finishes a request (scheduler.py
    ``event_loop_overlap``), so each request adds one pass whose verify commits nothing: passes lie in
    ``[V, V + R]`` (``V`` without overlap), ± ``edge`` for a log window's edge. Fewer passes than verify
    calls means verify steps the counter never saw; an eager verify shows as ``decode_none`` passes.
    """
    passes = counters.get("decode_cuda_graph", 0.0) + counters.get("decode_none", 0.0)
    extra = requests if overlap else 0
    if verify_calls - edge <= passes <= verify_calls + extra + edge:
        return None
    why = (f"up to one more per request ({requests} requests), the overlap scheduler's pass launched before it "
           "saw the request finish" if overlap else "one per verify call (no overlap scheduler)")
    return (f"{passes:g} decode passes (cuda_graph_passes_total decode_cuda_graph + decode_none) for {verify_calls:g} "
            f"verify calls (spec_verify_calls_total): expected {why}")


@dataclass(frozen=True)
class BatchUse:
    """The Decode lines of one running-batch size: how many said the verify graph ran, how many not."""

    bs: int
    graphed: int
    eager: int


def batch_use(decode_records: Sequence[DecodeRecord]) -> list[BatchUse]:
    """Per ``#running-req`` value of the Decode lines, the count of ``graph: True`` and ``False`` lines."""
    counts: dict[int, list[int]] = {}
    for rec in decode_records:
        counts.setdefault(rec.running, [0, 0])[0 if rec.graph else 1] += 1
    return [BatchUse(bs, g, e) for bs, (g, e) in sorted(counts.items())]


def _ranges(values: Sequence[int]) -> str:
    """``[1, 2, 3, 4, 8]`` -> ``"1-4, 8"``."""
    out: list[str] = []
    vals = sorted(set(values))
    i = 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        out.append(str(vals[i]) if i == j else f"{vals[i]}-{vals[j]}")
        i = j + 1
    return ", ".join(out)


def describe_batches(uses: Sequence[BatchUse], captured: Sequence[int] | None) -> str:
    """One line: which batch sizes ran graphed and which eager, and which lay above the captured ones."""
    graphed = [u.bs for u in uses if u.graphed]
    eager = [u.bs for u in uses if u.eager]
    parts = []
    if graphed:
        parts.append(f"graphed at bs {_ranges(graphed)}")
    if eager:
        parts.append(f"eager at bs {_ranges(eager)}")
    text = "Decode lines ran " + " and ".join(parts) if parts else "no Decode lines"
    if captured and uses:
        above = [u.bs for u in uses if u.bs > max(captured)]
        text += (f"; bs {_ranges(above)} above the largest captured bs={max(captured)}" if above
                 else f"; every batch within the captured sizes (largest bs={max(captured)})")
    return text


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


def max_running(server_info: Mapping[str, Any]) -> int | None:
    """The resolved ``--max-running-requests`` (SGLang keeps None when unset; the scheduler's value then)."""
    for value in (server_info.get("max_running_requests"),
                  _state(server_info).get("effective_max_running_requests_per_dp"),
                  _state(server_info).get("max_running_requests")):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def capture_limit(server_info: Mapping[str, Any]) -> tuple[int, str] | None:
    """(the decode capture limit ``/server_info`` resolved, the flag that sets it), or None when it holds none:
    ``cuda_graph_max_bs_decode`` (0.5.14 on), ``cuda_graph_max_bs`` (0.5.12/0.5.13: :data:`CAPTURE_LIMIT_KEYS`)."""
    for key, flag in CAPTURE_LIMIT_KEYS:
        limit = server_info.get(key)
        if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
            return limit, flag
    return None


def _limit_flag(server_info: Mapping[str, Any], captured: Sequence[int]) -> str:
    """The capture-limit flag as this server set it (SGLang 0.5.23, srt/arg_groups/fields/exec_.py; before
    0.5.14 ``--cuda-graph-max-bs``)."""
    listed = server_info.get("cuda_graph_bs_decode")
    if listed:
        return f"--cuda-graph-bs-decode {' '.join(str(b) for b in listed)}"
    if found := capture_limit(server_info):
        return f"{found[1]} {found[0]}"
    default = ((server_info.get("cuda_graph_config") or {}).get("decode") or {}).get("max_bs")
    shown = default if default else max(captured)
    return f"--cuda-graph-max-bs-decode (unset: SGLang's default, from GPU memory, gave {shown})"


def capture_limit_cause(
    server_info: Mapping[str, Any], captured: Sequence[int], biggest: int, concurrency: int | None = None,
    *, observed: bool = True,
) -> str:
    """Why batches of ``biggest`` requests verified eagerly: the capture limit is below the running batch.

    Names the flag that set the limit (``--cuda-graph-bs-decode`` or ``--cuda-graph-max-bs-decode``),
    what let the batch grow (``--max-running-requests``, the load's concurrency), and the two fixes.
    ``observed``: the Decode lines showed such batches (else they could run, by the load's concurrency).
    """
    top = max(captured)
    mrr = max_running(server_info)
    reach = ([f"--max-running-requests {mrr}"] if mrr is not None else []) + (
        [f"load concurrency {concurrency}"] if concurrency else [])
    bounds = [x for x in (mrr, concurrency) if x]
    need = max(biggest, min(bounds)) if bounds else biggest
    flag = _limit_flag(server_info, captured)
    ran = "ran" if observed else "could run"
    return (f"{flag} is below the running batch: batches of up to {biggest} requests {ran}"
            + (f" ({', '.join(reach)})" if reach else "")
            + f" but verify graphs were captured only up to bs={top} (bs {_ranges(captured)}), so every batch "
            f"above {top} verifies eagerly; raise {flag.split()[0]} to at least {need} or lower "
            f"--max-running-requests to {top}")


def explain_eager(
    server_info: Mapping[str, Any], captures: Sequence[CaptureRecord], batch_sizes: Sequence[int], graph_label: str,
    *, eager_sizes: Sequence[int] | None = None, concurrency: int | None = None,
) -> str:
    """The most specific cause of an eager verify that the outside of the server shows.

    ``eager_sizes``: the batch sizes whose Decode lines said the verify graph did not run (None:
    unknown, e.g. no Decode lines); ``batch_sizes``: every batch size the workload ran.
    """
    if graph_label and not graph_label.startswith("cuda"):
        return (f"the server runs on {graph_label.split()[0].upper()} (log label '{graph_label}'), "
                "where no CUDA graphs exist")
    disabled = _disabled_cause(server_info)
    if disabled:
        return disabled
    captured = captured_verify_bs(server_info, captures)
    if not captured:
        return "no 'Capture target verify CUDA graph' line and no decode_cuda_graph_bs: nothing was captured"
    top = max(captured)
    known = list(eager_sizes) if eager_sizes else list(batch_sizes)
    above = [b for b in known if b > top]
    within = sorted({b for b in (eager_sizes or ()) if b <= top})
    if above:
        cause = capture_limit_cause(server_info, captured, max(above), concurrency)
        if within:
            cause += (f"; batches within the captured sizes (bs {_ranges(within)}) also verified eagerly: a "
                      "server-side switch or patch runs verify eager as well")
        return cause
    if not eager_sizes and concurrency and concurrency > top:
        reach = min(x for x in (concurrency, max_running(server_info)) if x)
        if reach > top:
            return "no Decode line says which batches verified eagerly; " + capture_limit_cause(
                server_info, captured, reach, concurrency, observed=False)
    where = f" (eager at bs {_ranges(within)})" if within else ""
    return (f"verify graphs were captured for these batch sizes but did not replay{where}: a server-side switch or "
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
    concurrency: int | None = None,
    counter: str | None = None,
) -> GraphReport:
    """Judge graph use in the verify step from every signal available (``counter``: the engine's name of
    the graph-pass counter the ``counters`` came from; default the native engine's).

    ``counters`` maps ``decode_cuda_graph`` and ``decode_none`` to their deltas over the workload
    (None without /metrics). ``batch_sizes`` are the running-batch sizes the workload produced;
    ``concurrency`` is the load's requests in flight. The batch sizes of the Decode lines are
    compared with the captured ones, so that a batch that outgrew them is named as the cause.
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
            verdict, decided = eager == 0, counter or native_metrics().graph_passes
    uses = batch_use(decode_records)
    if decode_records:
        eager_lines = sum(u.eager for u in uses)
        signals["log"] = f"{eager_lines} of {len(decode_records)} Decode batch lines say '{label}: False'"
        if verdict is None:
            verdict, decided = eager_lines == 0, "Decode batch lines"
    captured = captured_verify_bs(server_info, captures)
    signals["capture"] = (f"verify graphs captured for bs={captured}" if captured else "no verify graph captured")
    if captured and batch_sizes and max(batch_sizes) > max(captured):
        signals["capture"] += f"; workload ran bs up to {max(batch_sizes)}: not covered"
    if uses:
        signals["batches"] = describe_batches(uses, captured)
    if verify_cycle_ms and decode_step_ms:
        ratio = verify_cycle_ms / decode_step_ms
        signals["timing"] = (f"verify cycle {verify_cycle_ms:.2f} ms vs baseline decode step {decode_step_ms:.2f} ms "
                             f"= {ratio:.1f}x (an eager verify is typically > {EAGER_TIMING_RATIO}x)")
        if verdict is None:
            verdict, decided = ratio <= EAGER_TIMING_RATIO, "timing"
    if verdict is None and captured is not None:
        verdict = bool(max(batch_sizes, default=1) <= max(captured))
        decided = "capture lines"
    cause = ""
    if verdict is False:
        eager_sizes = [u.bs for u in uses if u.eager] if uses else None
        cause = explain_eager(server_info, captures, batch_sizes, label, eager_sizes=eager_sizes,
                              concurrency=concurrency)
    return GraphReport(ok=verdict, decided_by=decided, cause=cause, signals=signals)
