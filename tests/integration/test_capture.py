"""`specwatch capture` then `specwatch inspect` against a live reference server: the round trip.

The server is started by hand, as a user would on their host: untuned at launch, but with a leaked
``sitecustomize.py`` on PYTHONPATH that sets the tuned NCCL variables in every Python process (the
case study's contamination) and a secret in its environment. The main process's ``/proc`` shows
only its start environment, which lacks the variables: its resource tracker, started after it,
shows they were set inside it. (Whether the retitled worker's own ``/proc`` is blank depends on
setproctitle; the unit tests' captures cover the all-blank case.)
"""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

import handstarted
import pytest

from specwatch.cli import main
from specwatch.profiles.profile import TUNED_NCCL
from specwatch.signals import probe
from specwatch.store.capture import MANIFEST, REDACTED, read_capture

ROOT = Path(__file__).resolve().parents[2]
SECRET = "hf_do_not_keep_me"
PRIVATE = "my-private-value-42"
NCCL_SAMPLE = next(iter(TUNED_NCCL))


@pytest.fixture(scope="module")
def leaky_server(tmp_path_factory: pytest.TempPathFactory):
    """(url, log, pid) of an EAGLE3 reference server with a leaked sitecustomize, logging to a file."""
    tmp = tmp_path_factory.mktemp("leaky")
    leak = tmp / "site"
    probe.write_setter(leak, TUNED_NCCL)
    log = tmp / "server.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "SPECWATCH_"))}
    env.update({"PYTHONPATH": os.pathsep.join([str(leak), str(ROOT / "src")]), "HF_TOKEN": SECRET,
                "MY_PRIVATE_NOTE": PRIVATE})
    proc, url = handstarted.start(log, env, ("--device", "cpu"))
    body = json.dumps({"text": "the quick brown fox jumps over", "sampling_params": {"max_new_tokens": 48,
                                                                                       "temperature": 0}}).encode()
    for _ in range(3):  # some verify cycles for the Decode lines and the counters
        req = urllib.request.Request(url + "/generate", body, {"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=60).read()
    yield url, log, proc.pid
    handstarted.stop(proc)


def test_capture_by_url_then_inspect_finds_the_leak(leaky_server, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    url, log, pid = leaky_server
    out = tmp_path / "cap"
    assert main(["capture", str(out), "--url", url, "--redact", "MY_*"]) == 0
    said = capsys.readouterr().out
    assert f"wrote {out / MANIFEST}" in said and "with a blank /proc environ" in said
    # the capture: the whole tree from the main pid, the log found through the server's stderr, secrets gone
    cap = read_capture(out)
    assert cap.main_pid == pid and cap.url == url and cap.missing == {}
    assert cap.log is not None and cap.metrics_text and cap.server_info
    assert cap.log.read_text().startswith(log.read_text()[:200])
    by_pid = {p.pid: p for p in cap.processes}
    main_proc = by_pid[pid]
    assert main_proc.environ.status == "ok" and main_proc.start_time is not None
    assert main_proc.environ.env["HF_TOKEN"] == REDACTED and main_proc.environ.env["MY_PRIVATE_NOTE"] == REDACTED
    assert not set(TUNED_NCCL) & set(main_proc.environ.env)  # launched untuned
    workers = [p for p in cap.processes if p.title.startswith("refserver::scheduler")]
    assert workers and all(p.environ.status in ("ok", "partial", "retitled") for p in workers)
    assert all(p.start_time is not None and p.start_time >= main_proc.start_time for p in cap.processes)
    everything = "".join(f.read_text(errors="replace") for f in out.rglob("*") if f.is_file())
    assert SECRET not in everything and PRIVATE not in everything

    # inspect: the leak, from the tree alone (no probe, no NCCL lines)
    assert main(["inspect", str(out)]) == 1
    lines = capsys.readouterr().out.splitlines()
    env_line = next(line for line in lines if line.startswith("environment:"))
    assert " fail " in env_line and f"(pid {pid}) after it started" in env_line, lines
    tracker = next(p for p in cap.processes if "resource_tracker" in p.title)  # the helper that shows it
    assert tracker.ppid == pid and NCCL_SAMPLE in tracker.environ.env
    assert "sitecustomize.py or a patch" in env_line and f"(pid {tracker.pid})" in env_line
    assert "started after it, carr" in env_line  # the tracker (and a readable worker) carry them
    for var in TUNED_NCCL:
        assert var in env_line
    for worker in workers:  # from its own /proc, or, when blank, from its earlier sibling
        assert f"refserver::scheduler (pid {worker.pid})" in env_line, lines
    graphs = next(line for line in lines if line.startswith("verify graphs:"))
    assert " fail " in graphs and "CPU" in graphs, lines  # a CPU server has no CUDA graphs
    accept = next(line for line in lines if line.startswith("accept length:"))
    assert " pass " in accept, lines


def test_capture_by_pid_judged_against_the_untuned_profile(leaky_server, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    url, _log, pid = leaky_server
    out = tmp_path / "cap"
    assert main(["capture", str(out), "--pid", str(pid)]) == 0
    capsys.readouterr()
    assert read_capture(out).url == url  # from the main process's --port
    assert main(["inspect", str(out), "--server", "eagle3-untuned"]) == 1
    text = capsys.readouterr().out
    assert "judged against profile eagle3-untuned" in text
    assert next(line for line in text.splitlines() if line.startswith("environment:")).split()[1] == "fail"
