"""specwatch against a real third-party OpenAI-compatible server: Hugging Face's `transformers serve`.

One server for the module: a tiny random Llama made at test time (tinyhf.py, no download), served
on CPU by ``transformers serve`` on a free port, offline. Through it:

- the OpenAI client, in process: a streamed completion and chat, what the server refuses
  (``ignore_eos``: HTTP 422, dropped once and noted), its one-line errors, its usage counts;
- ``pytest -m perf`` on fixtures/profiles/transformers-serve.toml (both routes): single-stream
  throughput recorded as a baseline with a floor and a concurrency sweep (levels 1 and 4: p99 TTFT,
  ITL, TPOT and e2e of both routes), then the drift gate against the baseline;
- ``specwatch capture --url`` then ``specwatch inspect`` of the capture.

Skipped, saying why, when ``transformers`` with its serving extra is not installed.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from keptruns import runs_kept
from openaiup import wait_until_serving

from specwatch.errors import InfraError, RequestRejected
from specwatch.load.openai_client import OpenAIClient
from specwatch.server.process import die_with_parent, free_port

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "fixtures" / "profiles" / "transformers-serve.toml"
SERVERS = ("tf-completions", "tf-chat")


def _missing() -> str | None:
    """Why `transformers serve` cannot run here, or None."""
    needed = ("transformers", "tokenizers", "fastapi", "uvicorn", "openai")
    absent = [m for m in needed if importlib.util.find_spec(m) is None]
    if absent:
        return f"needs `transformers serve`: pip install 'transformers[serving]' (missing: {', '.join(absent)})"
    from importlib.metadata import version

    if int(version("transformers").split(".")[0]) < 5:
        return f"needs transformers 5 or later for `transformers serve MODEL`, found {version('transformers')}"
    return None


if (why := _missing()) is not None:
    pytest.skip(why, allow_module_level=True)


@pytest.fixture(scope="module")
def tf_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, int, Path]]:
    """(url, model folder, pid, log) of `transformers serve` pinned to a tiny random Llama, on CPU."""
    tmp = tmp_path_factory.mktemp("tfserve")
    model, log, port = tmp / "tiny-llama", tmp / "server.log", free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECWATCH_", "HF_", "CUDA"))}
    env.update({"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp / "hf-home"), "OMP_NUM_THREADS": "1",
                "CUDA_VISIBLE_DEVICES": ""})
    # the model is built by the server's own process, then `transformers serve` runs in it (tinyhf.main)
    cmd = [sys.executable, str(Path(__file__).with_name("tinyhf.py")), str(model), "serve", str(model),
           "--host", "127.0.0.1", "--port", str(port), "--device", "cpu", "--log-level", "info"]
    with open(log, "wb") as err:
        # its own group, and gone with pytest even after a kill -9 (as specwatch's own servers are)
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err, preexec_fn=die_with_parent)
    url = f"http://127.0.0.1:{port}"
    wait_until_serving(url, proc, 180, "transformers serve", lambda: log.read_text()[-3000:], poll_s=0.3)
    yield url, model, proc.pid, log
    os.killpg(proc.pid, 15)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait(timeout=30)


def _client(url: str, api: str, job: Any) -> Any:
    async def run() -> Any:
        async with OpenAIClient(url, api) as client:
            return await job(client)

    return asyncio.run(run())


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_the_client_streams_from_the_real_server(tf_server: tuple[str, Path, int, Path], api: str) -> None:
    url, model, _pid, _log = tf_server

    async def job(c: OpenAIClient) -> tuple[Any, ...]:
        first = await c.generate("the model drafts tokens", max_new_tokens=12)
        second = await c.generate("write a function", max_new_tokens=12)
        return first, second, list(c.notes), await c.server_info(), await c.healthy(), await c.metrics()

    first, second, notes, info, healthy, metrics = _client(url, api, job)
    for gen in (first, second):
        # the count is the server's usage chunk, the text came in chunks, and it ran to max_tokens
        assert gen.completion_tokens == 12 and gen.meta_info["completion_tokens_from"] == "usage", gen.meta_info
        assert gen.meta_info["finish_reason"] == "length" and gen.text
        assert gen.meta_info["prompt_tokens"] > 0 and gen.meta_info["ignore_eos"] is False
        # the 12 tokens spread over the text chunks, at least one each after the first
        assert 1 <= len(gen.chunk_gaps_s) == len(gen.chunk_tokens) <= sum(gen.chunk_tokens) <= 11, gen.chunk_tokens
        assert len(gen.itl_s) == sum(gen.chunk_tokens) and 0 < gen.ttft_s < gen.e2e_s
    # the server refuses ignore_eos with a 422: asked once more without, noted once, never sent again
    assert len(notes) == 1 and notes[0].startswith(f"{url}/v1/") and "refused ignore_eos (HTTP 422: " in notes[0]
    assert "Unexpected fields in the request" in notes[0] and "{\"detail\"" not in notes[0], notes
    assert info == {"api": api, "model": str(model)}  # GET /v1/models lists the pinned model; no /version
    assert healthy is True and metrics is None


def test_the_real_servers_errors_are_one_line(tf_server: tuple[str, Path, int, Path]) -> None:
    url, model, _pid, _log = tf_server

    async def pinned(c: OpenAIClient) -> Any:
        c.model = "some-other-model"
        return await c.generate("x", max_new_tokens=2)

    with pytest.raises(RequestRejected) as rejected:
        _client(url, "chat", pinned)
    said = str(rejected.value)
    # the server's own message (its JSON "detail"), not the ignore_eos refusal it gave first
    assert said.startswith(f"POST {url}/v1/chat/completions -> HTTP 400: Server is pinned to '{model}'"), said
    assert "asked with ignore_eos first: HTTP 422" in said and rejected.value.status == 400 and "\n" not in said
    with pytest.raises(InfraError, match=r"the stream reported an error: `max_new_tokens` must be greater than 0"):
        _client(url, "completions", lambda c: c.generate("x", max_new_tokens=0))


def _profile(tmp: Path, url: str, extra: str = "") -> Path:
    """The shipped transformers-serve profile at ``url``, with ``extra`` TOML appended."""
    text = PROFILE.read_text()
    assert "http://localhost:8000" in text
    out = tmp / "tf.toml"
    out.write_text(text.replace("http://localhost:8000", url) + extra)
    return out


def _pytest(tmp: Path, profile: Path, tests: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pytest", "-m", "perf", "-p", "no:cacheprovider", "-q", "-rs", "--rootdir",
           str(ROOT), *(str(ROOT / "tests" / "perf" / t) for t in tests), f"--specwatch-profiles={profile}",
           f"--specwatch-baseline-dir={tmp / 'baselines'}", f"--specwatch-report-dir={tmp / 'reports'}",
           f"--specwatch-history={tmp / 'history.sqlite'}", f"--specwatch-results={tmp / 'results.json'}",
           "--specwatch-machine-class=ci-cpu", *args]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECWATCH_", "PYTEST_XDIST"))}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=400, cwd=ROOT, env=env)


def test_perf_records_both_routes_and_a_sweep_then_the_drift_gate_passes(tf_server: tuple[str, Path, int, Path],
                                                                        tmp_path: Path) -> None:
    """`pytest -m perf` twice: single-stream throughput of both routes recorded, with a floor and a
    concurrency sweep; then the drift gate against what was recorded. The sweep needs a pair to
    compare: here chat against completions of the one server (the sweep table has p99 latencies of both)."""
    profile = _profile(tmp_path, tf_server[0], '\n[fixtures]\nbaseline = "tf-completions"\nspec = "tf-chat"\n')
    text = profile.read_text().replace("[defaults]\n", "[defaults]\nfloor_tok_s = 1\n", 1)
    text = text.replace("max_new_tokens = 32\n", "max_new_tokens = 8\nconcurrency = [1, 4]\n", 1)
    profile.write_text(text)
    runs = ("--specwatch-runs=4", "--specwatch-warmup=1", "--specwatch-tolerance=0.5")
    out = _pytest(tmp_path, profile, ["test_throughput.py", "test_sweep.py"], "--update-baselines", *runs)
    said = out.stdout + out.stderr
    assert out.returncode == 0, said[-4000:]
    assert "booting" not in said, "an openai server is never booted"
    assert "refused ignore_eos (HTTP 422" in said, said[-4000:]  # the run says what the client changed
    assert "3 passed" in said.split("short test summary info")[-1], said[-2000:]  # two floors and the sweep
    results = {r["key"]: r for r in json.loads((tmp_path / "results.json").read_text())["results"]}
    for server in SERVERS:
        doc = json.loads((tmp_path / "baselines" / "ci-cpu" / f"{server}.json").read_text())
        samples = doc["metrics"]["single-stream/output_tok_s"]["samples"]
        assert len(samples) == 4 and min(samples) > 0, samples
        for metric in ("output_tok_s", "decode_tok_s", "ttft_ms"):
            r = results[f"{server}/single-stream/{metric}"]
            assert len(r["samples"]) == runs_kept(r, 4) and min(r["samples"]) > 0, r
        for level in ("concurrency-1", "concurrency-4"):
            for metric in ("output_throughput", "p99_ttft_ms", "p99_itl_ms", "p99_tpot_ms", "p99_e2e_latency_ms"):
                r = results[f"{server}/{level}/{metric}"]
                assert len(r["samples"]) == runs_kept(r, 4) and min(r["samples"]) > 0, (server, level, metric, r)
    assert "specwatch sweep: tf-chat vs tf-completions" in said and "p99 TTFT ms" in said, said[-3000:]
    # one request at a time (no --continuous-batching): four in flight wait for each other
    c1, c4 = (statistics.median(results[f"tf-completions/concurrency-{n}/p99_ttft_ms"]["samples"]) for n in (1, 4))
    assert c4 > c1, (c1, c4)

    again = _pytest(tmp_path, profile, ["test_throughput.py"], *runs)  # against the baselines just recorded
    said = again.stdout + again.stderr
    assert again.returncode == 0, said[-4000:]
    assert "MISSING BASELINE" not in said and "0 regression(s)" in said, said[-3000:]
    assert "6 passed" in said.split("short test summary info")[-1], said[-2000:]  # floor + 2 drifts, 2 routes
    for server in SERVERS:
        row = next(line for line in said.splitlines()
                   if line.startswith(f"{server}/single-stream/output_tok_s ") and "≥ floor" not in line)
        assert "tok/s" in row and "±50%" in row, row


def test_capture_by_url_then_inspect(tf_server: tuple[str, Path, int, Path], tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    from specwatch.cli import main
    from specwatch.store.capture import MANIFEST, read_capture

    url, _model, pid, log = tf_server
    out = tmp_path / "cap"
    assert main(["capture", str(out), "--url", url]) == 0
    said = capsys.readouterr().out
    assert f"wrote {out / MANIFEST}" in said and "no /metrics, no /server_info" in said, said
    cap = read_capture(out)
    assert cap.main_pid == pid and cap.url == url
    assert set(cap.missing) == {"metrics", "server_info"} and "HTTP 404" in cap.missing["server_info"]
    assert cap.log is not None and cap.log.read_text().startswith(log.read_text()[:200])  # found through its stderr
    assert cap.processes[0].pid == pid and cap.processes[0].environ.env.get("HF_HUB_OFFLINE") == "1"

    profile = _profile(tmp_path, url)
    assert main(["inspect", str(out), "--profile", str(profile), "--server", "tf-chat"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "judged against profile tf-chat" in lines[0], lines
    for check in ("environment:", "verify graphs:", "accept length:"):  # as the live run skips them
        line = next(ln for ln in lines if ln.startswith(check))
        assert line.split(":", 1)[1].split()[0] == "skip", line
        assert "SGLang-only check" in line and "engine = 'openai'" in line, line
