"""ncclenv: NCCL "set by environment" lines per (pid, rank) and launched-vs-applied comparison."""

from __future__ import annotations

from pathlib import Path

from specwatch.signals.ncclenv import compare, normalize_value, parse_nccl_lines

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "sglang" / "real"
TUNED = {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_MAX_NCHANNELS": "16",
         "NCCL_BUFFSIZE": "16777216", "NCCL_NTHREADS": "512"}


def test_sample_log_groups_per_pid_and_rank():
    procs = parse_nccl_lines((FIX / "nccl-debug-sample.log").read_text().splitlines())
    assert set(procs) == {(1013, 0), (1014, 1)}
    for p in procs.values():
        assert p.version == "2.28.9+cuda13.0"
        assert p.host == "host"
        assert p.applied == {**TUNED, "NCCL_NVLS_ENABLE": "0"}  # numeric final '.' stripped


def test_final_period_stripped_on_numeric_values_only():
    assert normalize_value("16777216.") == "16777216"
    assert normalize_value("0.") == "0"
    assert normalize_value("LL") == "LL"
    assert normalize_value("eth0.") == "eth0."
    procs = parse_nccl_lines(["h:1:1 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0."])
    assert procs[(1, 0)].applied == {"NCCL_SOCKET_IFNAME": "eth0."}


def test_compare_reports_not_applied_not_launched_and_mismatch():
    procs = parse_nccl_lines([
        "h:7:7 [0] NCCL INFO NCCL_PROTO set by environment to Simple",
        "h:7:7 [0] NCCL INFO NCCL_BUFFSIZE set by environment to 16777216.",
        "h:7:7 [0] NCCL INFO NCCL_P2P_LEVEL set by environment to SYS",
        "h:7:7 [0] NCCL INFO NCCL_CUMEM_ENABLE set by environment to 0.",
        "prefix text h:8:8 [1] NCCL INFO NCCL_PROTO set by environment to LL",
    ])
    diffs = {(d.pid, d.rank): d for d in compare({**TUNED, "NCCL_DEBUG": "INFO", "PATH": "/bin"}, procs,
                                                   ignore={"NCCL_CUMEM_ENABLE"})}
    d7 = diffs[(7, 0)]
    assert d7.mismatched == {"NCCL_PROTO": ("LL", "Simple")}
    assert d7.matched == {"NCCL_BUFFSIZE": "16777216"}
    assert set(d7.not_applied) == {"NCCL_ALGO", "NCCL_MAX_NCHANNELS", "NCCL_NTHREADS"}  # NCCL_DEBUG is silent
    assert d7.not_launched == {"NCCL_P2P_LEVEL": "SYS"}
    assert not d7.clean
    assert any("NCCL_P2P_LEVEL" in line for line in d7.lines())
    assert diffs[(8, 1)].matched == {"NCCL_PROTO": "LL"}


def test_sample_log_is_clean_against_its_launch_env():
    procs = parse_nccl_lines((FIX / "nccl-debug-sample.log").read_text().splitlines())
    diffs = compare({**TUNED, "NCCL_NVLS_ENABLE": "0"}, procs)
    assert all(d.clean for d in diffs)
    assert len(diffs) == 2
