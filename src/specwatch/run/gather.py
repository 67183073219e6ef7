"""What pytest-xdist workers measured, gathered on the controller into one run.

Under ``pytest -n N`` every worker boots and measures its own servers. Each worker sends its
results, verdict rows, notes and failure counts to the controller (xdist's ``workeroutput``), and
the controller writes one results file, one history entry and one baseline session, prints one
summary table and maps the exit status, exactly as a run without xdist does. Without this the
workers' files overwrite each other and the controller prints nothing.

When two workers measured the same server, their runs are pooled into one result: both were
measured on this host in this run, and dropping either would lose data.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from specwatch.errors import UsageError
from specwatch.report.table import ReportRow
from specwatch.store.result import Result, ResultSet

#: The key of the payload in xdist's ``workeroutput``.
PAYLOAD_KEY = "specwatch"
PAYLOAD_VERSION = 1


def payload(results: ResultSet, rows: list[ReportRow], notes: list[str], infra_failures: int,
            verdict_failures: int, worker: str | None) -> str:
    """One worker's run as JSON text (xdist sends workeroutput through execnet: plain data only)."""
    return json.dumps({
        "version": PAYLOAD_VERSION, "worker": worker, "results": results.to_dict(),
        "rows": [asdict(r) for r in rows], "notes": notes,
        "infra_failures": infra_failures, "verdict_failures": verdict_failures,
    })  # fmt: skip


@dataclass
class Gathered:
    """The workers' runs merged so far."""

    results: ResultSet | None = None
    rows: list[ReportRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    infra_failures: int = 0
    verdict_failures: int = 0
    workers: list[str] = field(default_factory=list)

    def add(self, text: str) -> None:
        """Merge one worker's payload."""
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("version") != PAYLOAD_VERSION:
            raise UsageError(f"an xdist worker sent a specwatch payload this controller cannot read: "
                             f"version {data.get('version') if isinstance(data, dict) else None!r}, "
                             f"expected {PAYLOAD_VERSION}; run the same specwatch on the controller and workers")
        self.workers.append(str(data.get("worker")))
        self.results = merge_result_sets(self.results, ResultSet.from_dict(data["results"]))
        self.rows += [_row(r) for r in data["rows"]]
        self.notes += [n for n in data["notes"] if n not in self.notes]
        self.infra_failures += int(data["infra_failures"])
        self.verdict_failures += int(data["verdict_failures"])

    def lost(self, worker: str, error: Any) -> None:
        """A worker went down without a payload: say that its measurements are missing."""
        self.notes.append(f"xdist worker {worker} went down ({error}); its measurements are not in this run's files")

    @property
    def measured(self) -> bool:
        return bool(self.results and self.results.results) or bool(self.rows)


def _row(data: dict[str, Any]) -> ReportRow:
    data = dict(data)
    data["samples"] = tuple(data.get("samples") or ())
    return ReportRow(**data)


def merge_result_sets(into: ResultSet | None, new: ResultSet) -> ResultSet:
    """``into`` with ``new``'s results added; a key both measured gets both sets of runs."""
    if into is None:
        return new
    merged = ResultSet(results=[], machine=into.machine or new.machine, commit=into.commit or new.commit,
                       created=min(into.created, new.created))
    theirs = {r.key: r for r in new.results}
    for r in into.results:
        other = theirs.pop(r.key, None)
        merged.add(r if other is None else _pooled(r, other))
    for r in theirs.values():
        merged.add(r)
    return merged


def _pooled(a: Result, b: Result) -> Result:
    extra = dict(a.extra)
    extra["runs"] = len(a.samples) + len(b.samples)
    extra["shared_host"] = bool(a.extra.get("shared_host") or b.extra.get("shared_host"))
    extra["pooled_from_workers"] = sum(int(r.extra.get("pooled_from_workers", 1)) for r in (a, b))
    return Result(a.key, a.profile, a.workload, a.metric, a.unit, a.higher_is_better,
                  [*a.samples, *b.samples], extra)
