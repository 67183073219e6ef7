"""Seeded prompt sets and the workloads that drive a server, and the load levels of a sweep.

Every request runs to its length (``ignore_eos``), so runs are comparable: the case study's run
that stopped early at 1587 tokens muddied its average. Lengths are ``max_new_tokens``, or drawn
(seeded) from ``output_len``; prompts are synthetic (:func:`prompt_set`) or drawn (seeded) from a
dataset (:mod:`specwatch.load.dataset`).

A run sends ``run_size`` requests with at most ``concurrency`` in flight (a closed loop), or, for a
request-rate level, at seeded Poisson arrival times (an open loop). A sweep (``[workload]``
``concurrency = [1, 4, 16]`` / ``request_rate = [2.0, 8.0]``) is one workload per level, named
``concurrency-N`` / ``request-rate-R``, each measured (warm-up included) on its own, so each level
has its own results keys.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from specwatch.errors import UsageError
from specwatch.load.dataset import BUILTIN, Entry, Lengths, fit_entry, load_dataset

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
class Request:
    """One request of a run: the prompt text sent to ``/generate`` and its length in tokens; a chat
    also keeps its turns, which ``/v1/chat/completions`` takes as they are."""

    text: str
    max_new_tokens: int
    category: str = ""
    messages: tuple[tuple[str, str], ...] = ()  # (role, content); () for a plain prompt


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
    dataset: str | None = None  # None: synthetic prompts; "builtin" or a file (load.dataset)
    categories: tuple[str, ...] = ()  # only the dataset's entries of these categories
    input_words: Any = None  # None: prompts as they are; else words per prompt: an int or a distribution table
    output_len: Any = None  # None: max_new_tokens; else an int or a distribution table (tokens)
    request_rate: float | None = None  # requests/s with Poisson arrivals (an open loop); None: a closed loop
    run_requests: int = 0  # requests per run; 0: ``concurrency`` (one wave, the single-stream runs' shape)
    level: bool = False  # a sweep level: its runs also report bench_serving's metrics
    _lengths: tuple[Lengths | None, Lengths | None] = field(default=(None, None), init=False, repr=False,
                                                           compare=False)

    def __post_init__(self) -> None:
        for name in ("concurrency", "runs", "max_new_tokens", "prompt_words"):
            if getattr(self, name) < 1:
                raise UsageError(f"workload {self.name}: {name} must be ≥ 1, got {getattr(self, name)}")
        if self.warmup < 0 or self.run_requests < 0 or self.seed < 0:
            raise UsageError(f"workload {self.name}: warmup, run_requests and seed must be ≥ 0, got "
                             f"{self.warmup}, {self.run_requests}, {self.seed}")
        if not 0 <= self.warmup_s <= 600:
            raise UsageError(f"workload {self.name}: warmup_s must be in [0, 600] seconds, got {self.warmup_s}")
        if not 0 <= self.min_duration_s <= 3600:
            raise UsageError(f"workload {self.name}: min_duration_s must be in [0, 3600] seconds, "
                             f"got {self.min_duration_s}")
        if self.request_rate is not None and not self.request_rate > 0:
            raise UsageError(f"workload {self.name}: request_rate must be > 0 requests/s, got {self.request_rate}")
        lengths = tuple(None if spec is None else Lengths.parse(spec, f"workload {self.name}: {what}")
                        for what, spec in (("input_words", self.input_words), ("output_len", self.output_len)))
        object.__setattr__(self, "_lengths", lengths)

    @property
    def run_size(self) -> int:
        """Requests per run: ``run_requests``, else ``concurrency`` (a closed loop) or 4 s worth of
        arrivals, at least 8 (an open loop)."""
        if self.run_requests:
            return self.run_requests
        if self.request_rate is not None:
            return max(RATE_MIN_REQUESTS, round(self.request_rate * RATE_RUN_S))
        return self.concurrency

    def requests(self) -> list[Request]:
        """One request per request of every run, warmup included (``run_size`` per run)."""
        per, slots = self.run_size, self.warmup + self.runs
        if self.same_prompts_each_run:
            return self._request_set(per) * slots
        return self._request_set(per * slots)

    def prompts(self) -> list[str]:
        """The prompt text of :meth:`requests`."""
        return [r.text for r in self.requests()]

    def _request_set(self, n: int) -> list[Request]:
        """``n`` requests: prompts and lengths drawn with this workload's seed (a prefix of a larger set)."""
        inputs, outputs = self._lengths
        out_lens = outputs.sample(random.Random(self.seed + 2), n) if outputs else [self.max_new_tokens] * n
        if self.dataset is None:
            entries = [Entry(prompt=p) for p in prompt_set(self.seed, n, self.prompt_words)]
        else:
            pool = list(load_dataset(self.dataset).only(self.categories))
            random.Random(self.seed).shuffle(pool)
            entries = [pool[i % len(pool)] for i in range(n)]
        if inputs:
            entries = [fit_entry(e, w) for e, w in zip(entries, inputs.sample(random.Random(self.seed + 1), n),
                                                         strict=True)]
        return [Request(e.text, k, e.category, e.messages) for e, k in zip(entries, out_lens, strict=True)]

    def arrivals(self) -> list[float]:
        """Seconds from a run's start at which each of its requests is sent: all at once for a closed
        loop, seeded Poisson arrivals (the same in every run, so runs are repeats) at ``request_rate``."""
        if self.request_rate is None:
            return [0.0] * self.run_size
        return poisson_arrivals(self.run_size, self.request_rate, self.seed)

    def describe(self) -> dict[str, Any]:
        """What results record beyond runs, concurrency and max_new_tokens (only what is set)."""
        out: dict[str, Any] = {}
        if self.dataset is not None:
            data = load_dataset(self.dataset)
            out["dataset"] = {"name": data.name if data.name == BUILTIN else Path(data.name).name,
                              "sha256": data.sha256[:16], "categories": list(self.categories)}
        for key, lengths in zip(("input_words", "output_len"), self._lengths, strict=True):
            if lengths is not None:
                out[key] = lengths.spec
        if self.request_rate is not None:
            out["request_rate"] = self.request_rate
        if self.level:
            out["run_requests"] = self.run_size
        return out

    def with_overrides(self, runs: int | None = None, warmup: int | None = None) -> Workload:
        """This workload with run counts from the command line, when given."""
        return replace(self, runs=runs or self.runs, warmup=self.warmup if warmup is None else warmup)


def poisson_arrivals(n: int, rate: float, seed: int) -> list[float]:
    """``n`` send times (s) of a Poisson process at ``rate`` requests/s: the first at 0, then
    exponential gaps (as ``sglang.bench_serving`` sends), drawn with ``seed``."""
    rng = random.Random(seed)
    out, t = [], 0.0
    for _ in range(n):
        out.append(t)
        t += rng.expovariate(rate)
    return out


#: An open-loop level's run lasts about this long by default (at least ``RATE_MIN_REQUESTS`` requests).
RATE_RUN_S = 4.0
RATE_MIN_REQUESTS = 8
#: A closed-loop sweep level sends at least this many requests a run (so that every level, the
#: lowest included, mixes this many prompts: accept length depends on the prompt).
LEVEL_MIN_REQUESTS = 8
#: Keys of a profile set's ``[workload]`` table that are overrides of every workload.
WORKLOAD_OVERRIDES = ("runs", "warmup", "warmup_s", "min_duration_s", "max_new_tokens", "dataset", "categories",
                      "input_words", "output_len", "seed", "run_requests")
#: Keys that define a sweep's levels rather than override a workload.
SWEEP_KEYS = ("concurrency", "request_rate")
#: Every key a profile set's ``[workload]`` table may hold (profiles.tables.WORKLOAD_FIELDS).
PROFILE_OVERRIDABLE = (*WORKLOAD_OVERRIDES, *SWEEP_KEYS)

SINGLE_STREAM = Workload("single-stream")
#: The built-in workloads by name; a level (``concurrency-N``, ``request-rate-R``) is made by :func:`resolve`.
WORKLOADS: dict[str, Workload] = {w.name: w for w in (SINGLE_STREAM,)}
#: A sweep level's defaults (the profile set's [workload] and the command line override them).
LEVEL_RUNS, LEVEL_WARMUP = 6, 1
_LEVEL_NAME = re.compile(r"(concurrency|request-rate)-(\d+(?:\.\d+)?)")


def level_name(kind: str, value: float) -> str:
    """``concurrency-16`` or ``request-rate-2.5``: the workload (and results key part) of one level."""
    return f"{'concurrency' if kind == 'concurrency' else 'request-rate'}-{value:g}"


def level_names(table: Mapping[str, Any]) -> list[str]:
    """The sweep levels a ``[workload]`` table asks for: concurrency levels, then request rates."""
    return [level_name(kind, v) for kind in SWEEP_KEYS for v in _as_levels(table.get(kind))]


def _as_levels(value: Any) -> tuple[float, ...]:
    if value is None:
        return ()
    return tuple(sorted(value)) if isinstance(value, (list, tuple)) else (value,)


def resolve(name: str, table: Mapping[str, Any] | None = None) -> Workload:
    """The workload called ``name`` (a built-in one, or a level ``concurrency-N`` / ``request-rate-R``)
    with a profile set's ``[workload]`` overrides applied."""
    overrides = {k: v for k, v in (table or {}).items() if k in WORKLOAD_OVERRIDES}
    if "categories" in overrides:
        overrides["categories"] = tuple(overrides["categories"])
    found = _LEVEL_NAME.fullmatch(name)
    if found:
        kind, value = found.groups()
        base = Workload(name, runs=LEVEL_RUNS, warmup=LEVEL_WARMUP, level=True)
        if kind == "concurrency":
            c = int(float(value))
            if c < 1 or level_name("concurrency", c) != name:
                raise UsageError(f"unknown workload {name!r}: a concurrency level is a whole number ≥ 1")
            wl = replace(base, concurrency=c, run_requests=LEVEL_MIN_REQUESTS)
        else:
            rate = float(value)
            if not rate > 0:
                raise UsageError(f"unknown workload {name!r}: a request rate is > 0")
            wl = replace(base, request_rate=rate)
            wl = replace(wl, concurrency=wl.run_size)  # an open loop: no cap on requests in flight
        wl = replace(wl, **overrides)
        if wl.request_rate is None:  # a run keeps the level's concurrency in flight at least once
            return replace(wl, run_requests=max(wl.run_requests, wl.concurrency))
        return replace(wl, concurrency=wl.run_size)
    if name not in WORKLOADS:
        raise UsageError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}, concurrency-N, request-rate-R")
    return replace(WORKLOADS[name], **overrides)


#: Four requests in flight: a level, as a sweep of ``concurrency = [4]`` measures it.
CONCURRENT_4 = resolve("concurrency-4")
