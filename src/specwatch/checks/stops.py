"""Stops under speculation: a stop inside an accepted run must end the output there, whatever the length cap says.

Pure: stdlib only. A speculative step commits several tokens at once. When one of them is a stop (a stop token id,
EOS or the end of a stop string) and the same step also reaches ``max_new_tokens``, a server that tests the length
cap before the stop finishes the request as ``length`` at the cap: the tokens after the stop reach the client and
the finish reason is wrong. Plain decoding cannot show it (it grows one token a step), so the comparison with the
plain server says what the client should have seen.

The probes come from the plain server's own greedy output of a prompt: a token ``t`` that first appears at position
``k`` becomes a stop (``stop_token_ids=[t]``, or its text as a stop string) and ``max_new_tokens`` is set to
``k + 1 + overshoot``, so that a verify cycle that commits position ``k`` and the next one crosses the cap. Each
probe's reply is judged on its own (no token after a stop token, no stop string in the text, never more than
``max_new_tokens``) and against the plain server's reply to the same request (ids, text, completion tokens and
finish reason equal). A reply whose tokens before the stop differ from the plain output never reached the stop:
that probe says nothing about stops (the lossless check judges such differences) and is counted apart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "OVERSHOOTS",
    "POSITIONS",
    "Probe",
    "Reply",
    "StopReport",
    "judge",
    "probes_from",
]

#: how far past the stop the cap is put: a cycle that commits the stop and 1 (or 2) tokens more crosses it
OVERSHOOTS = (1, 2)
#: stop positions tried per prompt, from the third output token on (the first comes from the prefill)
POSITIONS = 6
#: a stop string shorter than this (after stripping) is too likely to occur by chance in other tokens' text
MIN_STOP_STR = 2


@dataclass(frozen=True)
class Probe:
    """One request: a prompt with one stop (a token id or a string) at ``position`` and a cap just past it."""

    prompt_index: int
    prompt: str
    position: int  # where the stop sits in the plain greedy output (0-based)
    max_new_tokens: int
    expected_ids: tuple[int, ...]  # the plain greedy output up to and including the stop
    stop_token_id: int | None = None
    stop_str: str | None = None

    @property
    def kind(self) -> str:
        return "stop token" if self.stop_token_id is not None else "stop string"

    def describe(self) -> str:
        stop = f"stop token {self.stop_token_id}" if self.stop_token_id is not None else f"stop {self.stop_str!r}"
        return f"prompt {self.prompt_index}, {stop} at position {self.position}, max_new_tokens {self.max_new_tokens}"

    def sampling(self) -> dict[str, Any]:
        """The request's sampling parameters beside greedy decoding (EOS honoured: a stop must be able to end it)."""
        params: dict[str, Any] = {"max_new_tokens": self.max_new_tokens, "ignore_eos": False}
        if self.stop_token_id is not None:
            params["stop_token_ids"] = [self.stop_token_id]
        if self.stop_str is not None:
            params["stop"] = [self.stop_str]
        return params


@dataclass(frozen=True)
class Reply:
    """What a client saw of one request: ids, text, the server's completion-token count and finish reason."""

    ids: tuple[int, ...]
    text: str
    completion_tokens: int
    finish_type: str | None  # "stop", "length", "abort"; None when the server said none
    matched: int | str | None = None

    @classmethod
    def from_response(cls, output_ids: Sequence[int], text: str, meta_info: Mapping[str, Any]) -> Reply:
        """From an SGLang-style ``/generate`` reply (``meta_info.finish_reason`` = {type, matched})."""
        reason = meta_info.get("finish_reason")
        ftype, matched = (reason.get("type"), reason.get("matched")) if isinstance(reason, Mapping) else (None, None)
        ids = tuple(int(t) for t in output_ids)
        count = meta_info.get("completion_tokens")
        count = count if isinstance(count, int) and not isinstance(count, bool) else len(ids)
        return cls(ids, text, count, ftype if isinstance(ftype, str) else None, matched)

    def to_json(self) -> dict[str, Any]:
        return {"ids": list(self.ids), "text": self.text, "completion_tokens": self.completion_tokens,
                "finish_type": self.finish_type, "matched": self.matched}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Reply:
        return cls(tuple(data["ids"]), data["text"], int(data["completion_tokens"]), data.get("finish_type"),
                   data.get("matched"))


def probes_from(prompts: Sequence[str], outputs: Sequence[Sequence[int]],
                token_texts: Sequence[Sequence[str] | None] | None = None, *, positions: int = POSITIONS,
                overshoots: Sequence[int] = OVERSHOOTS, first: int = 2) -> list[Probe]:
    """Probes from each prompt's plain greedy output (and, when given, each output token's own text).

    A stop token is a token that first appears at its position (an earlier copy would end the output sooner); a
    stop string is the text of the last one to three tokens up to that position, at least ``MIN_STOP_STR`` visible
    characters, that occurs nowhere earlier in the output's text (so it completes exactly at that token).
    """
    out: list[Probe] = []
    for i, (prompt, ids) in enumerate(zip(prompts, outputs, strict=True)):
        texts = token_texts[i] if token_texts is not None else None
        longest = max(overshoots)
        for k in range(first, min(first + positions, len(ids) - longest)):
            expected = tuple(int(t) for t in ids[:k + 1])
            kinds: list[dict[str, Any]] = []
            if ids[k] not in ids[:k]:
                kinds.append({"stop_token_id": int(ids[k])})
            if texts is not None and len(texts) == len(ids) and (word := _stop_string(texts, k)) is not None:
                kinds.append({"stop_str": word})
            for kind in kinds:
                out += [Probe(i, prompt, k, k + 1 + d, expected, **kind) for d in overshoots]
    return out


def _stop_string(texts: Sequence[str], k: int) -> str | None:
    """The shortest text of tokens ending at ``k`` (at most 3) with ``MIN_STOP_STR`` visible characters that
    occurs nowhere before its end; None when there is none (or a token's text is not whole characters)."""
    for start in range(k, max(k - 3, -1), -1):
        word = "".join(texts[start:k + 1])
        if "\ufffd" in word or not word.isprintable():
            return None
        if len(word.strip()) >= MIN_STOP_STR:
            before = "".join(texts[:k + 1])
            return word if before.find(word) == len(before) - len(word) else None
    return None


@dataclass(frozen=True)
class Finding:
    """What one probe's reply did wrong, or how it differed from the plain server's."""

    probe: Probe
    server: str
    problem: str
    leaked_ids: tuple[int, ...] = ()
    leaked_text: str = ""


@dataclass
class StopReport:
    """Every probe's verdict: findings (failures), the probes that never reached their stop, the ones that held."""

    names: tuple[str, str]  # (plain, speculative) server names
    compared: bool = True  # False: no plain server's replies; the speculative ones were judged alone
    probes: int = 0
    held: int = 0
    findings: list[Finding] = field(default_factory=list)
    diverged: list[tuple[Probe, str]] = field(default_factory=list)  # (probe, server whose tokens differed)
    finish_counts: dict[str, dict[str, int]] = field(default_factory=dict)  # server -> finish type -> count

    @property
    def ok(self) -> bool | None:
        if self.findings:
            return False
        return True if self.held else None

    @property
    def failed_probes(self) -> int:
        return len({id(f.probe) for f in self.findings})

    def summary(self) -> str:
        plain, spec = self.names
        if self.findings:
            leaks = [f for f in self.findings if f.leaked_ids or f.leaked_text]
            head = (f"{self.failed_probes} of {self.probes} stop probes differ: {len(leaks)} repl(ies) carried tokens "
                    "past a stop")
            if any(f.server == spec for f in leaks) and not any(f.server == plain for f in leaks):
                head += (f"; only {spec} (speculative) leaks: a step that commits the stop and crosses "
                         "max_new_tokens finished as 'length' (the cap tested before the stop)")
            return head
        if not self.held:
            return (f"none of {self.probes} stop probes reached its stop on both servers (outputs diverged before "
                    "it): cannot tell")
        where = (f"identical on {plain} and {spec}" if self.compared else
                 f"judged on {spec} alone (no plain server to compare with)")
        return (f"{self.held} of {self.probes} stop probes {where}: every stop inside an accepted run ended the "
                "output there, within max_new_tokens")

    def message(self, limit: int = 6) -> str:
        lines = [self.summary()]
        for f in self.findings[:limit]:
            line = f"  {f.server}: {f.probe.describe()}: {f.problem}"
            if f.leaked_ids:
                line += f"; {len(f.leaked_ids)} token(s) after the stop: {list(f.leaked_ids)}"
            if f.leaked_text:
                line += f"; text after the stop: {f.leaked_text!r}"
            lines.append(line)
        if len(self.findings) > limit:
            lines.append(f"  ... and {len(self.findings) - limit} more")
        for server, counts in sorted(self.finish_counts.items()):
            lines.append(f"  {server} finish reasons: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        if self.diverged:
            lines.append(f"  {len(self.diverged)} probe(s) never reached their stop (tokens before it differed from "
                         "the plain output: a near-tie or a lossless failure, see the lossless check)")
        return "\n".join(lines)


def _violations(probe: Probe, reply: Reply) -> list[tuple[str, tuple[int, ...], str]]:
    """What a reply does wrong on its own: past the cap, tokens after the stop token, the stop string in its text."""
    out: list[tuple[str, tuple[int, ...], str]] = []
    if reply.completion_tokens > probe.max_new_tokens or len(reply.ids) > probe.max_new_tokens:
        out.append((f"{max(reply.completion_tokens, len(reply.ids))} tokens, more than max_new_tokens "
                    f"{probe.max_new_tokens}", (), ""))
    if probe.stop_token_id is not None and probe.stop_token_id in reply.ids[:-1]:
        at = reply.ids.index(probe.stop_token_id)
        out.append((f"finished {reply.finish_type!r} {at} tokens in, past its stop token", reply.ids[at + 1:], ""))
    if probe.stop_str is not None and probe.stop_str in reply.text:
        at = reply.text.index(probe.stop_str)
        out.append((f"finished {reply.finish_type!r} with its stop string in the text",
                    (), reply.text[at + len(probe.stop_str):]))
    return out


def _reached(probe: Probe, reply: Reply) -> bool:
    """The reply's tokens up to the stop are the plain greedy output's (the stop was there to be seen)."""
    return reply.ids[:len(probe.expected_ids)] == probe.expected_ids


def _differences(plain: Reply, spec: Reply) -> list[str]:
    out = []
    if (plain.finish_type, plain.matched) != (spec.finish_type, spec.matched):
        out.append(f"finish reason {spec.finish_type!r} (matched {spec.matched!r}) where the plain server said "
                   f"{plain.finish_type!r} (matched {plain.matched!r})")
    if plain.completion_tokens != spec.completion_tokens:
        out.append(f"completion_tokens {spec.completion_tokens} against {plain.completion_tokens}")
    if plain.ids != spec.ids:
        out.append(f"{len(spec.ids)} output ids against {len(plain.ids)}")
    if plain.text != spec.text:
        out.append(f"text {spec.text[-40:]!r} against {plain.text[-40:]!r} (last 40 characters)")
    return out


def judge(probes: Sequence[Probe], plain: Sequence[Reply] | None, spec: Sequence[Reply],
          names: tuple[str, str] = ("plain", "speculative")) -> StopReport:
    """Judge each probe's replies: each server's on its own, then the speculative one against the plain one.

    ``plain`` None: only the speculative server was reachable; its replies are judged on their own.
    """
    rep = StopReport(names, compared=plain is not None, probes=len(probes))
    sides: list[tuple[str, Sequence[Reply]]] = [(names[1], spec)]
    if plain is not None:
        sides.insert(0, (names[0], plain))
    for name, replies in sides:
        if len(replies) != len(probes):
            raise ValueError(f"{name}: {len(replies)} replies for {len(probes)} probes")
        counts = rep.finish_counts.setdefault(name, {})
        for r in replies:
            counts[str(r.finish_type)] = counts.get(str(r.finish_type), 0) + 1
    for n, probe in enumerate(probes):
        before = len(rep.findings)
        for name, replies in sides:
            for problem, ids, text in _violations(probe, replies[n]):
                rep.findings.append(Finding(probe, name, problem, ids, text))
        unreached = [name for name, replies in sides if not _reached(probe, replies[n])]
        if len(rep.findings) == before and unreached:
            rep.diverged.append((probe, unreached[0]))
            continue
        if plain is not None and _reached(probe, plain[n]) and (problems := _differences(plain[n], spec[n])):
            rep.findings.append(Finding(probe, names[1], "; ".join(problems)))
        if len(rep.findings) == before:
            rep.held += 1
    return rep
