"""The run record, and pytest-xdist workers' records gathered on the controller (the pure part; the end-to-end run is in
tests/integration/test_main_job.py)."""

from __future__ import annotations

import json

import pytest

from specwatch.errors import UsageError
from specwatch.report.table import ReportRow
from specwatch.run.record import RunRecord, merge_result_sets
from specwatch.store.result import Result, ResultSet


def _rs(profile: str, samples: list[float], shared: bool = False) -> ResultSet:
    r = Result.make(profile, "single-stream", "output_tok_s", unit="tok/s", higher_is_better=True,
                    samples=samples, extra={"runs": len(samples), "shared_host": shared})
    return ResultSet(results=[r], machine={"machine_class": "h200x8"}, commit="abc")


def test_payloads_of_two_workers_merge_into_one_run() -> None:
    row = ReportRow(key="a/single-stream/output_tok_s", n=3, median=2.0, unit="tok/s", verdict="regression",
                    samples=(1.0, 2.0, 3.0), message="slower")
    g = RunRecord()
    assert not g.measured
    for worker, rec in (("gw0", RunRecord(_rs("a", [1.0, 2.0, 3.0]), [row], ["[environment] a: missing"], 0, 1, 2)),
                        ("gw1", RunRecord(_rs("b", [5.0, 6.0], shared=True), [], ["[environment] a: missing"], 1, 0))):
        g.merge(RunRecord.from_json(rec.to_json(worker)))  # the trip through xdist's workeroutput
    assert g.workers == ["gw0", "gw1"] and g.measured and g.perf_tests == 2
    assert g.results.keys() == ["a/single-stream/output_tok_s", "b/single-stream/output_tok_s"]
    assert g.rows == [row]  # the row survives the trip, samples as a tuple
    assert g.notes == ["[environment] a: missing"]  # the same note from two workers once
    assert (g.infra_failures, g.verdict_failures) == (1, 1)
    assert g.results.machine["machine_class"] == "h200x8" and g.results.commit == "abc"


def test_a_server_both_workers_measured_keeps_every_run() -> None:
    merged = merge_result_sets(_rs("a", [1.0, 2.0]), _rs("a", [3.0], shared=True))
    (r,) = merged.results
    assert r.samples == [1.0, 2.0, 3.0]
    assert r.extra["runs"] == 3 and r.extra["shared_host"] and r.extra["pooled_from_workers"] == 2
    again = merge_result_sets(merged, _rs("a", [4.0]))
    assert again.results[0].samples == [1.0, 2.0, 3.0, 4.0] and again.results[0].extra["pooled_from_workers"] == 3
    assert merge_result_sets(None, merged) is merged


def test_a_worker_lost_or_of_another_version_is_said() -> None:
    g = RunRecord()
    g.lost("gw3", "Not properly terminated")
    assert not g.measured and "gw3 went down (Not properly terminated)" in g.notes[0]
    with pytest.raises(UsageError, match="version 99, expected 1"):
        RunRecord.from_json(json.dumps({"version": 99}))
