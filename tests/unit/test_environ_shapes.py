"""``/proc/<pid>/environ`` blocks of every shape, made by real ``setproctitle`` calls, and what the checks say.

setproctitle clobbers the argv strings and every environment string that still lies right after
them; a variable the process replaced before retitling ends that run, so the entries from it on
survive. The shapes: whole (never retitled), blanked (retitled), partly overwritten (front),
empty (started with no environment) and unreadable (the process is gone). A correctly tuned server
must never be reported as having lost its variables, whatever shape its workers' blocks take.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from specwatch.checks import environment
from specwatch.checks.envcheck import check_environment
from specwatch.checks.inspect import inspect_capture
from specwatch.profiles.profile import TUNED_NCCL, ServerProfile
from specwatch.signals import procenv
from specwatch.signals.procenv import EnvRead, parse_environ_block, read_environ, reconcile_size, walk
from specwatch.store.capture import REDACTED, CapturedProcess, Redactor, read_capture, write_capture

pytest.importorskip("setproctitle")

#: the tuned variables in the order they sit in every block below
ORDER = ["NCCL_PROTO", "NCCL_ALGO", "NCCL_P2P_LEVEL", "NCCL_MAX_NCHANNELS", "NCCL_BUFFSIZE", "NCCL_NTHREADS"]
FILLER = {f"FILLER_{i:02d}": "f" * 24 for i in range(8)}

_CHILD = r"""
import os, sys, setproctitle
replace = sys.argv[1]
if replace:
    os.environ[replace] = os.environ[replace]   # the pointer moves off the block: the clobber stops here
if sys.argv[2]:
    setproctitle.setproctitle(sys.argv[2])
print("ready", flush=True)
sys.stdin.readline()
"""


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin"), **FILLER}
    env.update({k: TUNED_NCCL[k] for k in ORDER})
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    env.update(extra or {})
    return env


def _block(title: str, replace: str = "", env: dict[str, str] | None = None) -> tuple[bytes, EnvRead]:
    """The raw block and its parse, read from a live child that (maybe) replaced a variable, then retitled."""
    child = subprocess.Popen([sys.executable, "-c", _CHILD, replace, title], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=_env() if env is None else env)
    try:
        assert child.stdout.readline().strip() == "ready"
        with open(f"/proc/{child.pid}/environ", "rb") as fh:
            raw = fh.read()
        return raw, read_environ(child.pid)
    finally:
        child.kill()
        child.wait()


def test_a_block_never_retitled_is_whole_and_answers_for_every_variable() -> None:
    raw, read = _block(title="")
    assert read.status == "ok"
    assert read.complete
    assert read.nbytes == len(raw)
    assert {k: read.env[k] for k in ORDER} == {k: TUNED_NCCL[k] for k in ORDER}
    assert read.lookup("NOT_SET_ANYWHERE") == (True, None)  # a whole block can say "absent"


def test_a_blanked_block_answers_nothing() -> None:
    raw, read = _block(title="sglang::scheduler")
    assert raw.count(0) == len(raw)  # setproctitle blanked all of it
    assert read.status == "retitled"
    assert read.nbytes == len(raw)
    assert read.lookup("NCCL_ALGO") == (False, None)


def test_a_partly_overwritten_block_keeps_its_survivors_and_cannot_say_absent() -> None:
    raw, read = _block(title="sglang::scheduler", replace="NCCL_P2P_LEVEL")
    assert raw.startswith(b"\0")  # the front is gone
    assert read.status == "partial"
    assert not read.complete
    assert not read.readable
    lost, kept = ORDER[:2], ORDER[2:]
    for var in kept:
        assert read.lookup(var) == (True, TUNED_NCCL[var])
    for var in [*lost, *FILLER, "NOT_SET_ANYWHERE"]:
        assert read.lookup(var) == (False, None), var  # lost under the title, or never set: cannot tell
    assert "partly overwritten" in read.describe()


def test_a_block_retitled_after_replacing_its_first_variable_survives_whole() -> None:
    env = {"NCCL_PROTO": "LL", **{k: v for k, v in _env().items() if k != "NCCL_PROTO"}}
    raw, read = _block(title="sglang::scheduler", replace="NCCL_PROTO", env=env)
    assert not raw.startswith(b"\0")
    assert read.status == "ok"
    assert all(read.env[k] == TUNED_NCCL[k] for k in ORDER)


def test_an_empty_block_and_a_gone_process() -> None:
    child = subprocess.Popen([sys.executable, "-c", _CHILD, "", ""], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env={})
    try:
        assert child.stdout.readline().strip() == "ready"
        assert read_environ(child.pid).status == "empty"
    finally:
        child.kill()
        child.wait()
    gone = read_environ(child.pid)
    assert gone.status == "gone"
    assert gone.lookup("NCCL_ALGO") == (False, None)


@pytest.mark.parametrize(("data", "status", "env"), [
    (b"A=1\0B=2\0", "ok", {"A": "1", "B": "2"}),
    (b"\0\0\0B=2\0C=3\0", "partial", {"B": "2", "C": "3"}),
    (b"sglang::scheduler\0\0\0B=2\0", "partial", {"B": "2"}),
    (b"sglang::scheduler --x=1\0B=2\0", "partial", {"B": "2"}),  # title text with '=': not an entry
    (b"A=1\0B=2", "partial", {"A": "1"}),  # no final NUL: the last entry is cut
    (b"sglang::scheduler\0\0\0\0", "retitled", {}),
    (b"\0" * 64, "retitled", {}),
    (b"", "empty", {}),
])
def test_parse_shapes(data: bytes, status: str, env: dict[str, str]) -> None:
    read = parse_environ_block(data)
    assert (read.status, dict(read.env), read.nbytes) == (status, env, len(data))


def test_an_ok_record_whose_entries_fill_less_than_its_size_is_partial() -> None:
    raw, live = _block(title="sglang::scheduler", replace="NCCL_P2P_LEVEL")
    old = EnvRead("ok", dict(live.env), len(raw))  # how a capture written before 'partial' stored it
    assert reconcile_size(old).status == "partial"
    whole_raw, whole = _block(title="")
    assert reconcile_size(EnvRead("ok", dict(whole.env), len(whole_raw))).status == "ok"
    hidden = EnvRead("ok", {**live.env, "HF_TOKEN": REDACTED}, len(raw) + 40)
    assert reconcile_size(hidden, opaque=REDACTED).status == "ok"  # a redacted value hides its size
    assert reconcile_size(EnvRead("ok", {}, 300)).status == "retitled"


# ------------------------------------------------------------------------------------------------
# A real process tree shaped like SGLang's: a main process started with the six tuned variables,
# two spawned workers that retitle themselves; the scheduler replaced one variable first.

_LAUNCH = textwrap.dedent(r"""
    import multiprocessing as mp, os, sys, time

    def worker(title, replace, ready):
        import setproctitle
        if replace:
            os.environ[replace] = os.environ[replace]
        setproctitle.setproctitle(title)
        ready.put(title)
        time.sleep(120)

    if __name__ == "__main__":
        ctx = mp.get_context("spawn")
        ready = ctx.Queue()
        procs = [ctx.Process(target=worker, args=("sglang::scheduler", "NCCL_P2P_LEVEL", ready)),
                 ctx.Process(target=worker, args=("sglang::detokenizer", "", ready))]
        for p in procs:
            p.start()
        for _ in procs:
            ready.get(timeout=60)
        print("ready", flush=True)
        sys.stdin.readline()
        for p in procs:
            p.kill()
""")


@pytest.fixture(scope="module")
def tuned_tree(tmp_path_factory: pytest.TempPathFactory):
    pkg = tmp_path_factory.mktemp("fake") / "sglang"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_server.py").write_text(_LAUNCH)
    path = os.pathsep.join([str(pkg.parent), *filter(None, [os.environ.get("PYTHONPATH")])])
    main = subprocess.Popen([sys.executable, "-m", "sglang.launch_server"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=_env({"PYTHONPATH": path}))
    try:
        assert main.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 10
        procs = walk(main.pid)
        while time.monotonic() < deadline and len(procenv.workers(procs)) < 2:
            time.sleep(0.1)
            procs = walk(main.pid)
        yield main.pid, procs
    finally:
        main.kill()
        main.wait()


def test_live_tree_reads_one_whole_one_partial_one_blank(tuned_tree) -> None:
    main_pid, procs = tuned_tree
    shapes = {p.role.role: p.environ.status for p in procs if p.role and p.role.role in ("main", "scheduler",
                                                                                       "detokenizer")}
    assert shapes == {"main": "ok", "scheduler": "partial", "detokenizer": "retitled"}
    assert next(p for p in procs if p.pid == main_pid).role.role == "main"


def test_a_tuned_server_with_partial_and_blank_workers_is_never_reported_missing(tuned_tree) -> None:
    _, procs = tuned_tree
    report = check_environment(procs, TUNED_NCCL, "tuned")
    assert report.failures == []
    scheduler = next(p for p in procs if p.role and p.role.role == "scheduler")
    assert report.verdict_for(scheduler.pid, "NCCL_BUFFSIZE") == "ok"  # a survivor answers
    assert report.verdict_for(scheduler.pid, "NCCL_PROTO") == "unknown"  # lost under the title: cannot tell
    verdict = environment.evaluate(ServerProfile(name="tuned", env="tuned", env_vars=dict(TUNED_NCCL)), procs)
    assert not verdict.failed, verdict.reason
    assert "lost when the workers" not in verdict.message
    assert "missing" not in verdict.reason


def test_a_capture_of_that_tree_is_judged_the_same_and_counts_its_shapes(tuned_tree, tmp_path: Path) -> None:
    main_pid, procs = tuned_tree
    captured = [CapturedProcess(p.pid, p.ppid, p.name, p.cmdline, p.environ, float(i)) for i, p in enumerate(procs)]
    manifest = write_capture(tmp_path / "cap", created="2026-12-01T00:00:00Z", host="h", url="http://127.0.0.1:1",
                             main_pid=main_pid, processes=captured, redactor=Redactor.with_patterns())
    cap = read_capture(manifest.parent)
    statuses = sorted(p.environ.status for p in cap.processes if p.pid != main_pid and "::" in p.name + p.title)
    assert statuses == ["partial", "retitled"]
    env_verdict = inspect_capture(cap)[0]  # no profile: the launch's own six variables are the expectation
    assert not env_verdict.failed, env_verdict.reason
    assert "lost when the workers" not in env_verdict.message
