"""Results-file format: round trip, on-disk style, atomic writes, version handling."""

from __future__ import annotations

import json
import os

import pytest

from specwatch.errors import UsageError
from specwatch.store import result as result_mod
from specwatch.store.result import Result, ResultSet, atomic_write_json, load_versioned

FP = {"machine_class": "cpu-2core", "cpu_count": 2, "python": "3.11.7"}


def sample_set() -> ResultSet:
    return ResultSet(
        results=[
            Result.make("eagle3-tuned", "single-stream", "output_tok_s", unit="tok/s",
                        higher_is_better=True, samples=[81.9, 82.3, 82.0], extra={"accept_length": 1.92}),
            Result.make("baseline", "single-stream", "ttft_ms", unit="ms",
                        higher_is_better=False, samples=[12.0, 11.5]),
        ],
        machine=FP,
        commit="abc123",
        created="2026-11-29T19:30:00+00:00",
    )


def test_round_trip_and_documented_shape(tmp_path):
    path = tmp_path / "out" / "results.json"
    rs = sample_set()
    rs.save(path)
    data = json.loads(path.read_text())
    assert data["version"] == 1
    assert data["commit"] == "abc123"
    assert data["machine"]["machine_class"] == "cpu-2core"
    first = data["results"][0]
    assert first["key"] == "baseline/single-stream/ttft_ms"  # sorted by key
    assert data["results"][1] == {
        "key": "eagle3-tuned/single-stream/output_tok_s", "profile": "eagle3-tuned",
        "workload": "single-stream", "metric": "output_tok_s", "unit": "tok/s",
        "higher_is_better": True, "samples": [81.9, 82.3, 82.0], "extra": {"accept_length": 1.92},
    }  # fmt: skip
    loaded = ResultSet.load(path)
    assert loaded.to_dict() == rs.to_dict()
    assert loaded.machine_class == "cpu-2core"
    assert loaded.get("eagle3-tuned/single-stream/output_tok_s").samples == [81.9, 82.3, 82.0]
    assert loaded.profiles() == ["baseline", "eagle3-tuned"]


def test_on_disk_text_is_sorted_and_indented(tmp_path):
    path = sample_set().save(tmp_path / "r.json")
    text = path.read_text()
    assert text.endswith("\n")
    assert text == json.dumps(json.loads(text), sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def test_samples_keep_run_order(tmp_path):
    rs = ResultSet([Result.make("p", "w", "m", unit="u", higher_is_better=True, samples=[3, 1, 2])])
    assert ResultSet.load(rs.save(tmp_path / "r.json")).results[0].samples == [3.0, 1.0, 2.0]


def test_atomic_write_leaves_old_file_on_failure(tmp_path, monkeypatch):
    path = tmp_path / "r.json"
    atomic_write_json(path, {"version": 1, "a": 1})

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        atomic_write_json(path, {"version": 1, "a": 2})
    assert json.loads(path.read_text()) == {"version": 1, "a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temp file left behind


def test_unserialisable_values_are_refused_before_writing(tmp_path):
    with pytest.raises(ValueError):
        atomic_write_json(tmp_path / "x.json", {"v": float("nan")})
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ('{"version": 99, "results": []}', "newer than this specwatch"),
        ('{"results": []}', 'no "version" field'),
        ('{"version": "1", "results": []}', "must be an integer"),
        ("not json", "not readable JSON"),
        ('{"version": 0, "results": []}', "cannot migrate"),
        ('{"version": 1, "results": {}}', "'results' must be a list"),
        ('{"version": 1, "results": [{"profile": "p", "workload": "w", "metric": "m", "unit": "u", '
         '"higher_is_better": "yes", "samples": [1]}]}', "higher_is_better"),
        ('{"version": 1, "results": [{"profile": "p", "workload": "w", "metric": "m", "unit": "u", '
         '"higher_is_better": true, "samples": [1, "x"]}]}', "not a finite number"),
    ],
)
def test_bad_files_give_clear_usage_errors(tmp_path, content, needle):
    path = tmp_path / "r.json"
    path.write_text(content)
    with pytest.raises(UsageError, match=needle):
        ResultSet.load(path)


def test_missing_file_is_usage_error(tmp_path):
    with pytest.raises(UsageError, match="not found"):
        ResultSet.load(tmp_path / "nope.json")


def test_migration_chain_runs(tmp_path, monkeypatch):
    """A registered migration upgrades an old file on load."""
    def v0_to_v1(data):
        data["results"] = data.pop("benchmarks")
        return data

    monkeypatch.setitem(result_mod.RESULTS_MIGRATIONS, 0, v0_to_v1)
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"version": 0, "benchmarks": [
        {"profile": "p", "workload": "w", "metric": "m", "unit": "u", "higher_is_better": True, "samples": [1.5]}
    ]}))  # fmt: skip
    rs = ResultSet.load(path)
    assert rs.keys() == ["p/w/m"]
    assert load_versioned(path, "results", 1, result_mod.RESULTS_MIGRATIONS)["version"] == 1


def test_duplicate_keys_rejected():
    r = Result.make("p", "w", "m", unit="u", higher_is_better=True, samples=[1.0])
    with pytest.raises(UsageError, match="duplicate"):
        ResultSet([r, r])
    rs = ResultSet([r])
    with pytest.raises(UsageError, match="duplicate"):
        rs.add(r)
