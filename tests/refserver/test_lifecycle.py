"""Process model of the reference server: titles, blanked environ, env propagation, admission bound,
SIGTERM/SIGKILL teardown and TP=2 on CPU (gloo), seen through psutil, /proc, HTTP and stderr."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from refharness import ACCEPT, Server, boot, decode_lines, server_env, title

PROMPT = {"text": "Greedy twins", "sampling_params": {"max_new_tokens": 32, "temperature": 0.0, "ignore_eos": True}}
SPEC = ["--model-path", "ref-tiny", "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "2",
        "--decode-log-interval", "4"]

# A sitecustomize probe: every Python process started with this PYTHONPATH records its environment
# at start, before any retitling (the way specwatch's probe sees through a blanked /proc environ).
PROBE = '''
import json, os
d = os.environ.get("REFTEST_PROBE_DIR")
if d:
    with open(os.path.join(d, f"{os.getpid()}.json"), "w") as f:
        json.dump(dict(os.environ), f)
'''


def _alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _alive(pids)


@pytest.fixture(scope="module")
def tp1(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("tp1")
    probe_dir = base / "probe"
    probe_dir.mkdir()
    site = base / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(PROBE)
    env = server_env({"REFTEST_PROBE_DIR": str(probe_dir), "REFTEST_DROPME_A": "1", "REFTEST_KEEP": "1",
                      "SGLANG_LOG_MS": "1"})
    env["PYTHONPATH"] = os.pathsep.join([str(site), env["PYTHONPATH"]])
    server = boot([*SPEC, "--max-running-requests", "1", "--max-queued-requests", "1",
                   "--ref-fault-drop-env", "REFTEST_DROPME_"], base / "server.log", env=env)
    server.extra["probe_dir"] = probe_dir
    yield server
    server.stop(signal.SIGKILL)


def test_worker_title_and_blank_environ(tp1: Server) -> None:
    workers = tp1.workers()
    assert [title(w) for w in workers] == ["refserver::scheduler"]
    raw = Path(f"/proc/{workers[0].pid}/environ").read_bytes()
    assert raw
    assert set(raw) == {0}, "setproctitle should leave the original environ block all NUL"
    main_env = Path(f"/proc/{tp1.proc.pid}/environ").read_bytes()
    assert b"REFTEST_KEEP=1" in main_env  # the main process is not retitled


def test_drop_env_fault_removes_prefix_from_workers_only(tp1: Server) -> None:
    pid = tp1.workers()[0].pid
    worker_env = json.loads((tp1.extra["probe_dir"] / f"{pid}.json").read_text())
    main_env = json.loads((tp1.extra["probe_dir"] / f"{tp1.proc.pid}.json").read_text())
    assert "REFTEST_DROPME_A" in main_env
    assert "REFTEST_DROPME_A" not in worker_env
    assert worker_env["REFTEST_KEEP"] == "1"  # everything else is inherited unchanged


def _runnable_share(procs: list[psutil.Process], samples: int = 40) -> float:
    """The share of samples in which any of ``procs`` was runnable (state R). A spinning process is runnable
    whether or not a loaded host gives it a core; a worker waiting on its queue sleeps (S): unlike a CPU-percent
    threshold, this does not depend on how busy the machine is."""
    running = 0
    for _ in range(samples):
        running += any(p.status() == psutil.STATUS_RUNNING for p in procs)
        time.sleep(0.025)
    return running / samples


def test_idle_worker_does_not_spin(tp1: Server) -> None:
    assert _runnable_share(tp1.workers()[:1]) < 0.5


def test_admission_bound_gives_503_and_server_recovers(tp1: Server) -> None:
    results: list[int] = []
    lock = threading.Lock()

    def one() -> None:
        status, _ = tp1.request("POST", "/generate", {"text": "q", "sampling_params": {
            "max_new_tokens": 400, "ignore_eos": True, "temperature": 0.0}})
        with lock:
            results.append(status)

    threads = [threading.Thread(target=one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(set(results)) == [200, 503]
    assert results.count(200) >= 2  # one running + one queued are admitted
    assert tp1.generate(PROMPT)["meta_info"]["completion_tokens"] == 32
    tp1.extra["greedy"] = tp1.generate(PROMPT)["output_ids"]


def test_log_ms_timestamps(tp1: Server) -> None:
    tp1.generate(PROMPT)  # 32 tokens: several Decode windows of 4, whichever tests ran before
    lines = decode_lines(tp1.log())
    assert lines
    assert all(re.fullmatch(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3}", m.group("ts")) for m in lines)
    assert all(re.search(ACCEPT, m.string) for m in lines)


def test_tp2_boots_answers_same_greedy_output_and_dies_with_main(tp1: Server, tmp_path: Path) -> None:
    srv = boot([*SPEC, "--tp", "2"], tmp_path / "tp2.log")
    try:
        titles = sorted(title(w) for w in srv.workers())
        assert titles == ["refserver::scheduler_TP0", "refserver::scheduler_TP1"]
        out = srv.generate(PROMPT)
        expected = tp1.extra.get("greedy") or tp1.generate(PROMPT)["output_ids"]
        assert out["output_ids"] == expected
        lines = decode_lines(srv.log())
        assert lines
        assert all(m.group("ranks") == " TP0" for m in lines)
        # Per-rank startup lines carry their own prefix; TP1 logs no batch line.
        assert re.search(r"^\[[^\]]* TP1\] Disable decode CUDA graph", srv.log(), re.M)
        assert not re.search(r" TP1\] (Decode|Prefill) batch", srv.log())
        # Idle ranks wait on the queue / the control broadcast instead of spinning.
        workers = srv.workers()
        assert all(_runnable_share([w]) < 0.5 for w in workers)
        # SIGKILL of the main process: the workers (and the rest of the tree) go away by themselves.
        tree = [p.pid for p in psutil.Process(srv.proc.pid).children(recursive=True)]
        assert len(tree) >= 2
        os.kill(srv.proc.pid, signal.SIGKILL)
        srv.proc.wait(timeout=60)
        assert _wait_gone(tree, 60.0) == []  # a hang guard, not a speed test: a loaded host is slow to reap
    finally:
        srv.stop(signal.SIGKILL)


def test_sigterm_stops_everything_even_mid_request(tmp_path: Path) -> None:
    # a server of its own: stopping the module's shared one would fail the tests that run after it
    tp1 = boot(SPEC, tmp_path / "server.log", env=server_env({}))
    try:
        _sigterm_mid_request(tp1)
    finally:
        tp1.stop(signal.SIGKILL)


def _sigterm_mid_request(tp1: Server) -> None:
    import http.client
    import urllib.request

    tree = [p.pid for p in psutil.Process(tp1.proc.pid).children(recursive=True)]
    assert tp1.workers()
    # Mid-request by construction, not by a stopwatch: each step slowed 20x, so the 900 tokens would take
    # minutes, far beyond the hang guards below; the stream must end without its final chunk.
    status, _ = tp1.request("POST", "/ref/fault", {"slowdown_pct": 2000})
    assert status == 200
    body = json.dumps({"text": "long", "stream": True,
                       "sampling_params": {"max_new_tokens": 900, "ignore_eos": True}}).encode()
    resp = urllib.request.urlopen(urllib.request.Request(tp1.url + "/generate", data=body), timeout=120)
    assert resp.readline().startswith(b"data: ")  # a request is in flight
    code = tp1.stop(signal.SIGTERM, timeout=120)  # a generous hang guard: stop() SIGKILLs after it (code != 0)
    try:
        rest = resp.read()
    except http.client.IncompleteRead as cut:  # the server went away mid-stream
        rest = cut.partial
    except OSError:
        rest = b""
    resp.close()
    assert code == 0, tp1.log()[-3000:]
    assert b"[DONE]" not in rest and b'"finish_reason": {"type": "length"' not in rest, rest[-500:]  # cut short
    assert _wait_gone(tree, 60.0) == []
    assert "SIGTERM received" in tp1.log()
