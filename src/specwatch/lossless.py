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
diverge. For such servers pass a tolerance: ``min_identical`` (the fraction of prompts that must
match exactly) and ``min_common_prefix`` (every prompt must agree at least on its first N tokens).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["LosslessReport", "PromptDiff", "compare_outputs", "first_difference"]


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

    @property
    def identical(self) -> bool:
        return self.first_diff is None

    @property
    def common_prefix(self) -> int:
        """Tokens both outputs share from the start."""
        return self.baseline_len if self.first_diff is None else self.first_diff

    def line(self) -> str:
        if self.identical:
            return f"  prompt {self.index}: identical ({self.baseline_len} tokens)"
        shown = self.prompt if len(self.prompt) <= 40 else self.prompt[:37] + "..."

        def tok(t: int | None) -> str:
            return "<end>" if t is None else str(t)

        return (f"  prompt {self.index} ({shown!r}): first differing position {self.first_diff}: baseline token "
                f"{tok(self.baseline_token)}, speculative token {tok(self.spec_token)} "
                f"(lengths {self.baseline_len} vs {self.spec_len})")


@dataclass
class LosslessReport:
    """Per-prompt comparison plus the verdict under the chosen tolerance."""

    diffs: list[PromptDiff]
    min_identical: float = 1.0
    min_common_prefix: int | None = None
    names: tuple[str, str] = ("baseline", "speculative")
    problems: list[str] = field(default_factory=list)

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
        lines = [f"{head}; {tol}"]
        lines += [f"  FAIL {p}" for p in self.problems]
        lines += [d.line() for d in self.differing]
        return "\n".join(lines)


def compare_outputs(
    baseline: Sequence[Sequence[int]],
    spec: Sequence[Sequence[int]],
    prompts: Sequence[str] | None = None,
    min_identical: float = 1.0,
    min_common_prefix: int | None = None,
    names: tuple[str, str] = ("baseline", "speculative"),
) -> LosslessReport:
    """Compare greedy token outputs prompt by prompt.

    Passes when at least ``min_identical`` of the prompts are identical and, when
    ``min_common_prefix`` is given, every differing prompt agrees on at least that many leading
    tokens. The defaults (1.0, None) mean exact equality of every prompt.
    """
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
        ))
    report = LosslessReport(diffs, min_identical, min_common_prefix, names)
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
