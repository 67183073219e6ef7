"""Acceptance per concurrency, judged: under greedy decoding a request's output and the drafts it accepts do not
depend on who else shares its batch.

Pure: it judges replies already collected (:mod:`specwatch.checks.accept_concurrency` collects them). The same
prompts are asked one at a time (the reference, concurrency 1) and then at each higher concurrency (1, 4, 16 and
one above the largest batch size the server captured as a CUDA graph, where the verify runs eagerly); each reply
is compared with its prompt's reference: its output ids, its ``spec_verify_ct`` and ``spec_num_correct_drafts``.
A batch-dependent fault (TensorRT-LLM PR 4168: a gather that gave batches above one request the wrong draft rows)
keeps the output (the target verifies every draft) and lowers the accepted drafts; a wrong KV position changes
the output. The check fails at the lowest concurrency where either parts, naming the prompts and the numbers.

Near ties are told apart as :mod:`specwatch.checks.lossless` tells them: the two runs' own logprobs give the
numerical noise between the batch shapes where their tokens agree, and a first difference whose margins together
stay within ``TIE_FACTOR`` times it is a near-tie flip (its prompt's acceptance is then not compared: past the flip
the two runs decode different text). A draft's near tie cannot be seen (the draft's logits are not returned), so
where the logprobs do differ between the batch shapes (noise above zero and within lossless's ``NOISE_CEILING``)
a prompt's verify cycles and correct drafts may each move by at most ``MAX_DRAFT_TIES`` (lossless's
``MAX_TIES_PER_PROMPT``: each hidden near-tie flip of a draft token moves one cycle); where they are bit-identical,
not returned, or apart by more than numerical noise, every count must be equal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specwatch.checks import lossless
from specwatch.checks.graphcheck import BatchUse, describe_batches

__all__ = ["BASE_LEVELS", "MAX_DRAFT_TIES", "ConcurrencyReport", "Level", "Parting", "Reply", "judge", "levels_for"]

#: The concurrencies every run asks for (one above the captured batch sizes is added when the server says them)
BASE_LEVELS = (1, 4, 16)
#: Verify cycles (and correct drafts) a prompt may move by where the batch shapes' logprobs differ: hidden near-tie
#: flips of draft tokens, as many as the lossless check re-anchors per prompt
MAX_DRAFT_TIES = lossless.MAX_TIES_PER_PROMPT


def _int(meta: Mapping[str, Any], key: str) -> int | None:
    value = meta.get(key)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class Reply:
    """One greedy reply: which prompt it answered, its output (with logprobs when returned) and its counts."""

    prompt: int
    scored: lossless.Scored
    verify_ct: int | None = None
    correct_drafts: int | None = None
    completion_tokens: int | None = None

    @classmethod
    def of(cls, prompt: int, scored: lossless.Scored, meta: Mapping[str, Any]) -> Reply:
        """From SGLang's ``meta_info`` (``spec_verify_ct``, ``spec_num_correct_drafts``, ``completion_tokens``)."""
        return cls(prompt, scored, _int(meta, "spec_verify_ct"), _int(meta, "spec_num_correct_drafts"),
                   _int(meta, "completion_tokens"))

    @property
    def accept_length(self) -> float | None:
        """``1 + correct / verify`` (exact), else ``completion_tokens / verify`` (SGLang's meta_info ratio)."""
        if not self.verify_ct:
            return None
        if self.correct_drafts is not None:
            return 1.0 + self.correct_drafts / self.verify_ct
        return self.completion_tokens / self.verify_ct if self.completion_tokens is not None else None


def _pooled(replies: Sequence[Reply]) -> float | None:
    """SGLang's pooled accept length over ``replies``: ``1 + Σ correct / Σ verify`` (else ``Σ ct / Σ verify``)."""
    done = [r for r in replies if r.verify_ct]
    if not done:
        return None
    verify = sum(r.verify_ct or 0 for r in done)
    if all(r.correct_drafts is not None for r in done):
        return 1.0 + sum(r.correct_drafts or 0 for r in done) / verify
    if all(r.completion_tokens is not None for r in done):
        return sum(r.completion_tokens or 0 for r in done) / verify
    return None


@dataclass(frozen=True)
class Level:
    """The replies of one concurrency, the Decode lines' batch sizes while it ran, and why it was chosen."""

    concurrency: int
    replies: tuple[Reply, ...]
    batches: tuple[BatchUse, ...] = ()
    why: str = ""

    def label(self) -> str:
        return f"c={self.concurrency}" + (f" ({self.why})" if self.why else "")


@dataclass(frozen=True)
class Parting:
    """One reply that parted from its prompt's reply at concurrency 1."""

    concurrency: int
    request: int  # its index in the level (prompt ``request % len(prompts)``)
    prompt: int
    kind: str  # "output" or "accept length"
    text: str


@dataclass
class ConcurrencyReport:
    """Every level against the reference; what parted, the near ties and the noise allowances, the notes."""

    reference: Level
    levels: list[Level]
    partings: list[Parting] = field(default_factory=list)
    allowed: list[str] = field(default_factory=list)  # near-tie flips and noise allowances, named
    notes: list[str] = field(default_factory=list)
    compared: int = 0  # replies whose acceptance was compared with the reference

    @property
    def ok(self) -> bool | None:
        """False: something parted; None: nothing could be compared; True: every reply held."""
        if self.partings:
            return False
        return True if self.compared else None

    @property
    def first_parted(self) -> int | None:
        """The lowest concurrency at which a reply parted from the reference."""
        return min((p.concurrency for p in self.partings), default=None)

    def _ref_pooled(self, level: Level) -> float | None:
        ref = {r.prompt: r for r in self.reference.replies}
        return _pooled([ref[r.prompt] for r in level.replies if r.prompt in ref])

    def _level_line(self, level: Level) -> str:
        pooled, ref = _pooled(level.replies), self._ref_pooled(level)
        parts = [p for p in self.partings if p.concurrency == level.concurrency]
        state = "PARTED" if parts else "held"
        acc = f"accept length {pooled:.3f} pooled" if pooled is not None else "no accept length"
        if ref is not None and pooled is not None and level is not self.reference:
            acc += f" (the same prompts at c=1: {ref:.3f})"
        line = f"  {level.label()}: {len(level.replies)} requests, {acc}; {state}"
        if level.batches:
            line += "; " + describe_batches(level.batches, None)
        return line

    def message(self) -> str:
        verdict = {True: "PASS", False: "FAIL", None: "not judged"}[self.ok]
        each = [f"prompt {r.prompt} {a:.2f}" for r in self.reference.replies if (a := r.accept_length) is not None]
        lines = [f"accept length and greedy output by concurrency ({verdict}); reference: each prompt alone (c=1): "
                 + (", ".join(each) or "no accept length")]
        lines += [self._level_line(level) for level in (self.reference, *self.levels)]
        first = self.first_parted
        lines += [f"  FAIL c={p.concurrency} request {p.request}: {p.kind}: {p.text}" for p in self.partings
                  if p.concurrency == first]
        for level in self.levels:
            parts = [p for p in self.partings if p.concurrency == level.concurrency]
            if parts and level.concurrency != first:
                kinds = " and ".join(sorted({p.kind for p in parts}))
                lines.append(f"  FAIL c={level.concurrency}: {len(parts)} of {len(level.replies)} requests parted "
                             f"({kinds}; prompts {', '.join(str(q) for q in sorted({p.prompt for p in parts}))})")
        lines += [f"  allowed: {a}" for a in self.allowed]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def reason(self) -> str:
        """One line: where and how it parted, or every level it held at."""
        first = self.first_parted
        if first is not None:
            level = next(lv for lv in self.levels if lv.concurrency == first)
            parts = [p for p in self.partings if p.concurrency == first]
            kinds = sorted({p.kind for p in parts})
            pooled, ref = _pooled(level.replies), self._ref_pooled(level)
            head = f"{' and '.join(kinds)} parts at concurrency {first}"
            if pooled is not None and ref is not None:
                head += f": accept length {ref:.3f} at c=1 vs {pooled:.3f} at c={first} (pooled over the same prompts)"
            later = sorted({p.concurrency for p in self.partings} - {first})
            tail = f"; also at c={', '.join(map(str, later))}" if later else ""
            return f"{head}; {'; '.join(p.text for p in parts[:2])}" + (" ..." if len(parts) > 2 else "") + tail
        if not self.compared:
            return "no reply could be compared with its reference: " + ("; ".join(self.notes) or "no replies")
        each = [a for r in self.reference.replies if (a := r.accept_length) is not None]
        spread = f"; per prompt {min(each):.2f} to {max(each):.2f}" if each else ""
        held = ", ".join(str(lv.concurrency) for lv in (self.reference, *self.levels))
        extra = f"; {len(self.allowed)} allowance(s): {self.allowed[0]}" if self.allowed else ""
        return f"accept length and greedy output held at concurrency {held}{spread}{extra}"


def _counts(reply: Reply) -> str:
    return f"spec_verify_ct {reply.verify_ct}, correct drafts {reply.correct_drafts}"


def _flip(d: lossless.Divergence, c: int) -> str:
    """The margins of a first difference, in this check's words (c=1 against c=N)."""
    if d.baseline_margin is None or d.spec_margin is None:
        return f"no logprob of the other token (not in the top {lossless.TOP_LOGPROBS}): not a near tie"
    text = f"margins {d.baseline_margin:.3g} (c=1) + {d.spec_margin:.3g} (c={c}) nats"
    if d.bound is None:
        return text + ": no near-tie allowance (no logprob noise measured, or above its ceiling)"
    return text + f" vs near-tie bound {d.bound:.3g}: " + ("a near-tie flip (numerical)" if d.near_tie
                                                          else "too wide for numerical noise")


def _judge_level(report: ConcurrencyReport, ref: Mapping[int, Reply], level: Level) -> None:
    pairs = [(ref[r.prompt].scored, r.scored) for r in level.replies if r.prompt in ref]
    noise = lossless.agreement_noise(pairs)
    bound = lossless.tie_bound(noise)
    c = level.concurrency
    for i, r in enumerate(level.replies):
        base = ref.get(r.prompt)
        if base is None:
            report.notes.append(f"c={c}: prompt {r.prompt} has no reply at c=1")
            continue
        pos = lossless.first_difference(base.scored.ids, r.scored.ids)
        if pos is not None:
            d = lossless.classify(base.scored, r.scored, pos, bound)
            if d.near_tie:
                report.allowed.append(f"c={c} prompt {r.prompt}: output flips at position {pos}, {_flip(d, c)}; "
                                      "its accept length is not compared past a flip")
            else:
                report.partings.append(Parting(c, i, r.prompt, "output", (
                    f"prompt {r.prompt} first differs at position {pos} (token {d.baseline_token} at c=1, "
                    f"{d.spec_token} at c={c}): {_flip(d, c)}")))
            continue
        if base.verify_ct is None or r.verify_ct is None:
            report.notes.append(f"c={c} prompt {r.prompt}: no spec_verify_ct to compare")
            continue
        report.compared += 1
        dv = r.verify_ct - base.verify_ct
        dc = 0 if r.correct_drafts is None or base.correct_drafts is None else r.correct_drafts - base.correct_drafts
        if not dv and not dc:
            continue
        a, b = base.accept_length, r.accept_length
        said = (f"prompt {r.prompt} {a:.2f} -> {b:.2f}" if a is not None and b is not None else f"prompt {r.prompt}")
        said += f" ({_counts(base)} at c=1; {_counts(r)} at c={c})"
        small = abs(dv) <= MAX_DRAFT_TIES and abs(dc) <= MAX_DRAFT_TIES
        if noise is not None and noise[0] > 0 and bound is not None and small:  # numerical noise, within its ceiling
            report.allowed.append(f"c={c} {said}: within {MAX_DRAFT_TIES} cycles of hidden draft near ties, the "
                                  f"batch shapes' logprobs differing by up to {noise[0]:.3g} nats")
            continue
        if noise is None:
            why = "no logprobs returned: near ties cannot be told from faults, so the counts must be equal"
        elif noise[0] == 0:
            why = "the two batch shapes' logprobs are identical where their tokens agree: no near tie moves a draft"
        elif bound is None:
            why = (f"the batch shapes' logprobs differ by up to {noise[0]:.3g} nats, above the "
                   f"{lossless.NOISE_CEILING:g} numerical noise reaches: no near-tie allowance")
        else:
            why = (f"{max(abs(dv), abs(dc))} moved, more than the {MAX_DRAFT_TIES} hidden draft near ties explain "
                   f"(the batch shapes' logprobs differ by up to {noise[0]:.3g} nats)")
        report.partings.append(Parting(c, i, r.prompt, "accept length", f"{said}: {why}"))


def judge(reference: Level, levels: Sequence[Level], notes: Sequence[str] = ()) -> ConcurrencyReport:
    """Each level's replies against the reference's reply to the same prompt (the module's docstring)."""
    report = ConcurrencyReport(reference, list(levels), notes=list(notes))
    ref = {r.prompt: r for r in reference.replies}
    for level in levels:
        _judge_level(report, ref, level)
    return report


def levels_for(captured_top: int | None, max_running: int | None, base: Sequence[int] = BASE_LEVELS,
               what: str = "") -> tuple[list[tuple[int, str]], list[str]]:
    """The concurrencies to run above 1, each with why, and notes: ``base`` and one above ``captured_top`` (the
    largest batch size captured as a graph, or the capture limit; ``what`` names it, default "the largest captured
    bs=N") when the server's request pool (``max_running``) lets such a batch form."""
    what = what or f"the largest captured bs={captured_top}"
    notes: list[str] = []
    chosen = {c: "" for c in sorted(set(base)) if c > 1}
    if captured_top is None:
        notes.append("the captured batch sizes are unknown (no capture line, no limit in /server_info or the "
                     "profile): no level above them")
    elif max_running is not None and captured_top + 1 > max_running:
        notes.append(f"no batch above {what} can form: --max-running-requests {max_running}")
    else:
        chosen[captured_top + 1] = f"one above {what}"
    if max_running is not None and any(c > max_running for c in chosen):
        notes.append(f"levels above --max-running-requests {max_running} run as batches of at most {max_running}, "
                     "the rest queued")
    return sorted(chosen.items()), notes
