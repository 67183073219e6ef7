"""Request validation at the HTTP edge: the body and every field of /generate and /v1/completions.

Everything a client sends is type- and range-checked here, before anything reaches the scheduler, so
that malformed input gets HTTP 400 with a message naming the field (SGLang's error shape, built by
``http.error_json``) and never a 5xx or a dead worker. The accepted ranges mirror SGLang 0.5.23's
``SamplingParams.verify`` and ``GenerateReqInput``; where the reference is stricter it says so.
"""

from __future__ import annotations

import json
import math
import re
import reprlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Containers nested deeper than this are refused (no SGLang field nests past 3 levels).
MAX_DEPTH = 32
#: Integers beyond int64 are refused wherever an integer is expected.
MAX_INT = (1 << 63) - 1
#: A positive temperature below this is refused: SGLang silently turns it into greedy sampling
#: (_SAMPLING_EPS); the reference asks for an explicit 0 instead (1e-40 would divide the logits by a
#: float32 zero).
MIN_TEMPERATURE = 1e-6
#: The largest temperature accepted (past float32's range the logits would turn into NaN).
MAX_TEMPERATURE = 1e6
#: Token ids in stop_token_ids must be below this.
MAX_TOKEN_ID = (1 << 31) - 1
#: A text longer than this many characters per context token is refused before it is tokenized.
MAX_CHARS_PER_TOKEN = 32

SAMPLING_DEFAULTS: dict[str, Any] = {"max_new_tokens": 128, "temperature": 1.0}
# SGLang's SamplingParams fields (sampling_params.py); the ones the reference honours are marked.
SAMPLING_KEYS = {
    "max_new_tokens", "temperature", "ignore_eos", "stop", "stop_token_ids",  # honoured
    "min_new_tokens", "top_p", "top_k", "min_p", "stop_regex", "frequency_penalty", "presence_penalty",
    "repetition_penalty", "n", "json_schema", "regex", "ebnf", "structural_tag", "skip_special_tokens",
    "no_stop_trim", "stream_interval", "logit_bias", "sampling_seed", "custom_params",
    "spaces_between_special_tokens",
}
GENERATE_KEYS = {
    "text", "input_ids", "sampling_params", "stream", "rid", "return_logprob", "logprob_start_len",
    "top_logprobs_num", "return_text_in_logprobs", "log_metrics", "lora_path", "priority", "custom_labels",
    "return_hidden_states", "return_prompt_token_ids", "modalities", "bootstrap_host", "bootstrap_port",
    "bootstrap_room", "data_parallel_rank", "session_params", "image_data", "audio_data", "video_data",
    "return_routed_experts",  # SGLang 0.5.16 io_struct.GenerateReqInput; sglang.bench_serving sends it on every request
}
# /v1/completions fields that map onto sampling parameters (OpenAI name -> SGLang name).
COMPLETION_SAMPLING = {
    "max_tokens": "max_new_tokens", "min_tokens": "min_new_tokens", "seed": "sampling_seed",
    "temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p", "stop": "stop",
    "stop_token_ids": "stop_token_ids", "ignore_eos": "ignore_eos", "n": "n",
    "frequency_penalty": "frequency_penalty", "presence_penalty": "presence_penalty",
    "repetition_penalty": "repetition_penalty", "json_schema": "json_schema", "regex": "regex", "ebnf": "ebnf",
    "no_stop_trim": "no_stop_trim", "skip_special_tokens": "skip_special_tokens", "logit_bias": "logit_bias",
}

_SURROGATE = re.compile("[\ud800-\udfff]")
_REPR = reprlib.Repr()
_REPR.maxstring, _REPR.maxother, _REPR.maxlong, _REPR.maxlevel = 60, 60, 40, 3


class BadRequest(Exception):
    """A request the server refuses with HTTP 400 and a message."""


def short(value: Any) -> str:
    """A bounded repr of a client value, for error messages."""
    return _REPR.repr(value)


# ---- the body ------------------------------------------------------------------------------------
def parse_json(raw: bytes, method: str, path: str) -> Any:
    """The decoded body (None when empty), checked by ``check_tree``; BadRequest in pydantic's words
    (as SGLang answers) when it is not JSON."""
    if not raw:
        return None
    try:
        body = json.loads(raw)
    except RecursionError:
        raise BadRequest(_json_error(0, "the JSON nests too deeply", method, path)) from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, integers past 4300 digits
        at = getattr(exc, "pos", None)
        pos: int = getattr(exc, "start", 0) if at is None else at
        raise BadRequest(_json_error(pos, str(exc), method, path)) from exc
    check_tree(body)
    return body


def _json_error(pos: int, error: str, method: str, path: str) -> str:
    return (f"1 validation error:\n  {{'type': 'json_invalid', 'loc': ('body', {pos}), 'msg': 'JSON decode "
            f"error', 'input': {{}}, 'ctx': {{'error': {error!r}}}}}\n\n  {method} {path}")


def _path(parts: tuple[Any, ...]) -> str:
    """``sampling_params.stop[0]``-style name of a place in the body."""
    out = ""
    for p in parts:
        if isinstance(p, str) and p.isidentifier():
            out += f".{p}" if out else p
        else:
            out += f"[{short(p)}]"
    return out or "the body"


def check_tree(root: Any) -> None:
    """Refuse containers nested past MAX_DEPTH and strings (keys too) with lone surrogates, which are
    not valid UTF-8 (JSON's ``\\ud800`` escape decodes to one)."""
    stack: list[tuple[Any, int, tuple[Any, ...]]] = [(root, 1, ())]
    while stack:
        value, depth, parts = stack.pop()
        if isinstance(value, str):
            if _SURROGATE.search(value):
                raise BadRequest(f"{_path(parts)}: the string holds a lone surrogate (\\ud800-\\udfff), "
                                 "which is not valid UTF-8")
            continue
        if not isinstance(value, (list, dict)):
            continue
        if depth > MAX_DEPTH:
            raise BadRequest(f"The request body nests deeper than {MAX_DEPTH} levels (at {_path(parts)})")
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(key, str) and _SURROGATE.search(key):
                raise BadRequest(f"{_path(parts)}: the key {short(key)} holds a lone surrogate (\\ud800-\\udfff), "
                                 "which is not valid UTF-8")
            if isinstance(item, (str, list, dict)):
                stack.append((item, depth + 1, (*parts, key)))


# ---- scalar checks -------------------------------------------------------------------------------
def is_int(v: Any) -> bool:
    """An integer that is not a bool."""
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v: Any) -> bool:
    """An int or float that is not a bool."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class Fields:
    """Typed reads of one JSON object; messages name ``where`` + the field (``labels`` renames)."""

    def __init__(self, d: dict[str, Any], where: str = "", labels: dict[str, str] | None = None) -> None:
        self.d = d
        self.where = where
        self.labels = labels or {}

    def name(self, key: str) -> str:
        """The field as a client would spell it."""
        return self.where + self.labels.get(key, key)

    def fail(self, key: str, what: str) -> BadRequest:
        """The BadRequest for ``key`` holding something that is not ``what``."""
        return BadRequest(f"{self.name(key)} must be {what}, got {short(self.d.get(key))}")

    def integer(self, key: str, default: Any, lo: int = -MAX_INT, hi: int = MAX_INT, what: str | None = None) -> Any:
        """An integer in [lo, hi]; ``default`` when absent or null."""
        v = self.d.get(key)
        if v is None:
            return default
        if not is_int(v) or not lo <= v <= hi:
            raise self.fail(key, what or f"an integer in [{lo}, {hi}]")
        return v

    def number(self, key: str, default: Any, lo: float, hi: float, *, lo_open: bool = False,
              what: str | None = None) -> Any:
        """A finite number in [lo, hi] (or (lo, hi]); ``default`` when absent or null."""
        v = self.d.get(key)
        if v is None:
            return default
        what = what or f"a finite number in {'(' if lo_open else '['}{lo:g}, {hi:g}]"
        if not is_number(v):
            raise self.fail(key, what)
        try:
            f = float(v)
        except OverflowError:
            raise self.fail(key, what) from None
        if not math.isfinite(f) or not (lo < f if lo_open else lo <= f) or f > hi:
            raise self.fail(key, what)
        return f

    def boolean(self, key: str, default: Any = False) -> Any:
        """A JSON boolean; ``default`` when absent or null."""
        v = self.d.get(key)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise self.fail(key, "a boolean")
        return v

    def string(self, key: str, default: Any = None) -> Any:
        """A string; ``default`` when absent or null."""
        v = self.d.get(key)
        if v is None:
            return default
        if not isinstance(v, str):
            raise self.fail(key, "a string")
        return v

    def check(self, key: str, ok: Callable[[Any], bool], what: str) -> Any:
        """Any value ``ok`` accepts (null always passes: the field is optional)."""
        v = self.d.get(key)
        if v is not None and not ok(v):
            raise self.fail(key, what)
        return v


def _str_or_strs(v: Any) -> bool:
    return isinstance(v, str) or (isinstance(v, list) and all(isinstance(s, str) for s in v))


def _list_of(ok: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, list) and all(ok(x) for x in v)


def _optional(ok: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or ok(v)


# ---- sampling parameters -------------------------------------------------------------------------
def sampling_params(sp: Any, *, where: str = "", vocab_size: int = MAX_TOKEN_ID,
                    labels: dict[str, str] | None = None) -> dict[str, Any]:
    """SGLang's ``SamplingParams`` checks; the honoured fields as the dispatcher takes them."""
    label = where.rstrip(".") or "sampling_params"
    if sp is None:
        sp = {}
    if not isinstance(sp, dict):
        raise BadRequest(f"{label} must be an object, got {short(sp)}")
    unknown = sorted(set(sp) - SAMPLING_KEYS)
    if unknown:
        raise BadRequest(f"Unknown sampling parameter(s): {', '.join(short(k) for k in unknown)}")
    f = Fields(sp, where, labels)
    mnt = f.integer("max_new_tokens", SAMPLING_DEFAULTS["max_new_tokens"], 1, what="a positive integer")
    temp = f.number("temperature", SAMPLING_DEFAULTS["temperature"], 0.0, MAX_TEMPERATURE)
    if 0.0 < temp < MIN_TEMPERATURE:
        raise f.fail("temperature", f"0 (greedy) or at least {MIN_TEMPERATURE:g}")
    stop = sp.get("stop")
    if stop is None or stop == "":  # as [] : no stop string
        stop = []
    elif isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        raise f.fail("stop", "a string or a list of non-empty strings")
    sti = f.check("stop_token_ids", _list_of(lambda i: is_int(i) and 0 <= i <= MAX_TOKEN_ID),
                  f"a list of token ids (integers in [0, {MAX_TOKEN_ID}])") or ()
    ignore_eos = f.boolean("ignore_eos")
    # Accepted and checked as SGLang does, not applied by the reference.
    min_new = f.integer("min_new_tokens", 0, 0)
    if min_new > mnt:
        raise f.fail("min_new_tokens", f"at most max_new_tokens ({mnt})")
    f.number("top_p", 1.0, 0.0, 1.0, lo_open=True)
    f.integer("top_k", -1, -1, what="-1 (disable) or an integer >= 1")
    if sp.get("top_k") == 0:
        raise f.fail("top_k", "-1 (disable) or an integer >= 1")
    f.number("min_p", 0.0, 0.0, 1.0)
    f.number("frequency_penalty", 0.0, -2.0, 2.0)
    f.number("presence_penalty", 0.0, -2.0, 2.0)
    f.number("repetition_penalty", 1.0, 0.0, 2.0)
    f.integer("n", 1, 1, 1024)
    f.check("stop_regex", _str_or_strs, "a string or a list of strings")
    for key in ("json_schema", "regex", "ebnf", "structural_tag"):
        f.string(key)
    if sum(sp.get(k) is not None for k in ("json_schema", "regex", "ebnf")) > 1:
        raise BadRequest(f"Only one of {where}regex, {where}json_schema, or {where}ebnf can be set.")
    for key in ("skip_special_tokens", "no_stop_trim", "spaces_between_special_tokens"):
        f.boolean(key)
    f.integer("stream_interval", None, 1)
    f.integer("sampling_seed", None)
    f.check("custom_params", lambda v: isinstance(v, dict), "an object")
    bias = f.check("logit_bias", lambda v: isinstance(v, dict), "an object of token id -> bias")
    for tok, b in (bias or {}).items():
        if not (tok.isascii() and tok.isdigit() and len(tok) < 12 and int(tok) < vocab_size):
            raise BadRequest(f"{f.name('logit_bias')}: key {short(tok)} is not a token id in [0, {vocab_size})")
        if not is_number(b) or not -100 <= b <= 100:  # (NaN fails the comparison, a huge int never overflows)
            raise BadRequest(f"{f.name('logit_bias')}[{tok}] must be a finite number in [-100, 100], "
                             f"got {short(b)}")
    return {"max_new_tokens": mnt, "temperature": temp, "stop": tuple(stop), "stop_token_ids": tuple(sti),
            "ignore_eos": ignore_eos}


# ---- /generate -----------------------------------------------------------------------------------
@dataclass
class GenerateInput:
    """A checked /generate request: one entry per prompt in ``prompts``, ``sampling`` and ``rids``."""

    prompts: list[list[int]]
    is_batch: bool
    sampling: list[dict[str, Any]]
    rids: list[str | None]
    stream: bool
    log_metrics: bool
    logprob: dict[str, Any]


def prompt_ids(text: str, encode: Callable[[str], list[int]], context_len: int, where: str) -> list[int]:
    """Token ids of one text; a text far too long for the context is refused before tokenizing it."""
    if len(text) > MAX_CHARS_PER_TOKEN * context_len:
        raise BadRequest(f"The input ({where}: {len(text)} characters) is longer than the model's context "
                         f"length ({context_len} tokens).")
    return encode(text)


def _token_ids(seq: Any, vocab_size: int, where: str) -> list[int]:
    if not isinstance(seq, list) or not seq:
        raise BadRequest(f"{where} must be a non-empty list of token ids, got {short(seq)}")
    for i in seq:
        if not is_int(i) or not 0 <= i < vocab_size:
            raise BadRequest(f"{where} must hold token ids (integers in [0, {vocab_size})); got {short(i)}")
    return list(seq)


def _prompts(body: dict[str, Any], encode: Callable[[str], list[int]], vocab_size: int,
             context_len: int) -> tuple[list[list[int]], bool]:
    text, ids = body.get("text"), body.get("input_ids")
    if (text is None) == (ids is None):
        raise BadRequest("Either text or input_ids should be provided (exactly one of them).")
    if text is not None:
        if isinstance(text, str):
            return [prompt_ids(text, encode, context_len, "text")], False
        if isinstance(text, list) and text and all(isinstance(t, str) for t in text):
            return [prompt_ids(t, encode, context_len, f"text[{i}]") for i, t in enumerate(text)], True
        raise BadRequest(f"text must be a string or a non-empty list of strings, got {short(text)}")
    if isinstance(ids, list) and ids and all(isinstance(x, list) for x in ids):
        return [_token_ids(x, vocab_size, f"input_ids[{i}]") for i, x in enumerate(ids)], True
    if isinstance(ids, list) and ids and not any(isinstance(x, list) for x in ids):
        return [_token_ids(ids, vocab_size, "input_ids")], False
    raise BadRequest(f"input_ids must be a non-empty list of token ids or a list of such lists, got {short(ids)}")


def _per_prompt(value: Any, n: int, name: str) -> list[Any]:
    """A per-prompt field: one value for all, or a list with one value per prompt."""
    if isinstance(value, list):
        if len(value) != n:
            raise BadRequest(f"{name} has {len(value)} entries for {n} prompt(s); give one per prompt")
        return value
    return [value] * n


def logprob_opts(body: dict[str, Any], vocab_size: int) -> dict[str, Any]:
    """SGLang's logprob request fields (the same for every prompt of a batch)."""
    f = Fields(body)
    opts = {key: f.boolean(key) for key in ("return_logprob", "return_text_in_logprobs", "return_prompt_token_ids")}
    opts["top_logprobs_num"] = f.integer("top_logprobs_num", 0, 0, vocab_size)
    f.integer("logprob_start_len", -1, -1)  # accepted; the reference returns no input logprobs
    return opts


def _ignored_generate_fields(f: Fields) -> None:
    """Fields SGLang takes that the reference accepts without acting on them: types only."""
    f.boolean("return_hidden_states")
    f.boolean("return_routed_experts")
    f.integer("priority", None)
    f.integer("data_parallel_rank", None, 0, 1 << 16)
    f.check("lora_path", lambda v: isinstance(v, str) or _list_of(_optional(lambda s: isinstance(s, str)))(v),
            "a string or a list of strings")
    f.check("custom_labels", lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()),
            "an object of strings")
    f.check("modalities", _list_of(_optional(lambda s: isinstance(s, str))), "a list of strings")
    f.check("bootstrap_host", lambda v: isinstance(v, str) or _list_of(_optional(lambda s: isinstance(s, str)))(v),
            "a string or a list of strings")
    for key in ("bootstrap_port", "bootstrap_room"):
        f.check(key, lambda v: (is_int(v) and 0 <= v <= MAX_INT)
                or _list_of(_optional(lambda x: is_int(x) and 0 <= x <= MAX_INT))(v),
                "a non-negative integer or a list of them")
    f.check("session_params", lambda v: isinstance(v, dict), "an object")
    for key in ("image_data", "audio_data", "video_data"):
        f.check(key, lambda v: isinstance(v, (str, list, dict)), "a string, a list or an object")


def generate_request(body: Any, *, encode: Callable[[str], list[int]], vocab_size: int, context_len: int,
                     max_batch: int) -> GenerateInput:
    """Check a /generate body; BadRequest naming the first offending field."""
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object")
    unknown = sorted(set(body) - GENERATE_KEYS)
    if unknown:
        raise BadRequest(f"Unknown field(s) in the request: {', '.join(short(k) for k in unknown)}")
    prompts, is_batch = _prompts(body, encode, vocab_size, context_len)
    n = len(prompts)
    if n > max_batch:
        raise BadRequest(f"A batch of {n} prompts is more than the server admits at once ({max_batch} "
                         "requests: --max-running-requests + --max-queued-requests)")
    sps = body.get("sampling_params")
    if isinstance(sps, list):
        sps = _per_prompt(sps, n, "sampling_params")
        sampling = [sampling_params(sp, where=f"sampling_params[{i}].", vocab_size=vocab_size)
                    for i, sp in enumerate(sps)]
    else:
        sampling = [sampling_params(sps, where="sampling_params.", vocab_size=vocab_size)] * n
    f = Fields(body)
    rid = f.check("rid", lambda v: isinstance(v, str) or _list_of(lambda s: isinstance(s, str))(v),
                  "a string, or a list of strings (one per prompt)")
    if n > 1 and isinstance(rid, str):
        raise BadRequest("rid must be a list with one id per prompt for a batch")
    rids = _per_prompt(rid, n, "rid")
    named = [r for r in rids if r]
    if len(set(named)) != len(named):
        raise BadRequest(f"rid holds the same id more than once: {short(rids)}")
    logprob = logprob_opts(body, vocab_size)
    stream = f.boolean("stream")
    if stream and is_batch:
        raise BadRequest("stream is supported for a single prompt only")
    log_metrics = f.boolean("log_metrics", True)
    _ignored_generate_fields(f)
    for ids, sp in zip(prompts, sampling, strict=True):
        check_length(ids, sp["max_new_tokens"], context_len)
    return GenerateInput(prompts=prompts, is_batch=is_batch, sampling=sampling, rids=rids, stream=stream,
                         log_metrics=log_metrics, logprob=logprob)


def check_length(ids: list[int], max_new_tokens: int, context_len: int) -> None:
    """SGLang's two context-length refusals."""
    if len(ids) >= context_len:
        raise BadRequest(f"The input ({len(ids)} tokens) is longer than the model's context length "
                         f"({context_len} tokens).")
    if len(ids) + max_new_tokens > context_len:
        raise BadRequest(f"Requested token count exceeds the model's maximum context length of "
                         f"{context_len} tokens. You requested a total of {len(ids) + max_new_tokens} "
                         f"tokens: {len(ids)} tokens from the input messages and {max_new_tokens} tokens "
                         "for the completion. Please reduce the number of tokens in the input messages or "
                         "the completion to fit within the limit.")


# ---- /v1/completions -----------------------------------------------------------------------------
@dataclass
class CompletionInput:
    """A checked /v1/completions request."""

    ids: list[int]
    sampling: dict[str, Any]
    spec_details: bool


def completion_request(body: Any, *, encode: Callable[[str], list[int]], vocab_size: int,
                       context_len: int) -> CompletionInput:
    """Check a /v1/completions body (OpenAI's fields; unknown ones are ignored, as SGLang's pydantic
    model does); BadRequest naming the first offending field."""
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object")
    f = Fields(body)
    if f.boolean("stream"):
        raise BadRequest("stream=true is not supported on /v1/completions by the reference server")
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        ids = prompt_ids(prompt, encode, context_len, "prompt")
    elif isinstance(prompt, list) and prompt and not any(isinstance(p, (str, list)) for p in prompt):
        ids = _token_ids(prompt, vocab_size, "prompt")
    else:
        raise BadRequest(f"prompt must be a string or a non-empty list of token ids (the reference serves one "
                         f"prompt per request), got {short(prompt)}")
    sp = {sg: body[oa] for oa, sg in COMPLETION_SAMPLING.items() if body.get(oa) is not None}
    sp.setdefault("max_new_tokens", 16)
    labels = {sg: oa for oa, sg in COMPLETION_SAMPLING.items()}
    sampling = sampling_params(sp, vocab_size=vocab_size, labels=labels)
    f.string("model")
    f.string("user")
    f.string("suffix")
    f.boolean("echo")
    f.integer("logprobs", None, 0, vocab_size)
    f.integer("best_of", None, 1, 1024)
    f.check("stream_options", lambda v: isinstance(v, dict), "an object")
    f.check("rid", lambda v: isinstance(v, str), "a string")
    spec_details = f.boolean("return_spec_tokens_details")
    check_length(ids, sampling["max_new_tokens"], context_len)
    return CompletionInput(ids=ids, sampling=sampling, spec_details=spec_details)
