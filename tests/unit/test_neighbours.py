"""``shared_host`` means what it says: other inference servers or GPU processes on the host, not only xdist workers.

A real SGLang run read ``extra.shared_host: false`` on a host where other servers were running
(issue 24): the flag only counted pytest-xdist workers. Now each measurement looks at the process
table (and nvidia-smi's compute processes) before and after its runs.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specwatch.load import measure as measure_mod
from specwatch.load.measure import RunSample
from specwatch.load.workload import Workload
from specwatch.run.summary import note_lines, results_of
from specwatch.served import Setup
from specwatch.server import neighbours as nb


@pytest.mark.parametrize(("cmdline", "kind"), [
    (["/venv/bin/python3", "-m", "sglang.launch_server", "--model-path", "m"], "SGLang server"),
    (["/venv/bin/sglang", "serve", "--model-path", "m"], "SGLang server"),
    (["sglang::scheduler_TP0"], "SGLang server"),
    (["python", "-m", "specwatch.refserver", "--model-path", "ref-tiny"], "reference server"),
    (["refserver::scheduler"], "reference server"),
    (["/usr/bin/vllm", "serve", "meta-llama/Llama-3.1-8B"], "vLLM server"),
    (["python3.11", "-m", "vllm.entrypoints.openai.api_server"], "vLLM server"),
    (["transformers", "serve"], "transformers serve"),
    (["/opt/tritonserver/bin/tritonserver", "--model-repository", "/m"], "Triton server"),
    (["python", "-m", "pytest", "tests"], None),
    (["python", "-m"], None),
    (["bash"], None),
    ([], None),
])
def test_server_kind(cmdline: list[str], kind: str | None) -> None:
    assert nb.server_kind(cmdline) == kind


def _fake_server_module(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "sglang").mkdir()
    (tmp_path / "sglang" / "__init__.py").write_text("")
    (tmp_path / "sglang" / "launch_server.py").write_text("import time\ntime.sleep(60)\n")
    return {**os.environ, "PYTHONPATH": str(tmp_path)}


def _wait_for(pred, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return False


def test_another_server_on_the_host_is_found_and_the_runs_own_are_not(tmp_path: Path) -> None:
    env = _fake_server_module(tmp_path)
    pidfile = tmp_path / "pid"
    # someone else's server: started through a shell that exits, so it is no descendant of this process
    subprocess.run(["sh", "-c", f"{sys.executable} -m sglang.launch_server --model-path other & echo $! > {pidfile}"],
                   env=env, check=True, timeout=30)
    other = int(pidfile.read_text())
    mine = subprocess.Popen([sys.executable, "-m", "sglang.launch_server", "--model-path", "mine"], env=env)
    try:
        assert _wait_for(lambda: f"SGLang server (pid {other})" in nb.neighbours()), nb.neighbours()
        found = nb.neighbours()
        assert f"(pid {mine.pid})" not in " ".join(found), found  # the run's own servers are its descendants
        assert f"(pid {other})" not in " ".join(nb.neighbours(own=[other]))  # a --server-url server is the run's
    finally:
        os.kill(other, signal.SIGKILL)
        mine.kill()
        mine.wait(timeout=30)


def test_a_measurement_records_what_shared_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    class Client:
        notes: tuple[str, ...] = ()

        async def __aenter__(self) -> Client:
            return self

        async def __aexit__(self, *exc: object) -> None:
            return None

        async def flush_cache(self) -> bool:
            return True

        async def server_info(self) -> dict:
            return {}

        async def metrics(self) -> None:
            return None

    class Server:
        url, log_path, shared_host, pid = "A", None, False, None
        profile = type("P", (), {"name": "eagle3", "setup": lambda self: Setup("reference", "ref-tiny", 1)})()

        def log_size(self) -> int:
            return 0

    async def one_run(*args: object) -> RunSample:
        return RunSample(output_tok_s=100.0, decode_tok_s=110.0, ttft_ms=1.0, mean_itl_ms=1.0, e2e_s=0.1,
                         completion_tokens=8, client_overhead=0.0)

    seen = iter([["SGLang server (pid 4061)"], ["SGLang server (pid 4061)", "GPU process python (pid 77, 30 MiB)"]])
    monkeypatch.setattr(measure_mod, "client_for", lambda profile, url: Client())
    monkeypatch.setattr(measure_mod, "_one_run", one_run)
    monkeypatch.setattr(measure_mod, "neighbours", lambda own: next(seen))
    notes: list[str] = []
    (m,) = asyncio.run(measure_mod.measure_interleaved_async([Server()], Workload("w", runs=2, warmup=0),
                                                             notes.append))
    assert m.shared_host and m.neighbours == ("SGLang server (pid 4061)", "GPU process python (pid 77, 30 MiB)")
    assert any("the host was shared during the runs (SGLang server (pid 4061), GPU process" in n for n in notes)
    rs = results_of({("eagle3", "w"): m}, {"machine_class": "x"}, None)
    assert rs.results[0].extra["shared_host"] is True
    assert rs.results[0].extra["shared_with"] == list(m.neighbours)
    (line,) = [ln for ln in note_lines([], {("eagle3", "w"): m}, []) if "shared host" in ln]
    assert line.startswith("note: 1 measurement(s) ran on a shared host (SGLang server (pid 4061), GPU process")
