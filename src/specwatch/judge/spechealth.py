"""Speculation health, judged: the accept length against its baseline, exact under greedy.

Pure (numpy through :mod:`specwatch.judge.compare`). The run side (``specwatch.run.specgates``) reads a
server's counters and log windows into the types here; everything it concludes comes from here.

**Accept length under greedy, per prompt.** With fixed prompts and greedy decoding a healthy server
accepts the same drafts every time, so each prompt's verify count (SGLang's ``spec_verify_ct``, with
``completion_tokens``) is close to deterministic: a real SGLang 0.5.23 STANDALONE server took 31, 31,
37, 27, 30 and 25 verify steps for six prompts, one at a time and again as a batch. A prompt whose
count changed is a finding (:func:`compare_prompts`), unless the output moved with the target (the
lossless check's near-tie analysis against the plain server explains it). The verdict names the prompts
and the first output token where acceptance diverged (:func:`first_divergence`, from the streamed
chunks: exact when a stream delivered one chunk per verify cycle), and says which cause fits: a drop
with lossless output means the draft or its inputs changed (the draft model, its KV, the hidden
states it is fed); a drop with diverging output is a correctness bug.

**Accept length under sampling** (or without per-request counters): the drift verdict of throughput,
:func:`specwatch.judge.compare.drift`, on the aggregate accept length of each run, at its own
tolerance (:data:`ACCEPT_TOLERANCE`, or the recorded sessions' own spread once there are 3).

The verify cycle's cost and the break-even accept length are :mod:`specwatch.judge.cyclecost`'s.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specwatch.judge import compare

__all__ = [
    "ACCEPT_TOLERANCE",
    "GreedyComparison",
    "PromptChange",
    "PromptCount",
    "accept_drift",
    "compare_prompts",
    "explain",
    "first_divergence",
    "output_digest",
    "prompt_counts",
    "prompt_key",
]

#: The aggregate accept length's drift tolerance before 3 recorded sessions measure its own spread
#: (TensorRT-LLM's spec-decoding CI fails below 95% of its reference).
ACCEPT_TOLERANCE = 0.05


def _short(text: str, n: int = 40) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def prompt_key(prompt: str, max_new_tokens: int) -> str:
    """A stable name of one greedy request: a digest of its prompt and length."""
    return hashlib.sha1(f"{max_new_tokens}\0{prompt}".encode()).hexdigest()[:12]


def output_digest(ids: Sequence[int]) -> str:
    """A digest of output token ids (equal outputs, equal digests)."""
    return hashlib.sha1(",".join(str(int(t)) for t in ids).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class PromptCount:
    """One greedy prompt on one server, by the server's own per-request counters.

    ``verify_ct``: the verify cycles of each repetition in this run. ``bounds``: the output length after
    the prefill token and after each verify cycle (``1, 1 + a₁, ...``), known exactly when the streamed
    chunks of the repetitions cover every cycle; ``seen``: the chunk ends the streams showed (SGLang
    and the reference server merge cycles into one chunk when the client reads late, so these are some
    of the cycle ends, never a wrong one).
    """

    key: str
    prompt: str
    index: int
    max_new_tokens: int
    verify_ct: tuple[int, ...]
    completion_tokens: int
    output: str  # output_digest of the output ids
    bounds: tuple[int, ...] | None = None
    seen: tuple[int, ...] = ()

    @property
    def stable(self) -> bool:
        """Every repetition in this run took the same number of verify cycles."""
        return len(set(self.verify_ct)) <= 1

    @property
    def accept_length(self) -> float | None:
        """Committed tokens per verify cycle after the prefill token, ``(completion_tokens − 1) / verify_ct``."""
        v = self.verify_ct[0] if self.verify_ct else 0
        return (self.completion_tokens - 1) / v if v > 0 else None

    def to_dict(self) -> dict[str, Any]:
        """The form kept in a result's ``extra["per_prompt"]``."""
        return {"key": self.key, "prompt": _short(self.prompt, 60), "index": self.index,
                "max_new_tokens": self.max_new_tokens, "verify_ct": list(self.verify_ct),
                "completion_tokens": self.completion_tokens, "output": self.output,
                "bounds": list(self.bounds) if self.bounds is not None else None, "seen": list(self.seen)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PromptCount:
        """From :meth:`to_dict`'s form; ValueError on a malformed entry."""
        try:
            bounds = data.get("bounds")
            return cls(str(data["key"]), str(data.get("prompt", "")), int(data.get("index", 0)),
                       int(data.get("max_new_tokens", 0)), tuple(int(v) for v in data["verify_ct"]),
                       int(data["completion_tokens"]), str(data.get("output", "")),
                       tuple(int(b) for b in bounds) if bounds is not None else None,
                       tuple(int(b) for b in data.get("seen") or ()))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"a per-prompt record is malformed ({exc}): {dict(data)!r:.120}") from None


def prompt_counts(requests: Sequence[tuple[str, int, int | None, int, Sequence[int], Sequence[int]]]
                  ) -> list[PromptCount]:
    """Per prompt (in first-seen order), from each request's ``(prompt, max_new_tokens, spec_verify_ct,
    completion_tokens, output_ids, chunk_ends)``; requests without a verify count are left out.

    ``chunk_ends``: the output length after each streamed chunk (empty for an unstreamed reply).
    """
    groups: dict[str, list[tuple[str, int, int, int, Sequence[int], Sequence[int]]]] = {}
    for prompt, max_new, v, ct, ids, ends in requests:
        if v is None:
            continue
        groups.setdefault(prompt_key(prompt, max_new), []).append((prompt, max_new, int(v), int(ct), ids, ends))
    out = []
    for index, (key, reps) in enumerate(groups.items()):
        prompt, max_new, v, ct, ids, _ = reps[0]
        same = [r for r in reps if r[2] == v and r[3] == ct]
        seen = sorted({int(e) for r in same for e in r[5]})
        bounds = tuple(seen) if len(seen) == v + 1 and seen and seen[-1] == ct else None
        out.append(PromptCount(key, prompt, index, max_new, tuple(r[2] for r in reps), ct, output_digest(ids),
                               bounds, tuple(seen)))
    return out


def first_divergence(before: PromptCount, now: PromptCount) -> tuple[int, bool] | None:
    """The first output token (0-based; token 0 came from the prefill) whose acceptance differs, and
    whether that is exact (both streams covered every cycle) or an upper bound (one did: the first
    chunk end of the other that is no cycle end of the exact one). None: neither stream covered every
    cycle, or the cycles agree."""
    if before.bounds is not None and now.bounds is not None:
        for b, n in zip(before.bounds, now.bounds, strict=False):
            if b != n:
                return min(b, n), True
        return None
    for exact, other in ((before.bounds, now.seen), (now.bounds, before.seen)):
        if exact is not None:
            outside = [s for s in other if s not in set(exact)]
            if outside:
                return outside[0], False
    return None


@dataclass(frozen=True)
class PromptChange:
    """A prompt whose verify count changed against the recorded one, and what explains it."""

    before: PromptCount
    now: PromptCount
    #: why it is not a finding (the output moved with the target), or "" when it is one
    explained: str = ""
    #: the plain server's verdict on this prompt's output, when it was asked (True: lossless)
    lossless: bool | None = None

    @property
    def output_same(self) -> bool:
        return self.before.output == self.now.output

    @property
    def dropped(self) -> bool:
        """More verify cycles for the same tokens: acceptance went down."""
        return self.now.verify_ct[0] > self.before.verify_ct[0]

    def cause(self) -> str:
        """Which cause fits: a changed draft (lossless output) or a correctness bug (diverging output)."""
        if self.explained:
            return self.explained
        if self.output_same:
            return ("the output is token for token the recorded one (lossless): the draft or its inputs changed "
                    "(the draft model, its KV, the hidden states it is fed)")
        if self.lossless is False:
            return ("the output diverges from the plain server's greedy output: a correctness bug (see the lossless "
                    "check)")
        return ("the output changed since the recording and no plain server could be asked: a near-tie cannot be told "
                "from a bug (run the lossless check)")

    def line(self) -> str:
        b, n = self.before, self.now
        way = "dropped" if self.dropped else "rose"
        acc = ""
        if b.accept_length is not None and n.accept_length is not None:
            acc = f", accept length {b.accept_length:.2f} -> {n.accept_length:.2f}"
        where = first_divergence(b, n)
        if where is None:
            at = "; where acceptance first diverged is unknown (no stream delivered one chunk per verify cycle)"
        else:
            tok, exact = where
            at = (f"; acceptance first diverged at output token {tok}" if exact
                  else f"; acceptance first diverged at or before output token {tok}")
            if exact and b.bounds is not None and n.bounds is not None:
                i = next(i for i, (x, y) in enumerate(zip(b.bounds, n.bounds, strict=False)) if x != y)
                then, now = b.bounds[i] - b.bounds[i - 1], n.bounds[i] - n.bounds[i - 1]
                at += f" (verify cycle {i}: {then} tokens then, {now} now)"
        return (f"prompt {n.index} ({_short(n.prompt)!r}): {b.verify_ct[0]} -> {n.verify_ct[0]} verify cycles for "
                f"{n.completion_tokens} tokens ({way}{acc}){at}; {self.cause()}")


@dataclass
class GreedyComparison:
    """Every prompt of a greedy probe against its recorded verify count."""

    compared: int
    changes: list[PromptChange] = field(default_factory=list)
    unstable: list[PromptCount] = field(default_factory=list)  # repetitions disagreed in this run
    unmatched: list[str] = field(default_factory=list)  # prompts only one side has

    @property
    def findings(self) -> list[PromptChange]:
        return [c for c in self.changes if not c.explained]

    @property
    def ok(self) -> bool:
        return not self.findings

    def reason(self) -> str:
        """One line: the verdict with the prompts named."""
        if not self.compared:
            return "no prompt of the probe has a recorded verify count to compare with"
        if self.ok:
            moved = f"; {len(self.changes)} moved with the target's output" if self.changes else ""
            same = self.compared - len(self.changes)
            return f"{same}/{self.compared} prompts took their recorded verify counts{moved}"
        drops = [c for c in self.findings if c.dropped]
        named = ", ".join(f"prompt {c.now.index} ({c.before.verify_ct[0]} -> {c.now.verify_ct[0]})"
                          for c in self.findings)
        head = "acceptance dropped" if len(drops) == len(self.findings) else "acceptance changed"
        causes = sorted({"lossless output: the draft or its inputs changed" if c.output_same
                         else "diverging output: a correctness bug" if c.lossless is False
                         else "output changed, cause untold" for c in self.findings})
        return f"{head} on {len(self.findings)}/{self.compared} greedy prompts: {named} ({'; '.join(causes)})"

    def lines(self) -> list[str]:
        out = [f"greedy: {self.reason()}"]
        out += [f"  {c.line()}" for c in self.changes]
        out += [f"  prompt {p.index} ({_short(p.prompt)!r}) is not deterministic in this run: {list(p.verify_ct)} "
                "verify cycles over its repetitions (judged by any of them matching)" for p in self.unstable]
        if self.unmatched:
            out.append(f"  not compared (one side only): {len(self.unmatched)} prompt(s); re-record to compare them")
        return out


def compare_prompts(now: Sequence[PromptCount], before: Sequence[PromptCount]) -> GreedyComparison:
    """Each prompt's verify count against the recorded one (matched by :func:`prompt_key`).

    A prompt whose repetitions disagree in this run matches when any of its counts is a recorded one.
    The changes carry no explanation yet: the caller asks the plain server about changed outputs and
    sets ``explained`` / ``lossless`` (:meth:`explain`).
    """
    recorded = {p.key: p for p in before}
    result = GreedyComparison(compared=0)
    for p in now:
        b = recorded.pop(p.key, None)
        if b is None:
            result.unmatched.append(p.key)
            continue
        result.compared += 1
        if not p.stable:
            result.unstable.append(p)
        if set(p.verify_ct) & set(b.verify_ct):
            continue
        result.changes.append(PromptChange(b, p))
    result.unmatched += list(recorded)
    return result


def explain(comparison: GreedyComparison, lossless: Mapping[str, bool | None]) -> GreedyComparison:
    """The comparison with each changed prompt whose output changed judged by the plain server's
    verdict on it (``lossless[key]``: True when the speculative output equals the plain one, near-tie
    flips allowed): then the verify count moved with the target's own output, which explains it."""
    changes = []
    for c in comparison.changes:
        ok = lossless.get(c.now.key)
        why = ("the output changed since the recording, and the plain server's greedy output changed with it "
               "(the lossless check passes, near-tie flips allowed): the drafts the target accepts moved with "
               "its output") if ok and not c.output_same else ""
        changes.append(PromptChange(c.before, c.now, why, ok))
    return GreedyComparison(comparison.compared, changes, comparison.unstable, comparison.unmatched)


def accept_drift(current: Sequence[float], reference: Sequence[float], *, alpha: float = compare.DEFAULT_ALPHA,
                 sessions: Sequence[Sequence[float]] | None = None,
                 class_spread: tuple[float, str] | None = None, machine: str | None = None,
                 requested: float = ACCEPT_TOLERANCE) -> tuple[compare.Comparison, compare.DriftBasis]:
    """The aggregate accept length's drift verdict: throughput's machinery (:func:`compare.drift`),
    higher is better, at :data:`ACCEPT_TOLERANCE` until the recorded sessions measure its own spread;
    ``machine``: the run's own, labelled as the sessions are (judged as one on it when they hold enough)."""
    return compare.drift(current, reference, higher_is_better=True, requested=requested, alpha=alpha,
                         sessions=sessions, class_spread=class_spread, machine=machine)
