"""Greedy output equality: a speculative server must produce the baseline's tokens, token for token.

Pure: stdlib only. With greedy sampling (temperature 0) speculative decoding is lossless by
construction: the target verifies every drafted token and keeps only those it would have produced
itself. So any difference from the non-speculative server's output is a bug (a draft token
committed without verification, a wrong KV position, a mis-indexed bonus token), and the first
differing position points at the cycle where it happened.

Exact equality is the default and the right test for float32 servers (the reference server on
CPU). On bf16/fp16 GPU servers the verify forward runs ``num_draft_tokens`` positions per request
in one batch while the baseline decodes one position per step: different batch shapes pick
different kernels and reduction orders, so logits differ in the last bits, and where two tokens
are nearly tied the argmax can flip. From that position on the two continuations legitimately
diverge. Near-tie flips are told apart from bugs with the servers' own logprobs (SGLang's
``return_logprob``/``top_logprobs_num``): where the outputs first differ, the baseline's margin of
its token over the speculative one and the speculative server's margin the other way must both be
positive and together within ``TIE_FACTOR`` times the numerical noise, the largest logprob
difference of any top-k token between the two servers over the positions where they agree. Such a
flip is re-anchored (both servers continue from the baseline's token, see :class:`PromptTrace`) and
the comparison goes on; anything else is a divergence. A server that commits a token its own target
ranks below another (negative speculative margin) committed it without verification.

``min_identical`` (the fraction of prompts that must match) and ``min_common_prefix`` (every prompt
must agree at least on its first N tokens) remain for servers that return no logprobs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "MAX_TIES_PER_PROMPT",
    "NOISE_CEILING",
    "TIE_FACTOR",
    "TOP_LOGPROBS",
    "Divergence",
    "GreedyMemo",
    "LosslessReport",
    "PromptDiff",
    "PromptTrace",
    "Scored",
    "agreement_noise",
    "classify",
    "compare_outputs",
    "first_difference",
    "tie_bound",
]

#: Top logprobs asked for at every output position: enough to hold both tokens of a flip.
TOP_LOGPROBS = 5
#: A flip is a near-tie when both margins together stay within this many times the noise: two
#: tokens each moved by at most the noise can swap only if their margins sum to at most 2x it, and
#: the other 2x covers noise larger than the agreeing positions showed.
TIE_FACTOR = 4.0
#: Noise (nats) above which the two servers disagree by more than kernel and reduction order can
#: explain (a wrong position or cache would do it): no near-tie allowance then, exact equality. The
#: reference server in bf16 at TP=2 showed 0.084 (docs/validation/, section 9).
NOISE_CEILING = 0.5
#: Near-tie flips re-anchored per prompt; one more counts as a divergence (more flips than
#: numerical noise explains).
MAX_TIES_PER_PROMPT = 3


@dataclass(frozen=True)
class Scored:
    """One server's greedy output for one request: token ids and, when returned, their logprobs."""

    ids: tuple[int, ...]
    logprobs: tuple[float, ...] | None = None  # the chosen token's logprob at each position
    top: tuple[Mapping[int, float], ...] | None = None  # the top-k {token: logprob} at each position
    prompt_ids: tuple[int, ...] | None = None  # the request's tokenized input, for re-anchoring

    @classmethod
    def from_response(cls, output_ids: Sequence[int], meta_info: Mapping[str, Any],
                      prompt_ids: Sequence[int] | None = None) -> Scored:
        """From SGLang's ``/generate`` reply: ``output_token_logprobs`` ([logprob, id, text] per
        token) and ``output_top_logprobs`` (a list of those per token); missing or malformed
        logprobs leave the fields None."""
        ids = tuple(int(t) for t in output_ids)
        lps = _token_logprobs(meta_info.get("output_token_logprobs"), ids)
        top = _top_logprobs(meta_info.get("output_top_logprobs"), len(ids))
        return cls(ids, lps, top, tuple(int(t) for t in prompt_ids) if prompt_ids is not None else None)

    def logprob(self, pos: int, token: int | None) -> float | None:
        """This server's logprob of ``token`` at ``pos``, if it reported one."""
        if token is None or pos >= len(self.ids):
            return None
        if self.logprobs is not None and self.ids[pos] == token:
            return self.logprobs[pos]
        return self.top[pos].get(token) if self.top is not None else None


@dataclass
class GreedyMemo:
    """Greedy outputs per (profile name, prompts, max_new_tokens), kept by the caller for a whole run
    (``Session.greedy_outputs``): each server is asked (and booted) for the same outputs once."""

    outputs: dict[tuple[str, tuple[str, ...], int], list[Scored]] = field(default_factory=dict)

    def get(self, profile: str, prompts: Sequence[str], max_new_tokens: int,
            ask: Callable[[], list[Scored]]) -> list[Scored]:
        """The kept outputs, or ``ask()``'s (then kept)."""
        key = (profile, tuple(prompts), max_new_tokens)
        if key not in self.outputs:
            self.outputs[key] = ask()
        return self.outputs[key]


def _token_logprobs(raw: Any, ids: tuple[int, ...]) -> tuple[float, ...] | None:
    if not isinstance(raw, list) or len(raw) != len(ids):
        return None
    try:
        out = tuple(float(e[0]) for e in raw)
        if any(int(e[1]) != t for e, t in zip(raw, ids, strict=True)):
            return None
    except (TypeError, ValueError, IndexError):
        return None
    return out


def _top_logprobs(raw: Any, n: int) -> tuple[dict[int, float], ...] | None:
    if not isinstance(raw, list) or len(raw) != n:
        return None
    try:
        return tuple({int(e[1]): float(e[0]) for e in (pos or ())} for pos in raw)
    except (TypeError, ValueError, IndexError):
        return None


def agreement_noise(pairs: Iterable[tuple[Scored, Scored]]) -> tuple[float, int] | None:
    """The largest logprob difference of any token both servers list (top-k and chosen), over the
    positions before each pair's first difference, and how many values it saw; None without
    logprobs on both sides. Lower-ranked tokens count: a confident token's logprob sits near 0 and
    hides the logit noise that decides a flip."""
    worst, n = 0.0, 0
    for base, spec in pairs:
        if base.logprobs is None or spec.logprobs is None:
            continue
        end = first_difference(base.ids, spec.ids)
        end = len(base.ids) if end is None else end
        for pos in range(end):
            b = dict(base.top[pos]) if base.top is not None else {}
            s = dict(spec.top[pos]) if spec.top is not None else {}
            b[base.ids[pos]], s[spec.ids[pos]] = base.logprobs[pos], spec.logprobs[pos]
            for tok in b.keys() & s.keys():
                worst, n = max(worst, abs(b[tok] - s[tok])), n + 1
    return (worst, n) if n else None


def tie_bound(noise: tuple[float, int] | None) -> float | None:
    """The near-tie bound (nats) for an ``agreement_noise``; None (exact equality) without logprobs
    or when the noise is above ``NOISE_CEILING``."""
    if noise is None or noise[0] > NOISE_CEILING:
        return None
    return TIE_FACTOR * noise[0]


@dataclass(frozen=True)
class Divergence:
    """Where two greedy outputs first differ, with both servers' margins when known (nats).

    ``baseline_margin``: the baseline's logprob of its token minus of the speculative one (≥ 0 for
    a greedy baseline). ``spec_margin``: the speculative server's logprob of its token minus of
    the baseline's; negative means it committed a token its own target ranks lower.
    """

    position: int
    baseline_token: int | None
    spec_token: int | None
    baseline_margin: float | None = None
    spec_margin: float | None = None
    bound: float | None = None  # TIE_FACTOR x noise; None: no logprobs, exact comparison

    @property
    def near_tie(self) -> bool:
        """Both margins known, not negative, and together within the bound."""
        if None in (self.baseline_margin, self.spec_margin, self.bound):
            return False
        bm, sm = self.baseline_margin, self.spec_margin
        return bm >= 0 and sm >= 0 and bm + sm <= self.bound  # type: ignore[operator]

    def describe(self) -> str:
        """The margins and what they mean, for messages."""
        if self.baseline_margin is None or self.spec_margin is None:
            missing = "baseline" if self.baseline_margin is None else "speculative"
            return f"no {missing} logprob for the other token (not in its top {TOP_LOGPROBS}): not a near-tie"
        bm, sm = self.baseline_margin, self.spec_margin
        head = f"margins {bm:.3g} (baseline) + {sm:.3g} (speculative) nats"
        if sm < 0:
            return (f"{head}: the speculative server committed a token its own target ranks {-sm:.3g} nats below "
                    "the baseline's token, i.e. without verification")
        if self.bound is None:
            return head
        verdict = "a near-tie flip (numerical)" if self.near_tie else "too wide for numerical noise"
        return f"{head} vs near-tie bound {self.bound:.3g}: {verdict}"


def classify(base: Scored, spec: Scored, pos: int, bound: float | None, offset: int = 0) -> Divergence:
    """The divergence at ``pos`` of two segments (``offset``: the segment's start in the output)."""
    b_tok = base.ids[pos] if pos < len(base.ids) else None
    s_tok = spec.ids[pos] if pos < len(spec.ids) else None
    margins: list[float | None] = [None, None]
    if b_tok is not None and s_tok is not None:
        for i, (own, mine, other) in enumerate(((base, b_tok, s_tok), (spec, s_tok, b_tok))):
            a, b = own.logprob(pos, mine), own.logprob(pos, other)
            margins[i] = None if a is None or b is None else a - b
    return Divergence(offset + pos, b_tok, s_tok, margins[0], margins[1], bound)


@dataclass
class PromptTrace:
    """One prompt's comparison, segment by segment: after a near-tie flip both servers are asked to
    continue from the same prefix (prompt, agreed tokens, the baseline's token at the flip), so the
    rest of the output is still checked instead of diverging for good.

    ``advance`` consumes the next pair of segments; while ``anchor`` is set the caller requests
    ``anchor`` (input ids) for ``remaining`` tokens from both servers and advances again.
    """

    prompt_ids: tuple[int, ...] | None
    total: int  # output tokens the first segments asked for
    base_ids: list[int] = field(default_factory=list)  # stitched outputs so far
    spec_ids: list[int] = field(default_factory=list)
    ties: list[Divergence] = field(default_factory=list)
    divergence: Divergence | None = None
    anchor: tuple[int, ...] | None = None

    @property
    def remaining(self) -> int:
        return self.total - len(self.base_ids)

    def advance(self, base: Scored, spec: Scored, bound: float | None,
                max_ties: int = MAX_TIES_PER_PROMPT) -> None:
        """Compare one pair of segments and decide: done, or re-anchor after a near-tie."""
        offset, self.anchor = len(self.base_ids), None
        pos = first_difference(base.ids, spec.ids)
        if pos is None:
            self.base_ids += base.ids
            self.spec_ids += spec.ids
            return
        d = classify(base, spec, pos, bound, offset)
        rest = self.total - (offset + pos + 1)
        if d.near_tie and len(self.ties) < max_ties and (rest <= 0 or self.prompt_ids is not None):
            self.ties.append(d)
            self.base_ids += base.ids[: pos + 1]
            self.spec_ids += (*spec.ids[:pos], base.ids[pos])
            if rest > 0:
                self.anchor = (*self.prompt_ids, *self.base_ids)  # type: ignore[misc]
            return
        self.divergence = d
        self.base_ids += base.ids
        self.spec_ids += spec.ids


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first index where ``a`` and ``b`` differ (a length difference counts); None if equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    if len(a) != len(b):
        return min(len(a), len(b))
    return None


@dataclass(frozen=True)
class PromptDiff:
    """How one prompt's speculative output compares with the baseline's."""

    index: int
    prompt: str
    baseline_len: int
    spec_len: int
    first_diff: int | None  # None: identical
    baseline_token: int | None = None  # at first_diff (None past the end)
    spec_token: int | None = None
    ties: tuple[Divergence, ...] = ()  # near-tie flips re-anchored before first_diff (or the end)
    divergence: Divergence | None = None  # first_diff with the servers' margins, when known

    @property
    def identical(self) -> bool:
        """Identical, near-tie flips aside."""
        return self.first_diff is None

    @property
    def common_prefix(self) -> int:
        """Tokens both outputs share from the start."""
        return self.baseline_len if self.first_diff is None else self.first_diff

    def line(self) -> str:
        flips = "".join(f"\n    near-tie flip at position {t.position}: baseline token {t.baseline_token}, "
                        f"speculative token {t.spec_token}; {t.describe()}; re-anchored" for t in self.ties)
        if self.identical:
            after = f" after {len(self.ties)} near-tie flip(s)" if self.ties else ""
            return f"  prompt {self.index}: identical{after} ({self.baseline_len} tokens){flips}"
        why = f"\n    {self.divergence.describe()}" if self.divergence is not None else ""
        shown = self.prompt if len(self.prompt) <= 40 else self.prompt[:37] + "..."

        def tok(t: int | None) -> str:
            return "<end>" if t is None else str(t)

        return (f"  prompt {self.index} ({shown!r}): first differing position {self.first_diff}: baseline token "
                f"{tok(self.baseline_token)}, speculative token {tok(self.spec_token)} "
                f"(lengths {self.baseline_len} vs {self.spec_len}){flips}{why}")


@dataclass
class LosslessReport:
    """Per-prompt comparison plus the verdict under the chosen tolerance."""

    diffs: list[PromptDiff]
    min_identical: float = 1.0
    min_common_prefix: int | None = None
    names: tuple[str, str] = ("baseline", "speculative")
    problems: list[str] = field(default_factory=list)
    noise: tuple[float, int] | None = None  # agreement_noise of the first segments

    @property
    def bound(self) -> float | None:
        """The near-tie bound (nats), None when exact equality applies."""
        return tie_bound(self.noise)

    @property
    def ties(self) -> list[Divergence]:
        return [t for d in self.diffs for t in d.ties]

    @property
    def identical_fraction(self) -> float:
        return sum(d.identical for d in self.diffs) / len(self.diffs) if self.diffs else 0.0

    @property
    def differing(self) -> list[PromptDiff]:
        return [d for d in self.diffs if not d.identical]

    @property
    def ok(self) -> bool:
        return not self.problems

    def message(self) -> str:
        base, spec = self.names
        n_same = sum(d.identical for d in self.diffs)
        head = (f"greedy outputs of {spec} vs {base}: {n_same}/{len(self.diffs)} prompts identical"
                f" ({'PASS' if self.ok else 'FAIL'})")
        tol = "exact equality" if self.min_identical >= 1.0 and self.min_common_prefix is None else (
            f"tolerance: ≥ {self.min_identical:.0%} identical"
            + (f", common prefix ≥ {self.min_common_prefix} tokens" if self.min_common_prefix is not None else ""))
        if self.noise is not None and self.bound is None:
            tol += (f"; no near-tie allowance: the servers' logprobs differ by up to {self.noise[0]:.3g} nats where "
                    f"their tokens agree, more than numerical noise (ceiling {NOISE_CEILING:g})")
        elif self.noise is not None:
            tol += (f", except near-tie flips within {self.bound:.3g} nats = {TIE_FACTOR:g} x the largest logprob "
                    f"difference between the servers ({self.noise[0]:.3g} over {self.noise[1]} agreeing values)")
            if self.ties:
                tol += f"; {len(self.ties)} near-tie flip(s) re-anchored"
        else:
            tol += "; no logprobs from both servers, so near-ties cannot be told from bugs"
        lines = [f"{head}; {tol}"]
        lines += [f"  FAIL {p}" for p in self.problems]
        lines += [d.line() for d in self.diffs if not d.identical or d.ties]
        return "\n".join(lines)


def compare_outputs(
    baseline: Sequence[Sequence[int]],
    spec: Sequence[Sequence[int]],
    prompts: Sequence[str] | None = None,
    min_identical: float = 1.0,
    min_common_prefix: int | None = None,
    names: tuple[str, str] = ("baseline", "speculative"),
    traces: Sequence[PromptTrace] | None = None,
    noise: tuple[float, int] | None = None,
) -> LosslessReport:
    """Compare greedy token outputs prompt by prompt.

    Passes when at least ``min_identical`` of the prompts are identical and, when
    ``min_common_prefix`` is given, every differing prompt agrees on at least that many leading
    tokens. The defaults (1.0, None) mean exact equality of every prompt. ``traces`` (one per
    prompt, outputs stitched across near-tie flips) add each prompt's flips and margins to the
    report; ``noise`` is what the near-tie bound was derived from.
    """
    if traces is not None and len(traces) != len(baseline):
        raise ValueError(f"{len(traces)} traces for {len(baseline)} prompts")
    if len(baseline) != len(spec):
        raise ValueError(f"{len(baseline)} baseline outputs but {len(spec)} speculative outputs")
    if not 0.0 <= min_identical <= 1.0:
        raise ValueError(f"min_identical must be in [0, 1], got {min_identical}")
    texts = list(prompts) if prompts is not None else [""] * len(baseline)
    diffs: list[PromptDiff] = []
    for i, (a, b) in enumerate(zip(baseline, spec, strict=True)):
        pos = first_difference(a, b)
        diffs.append(PromptDiff(
            index=i, prompt=texts[i], baseline_len=len(a), spec_len=len(b), first_diff=pos,
            baseline_token=a[pos] if pos is not None and pos < len(a) else None,
            spec_token=b[pos] if pos is not None and pos < len(b) else None,
            ties=tuple(traces[i].ties) if traces else (),
            divergence=traces[i].divergence if traces and pos is not None else None,
        ))
    report = LosslessReport(diffs, min_identical, min_common_prefix, names, noise=noise)
    if not diffs:
        report.problems.append("no prompts compared")
        return report
    if report.identical_fraction + 1e-12 < min_identical:
        report.problems.append(
            f"{len(report.differing)} of {len(diffs)} prompts differ: {report.identical_fraction:.0%} identical, "
            f"need ≥ {min_identical:.0%}")
    if min_common_prefix is not None:
        short = [d for d in report.differing if d.common_prefix < min_common_prefix]
        if short:
            where = ", ".join(f"prompt {d.index} at {d.first_diff}" for d in short)
            report.problems.append(f"outputs diverge before token {min_common_prefix}: {where}")
    return report
