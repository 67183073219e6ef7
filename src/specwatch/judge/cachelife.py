"""Acceptance over the prefix cache's life: a fixed greedy set's accept length and output before the cache moves,
after unrelated traffic evicted the set's prefixes, and after ``/flush_cache``; and a soak's accept length over time.

Under greedy decoding a request's tokens, and so the drafts the target accepts, do not depend on whether its
prompt's KV came from the cache, was computed again after an eviction, or was loaded back from a host tier: the
accept length of the same set must hold across the passes. A draft that reads a stale or mis-restored cache still
produces lossless output (the target verifies every token) but accepts less, with no error: SGLang 0.5.15.post1
with its hierarchical cache read 4.487 before, 1.589 after eviction, 4.331 after ``/flush_cache``, measured as
Σ completion_tokens / Σ spec_verify_ct over a fixed greedy set (SGLang issue 32176).

Each pass's accept length here is that ratio (a request's: ``completion_tokens / spec_verify_ct``, SGLang's own
``meta_info.spec_accept_length``); the first pass is the reference of the later ones. A soak repeats the set and
asks the change-point detector (:mod:`specwatch.judge.changepoint`) whether its accept length fell. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from specwatch.judge.verdict import Verdict

__all__ = ["DEFAULT_ALLOWANCE", "NAME", "SOAK", "Allowance", "OutputChange", "Pass", "Reading", "judge", "soak"]

NAME = "acceptance over the cache's life"
SOAK = "acceptance soak"


@dataclass(frozen=True)
class Reading:
    """One request of a pass: the server's counts (``meta_info``) and its prompt's cached part."""

    completion_tokens: int
    verify_ct: int | None  # spec_verify_ct; None: the reply carries none
    prompt_tokens: int = 0
    cached_tokens: int | None = None  # None: the server did not say

    @property
    def accept_length(self) -> float | None:
        """``completion_tokens / spec_verify_ct`` (None without a verify cycle)."""
        return self.completion_tokens / self.verify_ct if self.verify_ct else None


@dataclass(frozen=True)
class Pass:
    """The set's requests of one pass, in the set's order, and what the pass is called in messages."""

    name: str
    readings: tuple[Reading, ...]

    @property
    def completion_tokens(self) -> int:
        return sum(r.completion_tokens for r in self.readings)

    @property
    def verify_ct(self) -> int:
        return sum(r.verify_ct or 0 for r in self.readings)

    @property
    def accept_length(self) -> float | None:
        """Σ completion_tokens / Σ spec_verify_ct over the set (None without a verify cycle)."""
        return self.completion_tokens / self.verify_ct if self.verify_ct else None

    def cached(self) -> str:
        """How much of the set's prompts the server found cached, in words."""
        said = [r for r in self.readings if r.cached_tokens is not None]
        if not said:
            return "cached tokens not said"
        prompt = sum(r.prompt_tokens for r in said)
        return f"{sum(r.cached_tokens or 0 for r in said):,} of {prompt:,} prompt tokens cached"


@dataclass(frozen=True)
class OutputChange:
    """A request whose output in a later pass differs from the first pass's: where, and whether the servers'
    logprobs make it a near-tie flip (numerical; its continuation legitimately differs) or not."""

    index: int
    position: int
    near_tie: bool
    detail: str = ""


@dataclass(frozen=True)
class Allowance:
    """How far a later pass's accept length may move from the first pass's: ``overall`` for the set's ratio,
    ``per_request`` for a request whose output held (a fraction of the first pass's value, either way)."""

    overall: float = 0.05
    per_request: float = 0.20


#: the allowance by default
DEFAULT_ALLOWANCE = Allowance()


@dataclass
class _Findings:
    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _pct(new: float, old: float) -> str:
    return f"{(new / old - 1) * 100:+.1f}%"


def judge(passes: Sequence[Pass], changes: Mapping[str, Sequence[OutputChange]] | None = None,
          allowance: Allowance = DEFAULT_ALLOWANCE, profile: str = "") -> Verdict:
    """Whether the accept length (the set's and each request's whose output held) and the output of every later
    pass hold against the first pass. ``changes``: per later pass, its requests whose output differs from the first
    pass's. The first line names the pass that moved and the numbers (``after eviction accept length 1.59 vs 4.49
    before; after /flush_cache 4.33``); a skip says why the passes cannot tell."""
    changes = changes or {}
    if len(passes) < 2:
        return Verdict.skip(NAME, f"{len(passes)} pass(es): nothing to compare", profile)
    first = passes[0]
    counted = [p.name for p in passes if p.accept_length is None]
    if counted:
        return Verdict.skip(NAME, f"no request of the pass(es) {', '.join(counted)} carries meta_info.spec_verify_ct "
                                  "(not a speculative server, or one that does not count its verify cycles)", profile)
    sizes = {len(p.readings) for p in passes}
    if len(sizes) != 1:
        return Verdict.skip(NAME, "the passes hold different numbers of requests: "
                                  + ", ".join(f"{p.name} {len(p.readings)}" for p in passes), profile)
    ref = first.accept_length
    assert ref is not None  # every pass has one (checked above)
    found = _Findings()
    moved: list[str] = []
    for p in passes[1:]:
        value = p.accept_length
        assert value is not None
        if abs(value / ref - 1) > allowance.overall:
            moved.append(p.name)
            found.problems.append(f"{p.name}: accept length {value:.2f} vs {ref:.2f} {first.name} "
                                  f"({_pct(value, ref)}, allowed ±{allowance.overall:.0%})")
        _requests(first, p, changes.get(p.name, ()), allowance, found)
    shown = [f"  {p.name}: accept length {p.accept_length:.4f} ({p.completion_tokens:,} tokens / {p.verify_ct:,} "
             f"verify cycles over {len(p.readings)} requests); {p.cached()}" for p in passes]
    summary = _summary(passes, moved, ref)
    detail = "\n".join([*shown, *(f"  {x}" for x in (*found.lines, *found.problems))])
    if found.problems:
        reason = summary if moved else found.problems[0]
        return Verdict.of(NAME, False, f"{NAME} on {profile or 'the server'}: {reason}\n{detail}", reason,
                          profile=profile)
    flips = sum(1 for cs in changes.values() for c in cs if c.near_tie)
    held = f"outputs identical in every pass ({len(first.readings)} requests)" if not flips else \
        f"outputs identical but for {flips} near-tie flip(s) (numerical), named below"
    reason = f"{summary}; {held}"
    return Verdict.of(NAME, True, f"{NAME} on {profile or 'the server'}: {reason}\n{detail}", reason,
                      profile=profile)


def _summary(passes: Sequence[Pass], moved: Sequence[str], ref: float) -> str:
    """``after eviction accept length 1.59 vs 4.49 before; after /flush_cache 4.33 (restored)``, or every pass's
    value when none moved."""
    first = passes[0]
    if not moved:
        values = ", ".join(f"{p.accept_length:.2f} {p.name}" for p in passes)
        return f"accept length held: {values}"
    parts = []
    for p in passes[1:]:
        value = p.accept_length
        assert value is not None
        if p.name in moved:
            parts.append(f"{p.name} accept length {value:.2f} vs {ref:.2f} {first.name}")
        else:
            parts.append(f"{p.name} {value:.2f} (restored)" if parts else f"{p.name} {value:.2f} (held)")
    return "; ".join(parts)


def _requests(first: Pass, later: Pass, changed: Sequence[OutputChange], allowance: Allowance,
              found: _Findings) -> None:
    """Per request of ``later``: a changed output that is not a near-tie flip is a problem; an accept length that
    moved beyond the allowance on an output that held is one too (the worst named)."""
    by_index = {c.index: c for c in changed}
    for c in changed:
        what = "a near-tie flip (numerical)" if c.near_tie else "output changed"
        line = f"{later.name}: request {c.index}: {what} at output position {c.position}"
        line += f" ({c.detail})" if c.detail else ""
        (found.lines if c.near_tie else found.problems).append(line)
    worst: tuple[float, int, float, float] | None = None
    for i, (a, b) in enumerate(zip(first.readings, later.readings, strict=True)):
        if i in by_index or a.accept_length is None or b.accept_length is None:
            continue
        move = b.accept_length / a.accept_length - 1
        if abs(move) > allowance.per_request and (worst is None or abs(move) > abs(worst[0])):
            worst = (move, i, b.accept_length, a.accept_length)
    if worst is not None:
        move, i, new, old = worst
        found.problems.append(f"{later.name}: request {i} accept length {new:.2f} vs {old:.2f} {first.name} "
                              f"({move * 100:+.1f}%, allowed ±{allowance.per_request:.0%} per request) with its "
                              "output unchanged")


def soak(series: Sequence[float], *, alpha: float = 0.01, min_drop: float = 0.05, min_size: int = 3,
         profile: str = "") -> Verdict:
    """A soak's accept length per repetition (the set's Σ completion_tokens / Σ spec_verify_ct, in order) judged
    for a fall over time: the change points of :func:`specwatch.judge.changepoint.detect` (Welch's t-test between
    the two sides of the best split, Bonferroni-corrected; at least ``min_size`` repetitions a side), a fall of more
    than ``min_drop`` fails naming the repetition and both sides' medians; a rise is reported. Fewer than
    ``2 * min_size`` repetitions cannot show a change: a skip says so."""
    from specwatch.judge.changepoint import detect

    n = len(series)
    if n < 2 * min_size:
        return Verdict.skip(SOAK, f"{n} repetition(s): a change point needs at least {2 * min_size} "
                                  f"({min_size} a side)", profile)
    points = detect(series, alpha=alpha, min_size=min_size, test="ttest", min_magnitude=min_drop)
    shown = ", ".join(f"{x:.2f}" for x in series)
    where = profile or "the server"
    falls = [p for p in points if p.magnitude < 0]
    lines = [f"  repetition {p.index + 1}: median {p.before_median:.3f} before, {p.after_median:.3f} from it "
             f"({p.magnitude * 100:+.1f}%, p={p.p:.2g})" for p in points]
    if falls:
        p = falls[0]
        reason = (f"accept length fell at repetition {p.index + 1} of {n}: {p.before_median:.2f} before, "
                  f"{p.after_median:.2f} from it ({p.magnitude * 100:+.1f}%, change point p={p.p:.2g})")
        return Verdict.of(SOAK, False, "\n".join([f"{SOAK} on {where}: {reason}", *lines,
                                                  f"  per repetition: {shown}"]), reason, profile=profile)
    rises = f"; {len(points)} rise(s) named below" if points else ""
    reason = (f"no fall of accept length over {n} repetitions (change points at alpha {alpha:g}, larger than "
              f"{min_drop:.0%}): {min(series):.2f} to {max(series):.2f}{rises}")
    return Verdict.of(SOAK, True, "\n".join([f"{SOAK} on {where}: {reason}", *lines, f"  per repetition: {shown}"]),
                      reason, profile=profile)
