"""The load's OpenAI client against a fake OpenAI-compatible server (openai_fake.py): what it measures,
what it sends, and that every failure is one line.

Timings are only bounded from below (a chunk cannot arrive before the server slept), never from
above: a loaded machine only makes them longer.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, TypeVar

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from openai_fake import BODIES, MODEL, make_app

from specwatch.errors import InfraError, RequestRejected, UsageError
from specwatch.load.client import Client, Generation
from specwatch.load.openai_client import OpenAIClient, client_for, error_text, spread
from specwatch.profiles.loading import check_reachable, parse_profiles
from specwatch.profiles.profile import ServerProfile
from specwatch.server.pool import ServerPool

T = TypeVar("T")
DELAY, FIRST = 0.02, 0.05


def _serve(
    app: web.Application,
    job: Callable[[OpenAIClient], Awaitable[T]],
    api: str = "completions",
    model: str | None = None,
) -> T:
    async def run() -> T:
        async with TestServer(app) as srv, OpenAIClient(str(srv.make_url("")).rstrip("/"), api, model) as client:
            return await job(client)

    return asyncio.run(run())


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_ttft_itl_and_tokens_of_a_stream(api: str) -> None:
    app = make_app(delay=DELAY, first_delay=FIRST)
    gen: Generation = _serve(app, lambda c: c.generate("hello there", max_new_tokens=6), api)
    assert gen.completion_tokens == 6 and gen.meta_info["completion_tokens_from"] == "usage"
    assert gen.text == " t0 t1 t2 t3 t4 t5" and gen.meta_info["finish_reason"] == "length"
    assert gen.meta_info["prompt_tokens"] == 2
    # TTFT: the first chunk with text (chat's role-only chunk and the keep-alive comment do not count)
    assert gen.ttft_s >= 0.8 * FIRST
    assert len(gen.chunk_gaps_s) == 5 and gen.chunk_tokens == [1] * 5
    # each gap is a later chunk's arrival: positive; its size depends on when this process got to read (a loaded
    # host reads one chunk late and the next early), so only the whole stream is bounded by the server's sleeps
    assert all(g > 0 for g in gen.chunk_gaps_s), gen.chunk_gaps_s
    assert len(gen.itl_s) == 5 and gen.e2e_s >= 0.8 * (FIRST + 5 * DELAY)
    body = app[BODIES][0]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["ignore_eos"] is True and body["temperature"] == 0 and body["max_tokens"] == 6
    assert body["model"] == MODEL  # asked of GET /v1/models: the profile named none
    assert (
        (body["messages"] == [{"role": "user", "content": "hello there"}])
        if api == "chat"
        else (body["prompt"] == "hello there")
    )


def test_several_tokens_per_chunk_are_spread_over_the_chunks() -> None:
    gen = _serve(make_app(delay=0.001, first_delay=0.001, per_chunk=3), lambda c: c.generate("x", max_new_tokens=8))
    assert gen.completion_tokens == 8 and gen.chunk_tokens == [3, 2]  # first chunk 3 tokens, then 3 and 2
    assert len(gen.itl_s) == 5
    assert spread(8, [3, 3, 2]) == [3, 3, 2] and spread(5, [1, 1, 1, 1, 1]) == [1] * 5
    assert sum(spread(7, [10, 1, 1])) == 7 and min(spread(7, [10, 1, 1])) >= 1
    assert spread(2, [1, 1, 1]) in ([1, 1, 0], [1, 0, 1], [0, 1, 1]) and spread(0, [1]) == [0]


def test_without_a_usage_chunk_the_chunks_are_counted_and_it_says_so() -> None:
    gen = _serve(make_app(delay=0.001, first_delay=0.001, usage=False), lambda c: c.generate("x", max_new_tokens=4))
    assert gen.completion_tokens == 4 and gen.meta_info["completion_tokens_from"] == "chunks"


def test_a_named_model_is_sent_and_models_is_not_asked() -> None:
    app = make_app(delay=0.001, first_delay=0.001)
    with pytest.raises(RequestRejected, match=r"^POST http://\S+/v1/completions -> HTTP 404: .*other-model") as exc:
        _serve(app, lambda c: c.generate("x", max_new_tokens=2), model="other-model")
    assert exc.value.status == 404 and "\n" not in str(exc.value)


@pytest.mark.parametrize(
    ("prompt", "error", "pattern"),
    [
        ("fail500", InfraError, r"-> HTTP 500: Internal Server Error \(engine died\)$"),
        ("malformed", InfraError, r"malformed stream line b'\{not json' \(not JSON\)$"),
        ("error", InfraError, r"the stream reported an error: out of KV cache$"),
        ("cut", InfraError, r"the stream ended without \[DONE\] or a finish_reason after 2 text chunk\(s\)"),
    ],
)
def test_failures_are_one_line(prompt: str, error: type[Exception], pattern: str) -> None:
    with pytest.raises(error, match=pattern) as exc:
        _serve(make_app(delay=0.001, first_delay=0.001), lambda c: c.generate(prompt, max_new_tokens=4))
    assert "\n" not in str(exc.value) and str(exc.value).startswith("POST http://")
    assert not isinstance(exc.value, RequestRejected)  # a 5xx or a broken stream is the server's fault


def test_a_refused_ignore_eos_is_dropped_once_and_noted() -> None:
    app = make_app(delay=0.001, first_delay=0.001, reject_ignore_eos=True)

    async def job(c: OpenAIClient) -> tuple[Generation, Generation, list[str]]:
        return await c.generate("x", max_new_tokens=3), await c.generate("y", max_new_tokens=3), c.notes

    first, second, notes = _serve(app, job)
    assert first.completion_tokens == second.completion_tokens == 3
    assert first.meta_info["ignore_eos"] is False and second.meta_info["ignore_eos"] is False
    assert ["ignore_eos" in b for b in app[BODIES]] == [True, False, False]  # asked once, then never again
    assert len(notes) == 1 and "refused ignore_eos (HTTP 400: " in notes[0], notes


def test_a_400_about_something_else_is_rejected_with_the_first_answer() -> None:
    async def bad(request: web.Request) -> web.Response:
        return web.Response(status=400, text="max_tokens is too large")

    app = web.Application()
    app.router.add_post("/v1/completions", bad)
    with pytest.raises(RequestRejected, match=r"-> HTTP 400: max_tokens is too large$"):
        _serve(app, lambda c: c.generate("x", max_new_tokens=3), model="m")


def _hf_like(chunks: list[dict[str, Any] | bytes], *, pinned: str = "m") -> web.Application:
    """A server shaped like the real `transformers serve` (5.x) of tests/integration: HTTP 422 with a
    FastAPI ``detail`` for a field it does not know (``ignore_eos``), 400 for another model than the
    one it is pinned to, a stream of ``chunks`` (JSON objects, or raw bytes as it wrote them) with no
    ``[DONE]``. The bodies received are kept in ``app[BODIES]``."""
    app = web.Application()
    app[BODIES] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        app[BODIES].append(body)
        if "ignore_eos" in body:
            return web.json_response({"detail": "Unexpected fields in the request: {'ignore_eos'}"}, status=422)
        if body["model"] != pinned:
            return web.json_response({"detail": f"Server is pinned to '{pinned}'; requested '{body['model']}'."},
                                     status=400)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for chunk in chunks:
            await resp.write(b"data: " + (chunk if isinstance(chunk, bytes) else json.dumps(chunk).encode()) + b"\n\n")
            await asyncio.sleep(0.002)
        return resp

    app.router.add_post("/v1/completions", handle)
    app.router.add_post("/v1/chat/completions", handle)
    return app


def _text(text: str, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": finish}], **extra}


def test_a_422_for_ignore_eos_is_dropped_once_and_noted_with_the_servers_message() -> None:
    """transformers serve refuses unknown fields with FastAPI's 422, not 400: every request failed."""
    usage = {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}
    app = _hf_like([_text("a"), _text(" bb"), _text("c"), _text("", "length", usage=usage)])

    async def job(c: OpenAIClient) -> tuple[Generation, Generation, list[str]]:
        return await c.generate("x", max_new_tokens=3), await c.generate("y", max_new_tokens=3), c.notes

    first, second, notes = _serve(app, job, model="m")
    assert first.completion_tokens == second.completion_tokens == 3 and first.text == "a bbc"
    assert first.meta_info["completion_tokens_from"] == "usage" and first.meta_info["finish_reason"] == "length"
    assert first.meta_info["ignore_eos"] is False
    assert ["ignore_eos" in b for b in app[BODIES]] == [True, False, False]
    assert len(notes) == 1 and notes[0].endswith(
        "/v1/completions refused ignore_eos (HTTP 422: Unexpected fields in the request: {'ignore_eos'}); requests "
        "go without it, so they may stop at the model's end of sequence"), notes


def test_a_retry_that_fails_otherwise_says_the_second_answer_and_the_first() -> None:
    """Another model than the pinned one: the 422 was not the only problem, and the 400 after it says what is."""
    app = _hf_like([], pinned="tiny")
    with pytest.raises(RequestRejected) as exc:
        _serve(app, lambda c: c.generate("x", max_new_tokens=3), "chat", model="other")
    assert str(exc.value).endswith(
        "/v1/chat/completions -> HTTP 400: Server is pinned to 'tiny'; requested 'other'. (asked with ignore_eos "
        "first: HTTP 422: Unexpected fields in the request: {'ignore_eos'})")
    assert exc.value.status == 400 and len(app[BODIES]) == 2


def test_an_error_chunk_written_as_broken_json_is_the_servers_error() -> None:
    """transformers serve writes ``data: {"error": "<message>"}`` without escaping the message: its
    quotes break the JSON, and a newline in it ends the data line."""
    for raw, said in [(b'{"error": "bad "stop" value 5"}', 'bad "stop" value 5'),
                      (b'{"error": "bad "stop" value:\n  5"}', 'bad "stop" value:')]:
        with pytest.raises(InfraError) as exc:
            _serve(_hf_like([_text("a"), raw]), lambda c: c.generate("x", max_new_tokens=3), model="m")
        assert str(exc.value).endswith(f"/v1/completions: the stream reported an error: {said}"), exc.value
        assert "\n" not in str(exc.value)
    app = _hf_like([_text("a"), b'{"error": "out of memory"}'])  # one it wrote as valid JSON
    with pytest.raises(InfraError, match=r"the stream reported an error: out of memory$"):
        _serve(app, lambda c: c.generate("x", max_new_tokens=3), model="m")


def test_a_reasoning_models_thinking_is_streamed_text() -> None:
    """Chat deltas of a reasoning model carry ``reasoning_content`` (transformers serve, SGLang) or
    ``reasoning`` (vLLM) before ``content``: the first token is the first thought, and every chunk
    of thought is a token gap, not a wait."""

    def delta(**d: str) -> dict[str, Any]:
        return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": d}]}

    usage = {"prompt_tokens": 4, "completion_tokens": 5, "total_tokens": 9}
    done = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
            "usage": usage}
    for key in ("reasoning_content", "reasoning"):
        app = _hf_like([delta(role="assistant"), delta(**{key: "hm"}), delta(**{key: " so"}), delta(content="Yes"),
                        delta(content=","), delta(content=" 4"), done])
        gen = _serve(app, lambda c: c.generate("x", max_new_tokens=5), "chat", model="m")
        assert gen.text == "hm soYes, 4" and gen.completion_tokens == 5, gen.text
        assert len(gen.chunk_gaps_s) == 4 and gen.chunk_tokens == [1, 1, 1, 1]


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ('{"detail": "Unexpected fields"}', "Unexpected fields"),  # FastAPI
        ('{"detail": [{"loc": ["body", "x"], "msg": "bad"}]}', '[{"loc": ["body", "x"], "msg": "bad"}]'),
        ('{"error": {"message": "The model `m` does not exist.", "code": 404}}', "The model `m` does not exist."),
        ('{"object": "error", "message": "too long", "code": 400}', "too long"),  # vLLM
        ('{"error": "out of memory"}', "out of memory"),
        ('{"error": {"code": 500}}', '{"error": {"code": 500}}'),  # no message: the body
        ("Internal Server Error\n  (engine died)", "Internal Server Error (engine died)"),
        ("[" * 5000, "[" * 300),  # nested too deep for json: the body, cut
    ],
)
def test_error_text_is_the_servers_message_in_one_line(body: str, said: str) -> None:
    assert error_text(body) == said


def test_connection_refused_and_a_missing_models_route_are_one_line() -> None:
    from specwatch.server.process import free_port

    async def refused() -> Any:
        async with OpenAIClient(f"http://127.0.0.1:{free_port()}", "chat", "m") as c:
            return await c.generate("x")

    with pytest.raises(InfraError, match=r"^POST http://127\.0\.0\.1:\d+/v1/chat/completions failed: ") as exc:
        asyncio.run(refused())
    assert "\n" not in str(exc.value)
    with pytest.raises(InfraError, match=r"GET http://\S+/v1/models -> HTTP 404: .*set model in the profile"):
        _serve(web.Application(), lambda c: c.generate("x"))


def test_server_info_flush_and_health_of_a_plain_openai_server() -> None:
    async def job(c: OpenAIClient) -> tuple[Any, ...]:
        return await c.server_info(), await c.flush_cache(), await c.healthy(), await c.metrics()

    info, flushed, healthy, metrics = _serve(make_app(), job, "chat")
    assert info == {"api": "chat", "model": MODEL} and flushed is True and healthy is True and metrics is None


def test_the_profile_picks_the_client() -> None:
    sglang = ServerProfile("s", engine="sglang", model="m")
    assert type(client_for(sglang, "http://h:1")) is Client
    chat = client_for(replace(sglang, api="chat"), "http://h:1")
    assert isinstance(chat, OpenAIClient) and chat.native and chat.route == "/v1/chat/completions"
    plain = client_for(ServerProfile("o", engine="openai", model=""), "http://h:1")
    assert isinstance(plain, OpenAIClient) and not plain.native and plain.model is None and plain.api == "completions"


def _openai(**fields: Any) -> dict[str, Any]:
    return {"version": 1, "server": [{"name": "vllm", "engine": "openai", **fields}]}


def test_openai_profiles() -> None:
    ps = parse_profiles(_openai(url="http://localhost:8000"), "p.toml")
    prof = ps.get("vllm")
    assert prof.model == "" and prof.load_api == "completions" and not prof.speaks_sglang and prof.gpus_needed == 0
    assert ps.roles == {"baseline": "vllm"}
    why = prof.sglang_only("verify graphs")
    assert why and "SGLang-only" in why and "engine = 'openai'" in why and "/v1/completions" in why
    assert ServerProfile("r").sglang_only("verify graphs") is None
    assert parse_profiles(_openai(api="chat", model="llama")).get("vllm").load_api == "chat"
    for fields, message in [
        ({"api": "generate"}, r"p\.toml: server\[0\] \(vllm\)\.api: an OpenAI-compatible server has no SGLang"),
        ({"url": "localhost:8000"}, r"\.url: expected an http:// or https:// base URL"),
        ({"api": "soap"}, r"\.api: expected one of 'generate', 'completions', 'chat'"),
    ]:
        with pytest.raises(UsageError, match=message):
            parse_profiles(_openai(**fields), "p.toml")
    with pytest.raises(UsageError, match=r"\.url: only for engine = \"openai\""):
        parse_profiles({"server": [{"name": "a", "engine": "sglang", "model": "m", "url": "http://h:1"}]})
    with pytest.raises(UsageError, match=r"\.api: the reference server streams only /generate"):
        parse_profiles({"server": [{"name": "a", "api": "completions"}]})


def test_an_openai_server_without_a_url_is_one_usage_line(tmp_path) -> None:
    ps = parse_profiles(_openai(), "p.toml")
    with pytest.raises(UsageError) as exc:
        check_reachable(ps, None)
    assert str(exc.value) == (
        "p.toml: vllm: engine = 'openai' is a server specwatch does not boot; give its URL "
        '(url = "http://host:8000" in the profile, or --specwatch-server-url URL)'
    )
    check_reachable(ps, "http://localhost:8000")  # the flag is its URL
    pool = ServerPool(ps.servers.values(), tmp_path)
    with pytest.raises(UsageError, match="does not boot"):
        pool.get(ps.get("vllm"))
    with pytest.raises(UsageError, match="does not boot"):
        ps.get("vllm").command("127.0.0.1", 1)
    remote = parse_profiles(_openai(url="http://localhost:8000/")).get("vllm")
    server = ServerPool([remote], tmp_path).get(remote)
    assert server.url == "http://localhost:8000" and server.external and server.process is None


def test_a_measurement_of_an_openai_server_and_its_skipped_sglang_checks() -> None:
    """measure() drives the OpenAI route end to end (warm-up, no flush, runs, counters) and says what the
    client changed; the SGLang-only checks skip with the profile's reason."""
    from specwatch.checks import accept_length, environment, lossless_live, verify_graphs
    from specwatch.load.measure import measure_async
    from specwatch.load.workload import Workload
    from specwatch.server.pool import RunningServer

    app = make_app(delay=0.002, first_delay=0.002, reject_ignore_eos=True)
    prof = parse_profiles(_openai(url="http://unused:1", api="chat")).get("vllm")
    notes: list[str] = []

    async def run() -> Any:
        async with TestServer(app) as srv:
            server = RunningServer(profile=prof, url=str(srv.make_url("")).rstrip("/"))
            return server, await measure_async(server, Workload("w", runs=3, warmup=1, max_new_tokens=5), notes.append)

    server, m = asyncio.run(run())
    assert len(m.runs) == 3 and m.samples("output_tok_s")[0] > 0 and all(r.completion_tokens == 5 for r in m.runs)
    assert m.server_info_after == {"api": "chat", "model": MODEL} and m.metrics_delta is None
    assert sum("refused ignore_eos" in n for n in notes) == 1, notes
    assert all("messages" in b for b in app[BODIES])
    for verdict in (
        environment.check(None, server),
        verify_graphs.check(None, server, m),
        accept_length.check(None, server, m),
        lossless_live.check(None, ServerProfile("ref"), prof, ["a"], 4),  # type: ignore[arg-type]
    ):
        assert verdict.skipped and "is an SGLang-only check" in verdict.reason, verdict.message
        assert "engine = 'openai'" in verdict.reason and "/v1/chat/completions" in verdict.reason


def test_profile_show_of_the_shipped_openai_example(capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    from specwatch.cli import main

    example = Path(__file__).resolve().parents[2] / "fixtures" / "profiles" / "openai-example.toml"
    assert main(["profile", "show", str(example)]) == 0
    assert capsys.readouterr().out == (
        "# vllm-llama8b [baseline] openai: not booted; load: POST http://localhost:8000/v1/completions, "
        "model the first id of GET /v1/models\n"
    )


def test_a_chat_dataset_goes_to_chat_completions_as_its_turns(tmp_path) -> None:
    """issue 16: chat goes through /v1/chat/completions with the server's own chat template: a
    dataset's system and user turns are sent as they are, not rendered into one user message."""
    import json

    from specwatch.load.measure import measure_async
    from specwatch.load.workload import Workload
    from specwatch.server.pool import RunningServer

    data = tmp_path / "chats.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "system", "content": "Be brief."},
                                             {"role": "user", "content": "Name two primes."}]}) + "\n"
                    + json.dumps({"prompt": "Say hi."}) + "\n")
    app = make_app(delay=0.001, first_delay=0.001)
    prof = parse_profiles(_openai(url="http://unused:1", api="chat")).get("vllm")
    wl = Workload("w", runs=2, warmup=0, max_new_tokens=3, dataset=str(data), concurrency=2,
                  flush_after_warmup=False)

    async def run() -> Any:
        async with TestServer(app) as srv:
            return await measure_async(RunningServer(profile=prof, url=str(srv.make_url("")).rstrip("/")), wl)

    asyncio.run(run())
    sent = [b["messages"] for b in app[BODIES]]
    assert [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name two primes."}] in sent
    assert [{"role": "user", "content": "Say hi."}] in sent  # a plain prompt: one user message
    assert not any("<|user|>" in m["content"] for turns in sent for m in turns)  # never our plain template
