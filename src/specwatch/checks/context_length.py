"""Speculation against context length on live servers: accept length and decode speedup at several input lengths.

The same prompts (:class:`ContextSweep`: seeded input ids of each length, in the ordinary-token range of
:mod:`specwatch.load.multiturn`) go to the plain and the speculative server, one streamed request at a time, the
server that is already live first; each length is cut to what the server takes (``/server_info``
``max_req_input_len`` less the output). :func:`specwatch.judge.contextlen.judge` builds the table and the verdict.

Prompt ``i`` ends in the same tail at every length (the shortest length's prompt ``i``), after a seeded prefix of
its own: the lengths differ in how much context comes before, not in what the request continues. A draft's
acceptance depends on what it continues; with a different prompt at each length, a draft whose acceptance varies
per prompt read 1.84 at 128 tokens and 1.19 at 1,024 on real SGLang (2026-12-05, an H200), which the accept-drop
rule cannot tell from a draft that fails past a context length.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from specwatch.checks.host import SweepHost, pair_skip
from specwatch.checks.verdictlog import record
from specwatch.errors import RequestRejected
from specwatch.judge import contextlen
from specwatch.judge.levels import typical_interval, unmeasured_decode
from specwatch.judge.verdict import Verdict
from specwatch.load.client import Client, Generation, run_sync
from specwatch.load.multiturn import seeded_ids
from specwatch.profiles.profile import ServerProfile

__all__ = ["DEFAULT_LENGTHS", "NAME", "NEEDS", "SWEEP", "ContextSweep", "check"]

NAME = contextlen.NAME
#: what the live check reads (:data:`specwatch.engines.protocol.CAPABILITIES`): input ids and ``/server_info`` of
#: the native API, each reply's ``meta_info`` (``spec_verify_ct``)
NEEDS = ("native_api", "meta_info")
#: input lengths (tokens) measured by default
DEFAULT_LENGTHS = (128, 1024, 2048, 4096)
#: tokens kept free between a prompt plus its output and the server's input limit (the draft's tokens past the end)
_MARGIN = 16


@dataclass(frozen=True)
class ContextSweep:
    """The lengths measured, each with ``prompts`` seeded prompts run to ``output_tokens`` (``ignore_eos``)."""

    lengths: tuple[int, ...] = DEFAULT_LENGTHS
    output_tokens: int = 128
    prompts: int = 3
    seed: int = 0

    @property
    def tail(self) -> int:
        """The tokens every length's prompt ``i`` ends in: the shortest length's whole prompt."""
        return min(self.lengths)

    def ids(self, length: int) -> list[list[int]]:
        """The prompts of ``length`` input ids: a seeded prefix of this length's own, then prompt ``i``'s tail
        (the shortest length's prompt; cut to ``length`` where a server's limit cuts below it)."""
        tail = min(self.tail, length)
        return [seeded_ids(f"context:{self.seed}:{length}:{i}", length - tail)
                + seeded_ids(f"context:{self.seed}:tail:{i}", self.tail)[self.tail - tail:]
                for i in range(self.prompts)]

    def fit(self, limit: int) -> tuple[list[tuple[int, int]], str]:
        """``(measured, asked)`` lengths under an input limit of ``limit`` tokens (each cut to ``limit`` less the
        output and a margin, the cut ones merged), and a note of what was cut ("" when nothing)."""
        top = limit - self.output_tokens - _MARGIN
        fitted: dict[int, int] = {}
        for n in self.lengths:
            fitted.setdefault(min(n, top), n)
        cut = [n for n in self.lengths if n > top]
        note = (f"cut to the server's input limit: {', '.join(f'{n:,}' for n in cut)} tokens asked, {top:,} measured "
                f"(max_req_input_len {limit:,} less {self.output_tokens} output tokens and {_MARGIN} spare)"
                if cut else "")
        return sorted(fitted.items()), note

    def describe(self) -> str:
        return (f"{self.prompts} prompt(s) of seeded input ids at each of {', '.join(f'{n:,}' for n in self.lengths)} "
                f"tokens, each ending in the same {self.tail:,} tokens at every length, {self.output_tokens} output "
                f"tokens each, one streamed request at a time")


#: the sweep by default
SWEEP = ContextSweep()


async def _limit(url: str) -> int | None:
    async with Client(url) as client:
        info = await client.server_info()
    limit = info.get("max_req_input_len") or info.get("context_length")
    return int(limit) if isinstance(limit, (int, float)) and limit > 0 else None


async def _measure(url: str, sweep: ContextSweep, lengths: Sequence[int], name: str,
                   progress: Callable[[str], None]) -> dict[int, list[Generation]]:
    """Each length's streamed replies, after one warm-up request at the shortest."""
    out: dict[int, list[Generation]] = {}
    async with Client(url) as client:
        await client.generate(input_ids=sweep.ids(lengths[0])[0], max_new_tokens=sweep.output_tokens, stream=True)
        for n in lengths:
            out[n] = [await client.generate(input_ids=ids, max_new_tokens=sweep.output_tokens, temperature=0.0,
                                            ignore_eos=True, stream=True) for ids in sweep.ids(n)]
            rates = ", ".join(f"{g.decode_tok_s:.1f}" for g in out[n])
            progress(f"{NAME}: {name} at {n:,} input tokens: decode {rates} tok/s")
    return out


def _rates(gens: Sequence[Generation]) -> tuple[float, ...]:
    """Each reply's decode tok/s (tokens after the first over the time after it); NaN where its tokens came in a
    burst the client cannot time (:func:`specwatch.judge.levels.unmeasured_decode`)."""
    windows = [g.decode_window for g in gens]
    typical = typical_interval([w for w in windows if w is not None])
    return tuple(math.nan if w is None or w.window_s <= 0 or unmeasured_decode(w, typical) else w.tokens / w.window_s
                 for w in windows)


def _runs(fitted: Sequence[tuple[int, int]], plain: dict[int, list[Generation]],
          spec: dict[int, list[Generation]]) -> list[contextlen.LengthRun]:
    return [contextlen.LengthRun(n, _rates(plain[n]), _rates(spec[n]), sum(g.completion_tokens for g in spec[n]),
                                 sum(g.verify_ct or 0 for g in spec[n]), asked if asked != n else 0)
            for n, asked in fitted]


def check(host: SweepHost, plain: ServerProfile, spec: ServerProfile, sweep: ContextSweep = SWEEP,
          gate: contextlen.ContextGate = contextlen.REPORT_ONLY) -> Verdict:
    """Measure ``sweep`` on both servers (the live one first) and judge it (:func:`specwatch.judge.contextlen.judge`).
    A pass or fail is kept in the host's log."""
    if (skip := pair_skip(host, NAME, NEEDS, plain, spec, "the speedup")) is not None:
        return skip
    live = set(host.live_profiles())
    order = sorted((plain, spec), key=lambda p: p.name not in live)
    host.progress(f"{NAME}: {sweep.describe()}")
    fitted: list[tuple[int, int]] = []
    note = ""
    replies: dict[str, dict[int, list[Generation]]] = {}
    for prof in order:
        url = host.server_for_profile(prof).url
        if not fitted:
            limit = run_sync(_limit(url))
            if limit is None:
                return Verdict.skip(NAME, f"{prof.name}'s /server_info says no max_req_input_len: the lengths "
                                          "cannot be fitted to it", spec.name)
            fitted, note = sweep.fit(limit)
            if fitted[0][0] < 1:
                return Verdict.skip(NAME, f"{prof.name} takes inputs of {limit:,} tokens: no room for "
                                          f"{sweep.output_tokens} output tokens", spec.name)
        try:
            replies[prof.name] = run_sync(_measure(url, sweep, [n for n, _ in fitted], prof.name, host.progress))
        except RequestRejected as exc:
            return Verdict.skip(NAME, f"{prof.name} refused a prompt the other server took: {exc}", spec.name)
    runs = _runs(fitted, replies[plain.name], replies[spec.name])
    verdict = contextlen.judge(runs, gate, names=(spec.name, plain.name), note=note)
    if not verdict.skipped:
        verdict.message += f"\n  {sweep.describe()}"
    return record(host, verdict)
