"""Prompt datasets and request lengths: what a workload sends, read from data.

Formats (told apart by the file's first character):

- JSONL (``{`` first): one JSON object per line with ``"prompt"`` (a string) or ``"messages"`` (a chat:
  ``[{"role": "system" | "user" | "assistant", "content": "..."}, ...]``) and optionally
  ``"category"``. Trailing assistant turns are dropped (they are the answer, not the prompt).
- ShareGPT JSON (``[`` first): ``[{"conversations": [{"from": "human", "value": "..."}, ...]}, ...]``.
  As ``sglang.bench_serving`` does, a conversation's prompt is its first human turn (with any system
  turn before it); conversations without a human turn are skipped.
- ``"builtin"``: specwatch's own prompt set, ``specwatch/data/prompts.jsonl`` (made by
  :mod:`specwatch.load.promptset`): code, math, chat, summarisation and long context.

Chat prompts are rendered to text with :data:`CHAT_TEMPLATE` and sent to ``/generate``: the
reference server has no ``/v1/chat/completions`` and the tester holds no tokenizer, so one plain,
documented template stands in for the model's own.

Every problem with a file is one :class:`~specwatch.errors.UsageError` line naming the file and line.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from specwatch.errors import UsageError
from specwatch.profiles.schema import Invalid, show
from specwatch.profiles.tables import LENGTH
from specwatch.userfile import read_user_file

BUILTIN = "builtin"
ROLES = ("system", "user", "assistant")
#: ShareGPT's speaker names -> chat roles.
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                  "chatgpt": "assistant", "bard": "assistant", "bing": "assistant", "model": "assistant",
                  "system": "system"}
#: How a chat becomes the text sent to ``/generate``: each turn as ``<|role|>\ncontent\n``, then
#: ``<|assistant|>\n`` for the reply.
CHAT_TEMPLATE = "<|{role}|>\n{content}\n"
CHAT_REPLY = "<|assistant|>\n"


@dataclass(frozen=True)
class Entry:
    """One prompt of a dataset: text, or a chat of (role, content) turns."""

    prompt: str | None = None
    messages: tuple[tuple[str, str], ...] = ()
    category: str = ""

    @property
    def text(self) -> str:
        """What is sent: the prompt, or the chat rendered with :data:`CHAT_TEMPLATE`."""
        return self.prompt if self.prompt is not None else render_chat(self.messages)


def render_chat(messages: Sequence[tuple[str, str]]) -> str:
    """A chat as one prompt text (:data:`CHAT_TEMPLATE`), ending where the assistant's reply begins."""
    return "".join(CHAT_TEMPLATE.format(role=r, content=c) for r, c in messages) + CHAT_REPLY


@dataclass(frozen=True)
class Dataset:
    """A loaded dataset: its entries, where it came from and a digest of its bytes."""

    name: str
    entries: tuple[Entry, ...]
    sha256: str
    skipped: int = 0  # ShareGPT conversations without a human turn

    def categories(self) -> list[str]:
        return sorted({e.category for e in self.entries})

    def only(self, categories: Sequence[str]) -> tuple[Entry, ...]:
        """The entries of these categories; UsageError naming the ones the dataset lacks."""
        if not categories:
            return self.entries
        missing = sorted(set(categories) - set(self.categories()))
        if missing:
            raise UsageError(f"{self.name}: no entries of categor{'ies' if len(missing) > 1 else 'y'} "
                             f"{', '.join(missing)}; it has {', '.join(self.categories()) or 'none named'}")
        return tuple(e for e in self.entries if e.category in categories)


_CACHE: dict[str, Dataset] = {}  # by content: a file edited in place is read again


def builtin_path() -> Path:
    """The packaged prompt set."""
    return Path(str(resources.files("specwatch").joinpath("data/prompts.jsonl")))


def load_dataset(source: str | Path) -> Dataset:
    """The dataset at ``source`` (a path, or ``"builtin"``), parsed once per file content."""
    path = builtin_path() if str(source) == BUILTIN else Path(source)
    name = BUILTIN if str(source) == BUILTIN else str(path)
    raw, text = read_user_file(path, "dataset")
    key = hashlib.sha256(raw).hexdigest()
    if key in _CACHE:
        return _CACHE[key]
    first = text.lstrip()[:1]
    if first == "[":
        entries, skipped = _sharegpt(name, text)
    elif first == "{":
        entries, skipped = _jsonl(name, text), 0
    else:
        raise UsageError(f"{name}:1: not a dataset: expected JSONL (one JSON object per line) or ShareGPT JSON "
                         f"(an array), got {show(text.lstrip()[:20]) if first else 'an empty file'}")
    if not entries:
        raise UsageError(f"{name}: no usable prompts ({skipped} conversation(s) without a human turn)")
    data = Dataset(name, tuple(entries), key, skipped)
    _CACHE[key] = data
    return data


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _jsonl(name: str, text: str) -> list[Entry]:
    entries = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{name}:{n}: not valid JSON: {exc.msg} (column {exc.colno})") from None
        entries.append(_entry(f"{name}:{n}", obj))
    return entries


def _entry(where: str, obj: Any) -> Entry:
    """One JSONL object: ``prompt`` or ``messages``, and an optional ``category``."""
    if not isinstance(obj, dict):
        raise UsageError(f"{where}: expected a JSON object with \"prompt\" or \"messages\", got {show(obj)}")
    category = obj.get("category", "")
    if not isinstance(category, str):
        raise UsageError(f"{where}: \"category\" must be a string, got {show(category)}")
    if ("prompt" in obj) == ("messages" in obj):
        raise UsageError(f"{where}: expected exactly one of \"prompt\" or \"messages\", got "
                         f"{'both' if 'prompt' in obj else 'neither (keys: ' + ', '.join(map(str, obj)) + ')'}")
    if "prompt" in obj:
        if not isinstance(obj["prompt"], str) or not obj["prompt"].strip():
            raise UsageError(f"{where}: \"prompt\" must be a non-empty string, got {show(obj['prompt'])}")
        return Entry(prompt=obj["prompt"], category=category)
    msgs = obj["messages"]
    if not isinstance(msgs, list) or not msgs:
        raise UsageError(f"{where}: \"messages\" must be a non-empty array of {{\"role\", \"content\"}} objects, "
                         f"got {show(msgs)}")
    turns = []
    for i, m in enumerate(msgs):
        role, content = (m.get("role"), m.get("content")) if isinstance(m, dict) else (None, None)
        if role not in ROLES or not isinstance(content, str):
            raise UsageError(f"{where}: messages[{i}] must be {{\"role\": one of {', '.join(ROLES)}, \"content\": "
                             f"a string}}, got {show(m)}")
        turns.append((role, content))
    return Entry(messages=_prompt_turns(where, turns), category=category)


def _prompt_turns(where: str, turns: list[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    while turns and turns[-1][0] == "assistant":
        turns.pop()
    if not any(role == "user" for role, _ in turns):
        raise UsageError(f"{where}: the chat has no user turn to answer")
    return tuple(turns)


def _sharegpt(name: str, text: str) -> tuple[list[Entry], int]:
    """A ShareGPT array, element by element so that an error can name its line."""
    decoder = json.JSONDecoder()
    pos = text.index("[") + 1
    entries: list[Entry] = []
    skipped = 0
    i = 0
    while True:
        pos = _skip_space(text, pos)
        if pos < len(text) and text[pos] == "]":
            break
        if i:
            if pos >= len(text) or text[pos] != ",":
                raise UsageError(f"{name}:{_line(text, pos)}: not valid JSON: expected ',' or ']' after entry {i - 1}")
            pos = _skip_space(text, pos + 1)
        try:
            obj, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{name}:{exc.lineno}: not valid JSON: {exc.msg} (column {exc.colno})") from None
        entry = _conversation(f"{name}:{_line(text, pos)}", i, obj)
        if entry is None:
            skipped += 1
        else:
            entries.append(entry)
        pos, i = end, i + 1
    after = _skip_space(text, pos + 1)
    if after < len(text):
        raise UsageError(f"{name}:{_line(text, after)}: not valid JSON: text after the array's end")
    return entries, skipped


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _conversation(where: str, index: int, obj: Any) -> Entry | None:
    """One ShareGPT entry: its first human turn (and any system turn before it); None without one."""
    conv = obj.get("conversations", obj.get("conversation")) if isinstance(obj, dict) else None
    if not isinstance(conv, list):
        raise UsageError(f"{where}: entry {index}: expected {{\"conversations\": [{{\"from\", \"value\"}}, ...]}}, "
                         f"got {show(obj)}")
    turns: list[tuple[str, str]] = []
    for k, turn in enumerate(conv):
        who, value = (turn.get("from"), turn.get("value")) if isinstance(turn, dict) else (None, None)
        role = SHAREGPT_ROLES.get(str(who).lower()) if isinstance(who, str) else None
        if role is None or not isinstance(value, str):
            raise UsageError(f"{where}: entry {index}: conversations[{k}] must be {{\"from\": one of "
                             f"{', '.join(SHAREGPT_ROLES)}, \"value\": a string}}, got {show(turn)}")
        turns.append((role, value))
        if role == "user":
            category = obj.get("category", "") if isinstance(obj.get("category", ""), str) else ""
            return Entry(messages=tuple(turns), category=category)
    return None


# -- request lengths --------------------------------------------------------------------------


@dataclass(frozen=True)
class Lengths:
    """A request length: fixed, or sampled from a distribution (profile syntax: ``LENGTH`` in
    :mod:`specwatch.profiles.tables`). Samples are integers ≥ 1, clipped to ``[low, high]``."""

    dist: str = "fixed"
    params: tuple[tuple[str, float], ...] = ()

    @classmethod
    def parse(cls, spec: int | Mapping[str, Any], what: str) -> Lengths:
        """From the profile syntax (an integer, or ``{dist = ..., ...}``); UsageError naming ``what``."""
        try:
            checked = LENGTH.convert(dict(spec) if isinstance(spec, Mapping) else spec)
        except Invalid as exc:
            raise UsageError(f"{what}{exc.at}: {exc.message}") from None
        if isinstance(checked, int):
            return cls("fixed", (("value", checked),))
        return cls(checked["dist"], tuple(sorted((k, v) for k, v in checked.items() if k != "dist")))

    @property
    def spec(self) -> int | dict[str, Any]:
        """Back to the profile syntax (what results record)."""
        p = dict(self.params)
        return int(p["value"]) if self.dist == "fixed" else {"dist": self.dist, **p}

    def sample(self, rng: random.Random, n: int) -> list[int]:
        """``n`` lengths drawn from ``rng``."""
        p = dict(self.params)
        if self.dist == "fixed":
            return [int(p["value"])] * n
        if self.dist == "uniform":
            return [rng.randint(int(p["low"]), int(p["high"])) for _ in range(n)]
        if self.dist == "normal":
            raw = [rng.gauss(p["mean"], p["std"]) for _ in range(n)]
        else:  # lognormal: median · e^(sigma·z)
            raw = [p["median"] * math.exp(p["sigma"] * rng.gauss(0.0, 1.0)) for _ in range(n)]
        low, high = int(p.get("low", 1)), p.get("high")
        return [max(low, min(int(high), round(x)) if high is not None else round(x)) for x in raw]


def fit_words(text: str, words: int) -> str:
    """``text`` cut to ``words`` whitespace-separated words, or repeated until it has that many."""
    have = text.split()
    if not have:
        raise ValueError("an empty prompt cannot be fitted to a length")
    reps = -(-words // len(have))
    return " ".join((have * reps)[:words])


def fit_entry(entry: Entry, words: int) -> Entry:
    """``entry`` with ``words`` words of prompt: a text prompt cut or repeated (:func:`fit_words`); a
    chat keeps its other turns and fits its last user turn to the words they leave (at least one)."""
    if entry.prompt is not None:
        return Entry(prompt=fit_words(entry.prompt, words), category=entry.category)
    last = max(i for i, (role, _) in enumerate(entry.messages) if role == "user")
    others = sum(len(c.split()) for i, (_, c) in enumerate(entry.messages) if i != last)
    turns = list(entry.messages)
    turns[last] = ("user", fit_words(turns[last][1] or "?", max(1, words - others)))
    return Entry(messages=tuple(turns), category=entry.category)


# -- one prompt file for two tools ------------------------------------------------------------


def shared_line(text: str) -> dict[str, Any]:
    """A prompt as one JSONL object that specwatch and ``sglang.bench_serving`` both send as ``text``: specwatch's
    JSONL reads ``"prompt"`` (its other keys unread); bench_serving's ``custom`` dataset reads ``"conversations"``,
    sends its first turn as it is and needs a second (unused when the output length is fixed)."""
    return {"prompt": text, "conversations": [{"from": "human", "value": text}, {"from": "gpt", "value": ""}]}
