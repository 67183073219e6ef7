"""envcheck: verdicts from /proc, probe and NCCL views; blank environ never reads as missing."""

from __future__ import annotations

from pathlib import Path

from specwatch.checks.envcheck import VIEW_NCCL, VIEW_PROBE_LATER, check_environment
from specwatch.signals.ncclenv import parse_nccl_lines
from specwatch.signals.probe import ProbeRecord, ProcessRecords
from specwatch.signals.procenv import EnvRead, ProcInfo, load_proctree

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "sglang" / "real"
TUNED = {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_MAX_NCHANNELS": "16",
         "NCCL_BUFFSIZE": "16777216", "NCCL_NTHREADS": "512"}


def _rec(pid, phase, vars_, title="sglang::scheduler", t=1.0):
    return ProbeRecord(pid, 19275, phase, t, [], [title, ""], vars_, ["NCCL_*"])


def test_proctree_blank_workers_are_unknown_never_missing():
    procs = load_proctree(FIX / "proctree.json")
    rep = check_environment(procs, TUNED)
    for pid in (19299, 19300):
        for var in TUNED:
            assert rep.verdict_for(pid, var) == "unknown"
    assert rep.verdict_for(19275, "NCCL_PROTO") == "ok"
    assert rep.verdict == "unknown"
    assert rep.ok
    msg = rep.message()
    assert "unreadable (retitled)" in msg
    assert "missing" not in msg
    assert "sglang::scheduler (pid 19299)" in msg


def test_proctree_with_probe_records_decides_for_blank_workers():
    procs = load_proctree(FIX / "proctree.json")
    good = {**TUNED}
    probe = {
        19299: ProcessRecords(19299, _rec(19299, "start", good), _rec(19299, "later", good, t=4.0)),
        19300: ProcessRecords(19300, _rec(19300, "start", {"NCCL_PROTO": "LL"}, "sglang::detokenizer")),
    }
    rep = check_environment(procs, TUNED, probe=probe)
    assert rep.verdict_for(19299, "NCCL_ALGO") == "ok"
    f = next(f for f in rep.findings if f.pid == 19300 and f.variable == "NCCL_ALGO")
    assert f.status == "missing"
    assert f.view == "probe start"
    assert f.title == "sglang::detokenizer"
    assert rep.verdict == "fail"
    assert "sglang::detokenizer (pid 19300) NCCL_ALGO: missing, expected 'Ring', found <absent> [probe start]" \
        in rep.message()


def test_untuned_server_reports_leaks():
    procs = load_proctree(FIX / "proctree.json")
    rep = check_environment(procs, TUNED, mode="untuned")
    leaks = [f for f in rep.failures if f.status == "leak"]
    assert {f.pid for f in leaks} == {19275}  # launcher/resource tracker are not checked; workers unknown
    assert {f.variable for f in leaks} == set(TUNED)
    assert rep.verdict_for(19299, "NCCL_PROTO") == "unknown"


def test_nccl_sample_log_tuned_passes_untuned_leaks():
    nccl = parse_nccl_lines((FIX / "nccl-debug-sample.log").read_text().splitlines())
    rep = check_environment([], TUNED, nccl=nccl)
    assert rep.verdict == "pass"
    assert all(f.view == VIEW_NCCL for f in rep.findings if f.status == "ok")
    assert not [f for f in rep.findings if f.status == "unexpected"]  # NCCL_NVLS_ENABLE is engine-set
    bad = check_environment([], TUNED, mode="untuned", nccl=nccl)
    assert len([f for f in bad.failures if f.status == "leak"]) == 10


def test_set_after_start_comes_from_later_views_and_mismatch_from_nccl():
    blank_start = ProcInfo(42, 1, "sglang::scheduler_TP0", ["sglang::scheduler_TP0", ""],
                           EnvRead("ok", {"PATH": "/bin"}))
    probe = {42: ProcessRecords(42, _rec(42, "start", {}), _rec(42, "later", {"NCCL_PROTO": "LL"}, t=4.0))}
    nccl = parse_nccl_lines(["h:42:42 [0] NCCL INFO NCCL_ALGO set by environment to Tree",
                             "h:42:42 [0] NCCL INFO NCCL_P2P_LEVEL set by environment to SYS"])
    rep = check_environment([blank_start], {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_BUFFSIZE": "1"},
                            probe=probe, nccl=nccl)
    proto = next(f for f in rep.findings if f.variable == "NCCL_PROTO" and f.status == "ok")
    assert proto.view == VIEW_PROBE_LATER
    assert "set after start" in proto.detail
    assert rep.verdict_for(42, "NCCL_ALGO") == "mismatch"
    assert rep.verdict_for(42, "NCCL_BUFFSIZE") == "missing"  # /proc and probe could answer: absent
    unexpected = [f for f in rep.findings if f.status == "unexpected"]
    assert [(f.variable, f.found) for f in unexpected] == [("NCCL_P2P_LEVEL", "SYS")]


def test_no_process_at_all_is_unknown():
    rep = check_environment([], TUNED)
    assert rep.verdict == "unknown"
    assert "no server process" in rep.message()
