"""Hostile input against one live reference server (CPU, ref-tiny, EAGLE3), seen from outside.

A hypothesis fuzz sends hundreds of requests to /generate and /v1/completions (single, batch and
streamed forms; valid, subtly wrong and absurd shapes; raw byte bodies) and asserts that no answer
is a 5xx, every 4xx is SGLang's error JSON, every stream finishes, requests built only from valid
parts succeed, and afterwards the server still answers a greedy request exactly as before with the
same worker processes. Plain regression tests pin each case that once crashed the server or got a 500.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from refharness import Server, boot

ARGS = ["--model-path", "ref-tiny", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "2",
        "--speculative-num-draft-tokens", "3"]
VOCAB = 512  # ref-tiny's (padded) vocabulary
#: Fuzz examples; one request each. The suite's hypothesis profile can raise it ("thorough"), never lower it.
FUZZ_EXAMPLES = max(800, settings.default.max_examples)
MIN_REQUESTS = 500
GREEDY_PROBE = {"text": "The quick brown fox", "sampling_params": {"max_new_tokens": 12, "temperature": 0}}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = boot(ARGS, tmp_path_factory.mktemp("http_fuzz") / "server.log")
    server.extra["greedy"] = server.generate(GREEDY_PROBE)["output_ids"]
    server.extra["workers"] = sorted(p.pid for p in server.workers())
    yield server
    server.stop()


# ---- talking to the server -----------------------------------------------------------------------
def post(srv: Server, path: str, raw: bytes, timeout: float = 60.0) -> tuple[int, str, bytes]:
    """POST raw bytes; (status, content type, body). A dropped connection fails the test."""
    req = urllib.request.Request(srv.url + path, data=raw, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read()


def check_answer(path: str, status: int, ctype: str, body: bytes, sent: bytes) -> None:
    """The invariants every answer keeps, valid request or not."""
    where = f"POST {path} {sent[:300]!r} -> {status} {body[:500]!r}"
    assert status < 500, where
    if status >= 400:
        err = json.loads(body)
        assert isinstance(err, dict), where
        assert err["object"] == "error", where
        assert err["code"] == status, where
        assert isinstance(err["message"], str) and err["message"], where
        if status == 400:
            assert err["type"] == "Bad Request", where
        return
    assert status == 200, where
    if ctype.startswith("text/event-stream"):
        events = [e[len("data: "):] for e in body.decode().split("\n\n") if e.startswith("data: ")]
        assert events and events[-1] == "[DONE]", where
        chunks = [json.loads(e) for e in events[:-1]]
        assert chunks, where
        assert all("error" not in c for c in chunks), where
        assert chunks[-1]["meta_info"]["finish_reason"] is not None, where
        return
    out = json.loads(body)
    if path == "/v1/completions":
        assert out["object"] == "text_completion", where
        assert out["choices"][0]["finish_reason"] in ("length", "stop"), where
        return
    for one in out if isinstance(out, list) else [out]:
        meta = one["meta_info"]
        assert meta["finish_reason"] is not None, where
        assert meta["completion_tokens"] == len(one["output_ids"]), where
        assert all(0 <= t < VOCAB for t in one["output_ids"]), where


def check_error(srv: Server, path: str, raw: bytes, *words: str) -> None:
    """``raw`` gets 400 in SGLang's shape (message naming ``words``), and the server serves on."""
    status, ctype, body = post(srv, path, raw)
    check_answer(path, status, ctype, body, raw)
    assert status == 400, (status, body[:300])
    message = json.loads(body)["message"]
    for w in words:
        assert w in message, (w, message)
    assert srv.proc.poll() is None
    assert srv.generate(GREEDY_PROBE)["output_ids"] == srv.extra["greedy"]


def dumps(body: Any) -> bytes:
    """JSON as Python writes it: NaN/Infinity literals, lone surrogates as ``\\ud800``-style escapes."""
    return json.dumps(body, allow_nan=True).encode()


# ---- the cases that crashed the server or got a 500 -------------------------------------------------
def _gen(**sp: Any) -> bytes:
    return dumps({"text": "a", "sampling_params": {"max_new_tokens": 2, **sp}})


@pytest.mark.parametrize("raw", [
    b'{"text": "a", "sampling_params": {"max_new_tokens": 2, "temperature": Infinity}}',
    b'{"text": "a", "sampling_params": {"max_new_tokens": 2, "temperature": 1e39}}',
    b'{"text": "a", "sampling_params": {"max_new_tokens": 2, "temperature": 1e-40}}',
    b'{"text": "a", "sampling_params": {"max_new_tokens": 2, "temperature": NaN}}',
    b'{"text": "a", "sampling_params": {"max_new_tokens": 2, "temperature": -Infinity}}',
], ids=["inf", "1e39", "1e-40", "nan", "-inf"])
def test_temperatures_that_killed_the_scheduler_get_400(srv: Server, raw: bytes) -> None:
    check_error(srv, "/generate", raw, "temperature")
    assert sorted(p.pid for p in srv.workers()) == srv.extra["workers"]
    assert "Scheduler hit an exception" not in srv.log()


@pytest.mark.parametrize(("raw", "field"), [
    (b'{"text": "\\ud800", "sampling_params": {"max_new_tokens": 2}}', "text"),
    (b'{"text": ["ok", "x\\udfff"], "sampling_params": {"max_new_tokens": 2}}', "text[1]"),
    (b'{"text": "a", "sampling_params": {"max_new_tokens": 2, "stop": ["\\udc80"]}}', "sampling_params.stop[0]"),
    (b'{"text": "a", "rid": "\\ud800", "sampling_params": {"max_new_tokens": 2}}', "rid"),
    (b'{"text": "a", "\\ud800": 1}', "surrogate"),
    (b'{"prompt": "\\ud800", "max_tokens": 2}', "prompt"),
], ids=["text", "batch-text", "stop", "rid", "key", "completions"])
def test_lone_surrogates_get_400(srv: Server, raw: bytes, field: str) -> None:
    path = "/v1/completions" if b"prompt" in raw else "/generate"
    check_error(srv, path, raw, field, "surrogate")


@pytest.mark.parametrize("raw", [
    b"[" * 200_000 + b"]" * 200_000,
    b'{"text": ' + b"[" * 200_000 + b"]" * 200_000 + b"}",
    b'{"text": "a", "sampling_params": ' + b'{"a": ' * 100_000 + b"1" + b"}" * 100_001,
    b'{"text": ' + b"[" * 500 + b"]" * 500 + b"}",  # parses, but nests past the limit
    b"[" * 200_000,  # and never closes
], ids=["list", "text", "sampling_params", "500-deep", "unclosed"])
def test_deeply_nested_json_gets_400(srv: Server, raw: bytes) -> None:
    check_error(srv, "/generate", raw)


@pytest.mark.parametrize(("path", "body", "field"), [
    ("/generate", {"text": "a", "rid": [[1]], "sampling_params": {"max_new_tokens": 2}}, "rid"),
    ("/generate", {"text": ["a", "b"], "rid": ["x"], "sampling_params": {"max_new_tokens": 2}}, "rid"),
    ("/generate", {"text": ["a", "b"], "rid": ["x", "x"], "sampling_params": {"max_new_tokens": 2}}, "rid"),
    ("/generate", {"text": "a", "sampling_params": {"max_new_tokens": 2, "stop": 5}}, "stop"),
    ("/generate", {"text": "a", "sampling_params": {"max_new_tokens": 2, "stop_token_ids": 5}}, "stop_token_ids"),
    ("/generate", {"text": "a", "sampling_params": {"max_new_tokens": 2, "stop_token_ids": [-1]}}, "stop_token_ids"),
    ("/generate", {"text": "a", "sampling_params": {"max_new_tokens": 2, "stop_token_ids": [True]}},
     "stop_token_ids"),
    ("/v1/completions", {"prompt": "a", "max_tokens": 2, "stop": 5}, "stop"),
    ("/v1/completions", {"prompt": "a", "max_tokens": 2, "stop_token_ids": 5}, "stop_token_ids"),
    ("/v1/completions", {"prompt": "a", "max_tokens": True}, "max_tokens"),
    ("/v1/completions", {"prompt": [256, True], "max_tokens": 2}, "prompt"),
    ("/generate", {"text": "a", "sampling_params": {"max_new_tokens": True}}, "max_new_tokens"),
    ("/generate", {"text": "a", "sampling_params": {"max_new_tokens": -3}}, "max_new_tokens"),
    ("/generate", {"text": "a", "sampling_params": {"max_new_tokens": 2**70}}, "max_new_tokens"),
    ("/generate", {"text": "a", "sampling_params": {"max_new_tokens": [2]}}, "max_new_tokens"),
    ("/generate", {"text": "a", "sampling_params": {"max_new_tokens": 2, "top_p": 0}}, "top_p"),
    ("/generate", {"text": "a", "sampling_params": {"max_new_tokens": 2, "top_k": 0}}, "top_k"),
    ("/generate", {"text": "a", "sampling_params": {"max_new_tokens": 2, "min_p": 1.5}}, "min_p"),
    ("/generate", {"text": "a", "sampling_params": {"max_new_tokens": 2, "repetition_penalty": -1}},
     "repetition_penalty"),
    ("/generate", {"text": "a", "sampling_params": {"max_new_tokens": 2, "logit_bias": {"5": 10**400}}},
     "logit_bias"),
    ("/generate", {"text": "a", "sampling_params": {"max_new_tokens": 2, "logit_bias": {"99999": 1}}}, "logit_bias"),
    ("/generate", {"text": "a", "sampling_params": {"max_new_tokens": 2, "min_new_tokens": 3}}, "min_new_tokens"),
    ("/generate", {"text": "a", "sampling_params": {"max_new_tokens": 2, "regex": "a", "ebnf": "b"}}, "regex"),
    ("/generate", {"text": "a", "sampling_params": [{"max_new_tokens": 2}] * 2}, "sampling_params"),
    ("/generate", {"text": ["a", "b"], "sampling_params": [{"max_new_tokens": 2}, {"temperature": "hot"}]},
     "sampling_params[1].temperature"),
    ("/generate", {"input_ids": [[1, 2], 3], "sampling_params": {"max_new_tokens": 2}}, "input_ids"),
    ("/generate", {"input_ids": [[]], "sampling_params": {"max_new_tokens": 2}}, "input_ids[0]"),
    ("/generate", {"input_ids": [1, 2**64], "sampling_params": {"max_new_tokens": 2}}, "input_ids"),
    ("/generate", {"text": "a", "stream": "yes", "sampling_params": {"max_new_tokens": 2}}, "stream"),
    ("/generate", {"text": ["a", "b"], "stream": True, "sampling_params": {"max_new_tokens": 2}}, "stream"),
    ("/generate", {"text": "a", "top_logprobs_num": 10**6, "return_logprob": True}, "top_logprobs_num"),
    ("/generate", {"text": ["a"] * 1000, "sampling_params": {"max_new_tokens": 2}}, "batch"),
], ids=lambda v: v if isinstance(v, str) and not v.startswith("/") else None)
def test_wrong_types_and_ranges_get_400(srv: Server, path: str, body: dict[str, Any], field: str) -> None:
    check_error(srv, path, dumps(body), field)


@pytest.mark.parametrize("raw", [b"", b"null", b"[]", b'"text"', b"5", b"\xff\xfe\x00", b'{"text": "\xff"}',
                                 b'{"text": "a"', b'{"text": "a"}}', b'{"text": 1' + b"0" * 5000 + b"}"])
def test_bodies_that_are_not_a_json_object_get_400(srv: Server, raw: bytes) -> None:
    check_error(srv, "/generate", raw)
    check_error(srv, "/v1/completions", raw)


def test_valid_shapes_that_were_added_or_tightened_still_work(srv: Server) -> None:
    """Per-prompt sampling_params for a batch, nulls meaning "default", stop_token_ids on completions."""
    out = srv.generate({"text": ["a", "b"], "sampling_params": [{"max_new_tokens": 2, "temperature": 0},
                                                                {"max_new_tokens": 3, "temperature": 0}]})
    assert [o["meta_info"]["completion_tokens"] for o in out] == [2, 3]
    out = srv.generate({"text": "a", "rid": None, "stream": None, "sampling_params": {
        "max_new_tokens": 2, "temperature": None, "stop": None, "stop_token_ids": None, "top_p": None}})
    assert out["meta_info"]["completion_tokens"] == 2
    base = srv.generate({"input_ids": [256, 65], "sampling_params": {"max_new_tokens": 6, "temperature": 0,
                                                                      "ignore_eos": True}})
    stop_at = base["output_ids"][2]
    status, _, body = post(srv, "/v1/completions", dumps({"prompt": [256, 65], "max_tokens": 6, "temperature": 0,
                                                          "ignore_eos": True, "stop_token_ids": [stop_at]}))
    assert status == 200, body
    usage = json.loads(body)["usage"]
    assert usage["completion_tokens"] == base["output_ids"].index(stop_at) + 1


# ---- the fuzz ----------------------------------------------------------------------------------------
SURROGATES = st.sampled_from(["\ud800", "a\udfffb", "\udc80", "\ud83d"])  # lone halves
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=8) | SURROGATES
FLOATS = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([1e39, 1e-40, -0.0, 1e308, 5e-324])
BIG_INTS = st.sampled_from([2**31, 2**63, 2**64 + 1, -(2**63) - 1, 10**40])
SCALARS = st.none() | st.booleans() | st.integers(-5, 600) | BIG_INTS | FLOATS | ANY_TEXT
JUNK = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(ANY_TEXT, inner, max_size=3),
                    max_leaves=8)
# Valid parts (small, so that a request that runs generates a few tokens only).
SAFE_TEXT = st.text(st.characters(codec="utf-8"), max_size=24)
SAFE_JUNK = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | SAFE_TEXT,
                         lambda inner: st.lists(inner, max_size=3) | st.dictionaries(SAFE_TEXT, inner, max_size=3),
                         max_leaves=8)
STOP_TEXT = st.text(st.characters(codec="utf-8"), min_size=1, max_size=3)
TOKEN_IDS = st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=10)
TEMPERATURE = st.sampled_from([0, 0.0, 1, 0.7]) | st.floats(1e-6, 5.0)
HOSTILE_MNT = st.integers(max_value=0) | BIG_INTS | FLOATS | st.booleans() | ANY_TEXT | st.lists(st.integers(1, 3))


class Draw:
    """A request under construction. Each field is drawn valid or hostile; how often hostile depends
    on the request's temper (all valid, now and then one bad field, or chaos). ``ok`` stays True
    while every drawn part is valid, so that the answer must then be 200."""

    def __init__(self, draw: Callable[[st.SearchStrategy[Any]], Any]) -> None:
        self.draw = draw
        self.ok = True
        self.p_hostile = draw(st.sampled_from([0, 0, 16, 16, 3]))  # 0: never

    def pick(self, valid: st.SearchStrategy[Any], hostile: st.SearchStrategy[Any] = JUNK) -> Any:
        """A valid value, or (with this request's probability) a hostile one."""
        if self.p_hostile and self.chance(self.p_hostile):
            self.ok = False
            return self.draw(hostile)
        return self.draw(valid)

    def bad(self, n: int) -> bool:
        """Whether to add an extra hostile part that ``pick`` cannot express (about 1/n of non-valid requests)."""
        return bool(self.p_hostile) and self.chance(n)

    def chance(self, n: int) -> bool:
        """True with probability about 1/n (a middle value: hypothesis favours the ends of a range)."""
        return self.draw(st.integers(0, n - 1)) == n // 2

    def maybe(self, d: dict[str, Any], key: str, valid: st.SearchStrategy[Any],
              hostile: st.SearchStrategy[Any] = JUNK) -> None:
        """Set ``d[key]`` half of the time."""
        if self.draw(st.booleans()):
            d[key] = self.pick(valid, hostile)


def sampling(r: Draw) -> Any:
    """SGLang sampling_params: mostly an object with a few known keys."""
    sp: dict[str, Any] = {"max_new_tokens": r.pick(st.integers(1, 4), HOSTILE_MNT)}
    r.maybe(sp, "temperature", TEMPERATURE, FLOATS | JUNK | st.integers(-3, -1))
    r.maybe(sp, "ignore_eos", st.booleans())
    r.maybe(sp, "stop", STOP_TEXT | st.lists(STOP_TEXT, max_size=2), JUNK | st.just([""]))
    r.maybe(sp, "stop_token_ids", st.lists(st.integers(0, VOCAB - 1), max_size=3),
            st.integers() | st.lists(JUNK, min_size=1, max_size=2))
    r.maybe(sp, "top_p", st.floats(0.01, 1.0), FLOATS | st.just(0))
    r.maybe(sp, "top_k", st.just(-1) | st.integers(1, 50), st.integers(-5, 0) | FLOATS)
    r.maybe(sp, "min_p", st.floats(0.0, 1.0), FLOATS)
    r.maybe(sp, "frequency_penalty", st.floats(-2.0, 2.0), FLOATS)
    r.maybe(sp, "repetition_penalty", st.floats(0.0, 2.0), FLOATS)
    r.maybe(sp, "n", st.just(1), st.integers(-2, 0) | BIG_INTS)
    r.maybe(sp, "min_new_tokens", st.just(0), st.integers(-3, 9) | FLOATS)
    r.maybe(sp, "skip_special_tokens", st.booleans())
    r.maybe(sp, "logit_bias", st.just({"65": 1.5}), st.dictionaries(ANY_TEXT, FLOATS | BIG_INTS, max_size=2))
    r.maybe(sp, "sampling_seed", st.integers(0, 2**32), FLOATS | BIG_INTS)
    if r.bad(16):
        r.ok = False
        sp[r.draw(ANY_TEXT)] = r.draw(JUNK)  # (usually) an unknown sampling parameter
    if r.bad(20):
        r.ok = False
        return r.draw(JUNK.filter(lambda v: v not in (None, {})))  # not an object at all
    return sp


@st.composite
def generate_request(draw: Callable[[st.SearchStrategy[Any]], Any]) -> tuple[str, bytes, bool]:
    """A /generate body: single or batch, text or input_ids, maybe streamed."""
    r = Draw(draw)
    body: dict[str, Any] = {}
    n = draw(st.sampled_from([1, 1, 2, 3]))
    batch = n > 1 or r.chance(6)
    if draw(st.booleans()):
        body["text"] = r.pick(st.lists(SAFE_TEXT, min_size=n, max_size=n) if batch else SAFE_TEXT,
                              ANY_TEXT | JUNK | st.just([]))
    else:
        body["input_ids"] = r.pick(st.lists(TOKEN_IDS, min_size=n, max_size=n) if batch else TOKEN_IDS,
                                   st.lists(st.integers(-3, 2**40) | st.booleans() | FLOATS, max_size=4) | JUNK
                                   | st.just([[]]))
    if r.bad(25):
        r.ok = False
        body["input_ids" if "text" in body else "text"] = draw(JUNK)  # both, or a null one
    if batch and draw(st.integers(0, 2)) == 0:
        body["sampling_params"] = [sampling(r) for _ in range(n)]
        if r.bad(6):
            r.ok = False
            body["sampling_params"].append({"max_new_tokens": 1})  # one too many
    else:
        body["sampling_params"] = sampling(r)
    if batch:
        r.maybe(body, "stream", st.just(False), JUNK | st.just(True))
    else:  # streamed about half of the time
        body["stream"] = r.pick(st.booleans(), JUNK)
    r.maybe(body, "rid", st.lists(SAFE_TEXT, min_size=n, max_size=n, unique=True) if batch else SAFE_TEXT,
            JUNK | st.lists(SAFE_TEXT, min_size=n + 1, max_size=n + 1, unique=True))
    r.maybe(body, "return_logprob", st.booleans())
    r.maybe(body, "top_logprobs_num", st.integers(0, 5), st.integers(-3, -1) | BIG_INTS | FLOATS | JUNK)
    r.maybe(body, "return_text_in_logprobs", st.booleans())
    r.maybe(body, "logprob_start_len", st.integers(-1, 3), st.integers(max_value=-2) | BIG_INTS | JUNK)
    r.maybe(body, "return_prompt_token_ids", st.booleans())
    r.maybe(body, "log_metrics", st.booleans())
    r.maybe(body, "priority", st.integers(-10, 10), FLOATS | BIG_INTS | JUNK)
    r.maybe(body, "lora_path", st.none() | SAFE_TEXT)
    r.maybe(body, "custom_labels", st.dictionaries(SAFE_TEXT, SAFE_TEXT, max_size=2))
    if r.bad(16):
        r.ok = False
        body[draw(ANY_TEXT)] = draw(JUNK)  # (usually) an unknown field
    return "/generate", dumps(body), r.ok


@st.composite
def completion_request(draw: Callable[[st.SearchStrategy[Any]], Any]) -> tuple[str, bytes, bool]:
    """A /v1/completions body (OpenAI fields)."""
    r = Draw(draw)
    body: dict[str, Any] = {"prompt": r.pick(SAFE_TEXT | TOKEN_IDS, st.lists(SAFE_TEXT, min_size=1, max_size=2)
                                             | st.lists(st.integers(-3, 2**40) | st.booleans(), max_size=3) | JUNK)}
    body["max_tokens"] = r.pick(st.integers(1, 4), HOSTILE_MNT)
    r.maybe(body, "model", st.just("ref-tiny"), FLOATS | JUNK)
    r.maybe(body, "temperature", TEMPERATURE, FLOATS | JUNK)
    r.maybe(body, "top_p", st.floats(0.01, 1.0), FLOATS)
    r.maybe(body, "stop", STOP_TEXT | st.lists(STOP_TEXT, max_size=2), JUNK)
    r.maybe(body, "stop_token_ids", st.lists(st.integers(0, VOCAB - 1), max_size=3), st.integers() | JUNK)
    r.maybe(body, "ignore_eos", st.booleans())
    r.maybe(body, "n", st.just(1), st.integers(-2, 0) | FLOATS)
    r.maybe(body, "seed", st.integers(0, 2**32), FLOATS | BIG_INTS)
    r.maybe(body, "echo", st.just(False))
    r.maybe(body, "logprobs", st.none() | st.integers(0, 5), st.integers(-3, -1) | BIG_INTS)
    r.maybe(body, "stream", st.just(False), st.just(True) | JUNK)
    r.maybe(body, "user", SAFE_TEXT)
    if r.bad(10):
        body["x_" + draw(SAFE_TEXT)] = draw(SAFE_JUNK)  # fields SGLang does not know are ignored
    return "/v1/completions", dumps(body), r.ok


@st.composite
def raw_request(draw: Callable[[st.SearchStrategy[Any]], Any]) -> tuple[str, bytes, bool]:
    """Bytes that are not (quite) a JSON object: random, truncated, corrupted, nested, wrong type."""
    path = draw(st.sampled_from(["/generate", "/v1/completions"]))
    valid = dumps({"text": "hello", "sampling_params": {"max_new_tokens": 2}} if path == "/generate"
                  else {"prompt": "hello", "max_tokens": 2})
    kind = draw(st.integers(0, 5))
    if kind == 0:
        raw = draw(st.binary(max_size=48))
    elif kind == 1:
        raw = valid[: draw(st.integers(0, len(valid) - 1))]
    elif kind == 2:
        i = draw(st.integers(0, len(valid) - 1))
        raw = valid[:i] + draw(st.binary(min_size=1, max_size=3)) + valid[i + 1:]
    elif kind == 3:
        depth = draw(st.sampled_from([31, 33, 500, 5000, 100_000]))
        raw = b'{"text": ' + b"[" * depth + b'"x"' + b"]" * depth + b"}"
    elif kind == 4:
        raw = dumps(draw(JUNK))
    else:
        raw = valid.replace(b'"hello"', b'"' + draw(st.sampled_from([b"\xff", b"\xed\xa0\x80", b"\xc3", b"\x00"]))
                            + b'"')
    return path, raw, False


REQUESTS = generate_request() | generate_request() | completion_request() | raw_request()


def test_fuzz_http_api_never_fails_the_server(srv: Server) -> None:
    seen: Counter[str] = Counter()
    first: list[str] = []  # the first failure, in case the server died and hypothesis cannot replay it
    t0 = time.perf_counter()

    @settings(max_examples=FUZZ_EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                     HealthCheck.data_too_large])
    @given(REQUESTS)
    def one(case: tuple[str, bytes, bool]) -> None:
        path, raw, must_succeed = case
        try:
            status, ctype, body = post(srv, path, raw)
            seen["requests"] += 1
            seen[f"{path} {status}{' stream' if ctype.startswith('text/event-stream') else ''}"] += 1
            check_answer(path, status, ctype, body, raw)
            if must_succeed:
                assert status == 200, (raw[:300], status, body[:500])
        except Exception as exc:
            if not first:
                first.append(f"POST {path} {raw[:300]!r}: {type(exc).__name__}: {exc}"[:3000])
            raise

    try:
        one()
    except Exception:
        if first and srv.proc.poll() is not None:
            pytest.fail(f"the server died; first failure: {first[0]}\nserver log tail:\n{srv.log()[-4000:]}")
        raise
    elapsed = time.perf_counter() - t0
    print(f"fuzz: {seen['requests']} requests in {elapsed:.1f} s: {dict(sorted(seen.items()))}")
    assert seen["requests"] >= MIN_REQUESTS, seen
    for form in ("/generate 200", "/generate 200 stream", "/generate 400", "/v1/completions 200",
                 "/v1/completions 400"):
        assert seen[form] >= 10, (form, seen)  # each form was exercised, valid and not
    # The server is unharmed: same workers, a greedy request answers exactly as before the fuzz.
    assert srv.proc.poll() is None
    workers = srv.workers()
    assert sorted(p.pid for p in workers) == srv.extra["workers"]
    assert all(p.status() != psutil.STATUS_ZOMBIE for p in workers)
    assert srv.generate(GREEDY_PROBE)["output_ids"] == srv.extra["greedy"]
    assert srv.request("GET", "/health")[0] == 200
    log = srv.log()
    for bad in ("Error handling request", "Scheduler hit an exception", "crashed with exit code", "never retrieved"):
        assert bad not in log, bad
