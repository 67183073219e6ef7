"""Prometheus text exposition with SGLang's metric names and labels (no prometheus_client needed).

Scheduler metrics carry ``engine_type, model_name, moe_ep_rank, pp_rank, tp_rank``; tokenizer
metrics carry ``engine_type, is_streaming, model_name`` (metrics_collector.py). Counters never go
down; /flush_cache does not touch them.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

Labels = tuple[tuple[str, str], ...]

HELP = {
    "sglang:gen_throughput": ("gauge", "The generation throughput (token/s)."),
    "sglang:num_running_reqs": ("gauge", "The number of running requests."),
    "sglang:num_queue_reqs": ("gauge", "The number of requests in the waiting queue."),
    "sglang:num_used_tokens": ("gauge", "The number of used tokens."),
    "sglang:token_usage": ("gauge", "The token usage."),
    "sglang:spec_accept_length": ("gauge", "Mean acceptance length of speculative decoding (accepted drafts "
                                  "+ bonus token per forward)."),
    "sglang:spec_accept_rate": ("gauge", "Speculative acceptance rate (`accepted drafts / proposed drafts` "
                                "in batch)."),
    "sglang:spec_num_steps": ("gauge", "Number of speculative decoding steps."),
    "sglang:spec_num_draft_tokens": ("gauge", "Number of speculative draft tokens per verify."),
    "sglang:max_total_num_tokens": ("gauge", "Maximum total number of tokens in the KV cache pool."),
    "sglang:context_len": ("gauge", "The context length."),
    "sglang:graph_memory_usage_gb": ("gauge", "Memory used by CUDA graphs (GB)."),
    "sglang:is_cuda_graph": ("gauge", "Whether the batch is using CUDA graph."),
    "sglang:cuda_graph_passes_total": ("counter", "Total number of forward passes categorized by CUDA graph."),
    "sglang:realtime_tokens_total": ("counter", "Total number of tokens processed (updated on each log "
                                     "interval). mode: prefill_compute, prefill_cache, decode."),
    "sglang:prompt_tokens_total": ("counter", "Number of prefill tokens processed."),
    "sglang:generation_tokens_total": ("counter", "Number of generation tokens processed."),
    "sglang:num_requests_total": ("counter", "The number of requests."),
    "sglang:cached_tokens_total": ("counter", "Number of cached prompt tokens."),
    "sglang:spec_verify_calls_total": ("counter", "Total number of speculative verify calls."),
    "sglang:num_aborted_requests_total": ("counter", "Number of requests aborted."),
    "sglang:time_to_first_token_seconds": ("histogram", "Histogram of time to first token in seconds."),
    "sglang:inter_token_latency_seconds": ("histogram", "Histogram of inter-token latency in seconds."),
    "sglang:e2e_request_latency_seconds": ("histogram", "Histogram of End-to-end request latency in seconds"),
}

#: SGLang 0.5.23's default buckets (observability/metrics_collector.py, TokenizerMetricsCollector).
_LATENCY = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
BUCKETS = {
    "sglang:time_to_first_token_seconds": _LATENCY,
    "sglang:e2e_request_latency_seconds": (*_LATENCY, 600, 1200, 1800, 2400),
    "sglang:inter_token_latency_seconds": (
        0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
        0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000),
}


def _fmt(value: float) -> str:
    return repr(float(value)) if value == value else "NaN"


class Registry:
    """Counters and gauges keyed by (name, labels); thread-safe; renders Prometheus text."""

    def __init__(self, model_name: str, tp_rank: int = 0) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, dict[Labels, float]] = {}
        self.sched_labels = {"engine_type": "unified", "model_name": model_name, "moe_ep_rank": "0",
                             "pp_rank": "0", "tp_rank": str(tp_rank)}
        self.tok_labels = {"engine_type": "unified", "model_name": model_name}

    @staticmethod
    def _key(labels: Mapping[str, str]) -> Labels:
        return tuple(sorted((k, str(v)) for k, v in labels.items()))

    def inc(self, name: str, amount: float = 1.0, labels: Mapping[str, str] | None = None) -> None:
        """Add ``amount`` to a counter."""
        key = self._key(labels or {})
        with self._lock:
            series = self._values.setdefault(name, {})
            series[key] = series.get(key, 0.0) + float(amount)

    def set(self, name: str, value: float, labels: Mapping[str, str] | None = None) -> None:
        """Set a gauge."""
        with self._lock:
            self._values.setdefault(name, {})[self._key(labels or {})] = float(value)

    def observe(self, name: str, value: float, labels: Mapping[str, str] | None = None, count: int = 1) -> None:
        """Record ``count`` observations of ``value`` in a histogram (buckets from BUCKETS):
        cumulative ``_bucket`` series per ``le``, plus ``_sum`` and ``_count``."""
        labels = dict(labels or {})
        with self._lock:  # one scrape sees all of an observation or none of it
            buckets = self._values.setdefault(f"{name}_bucket", {})
            for le in (*BUCKETS[name], float("inf")):
                key = self._key({**labels, "le": _le(le)})
                buckets[key] = buckets.get(key, 0.0) + (count if value <= le else 0)
            for suffix, amount in (("_sum", value * count), ("_count", count)):
                series = self._values.setdefault(f"{name}{suffix}", {})
                series[self._key(labels)] = series.get(self._key(labels), 0.0) + amount

    def get(self, name: str, labels: Mapping[str, str] | None = None) -> float:
        """Current value (0 when never set)."""
        with self._lock:
            return self._values.get(name, {}).get(self._key(labels or {}), 0.0)

    def sched(self, **extra: str) -> dict[str, str]:
        """Scheduler label set plus ``extra``."""
        return {**self.sched_labels, **extra}

    def tok(self, **extra: str) -> dict[str, str]:
        """Tokenizer label set plus ``extra``."""
        return {**self.tok_labels, **extra}

    def render(self) -> str:
        """Prometheus text exposition format 0.0.4."""
        lines: list[str] = []
        with self._lock:
            items: list[tuple[str, dict[Labels, float]]] = sorted(self._values.items())
            for name, series in items:
                family = _family(name)
                kind, text = HELP.get(family, ("gauge", name))
                if family == name or name.endswith("_bucket"):  # a histogram's header once, before its buckets
                    lines.append(f"# HELP {family} {text}")
                    lines.append(f"# TYPE {family} {kind}")
                for labels, value in sorted(series.items(), key=_series_order):
                    lab = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
                    lines.append(f"{name}{{{lab}}} {_fmt(value)}" if lab else f"{name} {_fmt(value)}")
            # prometheus_client (SGLang's) prints a labelled family's header before its first observation
            seen = {_family(name) for name, _ in items}
            for family, (kind, text) in sorted(HELP.items()):
                if kind == "histogram" and family not in seen:
                    lines += [f"# HELP {family} {text}", f"# TYPE {family} {kind}"]
        return "\n".join(lines) + "\n"


def _family(name: str) -> str:
    """The histogram a ``_bucket``/``_sum``/``_count`` series belongs to, else the name itself."""
    for suffix in ("_bucket", "_sum", "_count"):
        base = name.removesuffix(suffix)
        if base != name and base in BUCKETS:
            return base
    return name


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


def _series_order(item: tuple[Labels, float]) -> tuple:
    """Label sets in order, with a histogram's buckets by their numeric bound."""
    labels = item[0]
    le = dict(labels).get("le")
    rest = tuple(kv for kv in labels if kv[0] != "le")
    return (rest, float(le) if le is not None else 0.0)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def init_constants(reg: Registry, *, args: Any, max_total_tokens: int, context_len: int,
                   graph_mem_gb: float) -> None:
    """Series that exist from the start (so a scrape before traffic already lists the names)."""
    s = reg.sched
    reg.set("sglang:max_total_num_tokens", max_total_tokens, s())
    reg.set("sglang:context_len", context_len, s())
    reg.set("sglang:graph_memory_usage_gb", graph_mem_gb, s())
    reg.set("sglang:is_cuda_graph", 0.0, s())
    for gauge in ("gen_throughput", "num_running_reqs", "num_queue_reqs", "num_used_tokens", "token_usage"):
        reg.set(f"sglang:{gauge}", 0.0, s())
    reg.inc("sglang:cuda_graph_passes_total", 0.0, s(mode="decode_cuda_graph"))
    reg.inc("sglang:cuda_graph_passes_total", 0.0, s(mode="decode_none"))
    reg.inc("sglang:cuda_graph_passes_total", 0.0, s(mode="prefill_none"))
    for mode in ("prefill_compute", "prefill_cache", "decode"):
        reg.inc("sglang:realtime_tokens_total", 0.0, s(mode=mode))
    for counter in ("prompt_tokens_total", "generation_tokens_total", "num_requests_total"):
        reg.inc(f"sglang:{counter}", 0.0, reg.tok(is_streaming="false"))
    if args.is_speculative:
        reg.set("sglang:spec_accept_length", 0.0, s())
        reg.set("sglang:spec_accept_rate", 0.0, s())
        reg.set("sglang:spec_num_steps", float(args.speculative_num_steps), s())
        reg.set("sglang:spec_num_draft_tokens", float(args.speculative_num_draft_tokens), s())
        reg.inc("sglang:spec_verify_calls_total", 0.0, reg.tok(is_streaming="false"))


def on_step(reg: Registry, view: Any, gauges: Mapping[str, Any] | None, speculative: bool) -> None:
    """Per-batch scheduler counters (every batch counts, health checks included, as in SGLang)."""
    s = reg.sched
    if view.mode == "prefill":
        reg.inc("sglang:cuda_graph_passes_total", 1, s(mode="prefill_none"))
        reg.inc("sglang:realtime_tokens_total", view.new_token, s(mode="prefill_compute"))
        if view.cached_token:
            reg.inc("sglang:realtime_tokens_total", view.cached_token, s(mode="prefill_cache"))
    else:
        mode = "decode_cuda_graph" if view.can_run_cuda_graph else "decode_none"
        reg.inc("sglang:cuda_graph_passes_total", 1, s(mode=mode))
        gen = sum(view.accept_lens.values()) if speculative and view.accept_lens else view.bs
        reg.inc("sglang:realtime_tokens_total", gen, s(mode="decode"))
    if gauges:
        for key, value in gauges.items():
            if value is not None and key != "avg_spec_accept_length":
                reg.set(f"sglang:{key}", float(value), s())


def on_first_token(reg: Registry, ttft_s: float, streaming: bool) -> None:
    """A request's first output token (tokenizer side, as SGLang's observe_time_to_first_token)."""
    reg.observe("sglang:time_to_first_token_seconds", ttft_s,
                reg.tok(is_streaming="true" if streaming else "false"))


def on_new_tokens(reg: Registry, interval_s: float, n: int) -> None:
    """``n`` tokens arrived ``interval_s`` after the previous ones: n inter-token latencies of
    interval / n each (SGLang's observe_inter_token_latency)."""
    if n > 0:
        reg.observe("sglang:inter_token_latency_seconds", interval_s / n, reg.tok(), count=n)


def on_finish(reg: Registry, *, prompt_tokens: int, completion_tokens: int, cached_tokens: int,
              verify_ct: int, streaming: bool, speculative: bool, aborted: bool,
              e2e_latency_s: float | None = None) -> None:
    """Per-request tokenizer counters (not called for log_metrics=False requests)."""
    t = reg.tok(is_streaming="true" if streaming else "false")
    if e2e_latency_s is not None:
        reg.observe("sglang:e2e_request_latency_seconds", e2e_latency_s, t)
    reg.inc("sglang:prompt_tokens_total", prompt_tokens, t)
    reg.inc("sglang:generation_tokens_total", completion_tokens, t)
    reg.inc("sglang:num_requests_total", 1, t)
    reg.inc("sglang:cached_tokens_total", cached_tokens, reg.tok(cache_source="device"))
    if speculative:
        reg.inc("sglang:spec_verify_calls_total", verify_ct, t)
    if aborted:
        reg.inc("sglang:num_aborted_requests_total", 1, reg.tok())
