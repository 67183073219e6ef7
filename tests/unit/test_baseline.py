"""Baseline store: layout, recording, loading, missing-baseline and fingerprint messages."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest

from specwatch.errors import UsageError
from specwatch.judge.compare import DriftVerdict, compare
from specwatch.judge.stats import summarize as stats_summary
from specwatch.store.atomic import write_text_atomic
from specwatch.store.baseline import (
    BASELINE_VERSION,
    NOT_BASELINES,
    Baseline,
    BaselineMetric,
    BaselineStore,
    load_baseline,
)
from specwatch.store.result import Result, ResultSet

FP = {"machine_class": "h200x2-nvlink", "gpu_model": "NVIDIA H200", "gpu_count": 2,
      "driver": "580.159.04", "cuda": "13.0", "torch": "2.9.1", "os": "Linux 6.1"}  # fmt: skip
BASE_89 = [89.0, 89.3, 88.8, 89.1, 89.2, 88.9, 89.0, 89.4, 88.7, 89.1]
RETEST_82 = [82.1, 82.2, 83.0, 82.4, 82.3, 82.6, 82.0, 82.5, 82.8, 82.2]


def results(samples=BASE_89) -> ResultSet:
    return ResultSet(
        [
            Result.make("baseline", "single-stream", "output_tok_s", unit="tok/s", higher_is_better=True,
                        samples=samples),
            Result.make("baseline", "single-stream", "ttft_ms", unit="ms", higher_is_better=False,
                        samples=[12.0, 12.2, 11.9]),
            Result.make("eagle3", "single-stream", "output_tok_s", unit="tok/s", higher_is_better=True,
                        samples=[94.0, 93.5, 94.2], extra={"accept_length": 2.1}),
        ],
        machine=FP,
        commit="deadbeef",
    )  # fmt: skip


def test_path_layout_and_bad_names(tmp_path):
    store = BaselineStore(tmp_path / "baselines")
    assert store.path_for("h200x2-nvlink", "eagle3") == tmp_path / "baselines" / "h200x2-nvlink" / "eagle3.json"
    for bad in ("../x", "a/b", "", ".hidden"):
        with pytest.raises(UsageError):
            store.path_for(bad, "p")


def test_missing_baseline_is_none_and_message_says_how_to_record(tmp_path):
    store = BaselineStore(tmp_path)
    assert store.load("cpu-2core", "baseline") is None
    msg = store.missing_message("cpu-2core", "baseline")
    assert "pytest -m perf --update-baselines" in msg
    assert "specwatch baseline update RESULTS.json" in msg
    assert str(tmp_path / "cpu-2core" / "baseline.json") in msg
    with pytest.raises(UsageError, match="--update-baselines"):
        store.require("cpu-2core", "baseline")


def test_record_and_load_round_trip(tmp_path):
    store = BaselineStore(tmp_path)
    path = store.record("h200x2-nvlink", "baseline", FP, "deadbeef", results(),
                        recorded="2026-11-29T17:02:00+00:00")  # fmt: skip
    data = json.loads(path.read_text())
    assert data["version"] == BASELINE_VERSION
    assert sorted(data["metrics"]) == ["single-stream/output_tok_s", "single-stream/ttft_ms"]
    m = data["metrics"]["single-stream/output_tok_s"]
    assert m["samples"] == BASE_89
    assert m["unit"] == "tok/s"
    assert m["higher_is_better"] is True
    assert m["summary"]["n"] == 10
    assert m["summary"]["ci_low"] <= m["summary"]["median"] <= m["summary"]["ci_high"]
    assert data["commit"] == "deadbeef"
    assert data["recorded"] == "2026-11-29T17:02:00+00:00"
    assert path.read_text() == json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n"

    base = store.load("h200x2-nvlink", "baseline")
    assert isinstance(base, Baseline)
    assert base.get("single-stream", "output_tok_s").summary.median == pytest.approx(89.05)
    assert base.get("single-stream", "nope") is None
    assert [r.key for r in base.as_results()] == ["baseline/single-stream/output_tok_s",
                                                   "baseline/single-stream/ttft_ms"]  # fmt: skip
    # Re-saving what was loaded writes the same bytes.
    assert base.to_dict() == data


def test_baseline_catches_the_case_study_drift(tmp_path):
    store = BaselineStore(tmp_path)
    store.record("h200x2-nvlink", "baseline", FP, "good", results())
    base = store.require("h200x2-nvlink", "baseline")
    cur = results(RETEST_82).get("baseline/single-stream/output_tok_s")
    ref = base.reference(cur)
    verdict = compare(cur.samples, ref.samples, higher_is_better=ref.higher_is_better)
    assert verdict.verdict is DriftVerdict.REGRESSION


def test_record_all_writes_one_file_per_profile(tmp_path):
    store = BaselineStore(tmp_path)
    paths = store.record_all(results())
    assert sorted(p.name for p in paths) == ["baseline.json", "eagle3.json"]
    assert store.available() == [("h200x2-nvlink", "baseline"), ("h200x2-nvlink", "eagle3")]
    (tmp_path / "h200x2-nvlink" / "round-spread.json").write_text('{"version": 1, "runs": []}')  # specwatch ab's
    assert store.available() == [("h200x2-nvlink", "baseline"), ("h200x2-nvlink", "eagle3")]  # not a baseline
    assert store.load("h200x2-nvlink", "eagle3").get("single-stream", "output_tok_s").extra == {
        "accept_length": 2.1
    }
    with pytest.raises(UsageError, match="machine_class"):
        store.record_all(ResultSet(results().results, machine={}))
    with pytest.raises(UsageError, match="no results"):
        store.record("cpu-2core", "other", FP, None, results())


def test_fingerprint_mismatch_warning_lists_differences(tmp_path):
    store = BaselineStore(tmp_path)
    store.record("h200x2-nvlink", "baseline", FP, "good", results())
    base = store.load("h200x2-nvlink", "baseline")
    assert base.fingerprint_warning(dict(FP)) is None
    assert base.fingerprint_warning({**FP, "os": "Linux 6.2"}) is None  # kernel bumps are noise
    warn = base.fingerprint_warning({**FP, "driver": "575.57.08", "torch": "2.10.0"})
    assert "different machine" in warn
    assert "driver: '580.159.04' → '575.57.08'" in warn
    assert "torch: '2.9.1' → '2.10.0'" in warn


def test_baseline_on_another_engine_version_warns_first(tmp_path):
    """Baselines must not silently span SGLang upgrades: the engine's version is warned about on its own."""
    store = BaselineStore(tmp_path)
    sglang = {**FP, "engine": "sglang", "engine_version": "0.5.22", "engine_commit": "a" * 40}
    store.record("h200x2-nvlink", "eagle3", sglang, "good", results())
    base = store.load("h200x2-nvlink", "eagle3")
    assert base.machine["engine_version"] == "0.5.22" and base.machine["engine_commit"] == "a" * 40  # kept
    assert base.fingerprint_warning(dict(sglang)) is None
    warn = base.fingerprint_warning({**sglang, "engine_version": "0.5.23", "engine_commit": "b" * 40})
    assert warn.splitlines()[0].startswith("baseline h200x2-nvlink/eagle3")
    assert ("was recorded on another engine version: sglang 0.5.22 (commit aaaaaaaaaaaa) → sglang 0.5.23 "
            "(commit bbbbbbbbbbbb)") in warn
    assert "different machine" not in warn  # the engine is not listed again as a machine difference
    both = base.fingerprint_warning({**sglang, "engine_version": "0.5.23", "driver": "575.57.08"})
    assert both.index("another engine version") < both.index("different machine") and "driver" in both
    # same version, another commit of a source checkout: another engine too
    assert "another engine version" in base.fingerprint_warning({**sglang, "engine_commit": "c" * 40})
    assert base.fingerprint_warning({**sglang, "engine_version": None}) is None  # this run cannot tell
    # the reference server's commit is specwatch's own: a new commit alone is not another engine
    ref = {**FP, "engine": "reference", "engine_version": "0.1.0", "engine_commit": "a" * 40}
    other = BaselineStore(tmp_path / "other")
    other.record("h200x2-nvlink", "baseline", ref, "good", results())
    assert other.load("h200x2-nvlink", "baseline").fingerprint_warning({**ref, "engine_commit": "d" * 40}) is None
    # an older baseline that recorded no version says so
    other.record("h200x2-nvlink", "eagle3", {**FP, "engine": "sglang", "engine_version": None}, "good", results())
    old = other.load("h200x2-nvlink", "eagle3").fingerprint_warning({**sglang, "engine_version": "0.5.23"})
    assert "sglang version not recorded → sglang 0.5.23" in old


def test_newer_baseline_version_rejected(tmp_path):
    store = BaselineStore(tmp_path)
    path = store.record("cpu-2core", "baseline", FP, None, results())
    data = json.loads(path.read_text())
    data["version"] = 7
    path.write_text(json.dumps(data))
    with pytest.raises(UsageError, match="newer"):
        store.load("cpu-2core", "baseline")


def _session(store: BaselineStore, samples: list[float], when: str, keep: int) -> Baseline:
    rs = ResultSet(machine={"machine_class": "h200x1"}, commit=when)
    rs.add(Result.make("eagle3-tuned", "single-stream", "decode_tok_s", unit="tok/s", higher_is_better=True,
                       samples=samples))
    store.record("h200x1", "eagle3-tuned", rs.machine, rs.commit, rs, recorded=when, keep_sessions=keep)
    return store.load("h200x1", "eagle3-tuned")


def test_keep_sessions_pools_the_last_sessions_oldest_dropped(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    _session(store, [1.0, 1.1], "2026-11-01", keep=2)
    _session(store, [2.0, 2.1], "2026-11-02", keep=2)
    m = _session(store, [3.0, 3.1], "2026-11-03", keep=2).get("single-stream", "decode_tok_s")
    assert [s["recorded"] for s in m.sessions] == ["2026-11-02", "2026-11-03"]
    assert m.samples == [2.0, 2.1, 3.0, 3.1] and m.summary.n == 4
    replaced = _session(store, [4.0, 4.1], "2026-11-04", keep=1).get("single-stream", "decode_tok_s")
    assert replaced.samples == [4.0, 4.1] and len(replaced.sessions) == 1


def test_version_1_baselines_migrate_to_one_session(tmp_path: Path) -> None:
    path = tmp_path / "h200x1" / "p.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"version": 1, "machine_class": "h200x1", "profile": "p", "machine": {},
                                "commit": "abc", "recorded": "2026-11-29", "metrics": {"w/m": {
                                    "workload": "w", "metric": "m", "unit": "tok/s", "higher_is_better": True,
                                    "samples": [1.0, 2.0], "extra": {}}}}))
    m = BaselineStore(tmp_path).load("h200x1", "p").get("w", "m")
    assert m.sessions == [{"recorded": "2026-11-29", "commit": "abc", "samples": [1.0, 2.0]}]


def test_a_baseline_spanning_sessions_carries_the_machines_drift() -> None:
    """docs/validation: the H200 drifted ~6.5% between sessions, about the size of an 8% slowdown.

    Against one session, a healthy session that drifted looks like a regression; against a baseline
    that spans the drift it does not, and the 8% slowdown below both sessions still is one.
    """
    rng = np.random.default_rng(7)
    fast = list(rng.normal(1170, 8, 10))
    drifted = list(rng.normal(1092, 6, 10))
    healthy_later = list(rng.normal(1095, 6, 10))
    slowed = list(rng.normal(1060, 8, 10))
    assert compare(healthy_later, fast).verdict is DriftVerdict.REGRESSION  # one session: a false alarm
    assert compare(healthy_later, fast + drifted).verdict is not DriftVerdict.REGRESSION
    assert compare(slowed, fast + drifted).verdict is DriftVerdict.REGRESSION


def _host_session(store: BaselineStore, host: str, center: float, i: int) -> Baseline:
    """One recording session on machine ``host``: 8 runs tight around ``center``."""
    rs = ResultSet(machine={"machine_class": "h200x1", "host_id": host}, commit=f"c{i}")
    rs.add(Result.make("large-eagle3-tuned", "single-stream", "decode_tok_s", unit="tok/s", higher_is_better=True,
                       samples=[center * (1 + 0.002 * k) for k in range(-4, 4)]))
    store.record("h200x1", "large-eagle3-tuned", rs.machine, rs.commit, rs, recorded=f"2026-11-29T22:{i:02d}",
                 keep_sessions=20)
    return store.load("h200x1", "large-eagle3-tuned")


def test_sessions_remember_their_machine_and_a_machine_with_enough_sessions_is_judged_on_its_own(
        tmp_path: Path) -> None:
    """Session 3 on the lent H200s: leases of the "same" machine differed by 5%. Four sessions of
    machine A near 200 tok/s and three of machine B near 210: on A (or B) only its own sessions
    count, a new machine C is judged against all of them with a note, and an unknown host too."""
    store = BaselineStore(tmp_path)
    for i, (host, center) in enumerate([("aaaa", 200.0), ("bbbb", 210.0), ("aaaa", 201.0), ("bbbb", 209.0),
                                        ("aaaa", 199.5), ("bbbb", 210.5), ("aaaa", 200.5)]):
        base = _host_session(store, host, center + 0.1 * i, i)
    m = base.get("single-stream", "decode_tok_s")
    assert [s["host"] for s in m.sessions] == ["aaaa", "bbbb"] * 3 + ["aaaa"]
    assert base.fingerprint_warning({"machine_class": "h200x1", "host_id": "cccc"}) is None  # not a mismatch

    samples, sessions, note = m.reference_for("aaaa", 3)
    assert len(sessions) == 4 and len(samples) == 32 and max(samples) < 205
    assert note == "judged against the 4 of its 7 sessions recorded on this machine"
    _, sessions_b, note_b = m.reference_for("bbbb", 3)
    assert len(sessions_b) == 3 and "3 of its 7" in note_b
    _, sessions_b, note_b = m.reference_for("bbbb", 4)  # too few of B's own: every session, no note
    assert len(sessions_b) == 7 and note_b == ""
    samples, sessions, note = m.reference_for("cccc", 3)
    assert len(sessions) == 7 and samples == m.samples
    assert note.startswith("none of its 7 sessions was recorded on this machine") and "2 other machine(s)" in note
    assert m.reference_for(None, 3)[2] == ""

    # the per-machine view is what catches a 6% slowdown on A that the class-wide spread hides
    slowed = [188.0 * (1 + 0.002 * k) for k in range(-4, 4)]
    own = m.reference_for("aaaa", 3)
    assert compare(slowed, own[0], tolerance=0.05, reference_sessions=own[1]).verdict is DriftVerdict.REGRESSION
    every = m.reference_for("cccc", 3)
    assert compare(slowed, every[0], tolerance=0.05, reference_sessions=every[1]).verdict is not DriftVerdict.REGRESSION


def test_the_too_noisy_note_names_the_machine_term_of_sessions_from_several_machines(tmp_path: Path) -> None:
    """``baseline update``'s warning: sessions of two machines 5% apart are one baseline with a machine term
    (as the drift gate judges them), not one machine whose boots wander by 5%; it speaks for the machine
    just recorded: as a new one while it holds under 3 sessions, then as itself."""
    store = BaselineStore(tmp_path)
    for i, (host, center) in enumerate([("aaaa", 200.0), ("bbbb", 210.0), ("aaaa", 200.3), ("aaaa", 200.6)]):
        base = _host_session(store, host, center, i)
    (note,) = [n for n in base.resolution_notes(0.001) if "decode_tok_s" in n]
    assert "over 2 machines" in note and "judged as a run on it" in note  # aaaa: 3 sessions, just recorded
    base = _host_session(store, "bbbb", 210.3, 4)
    (note,) = [n for n in base.resolution_notes(0.01) if "decode_tok_s" in n]
    assert "over 2 machines" in note and "a new machine" in note and "every session from one machine" not in note


def test_cli_compare_uses_the_results_machine_sessions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from specwatch.cli import main
    from specwatch.errors import EXIT_REGRESSION

    store = BaselineStore(tmp_path / "b")
    for i, (host, center) in enumerate([("aaaa", 200.0), ("bbbb", 212.0), ("aaaa", 201.0), ("bbbb", 209.0),
                                        ("aaaa", 199.5), ("bbbb", 211.0)]):
        _host_session(store, host, center, i)
    rs = ResultSet(machine={"machine_class": "h200x1", "host_id": "aaaa"})
    rs.add(Result.make("large-eagle3-tuned", "single-stream", "decode_tok_s", unit="tok/s", higher_is_better=True,
                       samples=[188.0 * (1 + 0.002 * k) for k in range(-4, 4)]))
    rs.save(tmp_path / "r.json")
    path = store.path_for("h200x1", "large-eagle3-tuned")
    assert main(["compare", str(path), str(tmp_path / "r.json")]) == EXIT_REGRESSION
    assert "baseline: judged against the 3 of its 6 sessions recorded on this machine" in capsys.readouterr().out
    assert main(["baseline", "show", "--baseline-dir", str(tmp_path / "b")]) == 0
    assert "sessions=6 machines=2" in capsys.readouterr().out


def test_the_drift_gates_reference_takes_this_machines_sessions_or_says_there_are_none(tmp_path: Path) -> None:
    """Session.reference_samples (what the drift gate compares against) applies reference_for with
    the session's own fingerprint."""
    from specwatch.run.options import Config
    from specwatch.run.session import Session

    store = BaselineStore(tmp_path / "b")
    for i, (host, center) in enumerate([("aaaa", 200.0), ("bbbb", 210.0)] * 3):
        _host_session(store, host, center, i)
    session = Session(Config(baseline_dir=str(tmp_path / "b")), progress=lambda m: None)
    session._fingerprint = {"machine_class": "h200x1", "host_id": "aaaa"}
    ref = session.reference_samples("large-eagle3-tuned", "single-stream", "decode_tok_s")
    assert not isinstance(ref, str)
    assert len(ref.sessions) == 3 and max(ref.samples) < 205 and "3 of its 6 sessions" in ref.note
    session._fingerprint = {"machine_class": "h200x1", "host_id": "cccc"}
    ref = session.reference_samples("large-eagle3-tuned", "single-stream", "decode_tok_s")
    assert not isinstance(ref, str)
    assert len(ref.sessions) == 6 and ref.note.startswith("none of its 6 sessions was recorded on this machine")


def test_session_fingerprint_records_the_engines_version_and_commit() -> None:
    """Results, baselines and history take the session's fingerprint: the engine's version (the
    package in the server's Python, then what /server_info says) and its source commit."""
    import importlib.metadata
    import subprocess
    import sys
    from types import SimpleNamespace

    import specwatch
    from specwatch.profiles.loading import parse_profiles
    from specwatch.run.options import Config
    from specwatch.run.session import Session

    ref = Session(Config(), progress=lambda m: None, _profiles=parse_profiles({"server": [{"name": "a"}]}))
    fp = ref.fingerprint()
    assert fp["engine"] == "reference"
    assert fp["engine_version"] == importlib.metadata.version("specwatch")
    src = Path(specwatch.__file__).parent
    head = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert fp["engine_commit"] == (head if len(head) == 40 else None)
    sg = Session(Config(), progress=lambda m: None, _profiles=parse_profiles(
        {"server": [{"name": "s", "engine": "sglang", "model": "m", "launcher": "python -m sglang.launch_server",
                     "python": sys.executable}]}))
    assert sg.fingerprint()["engine"] == "sglang"
    sg.measurements[("s", "single-stream")] = SimpleNamespace(profile="s", server_info_after={"version": "0.5.23"})
    assert sg.fingerprint()["engine_version"] == "0.5.23"  # what the server said it is


ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted(p for p in (ROOT / "baselines").glob("*/*.json") if p.name not in NOT_BASELINES)


def test_version_1_baselines_migrate_in_every_reader() -> None:
    """compare read baseline files through Baseline.from_dict, which skipped the v1 → v2 migration."""
    v1 = {"version": 1, "machine_class": "cpu-2core", "profile": "p", "machine": {}, "commit": "abc",
          "recorded": "2026-11-29", "metrics": {"w/m": {"workload": "w", "metric": "m", "unit": "tok/s",
                                                        "higher_is_better": True, "samples": [1.0, 2.0]}}}
    before = json.dumps(v1)
    m = Baseline.from_dict(v1).get("w", "m")
    assert m.sessions == [{"recorded": "2026-11-29", "commit": "abc", "samples": [1.0, 2.0]}]
    assert json.dumps(v1) == before  # the caller's document is left as it was
    assert Baseline.from_dict(v1).to_dict()["version"] == BASELINE_VERSION


@pytest.mark.parametrize("path", SHIPPED, ids=[f"{p.parent.name}/{p.stem}" for p in SHIPPED])
def test_every_shipped_baseline_loads(path: Path) -> None:
    base = load_baseline(path)
    assert base.machine_class == path.parent.name and base.profile == path.stem
    assert all(m.sessions for m in base.metrics.values())


def test_cli_compares_against_a_shipped_version_1_baseline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from specwatch.cli import main
    from specwatch.errors import EXIT_OK

    # as shipped in baselines/cpu-2core until 2026-11-30, when sessions of a slower CPU VM were added
    path = ROOT / "tests" / "unit" / "data" / "baseline-v1-cpu-2core-eagle3-tuned.json"
    assert json.loads(path.read_text())["version"] == 1
    base = load_baseline(path)
    ResultSet(base.as_results(), machine=base.machine, commit="c").save(tmp_path / "results-latest.json")
    assert main(["compare", str(path), str(tmp_path / "results-latest.json")]) == EXIT_OK
    out, err = capsys.readouterr()
    assert err == "" and "eagle3-tuned/single-stream/decode_tok_s" in out


def _store_with(tmp_path: Path) -> tuple[BaselineStore, ResultSet]:
    store = BaselineStore(tmp_path / "b")
    rs = results()
    rs.results.append(Result.make("zz-last", "single-stream", "output_tok_s", unit="tok/s", higher_is_better=True,
                                  samples=[1.0, 1.1]))
    store.record_all(rs)
    return store, rs


def test_record_all_writes_nothing_when_one_target_is_broken(tmp_path: Path) -> None:
    store, rs = _store_with(tmp_path)
    folder = tmp_path / "b" / "h200x2-nvlink"
    broken = folder / "zz-last.json"  # the last profile: the others would have been rewritten first
    broken.write_text(broken.read_text()[:40])
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.iterdir()}
    for keep in (1, 3):
        with pytest.raises(UsageError, match=r"zz-last\.json is not readable JSON.*nothing was written"):
            store.record_all(rs, keep_sessions=keep)
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.iterdir()} == before  # no temp files
    broken.unlink()
    assert sorted(p.name for p in store.record_all(rs)) == ["baseline.json", "eagle3.json", "zz-last.json"]


def test_record_keeps_each_files_mode_and_new_files_follow_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        store, rs = _store_with(tmp_path)
        folder = tmp_path / "b" / "h200x2-nvlink"
        assert {stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()} == {0o644}  # not mkstemp's 0600
        (folder / "baseline.json").chmod(0o664)
        (folder / "eagle3.json").chmod(0o600)
        store.record_all(rs, keep_sessions=2)
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()}
        assert modes == {"baseline.json": 0o664, "eagle3.json": 0o600, "zz-last.json": 0o644}
    finally:
        os.umask(old)


def test_write_text_atomic_is_the_one_writer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "new" / "f.txt"
    old = os.umask(0o027)
    try:
        write_text_atomic(target, "one\n")
    finally:
        os.umask(old)
    assert target.read_text() == "one\n" and stat.S_IMODE(target.stat().st_mode) == 0o640
    target.chmod(0o604)
    write_text_atomic(target, "two\n")
    assert target.read_text() == "two\n" and stat.S_IMODE(target.stat().st_mode) == 0o604
    write_text_atomic(target, "three\n", mode=0o600)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600

    def boom(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        write_text_atomic(target, "four\n")
    assert target.read_text() == "three\n" and [p.name for p in target.parent.iterdir()] == ["f.txt"]


def test_the_note_never_claims_more_than_the_sessions_record() -> None:
    def metric(hosts: list[str | None]) -> BaselineMetric:
        sessions = [{"recorded": f"s{i}", "commit": None, "samples": [100.0 + i, 101.0 + i],
                     **({"host": h} if h else {})} for i, h in enumerate(hosts)]
        pooled = [x for s in sessions for x in s["samples"]]
        return BaselineMetric("w", "m", "tok/s", True, pooled, stats_summary(pooled), {}, sessions)

    known = metric(["aaaa", "aaaa", "bbbb"])
    note = known.reference_for("cccc", 3)[2]
    assert note.startswith("none of its 3 sessions was recorded on this machine (they come from 2 other "
                           "machine(s) of the class)")
    # some sessions do not say where they were recorded: this machine may be among them
    mixed = metric(["aaaa", None, None])
    note = mixed.reference_for("cccc", 3)[2]
    assert note.startswith("none of its 3 sessions is known to come from this machine (1 come from 1 other "
                           "machine(s) of the class, 2 from a machine the baseline did not record)"), note
    assert "of the class" not in mixed.reference_for("cccc", 3, same_class=None)[2]
    # a machine of another class: every session counts and the note says so, never "of the class"
    samples, sessions, note = known.reference_for("aaaa", 2, same_class=False)
    assert len(sessions) == 3 and samples == known.samples
    assert note.startswith("its 3 session(s) were recorded on another machine class than this machine's "
                           "(on 2 machine(s))"), note
    assert "of the class" not in note
    assert "no session records its machine" in metric([None, None]).reference_for("x", 3, same_class=False)[2]
    assert metric([None, None]).reference_for("x", 3)[2] == ""  # nothing known, nothing claimed


# -- issue 24 item 4: baselines accumulate sessions by default; replacing is explicit, said in one line --


def _run(tmp_path: Path, center: float, *, failures: int = 0, extra: dict | None = None,
         **options: object) -> tuple[Baseline | None, list[str]]:
    """One ``pytest -m perf --update-baselines`` run's persist step (summary.persist), with ``options``;
    ``failures``: its failed tests; ``extra``: what its results record (a shared host)."""
    from specwatch.report.table import ReportRow
    from specwatch.run.options import Config
    from specwatch.run.record import RunRecord
    from specwatch.run.summary import persist

    rs = ResultSet(machine={"machine_class": "cpu-2core", "host_id": "h1"}, commit="c")
    rs.add(Result.make("eagle3-tuned", "single-stream", "decode_tok_s", unit="tok/s", higher_is_better=True,
                       samples=[center + k for k in range(5)], extra=extra or {}))
    cfg = Config(update_baselines=True, rootdir=tmp_path, history=str(tmp_path / "h.sqlite"), **options)
    said: list[str] = []
    rows = [ReportRow(key="eagle3-tuned/single-stream/output_tok_s ≥ floor", n=5, median=center, verdict="fail")]
    persist(RunRecord(results=rs, rows=rows if failures else [], verdict_failures=failures), cfg, perf_run=False,
            machine_class=lambda: "cpu-2core", tolerance_for=lambda _: 0.05, progress=said.append)
    return BaselineStore(tmp_path / "baselines").load("cpu-2core", "eagle3-tuned"), said


def test_a_second_update_baselines_adds_a_session_and_replacing_is_said_in_one_line(tmp_path: Path) -> None:
    from specwatch.run.options import DEFAULTS

    assert DEFAULTS["baseline_sessions"] is None and DEFAULTS["replace_baselines"] is False
    base, _ = _run(tmp_path, 100.0)
    assert len(base.get("single-stream", "decode_tok_s").sessions) == 1
    base, said = _run(tmp_path, 110.0)
    m = base.get("single-stream", "decode_tok_s")
    assert [s["samples"][0] for s in m.sessions] == [100.0, 110.0] and len(m.samples) == 10
    assert not [line for line in said if "dropped" in line]  # nothing dropped, nothing to say
    _run(tmp_path, 120.0)
    base, said = _run(tmp_path, 130.0, replace_baselines=True)
    assert [s["samples"][0] for s in base.get("single-stream", "decode_tok_s").sessions] == [130.0]
    (line,) = [line for line in said if "dropped" in line]
    assert line.endswith("eagle3-tuned.json: its 3 earlier session(s) dropped (--specwatch-replace-baselines)"), line
    assert "\n" not in line
    _run(tmp_path, 140.0)
    base, said = _run(tmp_path, 150.0, baseline_sessions=2)
    assert [s["samples"][0] for s in base.get("single-stream", "decode_tok_s").sessions] == [140.0, 150.0]
    assert any("kept the last 2 session(s), dropped the 1 oldest (--specwatch-baseline-sessions 2)" in x for x in said)


def test_baseline_update_adds_by_default_and_replace_says_so(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from specwatch.cli import main

    path = tmp_path / "r.json"
    results().save(path)
    for _ in range(2):
        assert main(["baseline", "update", str(path), "--baseline-dir", str(tmp_path / "b")]) == 0
    capsys.readouterr()
    base = BaselineStore(tmp_path / "b").load("h200x2-nvlink", "baseline")
    assert all(len(m.sessions) == 2 for m in base.metrics.values())
    assert main(["baseline", "update", str(path), "--baseline-dir", str(tmp_path / "b"), "--replace"]) == 0
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if line.startswith("replaced ")] == [
        f"replaced {tmp_path / 'b' / 'h200x2-nvlink' / name}.json: its 2 earlier session(s) dropped (--replace)"
        for name in ("baseline", "eagle3")]
    assert all(len(m.sessions) == 1 for m in BaselineStore(tmp_path / "b").load(
        "h200x2-nvlink", "baseline").metrics.values())


def test_sessions_record_the_gpu_identity_and_are_grouped_by_machine(tmp_path: Path) -> None:
    from specwatch.store.baseline import session_machine
    from specwatch.store.machine import host_id

    ident = {"hostname": "node7", "gpu_uuids": ["GPU-b", "GPU-a"], "gpu_serials": ["1652"],
             "gpu_pci_bus_ids": ["00000000:18:00.0"]}
    rs = ResultSet(machine={"machine_class": "h200x1", "host_id": "h1", "gpu_identity": ident}, commit="c1")
    rs.add(Result.make("p", "w", "decode_tok_s", unit="tok/s", higher_is_better=True, samples=[1.0, 2.0]))
    store = BaselineStore(tmp_path)
    store.record_all(rs)
    sess = store.load("h200x1", "p").get("w", "decode_tok_s").sessions[0]
    assert sess["gpu_identity"] == ident and sess["host"] == "h1"
    assert session_machine(sess) == "host:h1"  # its host: the hash of its GPUs' UUIDs (here made up)
    # the UUIDs alone name the host their hash names: one label with the sessions recorded before them
    assert session_machine({"gpu_identity": ident}) == session_machine({"host": host_id(["GPU-a", "GPU-b"])})
    assert session_machine({"host": "h1", "commit": "c1"}) == "host:h1"
    assert session_machine({"commit": "1f61c74"}) == "commit:1f61c74"  # the committed leases
    assert session_machine({"gpu_identity": {"gpu_uuids": None}, "recorded": "2026-11-29T21:57"}) == "day:2026-11-29"
    # a fingerprint's identity is not a machine difference to warn about (like host_id)
    assert store.load("h200x1", "p").fingerprint_warning({"machine_class": "h200x1", "gpu_identity": {}}) is None


def test_a_baseline_update_says_what_it_added(tmp_path: Path) -> None:
    """A second --update-baselines added a session but said only `specwatch wrote ...json`."""
    _, said = _run(tmp_path, 100.0)
    assert any(line.endswith("eagle3-tuned.json: added session 1 (host:h1; 1 session(s) of that machine, 1 in all), "
                             "1 key(s)") for line in said), said
    _, said = _run(tmp_path, 110.0)
    assert any("added session 2 (host:h1; 2 session(s) of that machine, 2 in all)" in line for line in said), said


def test_a_run_whose_tests_failed_records_no_baseline_unless_asked_and_a_shared_host_is_said(tmp_path: Path) -> None:
    """A baseline was recorded from a run whose floor failed because a neighbour loaded the host."""
    base, said = _run(tmp_path, 50.0, failures=1, extra={"shared_host": True, "shared_with": ["sglang (pid 4242)"]})
    assert base is None  # nothing written
    (line,) = [x for x in said if "NO BASELINE RECORDED" in x]
    assert "1 test(s) of this run failed (eagle3-tuned/single-stream/output_tok_s ≥ floor)" in line
    assert "--specwatch-record-failed" in line and "\n" not in line
    base, said = _run(tmp_path, 50.0, failures=1, extra={"shared_host": True, "shared_with": ["sglang (pid 4242)"]},
                      record_failed=True)
    assert base is not None and len(base.get("single-stream", "decode_tok_s").sessions) == 1
    (loud,) = [x for x in said if "WARNING" in x]
    assert "while the host was shared (sglang (pid 4242)) in 1 measurement(s) (eagle3-tuned/single-stream)" in loud
    _, quiet = _run(tmp_path, 100.0)
    assert not [x for x in quiet if "WARNING" in x or "NO BASELINE" in x]


def test_a_key_whose_every_run_was_left_out_is_not_recorded_and_is_said(tmp_path: Path) -> None:
    """Under load every run of a probe can arrive in one burst and be left out of decode_tok_s: recording then
    keeps that key's earlier sessions (or records none) and says so, instead of failing the whole run (a
    fresh-clone CI run beside a busy loop: 'eagle3/speculation-probe/decode_tok_s: no samples to record')."""
    from specwatch.store.result import Result, ResultSet

    store = BaselineStore(tmp_path)
    first = ResultSet(results=[Result.make("p", "probe", "decode_tok_s", unit="tok/s", higher_is_better=True,
                                           samples=[100.0, 101.0]),
                               Result.make("p", "single", "decode_tok_s", unit="tok/s", higher_is_better=True,
                                           samples=[90.0, 91.0])], machine={"machine_class": "c"})
    store.record_all(first)
    empty = ResultSet(results=[Result.make("p", "probe", "decode_tok_s", unit="tok/s", higher_is_better=True,
                                           samples=[]),
                               Result.make("p", "single", "decode_tok_s", unit="tok/s", higher_is_better=True,
                                           samples=[92.0, 93.0])], machine={"machine_class": "c"})
    said: list[str] = []
    store.record_all(empty, said=said)
    base = store.load("c", "p")
    assert base is not None
    assert len(base.get("probe", "decode_tok_s").sessions) == 1  # kept, nothing added
    assert len(base.get("single", "decode_tok_s").sessions) == 2
    assert any("p/probe/decode_tok_s has no samples in this run" in s and "its 1 earlier session(s) kept" in s
               for s in said), said


def test_recording_some_keys_keeps_the_others_and_says_what_it_added(tmp_path: Path) -> None:
    """A run that measured only some keys (``-k drift``, ``baseline update --metric``) adds a session to those and
    leaves every other key of the baseline as it was: before, the others were dropped."""
    from specwatch.store.result import Result, ResultSet

    store = BaselineStore(tmp_path)
    full = ResultSet(results=[Result.make("p", "single", m, unit="u", higher_is_better=True, samples=[1.0, 1.1])
                              for m in ("decode_tok_s", "output_tok_s")], machine={"machine_class": "c"},
                     created="2026-12-01T00:00:00+00:00")
    store.record_all(full)
    store.record_all(full)
    some = ResultSet(results=[Result.make("p", "single", "accept_length", unit="tokens", higher_is_better=True,
                                          samples=[2.0, 2.0])], machine={"machine_class": "c"},
                     created="2026-12-03T00:00:00+00:00")
    store.record_all(some)
    base = store.load("c", "p")
    assert base is not None and set(base.metrics) == {"single/decode_tok_s", "single/output_tok_s",
                                                      "single/accept_length"}
    assert len(base.get("single", "decode_tok_s").sessions) == 2
    assert base.added().startswith("added session 1 (") and "1 key(s); 2 other key(s) kept as they were" in (
        base.added())
