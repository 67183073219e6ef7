"""The result file of SGLang's serving benchmark (``python -m sglang.bench_serving --output-file FILE``): one JSON
object a line, one line appended by each run of it (:data:`specwatch.engines.sglang.BENCH_SERVING_REQUIRED` names
the keys a line must have).

Every problem is one :class:`~specwatch.errors.UsageError` line naming the file (and the line): missing, not UTF-8,
empty, a line that is not JSON or not an object, a line that lacks the keys, a value of the wrong type, a run that
completed no request.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specwatch.engines.sglang import BENCH_SERVING, BENCH_SERVING_REQUIRED
from specwatch.errors import UsageError
from specwatch.store.result import parse_json
from specwatch.userfile import read_user_file

WHAT = "bench_serving result file"
#: its datasets whose every request asks ``sharegpt_output_len`` tokens when that is set (serving.py, custom.py)
FIXED_BY_SHAREGPT_LEN = ("custom", "sharegpt")


@dataclass(frozen=True)
class BenchRun:
    """One run of bench_serving, as its result line says: its shape and its metrics (bench_serving's names)."""

    line: int
    backend: str
    dataset: str
    completed: int
    max_concurrency: int | None  # None: no cap on requests in flight
    request_rate: float | None  # requests/s; inf: every request at once; None: a trace's timestamps
    output_len: int | None  # the tokens every request asked (None: each prompt's own, or a range)
    values: Mapping[str, float] = field(default_factory=dict)  # every number of the line, by its key
    model_path: str = ""  # the served model, from the line's server_info ("" when it has none)

    def value(self, metric: str) -> float:
        """The run's ``metric`` (NaN when the line has none: an older release, or null)."""
        return self.values.get(metric, math.nan)


def _number(where: str, key: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"{where}: {key} must be a number or null, got {value!r:.60}")
    return float(value)


def _whole(where: str, key: str, value: Any, low: int) -> int | None:
    number = _number(where, key, value)
    if number is None:
        return None
    if not number.is_integer() or number < low:
        raise UsageError(f"{where}: {key} must be a whole number ≥ {low}, got {value!r:.60}")
    return int(number)


def _output_len(where: str, doc: Mapping[str, Any]) -> int | None:
    """The one output length every request of the run asked, when the line says there was one: ``custom`` and
    ``sharegpt`` with ``sharegpt_output_len``, ``random``/``random-ids`` with ``random_range_ratio`` 1."""
    dataset = doc["dataset_name"]
    if dataset in FIXED_BY_SHAREGPT_LEN:
        return _whole(where, "sharegpt_output_len", doc.get("sharegpt_output_len"), 1)
    if str(dataset).startswith("random") and _number(where, "random_range_ratio", doc.get("random_range_ratio")) == 1:
        return _whole(where, "random_output_len", doc.get("random_output_len"), 1)
    return None


def _run(where: str, line: int, doc: Any) -> BenchRun:
    if not isinstance(doc, dict):
        raise UsageError(f"{where}: expected a JSON object (one {BENCH_SERVING} result), got {doc!r:.60}")
    lacking = [k for k in BENCH_SERVING_REQUIRED if k not in doc]
    if lacking:
        raise UsageError(f"{where}: not a {BENCH_SERVING} result line: it lacks {', '.join(lacking)}")
    for key in ("backend", "dataset_name"):
        if not isinstance(doc[key], str):
            raise UsageError(f"{where}: {key} must be a string, got {doc[key]!r:.60}")
    completed = _whole(where, "completed", doc["completed"], 0)
    if not completed:
        raise UsageError(f"{where}: the run completed no request: its numbers measure nothing (drop the line)")
    rate = doc["request_rate"]
    rate = None if rate == "trace" else _number(where, "request_rate", rate)
    if rate is not None and not rate > 0:
        raise UsageError(f"{where}: request_rate must be > 0, got {doc['request_rate']!r:.60}")
    values = {}
    for key, value in doc.items():  # the metrics: latencies, throughputs, accept length (null or NaN: none)
        if key.endswith(("_ms", "_throughput")) or key == "accept_length":
            number = _number(where, key, value)
            if number is not None and math.isfinite(number):
                values[key] = number
    info = doc.get("server_info")
    model = info.get("model_path") if isinstance(info, dict) else None
    return BenchRun(line, doc["backend"], doc["dataset_name"], completed,
                    _whole(where, "max_concurrency", doc["max_concurrency"], 1), rate, _output_len(where, doc), values,
                    model if isinstance(model, str) else "")


def read_bench_runs(path: str | Path) -> list[BenchRun]:
    """Every run of the result file at ``path``, in file order; blank lines are skipped."""
    _, text = read_user_file(path, WHAT)
    name = str(path)
    runs = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            doc = parse_json(line)
        except ValueError as exc:
            raise UsageError(f"{name}:{n}: not JSON: {exc}") from None
        runs.append(_run(f"{name}:{n}", n, doc))
    if not runs:
        raise UsageError(f"{WHAT} {name} is empty: {BENCH_SERVING} --output-file appends one line a run")
    return runs
