"""SGLang's log format on stderr: ``[YYYY-mm-dd HH:MM:SS{.mmm}{ TPr}] message``.

The rank prefix (`` TP0``) appears only in worker processes when tp_size > 1, the milliseconds
only when ``SGLANG_LOG_MS=1`` (srt/utils/common.py configure_logger).
"""

from __future__ import annotations

import logging
import os
import sys

DATEFMT = "%Y-%m-%d %H:%M:%S"


def rank_prefix(tp_rank: int | None, tp_size: int) -> str:
    """`` TP{r}`` for a worker when tp_size > 1, else the empty string."""
    return f" TP{tp_rank}" if tp_rank is not None and tp_size > 1 else ""


def configure_logging(level: str = "info", prefix: str = "") -> None:
    """Route every log record to stderr in SGLang's format (replaces existing root handlers)."""
    maybe_ms = ".%(msecs)03d" if os.environ.get("SGLANG_LOG_MS", "0") == "1" else ""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"[%(asctime)s{maybe_ms}{prefix}] %(message)s", datefmt=DATEFMT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def fmt_bool(flag: bool) -> str:
    """Python's bool spelling, as SGLang prints it."""
    return "True" if flag else "False"


def decode_line(*, running: int, num_tokens: int, token_usage: float, graph_label: str, graph: bool,
                gen_throughput: float, queue: int, accept_len: float | None = None,
                accept_rate: float | None = None) -> str:
    """The ``Decode batch`` message (metrics_reporter.py), accept fields only when speculative."""
    msg = f"Decode batch, #running-req: {running}, #token: {num_tokens}, token usage: {token_usage:.2f}, "
    if accept_len is not None and accept_rate is not None:
        msg += f"accept len: {accept_len:.2f}, accept rate: {accept_rate:.2f}, "
    msg += (f"{graph_label}: {fmt_bool(graph)}, gen throughput (token/s): {gen_throughput:.2f}, "
            f"#queue-req: {queue}")
    return msg


def prefill_line(*, new_seq: int, new_token: int, cached_token: int, token_usage: float, running: int,
                 queue: int, graph_label: str, graph: bool, input_throughput: float) -> str:
    """The ``Prefill batch`` message (metrics_reporter.py)."""
    return (f"Prefill batch, #new-seq: {new_seq}, #new-token: {new_token}, #cached-token: {cached_token}, "
            f"token usage: {token_usage:.2f}, #running-req: {running}, #queue-req: {queue}, "
            f"#pending-token: 0, {graph_label}: {fmt_bool(graph)}, "
            f"input throughput (token/s): {input_throughput:.2f}")


def graph_label(device: str) -> str:
    """``cuda graph`` on CUDA, ``cpu graph`` on CPU (metrics_reporter.py)."""
    return "cuda graph" if device == "cuda" else "cpu graph"
