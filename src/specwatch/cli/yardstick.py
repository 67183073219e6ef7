"""``specwatch yardstick``: time this machine's yardstick and print it as one JSON line."""

from __future__ import annotations

import argparse
import json
from typing import Any

from specwatch.cli.args import positive_float, positive_int
from specwatch.errors import EXIT_OK, UsageError


def _cmd_yardstick(args: argparse.Namespace) -> int:
    from specwatch.load.yardstick import measure_yardstick

    try:
        found = measure_yardstick(args.device, args.width, args.seconds)
    except (RuntimeError, ValueError, ImportError) as exc:
        raise UsageError(f"yardstick: {exc}") from None
    except MemoryError:
        raise UsageError(f"yardstick: width {args.width} does not fit in this machine's memory") from None
    print(json.dumps(found, sort_keys=True))
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``specwatch yardstick`` to the ``specwatch`` parser."""
    p = sub.add_parser(
        "yardstick",
        help="time the machine yardstick (a memory-bound GEMV graph, a graph of tiny "
        "kernels, a host round trip) that runs and baselines record; print its JSON",
    )
    p.add_argument("--device", default="auto", help="cuda, cuda:N, cpu or auto (default: CUDA when torch sees one)")
    p.add_argument(
        "--width",
        type=positive_int,
        default=None,
        help="the served model's hidden size (default 4096 on CUDA, 1024 on CPU)",
    )
    p.add_argument("--seconds", type=positive_float, default=3.0, help="time spent timing (default 3)")
    p.set_defaults(func=_cmd_yardstick)
