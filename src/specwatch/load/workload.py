"""Seeded prompt sets and the workloads that drive a server.

Every run of a workload has the same length (fixed ``max_new_tokens`` with ``ignore_eos``), so
runs are comparable: the case study's run that stopped early at 1587 tokens muddied its average.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from specwatch.errors import UsageError

_WORDS = (
    "the model drafts tokens and the target verifies them in one forward pass so that each cycle commits "
    "several tokens at the cost of one step speculative decoding wins only when the accepted length pays "
    "for the draft and the verify graphs replay kernels without launch overhead while the scheduler keeps "
    "batches full and the interconnect carries all reduce traffic between tensor parallel ranks"
).split()


def prompt_set(seed: int, n: int, words: int = 24) -> list[str]:
    """``n`` deterministic English-like prompts of ``words`` words each."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(_WORDS) for _ in range(words)) for _ in range(n)]


@dataclass(frozen=True)
class Workload:
    """How a measurement drives a server."""

    name: str
    concurrency: int = 1  # requests in flight per run (1 = single stream, as in the case study)
    runs: int = 8  # measured runs
    warmup: int = 3  # runs excluded from samples (new prompt shapes, allocator growth)
    # Keep warming up (beyond ``warmup`` runs) until this many seconds of load have passed: an idle
    # GPU sits at a low clock, and runs of a few hundred ms can end before it has ramped up.
    warmup_s: float = 0.0
    # Keep measuring (beyond ``runs``) until this many seconds have passed. On a machine whose speed
    # wanders over seconds, a session's median then averages many of those moments instead of one
    # (docs/validation/README.md, section 6: 3-s windows spread 5.6%, blocks of 4 windows 3.3%).
    min_duration_s: float = 0.0
    max_new_tokens: int = 128
    prompt_words: int = 24
    seed: int = 0
    flush_after_warmup: bool = True  # confine cumulative server counters to the measured runs
    # Every run sends the same prompt(s), so runs are true repeats: with a draft model the accept
    # length, and so tok/s, depends on the prompt, and mixing prompts across runs adds that spread
    # to the run-to-run noise that every verdict has to see through.
    same_prompts_each_run: bool = True

    def __post_init__(self) -> None:
        for name in ("concurrency", "runs", "max_new_tokens", "prompt_words"):
            if getattr(self, name) < 1:
                raise UsageError(f"workload {self.name}: {name} must be ≥ 1, got {getattr(self, name)}")
        if self.warmup < 0:
            raise UsageError(f"workload {self.name}: warmup must be ≥ 0, got {self.warmup}")
        if not 0 <= self.warmup_s <= 600:
            raise UsageError(f"workload {self.name}: warmup_s must be in [0, 600] seconds, got {self.warmup_s}")
        if not 0 <= self.min_duration_s <= 3600:
            raise UsageError(f"workload {self.name}: min_duration_s must be in [0, 3600] seconds, "
                             f"got {self.min_duration_s}")

    def prompts(self) -> list[str]:
        """One prompt per request of every run, warmup included."""
        if self.same_prompts_each_run:
            return prompt_set(self.seed, self.concurrency, self.prompt_words) * (self.warmup + self.runs)
        return prompt_set(self.seed, (self.warmup + self.runs) * self.concurrency, self.prompt_words)

    def with_overrides(self, runs: int | None = None, warmup: int | None = None) -> Workload:
        """This workload with run counts from the command line, when given."""
        return replace(self, runs=runs or self.runs, warmup=self.warmup if warmup is None else warmup)


#: Workload fields that a profile set's ``[workload]`` table may override.
PROFILE_OVERRIDABLE = ("runs", "warmup", "warmup_s", "min_duration_s", "max_new_tokens")

SINGLE_STREAM = Workload("single-stream")
CONCURRENT_4 = Workload("concurrency-4", concurrency=4, runs=6)
WORKLOADS: dict[str, Workload] = {w.name: w for w in (SINGLE_STREAM, CONCURRENT_4)}
