"""Prefix reuse under speculation: the speculative server's prompt-cache hits of deep turns against the plain
server's, on the same multi-turn workload (:mod:`specwatch.load.multiturn`).

Each turn of a session resends the previous turn's prompt and output with a new user message, so a server with a
prefix cache computes only the new part: its hit rate (cached prompt tokens over prompt tokens) of turns ≥ 2 is
high while the KV pool holds every session's prefix. A server whose pool evicts them recomputes whole prompts:
its hit rate falls and its time to first token and input throughput follow. Pure: stdlib only.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from specwatch.judge.verdict import ReportRow, Verdict

__all__ = ["DEFAULT_ALLOWANCE", "NAME", "Allowance", "ReuseReport", "ReuseRun", "TurnSample", "TurnStats", "deep_stats",
           "judge", "probe", "turn_stats"]

NAME = "prefix reuse"
#: turns from this one on are "deep": their prompts hold two earlier turns or more
DEEP_FROM = 2
#: below this deep-turn hit rate the plain server itself does not reuse prefixes and the workload cannot tell
MIN_PLAIN_HIT = 0.5


@dataclass(frozen=True)
class TurnSample:
    """One request of a multi-turn run: its session and turn, its prompt's length and cached part, its TTFT."""

    session: int
    turn: int
    prompt_tokens: int
    cached_tokens: int | None  # None: the server did not say
    ttft_s: float


@dataclass(frozen=True)
class ReuseRun:
    """One server's run of a multi-turn workload."""

    name: str
    samples: tuple[TurnSample, ...]
    turn_wall_s: Mapping[int, float] = field(default_factory=dict)  # wall time of each turn's requests
    pool_tokens: int | None = None  # the KV pool the server says it has (tokens); None: not said


@dataclass(frozen=True)
class TurnStats:
    """Turn ``turn`` of a run (``turn`` = the first of them for a pooled span): requests, prompt and cached
    tokens, the hit rate, TTFT p50 and input throughput (prompt tokens over the turns' wall time)."""

    turn: int
    requests: int
    prompt_tokens: int
    cached_tokens: int
    ttft_p50_s: float
    input_tok_s: float | None  # None: no wall time recorded

    @property
    def hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


@dataclass(frozen=True)
class Allowance:
    """How far the speculative server may fall behind: ``hit_points`` below the plain server's deep-turn hit rate
    (a fraction: 0.10 = 10 points), a TTFT p50 up to ``1 + ttft_rise`` times the plain server's."""

    hit_points: float = 0.10
    ttft_rise: float = 1.0
    min_plain_hit: float = MIN_PLAIN_HIT
    deep_from: int = DEEP_FROM


#: the allowances by default (``--specwatch-prefix-hit-allowance``, ``--specwatch-prefix-ttft-allowance``)
DEFAULT_ALLOWANCE = Allowance()


def _stats(samples: Sequence[TurnSample], turn: int, wall: float | None) -> TurnStats:
    prompt = sum(s.prompt_tokens for s in samples)
    return TurnStats(turn, len(samples), prompt, sum(s.cached_tokens or 0 for s in samples),
                     statistics.median(s.ttft_s for s in samples) if samples else 0.0,
                     prompt / wall if wall else None)


def turn_stats(run: ReuseRun) -> list[TurnStats]:
    """Each turn's stats, in turn order."""
    turns = sorted({s.turn for s in run.samples})
    return [_stats([s for s in run.samples if s.turn == t], t, run.turn_wall_s.get(t)) for t in turns]


def deep_stats(run: ReuseRun, deep_from: int = DEEP_FROM) -> TurnStats:
    """The turns from ``deep_from`` on, pooled (input throughput over their summed wall time)."""
    deep = [s for s in run.samples if s.turn >= deep_from]
    walls = [w for t, w in run.turn_wall_s.items() if t >= deep_from]
    return _stats(deep, deep_from, sum(walls) if walls and len(walls) == len({s.turn for s in deep}) else None)


@dataclass(frozen=True)
class ReuseReport:
    """Both runs' per-turn and deep-turn stats, and the first turn where their hit rates part."""

    names: tuple[str, str]  # (plain, speculative)
    plain_turns: tuple[TurnStats, ...]
    spec_turns: tuple[TurnStats, ...]
    plain_deep: TurnStats
    spec_deep: TurnStats
    parted_at: int | None  # the first turn whose speculative hit rate is more than the allowance below; None: none

    def table(self) -> list[str]:
        """One line per turn: both hit rates, TTFT p50s and input tok/s."""
        plain, spec = self.names
        lines = [f"turn  {plain} hit / TTFT p50 / input tok/s  |  {spec} hit / TTFT p50 / input tok/s"]
        for p, s in zip(self.plain_turns, self.spec_turns, strict=False):
            lines.append(f"{p.turn:>4}  {_turn(p)}  |  {_turn(s)}")
        return lines


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _points(drop: float) -> str:
    return f"{100 * drop:.1f} points below" if drop >= 0 else f"{-100 * drop:.1f} points above"


def _tok_s(x: float | None) -> str:
    return "n/a" if x is None else f"{x:,.0f}"


def _turn(t: TurnStats) -> str:
    return f"{_pct(t.hit_rate)} / {t.ttft_p50_s:.3g} s / {_tok_s(t.input_tok_s)}"


def _parted_at(plain: Sequence[TurnStats], spec: Sequence[TurnStats], points: float) -> int | None:
    by_turn = {t.turn: t for t in plain}
    for s in spec:
        p = by_turn.get(s.turn)
        if p is not None and p.hit_rate - s.hit_rate > points:
            return s.turn
    return None


def _pool(run: ReuseRun) -> str:
    return f"{run.pool_tokens:,} tokens" if run.pool_tokens else "not said"


def probe(run: ReuseRun, spec_name: str) -> Verdict | None:
    """A skip when a probe run (one session, two turns) shows that the server keeps no prefix: its second turn
    reports no cached tokens, or none at all; None when it reused some."""
    second = [s for s in run.samples if s.turn >= 1]
    if not second:
        return None
    if any(s.cached_tokens is None for s in run.samples):
        return Verdict.skip(NAME, f"{run.name} reports no cached prompt tokens per request (meta_info "
                                  "cached_tokens): the hit rate cannot be read", spec_name)
    if all(s.cached_tokens == 0 for s in second):
        return Verdict.skip(NAME, f"the plain server {run.name} cached none of the {second[0].prompt_tokens:,} tokens "
                                  "of a resent prompt (one session's second turn, alone on the server): no prefix "
                                  "cache, so the workload cannot tell", spec_name)
    return None


def judge(plain: ReuseRun, spec: ReuseRun, allowance: Allowance = DEFAULT_ALLOWANCE, *,
          live_tokens: int | None = None) -> Verdict:
    """The speculative server's deep-turn hit rate must be at most ``allowance.hit_points`` below the plain
    server's, and its deep-turn TTFT p50 at most ``1 + allowance.ttft_rise`` times the plain server's.

    Skips when a server reports no cached tokens, when either ran no deep turn, or when the plain server itself
    reuses less than ``allowance.min_plain_hit`` of its deep-turn prompts (no prefix cache, or a pool too small
    for the workload even without speculation: nothing to compare). ``live_tokens``: the tokens the workload's
    live prefixes need, named in a skip or a failure so that a pool can be sized.
    """
    names = (plain.name, spec.name)
    for run in (plain, spec):
        if any(s.cached_tokens is None for s in run.samples):
            return Verdict.skip(NAME, f"{run.name} reports no cached prompt tokens per request (meta_info "
                                      "cached_tokens): the hit rate cannot be read", spec.name)
        if not any(s.turn >= allowance.deep_from for s in run.samples):
            return Verdict.skip(NAME, f"{run.name} ran no turn ≥ {allowance.deep_from}: the workload has too few "
                                      "turns to reuse prefixes", spec.name)
    rep = ReuseReport(names, tuple(turn_stats(plain)), tuple(turn_stats(spec)), deep_stats(plain, allowance.deep_from),
                      deep_stats(spec, allowance.deep_from),
                      _parted_at(turn_stats(plain), turn_stats(spec), allowance.hit_points))
    need = f"; the workload's live prefixes need {live_tokens:,} tokens" if live_tokens else ""
    pools = f"KV pools: {plain.name} {_pool(plain)}, {spec.name} {_pool(spec)}{need}"
    p, s = rep.plain_deep, rep.spec_deep
    if p.hit_rate < allowance.min_plain_hit:
        if live_tokens and plain.pool_tokens and plain.pool_tokens >= 2 * live_tokens:
            why = (f"no prefix cache (its KV pool of {plain.pool_tokens:,} tokens holds the {live_tokens:,} the live "
                   "prefixes need twice over)")
        else:
            why = "no prefix cache, or a KV pool too small for the workload even without speculation"
        return Verdict.skip(NAME, f"the plain server {plain.name} itself reuses {_pct(p.hit_rate)} of its turn "
                                  f"≥ {allowance.deep_from} prompt tokens (below {_pct(allowance.min_plain_hit)}): "
                                  f"{why}, so the workload cannot tell ({pools})", spec.name)
    hit_drop = p.hit_rate - s.hit_rate
    ttft_ratio = s.ttft_p50_s / p.ttft_p50_s if p.ttft_p50_s > 0 else 1.0
    hit_ok, ttft_ok = hit_drop <= allowance.hit_points, ttft_ratio <= 1 + allowance.ttft_rise
    where = (f"they part at turn {rep.parted_at}" if rep.parted_at is not None
             else f"no turn parts by more than {100 * allowance.hit_points:.0f} points")
    head = (f"turn ≥ {allowance.deep_from} cache hit rate {_pct(s.hit_rate)} on {spec.name} against {_pct(p.hit_rate)} "
            f"on {plain.name} ({_points(hit_drop)}; allowed {100 * allowance.hit_points:.0f} below); "
            f"{where}; TTFT p50 {s.ttft_p50_s:.3g} s against {p.ttft_p50_s:.3g} s ({ttft_ratio - 1:+.0%}; allowed "
            f"+{allowance.ttft_rise:.0%}); input {_tok_s(s.input_tok_s)} against {_tok_s(p.input_tok_s)} tok/s")
    causes = []
    if not hit_ok:
        causes.append(f"{spec.name} loses reusable prefixes that {plain.name} keeps ({_pct(s.hit_rate)} against "
                      f"{_pct(p.hit_rate)} of deep-turn prompt tokens cached, from turn {rep.parted_at}): its KV pool "
                      "evicts them (a smaller pool, or more KV reserved per decode step)")
    if not ttft_ok:
        causes.append(f"{spec.name}'s TTFT p50 of deep turns is {ttft_ratio:.2f}x {plain.name}'s")
    reason = "; ".join(causes) if causes else f"{spec.name} keeps {plain.name}'s prefix reuse"
    rows = [_row(rep, "deep-turn cache hit rate", 100 * s.hit_rate, 100 * p.hit_rate, "%", hit_ok, True),
            _row(rep, "deep-turn TTFT p50", 1000 * s.ttft_p50_s, 1000 * p.ttft_p50_s, "ms", ttft_ok, False)]
    message = "\n".join([f"{NAME}: {head}", *rep.table(), pools, *([] if hit_ok and ttft_ok else causes)])
    return Verdict.of(NAME, hit_ok and ttft_ok, message, reason, profile=spec.name, details=rep, rows=rows)


def _row(rep: ReuseReport, what: str, spec: float, plain: float, unit: str, ok: bool, higher: bool) -> ReportRow:
    plain_name, spec_name = rep.names
    return ReportRow(key=f"{spec_name} vs {plain_name} (multi-turn, {what})", n=rep.spec_deep.requests, median=spec,
                     unit=unit, baseline_median=plain, change=spec / plain - 1 if plain else None,
                     verdict="pass" if ok else "regression", higher_is_better=higher)
