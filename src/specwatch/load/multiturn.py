"""A multi-turn workload with growing shared prefixes: the shape of agent and chat sessions.

``sessions`` sessions take ``turns`` turns each. Turn 0's prompt is ``first_tokens`` token ids; each later turn's
prompt is the previous turn's prompt, the output the server gave it, and a new user message of ``user_tokens``
ids, so a server with a prefix cache need compute only the new message. The ids come from a generator seeded
by (seed, session, turn), in ``[TOKEN_LOW, TOKEN_HIGH)`` (ordinary ids of byte-level and BPE vocabularies), and
go to ``/generate`` as ``input_ids``, so prompts are exact; outputs run to ``output_tokens`` (``ignore_eos``,
greedy), so every prompt's length is known before the run (:meth:`MultiTurn.prompt_tokens`).

Turns run in waves: every session's turn ``t`` (in session order, at most ``concurrency`` in flight), then
every session's turn ``t + 1``. The sessions not in flight keep their prefixes in the server's cache only while
the KV pool holds them all: once it is full, least-recently-used eviction takes the prefix of the session whose
turn comes next. :meth:`MultiTurn.live_tokens` says how many tokens the live prefixes need, so a pool can be
sized (``--max-total-tokens``) to hold them with plain decoding and little room beyond.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from specwatch.errors import InfraError, UsageError
from specwatch.judge.prefixreuse import ReuseRun, TurnSample
from specwatch.load.client import Client, Generation

__all__ = ["MULTI_TURN", "TOKEN_HIGH", "TOKEN_LOW", "MultiTurn", "run_multi_turn", "seeded_ids", "turn_sample"]

#: the prompt ids are drawn from [TOKEN_LOW, TOKEN_HIGH): printable ASCII of a byte-level vocabulary, and ordinary
#: (non-special) tokens of the BPE vocabularies of Llama-class models
TOKEN_LOW, TOKEN_HIGH = 32, 127


def seeded_ids(tag: str, n: int) -> list[int]:
    """``n`` ordinary token ids drawn from a generator seeded by ``tag`` (the same ids on every host and run)."""
    rng = random.Random(tag)
    return [rng.randrange(TOKEN_LOW, TOKEN_HIGH) for _ in range(n)]


@dataclass(frozen=True)
class MultiTurn:
    """How many sessions and turns, how many requests in flight, and each part's length in tokens."""

    sessions: int = 32
    turns: int = 4
    concurrency: int = 8
    first_tokens: int = 512  # turn 0's prompt
    user_tokens: int = 64  # the new user message of each later turn
    output_tokens: int = 64  # each turn's output
    seed: int = 0
    name: str = "multi-turn"

    def __post_init__(self) -> None:
        for f in ("sessions", "turns", "concurrency", "first_tokens", "user_tokens", "output_tokens"):
            if getattr(self, f) < 1:
                raise UsageError(f"multi-turn workload: {f} must be ≥ 1, got {getattr(self, f)}")
        if self.seed < 0:
            raise UsageError(f"multi-turn workload: seed must be ≥ 0, got {self.seed}")

    @classmethod
    def parse(cls, spec: str) -> MultiTurn:
        """``sessions=96,turns=4,concurrency=32,first_tokens=256,user_tokens=32,output_tokens=64,seed=0`` (any
        subset; the rest default); "" gives the defaults."""
        known = {f.name for f in fields(cls) if f.name != "name"}
        values: dict[str, Any] = {}
        for part in filter(None, (p.strip() for p in spec.split(","))):
            key, _, value = part.partition("=")
            key = key.strip()
            if key not in known:
                raise UsageError(f"multi-turn workload {spec!r}: unknown key {key!r}; known: "
                                 f"{', '.join(sorted(known))}")
            try:
                values[key] = int(value)
            except ValueError:
                raise UsageError(f"multi-turn workload {spec!r}: {key} must be a whole number, got {value!r}") from None
        return cls(**values)

    def message(self, session: int, turn: int) -> list[int]:
        """The new tokens of ``session``'s turn ``turn``: the first prompt at turn 0, a user message after."""
        return seeded_ids(f"multi-turn:{self.seed}:{session}:{turn}",
                          self.first_tokens if turn == 0 else self.user_tokens)

    def prompt_tokens(self, turn: int) -> int:
        """The length of every session's prompt at ``turn``."""
        return self.first_tokens + turn * (self.output_tokens + self.user_tokens)

    def live_tokens(self) -> int:
        """Tokens of every session's prefix after the last turn (prompt and output): what the KV pool must hold
        for the last turn to find every prefix it sent before."""
        return self.sessions * (self.prompt_tokens(self.turns - 1) + self.output_tokens)

    def pool_need(self, reserve_per_request: int = 1) -> int:
        """The pool that holds the live prefixes while ``concurrency`` requests decode, each with
        ``reserve_per_request`` tokens reserved beyond its own (1: a plain decode step)."""
        return self.live_tokens() + self.concurrency * reserve_per_request

    def describe(self) -> str:
        """One line: the shape, and the pool its live prefixes need."""
        return (f"{self.name}: {self.sessions} sessions x {self.turns} turns, {self.concurrency} in flight, prompts "
                f"{self.first_tokens} + {self.output_tokens} output + {self.user_tokens} user tokens a turn (last "
                f"turn's prompt {self.prompt_tokens(self.turns - 1):,}); live prefixes need {self.live_tokens():,} "
                f"KV tokens (a pool of {self.pool_need():,} holds them with plain decoding)")


#: the default multi-turn workload (the prefix-reuse gate's, unless the run names another)
MULTI_TURN = MultiTurn()


def turn_sample(wl: MultiTurn, session: int, turn: int, prompt: list[int], gen: Generation) -> TurnSample:
    """One reply as a :class:`TurnSample`: its prompt and cached tokens (``meta_info``) and TTFT; an error when its
    ``output_ids`` are not the whole output (the next turn resends them)."""
    if len(gen.output_ids) != gen.completion_tokens:
        raise InfraError(f"{wl.name}: session {session} turn {turn}: the reply's output_ids hold "
                         f"{len(gen.output_ids)} tokens of its {gen.completion_tokens} (incremental streaming?): the "
                         "next turn's prompt cannot resend the output")
    cached = gen.meta_info.get("cached_tokens")
    prompt_n = gen.meta_info.get("prompt_tokens", len(prompt))
    return TurnSample(session, turn, int(prompt_n), None if cached is None else int(cached), gen.ttft_s)


async def run_multi_turn(url: str, wl: MultiTurn = MULTI_TURN, name: str = "",
                         progress: Callable[[str], None] | None = None) -> ReuseRun:
    """Run ``wl`` against the server at ``url`` (its prefix cache flushed first) and return each request's
    prompt and cached tokens and TTFT, each turn's wall time, and the KV pool the server says it has."""
    history: list[list[int]] = [[] for _ in range(wl.sessions)]
    samples: list[TurnSample] = []
    walls: dict[int, float] = {}
    async with Client(url) as client:
        info: dict[str, Any] = await client.server_info()
        await client.flush_cache()
        gate = asyncio.Semaphore(wl.concurrency)

        async def one(session: int, turn: int) -> tuple[int, list[int], Generation]:
            prompt = history[session] + wl.message(session, turn)
            async with gate:
                gen = await client.generate(input_ids=prompt, max_new_tokens=wl.output_tokens, temperature=0.0,
                                            ignore_eos=True, stream=True)
            return session, prompt, gen

        for turn in range(wl.turns):
            start = time.perf_counter()
            done = await asyncio.gather(*(one(s, turn) for s in range(wl.sessions)))
            walls[turn] = time.perf_counter() - start
            for session, prompt, gen in done:
                samples.append(turn_sample(wl, session, turn, prompt, gen))
                history[session] = prompt + list(gen.output_ids)
            if progress is not None:
                turn_samples = samples[-wl.sessions:]
                cached = sum(s.cached_tokens or 0 for s in turn_samples)
                total = sum(s.prompt_tokens for s in turn_samples)
                progress(f"{name or url} {wl.name} turn {turn}: {cached}/{total} prompt tokens cached, "
                         f"{walls[turn]:.2f} s")
    pool = info.get("max_total_num_tokens")
    return ReuseRun(name or url, tuple(samples), walls, int(pool) if isinstance(pool, (int, float)) else None)
