"""The verify-graphs check: did the verify step of a measured workload replay CUDA graphs?

Signals, most trusted first: ``sglang:cuda_graph_passes_total`` deltas by mode (``/metrics``), the
Decode lines' ``cuda graph`` flag, the capture lines and ``/server_info``, and the timing of a
verify cycle against a plain decode step. The batch sizes the workload reached (the Decode lines'
``#running-req``) are compared with the captured ones at every load level, so a batch that outgrew
the capture limit fails the check naming the flag. :func:`evaluate` judges collected signals (recorded data
too) with :func:`specwatch.checks.graphcheck.check_verify_graphs`; :func:`check` collects them from a
measurement. Both return a :class:`~specwatch.judge.verdict.Verdict` named ``verify graphs``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from specwatch.checks import graphcheck
from specwatch.checks.verdictlog import VerdictLog, record
from specwatch.engines.protocol import MetricNames
from specwatch.engines.registry import native_metrics
from specwatch.judge.diagnose import median_gap_ms
from specwatch.judge.verdict import Verdict
from specwatch.signals.logscan import CaptureRecord, DecodeRecord, LogWindow

if TYPE_CHECKING:
    from specwatch.load.measure import Measurement
    from specwatch.server.pool import RunningServer
    from specwatch.signals.promtext import Exposition

__all__ = ["NAME", "NEEDS", "check", "evaluate", "graph_counters"]

NAME = "verify graphs"
#: what the live check reads (:data:`specwatch.engines.protocol.CAPABILITIES`)
NEEDS = ("native_api", "graph_counters", "decode_lines")


def graph_counters(delta: Exposition | None, metrics: MetricNames | None = None) -> dict[str, float] | None:
    """The graph-pass counter's deltas by mode (summed over ranks); None without /metrics. ``metrics``: the
    engine's names (default: the native engine's, ``cuda_graph_passes_total``)."""
    if delta is None:
        return None
    out: dict[str, float] = {}
    for labels, value in delta.find((metrics or native_metrics()).graph_passes):
        mode = labels.get("mode", "")
        out[mode] = out.get(mode, 0.0) + value
    return out if out else None


def evaluate(
    profile: str,
    *,
    counters: Mapping[str, float] | None,
    decode_records: Sequence[DecodeRecord],
    captures: Sequence[CaptureRecord],
    server_info: Mapping[str, Any],
    batch_sizes: Sequence[int],
    verify_cycle_ms: float | None = None,
    decode_step_ms: float | None = None,
    concurrency: int | None = None,
    metrics: MetricNames | None = None,
) -> Verdict:
    """Judge verify-graph use from collected signals (see :func:`graphcheck.check_verify_graphs`)."""
    rep = graphcheck.check_verify_graphs(
        counters=counters, decode_records=decode_records, captures=captures, server_info=server_info,
        batch_sizes=batch_sizes, verify_cycle_ms=verify_cycle_ms, decode_step_ms=decode_step_ms,
        concurrency=concurrency, counter=(metrics or native_metrics()).graph_passes)
    message = rep.message()
    if rep.ok is None:
        return Verdict.of(NAME, None, message, "no signal could answer (no /metrics counters, no Decode lines, no "
                                               "capture lines, no timing)", profile=profile, details=rep)
    reason = rep.cause if rep.ok is False else f"verify graphs replayed (decided by {rep.decided_by})"
    return Verdict.of(NAME, rep.ok, message, reason, profile=profile, details=rep)


def check(log: VerdictLog | None, server: RunningServer, measurement: Measurement,
          baseline: Measurement | None = None) -> Verdict:
    """Did the verify step of ``measurement`` replay CUDA graphs? Fails with the cause when not.

    ``baseline``: the non-speculative server's measurement of the same workload, when there is
    one: its decode step is the timing signal's yardstick. A pass or fail is kept in ``log``.
    """
    prof = server.profile
    if why := prof.unable(NAME, NEEDS):
        return Verdict.skip(NAME, why, prof.name)
    if prof.speculative is None:
        return Verdict.skip(NAME, "not a speculative server: there is no verify step", prof.name)
    decodes = measurement.decode_records
    captures: list[CaptureRecord] = []
    if server.log_path is not None:
        captures = LogWindow(server.log_path, start=0).capture_records()
    sizes = [r.running for r in decodes] or [measurement.workload.concurrency]
    cycle = median_gap_ms(g.chunk_gaps_s for g in measurement.generations)
    step = median_gap_ms(g.chunk_gaps_s for g in baseline.generations) if baseline is not None else None
    names = prof.engine_kind.metrics
    result = evaluate(
        prof.name, counters=graph_counters(measurement.metrics_delta, names), decode_records=decodes,
        captures=captures, server_info=measurement.server_info_after, batch_sizes=sizes, verify_cycle_ms=cycle,
        decode_step_ms=step, concurrency=measurement.workload.concurrency, metrics=names)
    return record(log, result)
