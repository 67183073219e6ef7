"""procenv: environ blank detection (live, with setproctitle), tree classification, listeners."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from specwatch.signals.procenv import (
    ProcInfo,
    classify,
    find_listener,
    load_proctree,
    parse_environ_block,
    read_environ,
    walk,
    workers,
)

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "sglang" / "real"


def test_parse_environ_block():
    ok = parse_environ_block(b"A=1\0NCCL_PROTO=LL\0")
    assert ok.status == "ok"
    assert ok.env == {"A": "1", "NCCL_PROTO": "LL"}
    assert ok.covers("ANY")
    blank = parse_environ_block(b"\0" * 1497)
    assert blank.status == "retitled"
    assert blank.describe() == "unreadable (retitled)"
    assert not blank.readable
    assert blank.lookup("NCCL_PROTO") == (False, None)
    assert parse_environ_block(b"").status == "empty"


def test_proctree_json_classification_and_blank_workers():
    procs = load_proctree(FIX / "proctree.json")
    roles = {p.pid: (p.role.engine, p.role.role) for p in procs}
    assert roles == {
        19272: ("other", "launcher"),
        19275: ("sglang", "main"),
        19298: ("python", "resource_tracker"),
        19299: ("sglang", "scheduler"),
        19300: ("sglang", "detokenizer"),
    }
    sched = next(p for p in procs if p.pid == 19299)
    assert sched.title == "sglang::scheduler"
    assert sched.retitled_cmdline
    assert sched.environ.describe() == "unreadable (retitled)"
    main = next(p for p in procs if p.pid == 19275)
    assert main.environ.lookup("NCCL_PROTO") == (True, "LL")
    assert main.environ.lookup("PATH") == (False, None)  # the file kept only NCCL_*: unknown, not missing
    tracker = next(p for p in procs if p.pid == 19298)
    assert tracker.environ.env["NCCL_CUMEM_ENABLE"] == "0"
    assert [p.pid for p in workers(procs, engine="sglang")] == [19299, 19300]


@pytest.mark.parametrize(
    ("title", "engine", "role", "ranks"),
    [
        ("sglang::scheduler_TP1", "sglang", "scheduler", {"TP": 1}),
        ("sglang::scheduler_DP0_TP3", "sglang", "scheduler", {"DP": 0, "TP": 3}),
        ("sglang::scheduler_PP1_ATTN_CP2_MOE_DP0_TP1_EP1", "sglang", "scheduler",
         {"PP": 1, "ATTN_CP": 2, "MOE_DP": 0, "TP": 1, "EP": 1}),
        ("sglang::data_parallel_controller", "sglang", "dp_controller", {}),
        ("sglang::detokenizer_router", "sglang", "detokenizer_router", {}),
        ("sglang::tokenizer_worker:4242", "sglang", "tokenizer_worker", {}),
        ("refserver::scheduler", "refserver", "scheduler", {}),
        ("refserver::scheduler_TP1", "refserver", "scheduler", {"TP": 1}),
    ],
)
def test_titles(title, engine, role, ranks):
    r = classify(ProcInfo(1, 0, title[:15], [title, "", ""]))
    assert (r.engine, r.role, dict(r.ranks)) == (engine, role, ranks)


@pytest.mark.parametrize(
    ("argv", "role"),
    [
        (["/venv/bin/sglang", "serve", "--model-path", "m"], "main"),
        (["python3.11", "-m", "specwatch.refserver", "--tp", "2"], "main"),
        (["timeout", "600", "python", "-m", "sglang.launch_server"], "other"),
        (["python", "-c", "from multiprocessing.spawn import spawn_main; spawn_main()"], "worker"),
    ],
)
def test_main_vs_wrapper(argv, role):
    assert classify(ProcInfo(1, 0, "x", argv)).role == role


_RETITLE_CHILD = r"""
import os, sys, time, setproctitle
print("before", flush=True)
sys.stdin.readline()
setproctitle.setproctitle("refserver::scheduler_TP1")
print("after", flush=True)
sys.stdin.readline()
"""


def test_live_setproctitle_blanks_environ_and_walk_reports_retitled():
    pytest.importorskip("setproctitle")
    env = {**os.environ, "NCCL_PROTO": "LL"}
    child = subprocess.Popen([sys.executable, "-c", _RETITLE_CHILD], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout.readline().strip() == "before"
        before = read_environ(child.pid)
        assert before.status == "ok"
        assert before.env["NCCL_PROTO"] == "LL"
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "after"
        after = read_environ(child.pid)
        assert after.status == "retitled"
        assert after.nbytes > 0
        tree = walk(os.getpid())
        me = next(p for p in tree if p.pid == child.pid)
        assert me.role.engine == "refserver"
        assert me.role.role == "scheduler"
        assert me.role.ranks == {"TP": 1}
        assert me.environ.describe() == "unreadable (retitled)"
    finally:
        child.kill()
        child.wait()
    assert read_environ(child.pid).status == "gone"


def test_walk_of_vanished_pid_is_empty():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    assert walk(p.pid) == []


def test_find_listener_finds_this_process():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    try:
        port = sock.getsockname()[1]
        deadline = time.time() + 5
        pid = find_listener(port)
        while pid is None and time.time() < deadline:
            time.sleep(0.05)
            pid = find_listener(port)
        assert pid == os.getpid()
        assert psutil.pid_exists(pid)
    finally:
        sock.close()
    assert find_listener(port) is None
