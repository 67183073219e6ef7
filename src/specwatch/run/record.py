"""The run record: what a run measured, and pytest-xdist workers' records gathered on the controller.

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
from specwatch.judge.verdict import ReportRow
from specwatch.store.result import Result, ResultSet

#: The key of a worker's record in xdist's ``workeroutput``.
PAYLOAD_KEY = "specwatch"
RECORD_VERSION = 1


@dataclass
class RunRecord:
    """What one run (or one xdist worker) measured and concluded: the only way data leaves a run.

    The session builds it, xdist carries a worker's to the controller (:meth:`to_json`), the
    controller merges them (:meth:`merge`), and :func:`specwatch.run.summary.persist` writes it.
    """

    results: ResultSet = field(default_factory=ResultSet)
    rows: list[ReportRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    infra_failures: int = 0
    verdict_failures: int = 0
    #: perf tests that ran to a verdict (history records perf runs only)
    perf_tests: int = 0
    #: the xdist workers merged into this record
    workers: list[str] = field(default_factory=list)

    @property
    def measured(self) -> bool:
        return bool(self.results.results) or bool(self.rows)

    def to_json(self, worker: str | None = None) -> str:
        """This record as JSON text (xdist sends workeroutput through execnet: plain data only)."""
        return json.dumps({
            "version": RECORD_VERSION, "worker": worker, "results": self.results.to_dict(),
            "rows": [asdict(r) for r in self.rows], "notes": self.notes, "perf_tests": self.perf_tests,
            "infra_failures": self.infra_failures, "verdict_failures": self.verdict_failures,
        })  # fmt: skip

    @classmethod
    def from_json(cls, text: str) -> RunRecord:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("version") != RECORD_VERSION:
            raise UsageError(f"an xdist worker sent a specwatch record this controller cannot read: "
                             f"version {data.get('version') if isinstance(data, dict) else None!r}, "
                             f"expected {RECORD_VERSION}; run the same specwatch on the controller and workers")
        return cls(results=ResultSet.from_dict(data["results"]), rows=[_row(r) for r in data["rows"]],
                   notes=list(data["notes"]), infra_failures=int(data["infra_failures"]),
                   verdict_failures=int(data["verdict_failures"]), perf_tests=int(data.get("perf_tests", 0)),
                   workers=[str(data.get("worker"))])

    def merge(self, other: RunRecord) -> None:
        """Add ``other`` (one worker's record) to this one; a key both measured keeps every run."""
        self.results = merge_result_sets(self.results if self.results.results else None, other.results)
        self.rows += other.rows
        self.notes += [n for n in other.notes if n not in self.notes]
        self.infra_failures += other.infra_failures
        self.verdict_failures += other.verdict_failures
        self.perf_tests += other.perf_tests
        self.workers += other.workers

    def lost(self, worker: str, error: Any) -> None:
        """A worker went down without a record: say that its measurements are missing."""
        self.notes.append(f"xdist worker {worker} went down ({error}); its measurements are not in this run's files")


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
