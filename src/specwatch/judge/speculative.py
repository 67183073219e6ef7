"""Accept-length semantics: ONE canonical definition, typed conversions, bounds, reconciliation.

Pure: stdlib only.

Canonical accept length = tokens committed per request per verify cycle, bonus token included.
1.0 means no draft token was accepted; the most a cycle can commit is ``num_steps + 1`` (chain or
tree: the tree depth is ``num_steps``). SGLang 0.5.23 exposes it in several conventions:

=========================  ==============================================================  =======
convention                 definition (SGLang 0.5.23)                                      exact?
=========================  ==============================================================  =======
``WINDOW`` (log/gauge)     ``accept len`` of a Decode line, ``sglang:spec_accept_length``:  yes,
                           Σ(correct drafts + bs) / Σ bs over one log window. Canonical.    ±0.005
                                                                                           (log)
``CUMULATIVE``             ``/server_info`` ``avg_spec_accept_length``: same formula over   needs 2
                           the server lifetime since the last ``/flush_cache``; folded in   snapshots
                           only when a Decode line fires.                                   + counts
``COMPLETION_RATIO``       per request ``completion_tokens / spec_verify_ct`` (SGLang's     bound
                           own tests, ``meta_info.spec_accept_length``). Counts the
                           prefill token and drops tokens trimmed at stop/max.
``EXTRA_PER_CYCLE``        external profilers: accepted drafts per cycle (no bonus).        yes
``ACCEPT_RATE``            ``accept rate``: Σ correct / (Σ bs · (num_draft_tokens − 1)).    yes,
                                                                                           ±rounding
=========================  ==============================================================  =======

Exact relations used below (``ct`` = completion_tokens, ``v`` = spec_verify_ct, ``c`` =
spec_num_correct_drafts, ``s`` = num_steps, ``n`` = num_draft_tokens, ``t`` = tokens trimmed in the
last cycle, ``0 ≤ t ≤ s``):

* per request, canonical = ``(c + v) / v = 1 + c / v`` (exact, raw accept_lens before trim);
* ``ct = 1 + (c + v) − t`` so canonical = ``(ct − 1 + t) / v`` ∈ ``[(ct − 1)/v, (ct − 1 + s)/v]``;
  SGLang's ``ct / v`` exceeds ``(ct − 1)/v`` by exactly ``1/v``;
* from a rate: canonical = ``1 + rate · (n − 1)`` (chain: ``n = s + 1``; tree: the same, since the
  rate's denominator is ``n − 1`` per row);
* from extra tokens per cycle ``x``: canonical = ``1 + x``.

The accept length of a *measurement* (many requests, many log windows) has one definition here,
:func:`measured_accept_length`: SGLang's own, Σ(correct drafts + bs) / Σ bs over the measured verify
cycles. The Decode lines give it per window, so over a measurement it is their batch-weighted mean
(:func:`from_windows`; not their median, which weighs a window of one request like one of 48); the
requests' ``meta_info`` give it exactly, summed (:func:`from_requests`: ``1 + Σc / Σv``, the same
formula over the same cycles). The perf gates' diagnosis and the accept-length check both use these.
Each source is read by its own definition (:data:`SOURCES`); an :class:`Estimate` names its source.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "LOG_ROUNDING",
    "SOURCES",
    "CannotDeriveError",
    "Convention",
    "Estimate",
    "Reconciliation",
    "bounds_problems",
    "check_bounds",
    "check_histogram",
    "from_accept_rate",
    "from_completion_ratio",
    "from_extra_per_cycle",
    "from_gauge",
    "from_histogram",
    "from_meta_ratio",
    "from_metrics_delta",
    "from_request_meta",
    "from_requests",
    "from_window",
    "from_windows",
    "max_accept_length",
    "measured_accept_length",
    "meta_ratio_problem",
    "reconcile",
    "to_accept_rate",
    "to_extra_per_cycle",
    "window_from_cumulative",
]

LOG_ROUNDING = 0.005  # Decode lines print accept len / rate with 2 decimals
_EPS = 1e-9

#: Each accept-length source of SGLang 0.5.23 and what it covers, by the name its estimates carry.
SOURCES: dict[str, str] = {
    "Decode lines": "each line's window: Σ(correct drafts + bs) / Σ bs over its decode_log_interval batches",
    "spec_accept_length gauge": "the engine's gauge: the last Decode-line window only (0.0 before the first)",
    "/server_info avg_spec_accept_length": "cumulative since boot or the last successful /flush_cache",
    "meta_info": "per request, exact: 1 + spec_num_correct_drafts / spec_verify_ct",
    "meta_info spec_accept_length": "per request: completion_tokens / spec_verify_ct (counts the prefill token, "
                                    "drops tokens trimmed at a stop or max_new_tokens)",
    "/metrics delta": "Δgeneration_tokens / Δspec_verify_calls over the finished requests (the same bounds as "
                      "completion_tokens / spec_verify_ct)",
}


class Convention(str, enum.Enum):
    """Where an accept-length-like number came from (and so what it means)."""

    WINDOW = "window"  # Decode-line "accept len", the spec_accept_length gauge (canonical)
    CUMULATIVE = "cumulative"  # /server_info internal_states[k].avg_spec_accept_length
    COMPLETION_RATIO = "completion_ratio"  # completion_tokens / spec_verify_ct, per request
    EXTRA_PER_CYCLE = "extra_per_cycle"  # external profilers: accepted drafts per cycle, no bonus
    ACCEPT_RATE = "accept_rate"  # accepted drafts / proposed drafts


class CannotDeriveError(ValueError):
    """The canonical value cannot be derived from what was given; the message says what's missing."""


@dataclass(frozen=True)
class Estimate:
    """A canonical accept length with the interval the definitions allow around it."""

    value: float
    low: float
    high: float
    source: str = ""
    convention: Convention = Convention.WINDOW
    note: str = ""

    def __post_init__(self) -> None:
        if not (self.low <= self.value + _EPS and self.value <= self.high + _EPS):
            raise ValueError(f"estimate {self.value} outside its interval [{self.low}, {self.high}]")

    def describe(self) -> str:
        name = self.source or self.convention.value
        rng = "" if self.high - self.low < 1e-12 else f" (allowed [{self.low:.4f}, {self.high:.4f}])"
        note = f"; {self.note}" if self.note else ""
        return f"{name}: {self.value:.4f}{rng}{note}"


def max_accept_length(num_steps: int) -> int:
    """The most tokens one verify cycle can commit per request: ``num_steps + 1``."""
    if num_steps < 0:
        raise ValueError(f"num_steps must be >= 0, got {num_steps}")
    return num_steps + 1


# --------------------------------------------------------------------------------------------
# Plain conversions (exact, invertible)


def from_extra_per_cycle(extra: float) -> float:
    """External profilers' "extra tokens per cycle" (no bonus) -> canonical (``0.92 -> 1.92``)."""
    return extra + 1.0


def to_extra_per_cycle(accept_len: float) -> float:
    """Canonical -> extra tokens per cycle."""
    return accept_len - 1.0


def from_accept_rate(rate: float, num_draft_tokens: int) -> float:
    """SGLang accept rate -> canonical: ``1 + rate·(num_draft_tokens − 1)`` (chain and tree)."""
    if num_draft_tokens < 1:
        raise ValueError(f"num_draft_tokens must be >= 1, got {num_draft_tokens}")
    return 1.0 + rate * (num_draft_tokens - 1)


def to_accept_rate(accept_len: float, num_draft_tokens: int) -> float:
    """Canonical -> SGLang accept rate (inverse of :func:`from_accept_rate`)."""
    if num_draft_tokens < 2:
        raise ValueError(f"a rate needs num_draft_tokens >= 2, got {num_draft_tokens}")
    return (accept_len - 1.0) / (num_draft_tokens - 1)


# --------------------------------------------------------------------------------------------
# Estimates with their allowed interval


def _clip(lo: float, hi: float, num_steps: int | None) -> tuple[float, float]:
    lo = max(lo, 1.0)
    if num_steps is not None:
        hi = min(hi, float(num_steps + 1))
    return lo, hi


def from_window(value: float, rounded: bool = True, source: str = "log accept len") -> Estimate:
    """A Decode-line ``accept len`` (``rounded``: printed with 2 decimals) or the gauge (exact)."""
    tol = LOG_ROUNDING if rounded else 0.0
    return Estimate(value, value - tol, value + tol, source, Convention.WINDOW)


def from_gauge(value: float, source: str = "spec_accept_length gauge (the last log interval)") -> Estimate:
    """The ``spec_accept_length`` gauge (``source``: its full name): the window formula, exact, last interval."""
    return Estimate(value, value, value, source, Convention.WINDOW, "the last Decode-line window only")


def meta_ratio_problem(meta: Mapping[str, Any]) -> str | None:
    """Why a request's ``meta_info.spec_accept_length`` is not SGLang's ``completion_tokens / spec_verify_ct``
    (None: it is, or the request does not carry the three fields)."""
    got = [float(x) for k in ("spec_accept_length", "completion_tokens", "spec_verify_ct")
           if isinstance(x := meta.get(k), (int, float)) and not isinstance(x, bool)]
    if len(got) < 3 or not got[2]:
        return None
    value, ct, v = got
    if abs(value - ct / v) <= 1e-6 * max(1.0, ct / v):
        return None
    return (f"meta_info.spec_accept_length {value:g} is not completion_tokens/spec_verify_ct = {ct:g}/{v:g} = "
            f"{ct / v:.4f} (SGLang's definition, 0.5.16 to 0.5.23)")


def from_meta_ratio(value: float, verify_ct: int, num_steps: int,
                    source: str = "meta_info spec_accept_length") -> Estimate:
    """A request's ``meta_info.spec_accept_length`` read by its definition, ``completion_tokens / spec_verify_ct``
    (64/63 = 1.016 with no draft accepted), as canonical within :func:`from_completion_ratio`'s bounds."""
    if verify_ct <= 0:
        raise CannotDeriveError(f"spec_verify_ct={verify_ct}: the request never reached a verify step")
    return from_completion_ratio(round(value * verify_ct), verify_ct, num_steps, source)


def from_completion_ratio(
    completion_tokens: int, verify_ct: int, num_steps: int, source: str = "completion_tokens/spec_verify_ct"
) -> Estimate:
    """Per-request (or summed) completion tokens and verify counts -> canonical with bounds.

    Exact relation: canonical = ``(ct − 1 + t)/v`` with ``0 ≤ t ≤ num_steps`` trimmed tokens; the
    point value is ``(ct − 1)/v`` (no trim). For several requests pass the sums and use
    :func:`from_metrics_delta` (one prefill token and up to ``num_steps`` trims per request).
    """
    if verify_ct <= 0:
        raise CannotDeriveError(f"spec_verify_ct={verify_ct}: the request never reached a verify step "
                                "(e.g. max_new_tokens=1), so it has no accept length")
    if completion_tokens < 1:
        raise CannotDeriveError(f"completion_tokens={completion_tokens} < 1 with verify_ct={verify_ct}")
    return from_metrics_delta(completion_tokens, verify_ct, 1, num_steps, source=source)


def from_metrics_delta(
    generation_tokens: float,
    verify_calls: float,
    num_requests: float,
    num_steps: int,
    source: str = "Δgeneration_tokens/Δspec_verify_calls",
) -> Estimate:
    """``/metrics`` counter deltas (or per-request sums) -> canonical with bounds.

    Each finished request adds its completion tokens (one from prefill) to ``generation_tokens``
    and its ``spec_verify_ct`` to ``verify_calls``. So canonical ∈
    ``[(G − R)/V, (G − R + R·num_steps)/V]`` where ``R`` = requests in the delta.
    """
    if verify_calls <= 0:
        raise CannotDeriveError(f"no verify calls in the delta (spec_verify_calls={verify_calls})")
    base = (generation_tokens - num_requests) / verify_calls
    hi = (generation_tokens - num_requests + num_requests * num_steps) / verify_calls
    lo, hi = _clip(base, hi, num_steps)
    value = min(max(base, lo), hi)
    note = f"{generation_tokens:g} tokens, {num_requests:g} requests, {verify_calls:g} verify calls"
    if lo > hi:  # inconsistent counters: keep the raw value and flag it through bounds checks
        return Estimate(base, base, base, source, Convention.COMPLETION_RATIO, note + "; inconsistent")
    return Estimate(value, lo, hi, source, Convention.COMPLETION_RATIO, note)


def from_request_meta(meta: Mapping[str, Any], num_steps: int, source: str = "meta_info") -> Estimate:
    """A ``/generate`` ``meta_info`` with ``spec_*`` fields -> canonical.

    Exact when ``spec_num_correct_drafts`` is present (``1 + c/v``); else bounded from
    ``completion_tokens``.
    """
    v = meta.get("spec_verify_ct")
    if v is None:
        raise CannotDeriveError("meta_info has no spec_verify_ct (server not speculative?)")
    v = int(v)
    c = meta.get("spec_num_correct_drafts")
    if c is not None and v > 0:
        val = 1.0 + int(c) / v
        return Estimate(val, val, val, source, Convention.WINDOW, "exact: 1 + correct_drafts/verify_ct")
    return from_completion_ratio(int(meta["completion_tokens"]), v, num_steps, source)


def from_windows(windows: Sequence[tuple[float, int]], source: str | None = None) -> Estimate | None:
    """Decode-line windows ``(accept len, #running-req)`` -> their batch-weighted mean (None without any).

    Each window is ``Σ(correct + bs) / Σ bs`` over the same number of decode steps, so weighting by
    its batch size (at least 1) gives SGLang's formula over all of them; each printed value is
    rounded to 2 decimals, hence ± :data:`LOG_ROUNDING`.
    """
    if not windows:
        return None
    weights = [max(bs, 1) for _, bs in windows]
    mean = sum(a * w for (a, _), w in zip(windows, weights, strict=True)) / sum(weights)
    values = [a for a, _ in windows]
    return Estimate(mean, mean - LOG_ROUNDING, mean + LOG_ROUNDING,
                    source if source is not None else f"Decode lines ({len(windows)} windows)", Convention.WINDOW,
                    f"bs-weighted mean; windows {min(values):.2f}..{max(values):.2f}")


def from_requests(metas: Sequence[Mapping[str, Any]], source: str | None = None) -> Estimate | None:
    """Requests' ``meta_info`` summed -> exact ``1 + Σ correct_drafts / Σ verify_ct``.

    Counts the requests that report both and reached a verify step; None when none did.
    """
    total_c = total_v = 0
    for meta in metas:
        v, c = meta.get("spec_verify_ct"), meta.get("spec_num_correct_drafts")
        if v is None or c is None or int(v) <= 0:
            continue
        total_c += int(c)
        total_v += int(v)
    if not total_v:
        return None
    val = 1.0 + total_c / total_v
    return Estimate(val, val, val, source if source is not None else f"meta_info of {len(metas)} requests",
                    Convention.WINDOW, "exact: 1 + Σcorrect/Σverify_ct")


def measured_accept_length(windows: Sequence[tuple[float, int]] = (),
                           metas: Sequence[Mapping[str, Any]] = ()) -> Estimate | None:
    """THE accept length of a measurement: the server's reported values (Decode-line windows,
    batch-weighted: :func:`from_windows`), else the requests' exact sums (:func:`from_requests`).

    None when neither is there (not a speculative server, or nothing was measured).
    """
    return from_windows(windows) or from_requests(metas)


def from_histogram(hist: Sequence[int], source: str = "spec_correct_drafts_histogram") -> Estimate:
    """Canonical from a correct-drafts histogram: ``1 + Σ k·h[k] / Σ h[k]``."""
    total = sum(hist)
    if total <= 0:
        raise CannotDeriveError("empty histogram: no verify steps")
    val = 1.0 + sum(k * h for k, h in enumerate(hist)) / total
    return Estimate(val, val, val, source, Convention.WINDOW, "exact")


def window_from_cumulative(
    before_avg: float | None,
    after_avg: float | None,
    before_count: float | None = None,
    after_count: float | None = None,
    flushed_before: bool = False,
    source: str = "/server_info avg_spec_accept_length",
) -> Estimate:
    """The canonical value of a window from two cumulative ``/server_info`` snapshots.

    ``avg_spec_accept_length`` is a lifetime mean (reset by ``/flush_cache``). With the row
    counts behind the two means (``*_count``: verify rows, Σ bs), the window mean is
    ``(a2·n2 − a1·n1)/(n2 − n1)``. Without counts it is only derivable when a successful flush
    preceded the window (``flushed_before``): then the window is ``after_avg``. Otherwise this
    raises :class:`CannotDeriveError` saying so. Note the totals are folded in only when a Decode
    line fires, so cycles after the last line of the window are not included.
    """
    if after_avg is None:
        raise CannotDeriveError(
            "avg_spec_accept_length is absent after the window: no Decode log window has completed "
            "since start or the last flush (it appears after --decode-log-interval decode steps)"
        )
    if flushed_before:
        return Estimate(after_avg, after_avg, after_avg, source, Convention.CUMULATIVE, "cumulative since the flush")
    if before_avg is None and before_count in (None, 0):
        if before_count == 0:
            return Estimate(after_avg, after_avg, after_avg, source, Convention.CUMULATIVE, "from zero")
        raise CannotDeriveError(
            "no 'before' value and no count: cannot tell whether the lifetime mean includes traffic "
            "before the window; flush the cache before the window or pass the counts"
        )
    if before_count is None or after_count is None:
        raise CannotDeriveError(
            "avg_spec_accept_length is cumulative: a window value needs the verify-row counts of both "
            "snapshots or a /flush_cache before the window"
        )
    if after_count < before_count:
        raise CannotDeriveError(
            f"count went down ({before_count:g} -> {after_count:g}): the totals were reset in between"
        )
    if after_count == before_count:
        raise CannotDeriveError("no verify rows were folded in between the two snapshots")
    a1 = before_avg or 0.0
    val = (after_avg * after_count - a1 * before_count) / (after_count - before_count)
    return Estimate(val, val, val, source, Convention.CUMULATIVE, "window from two cumulative snapshots")


# --------------------------------------------------------------------------------------------
# Bounds


def bounds_problems(
    value: float,
    num_steps: int | None = None,
    num_draft_tokens: int | None = None,
    name: str = "accept length",
) -> list[str]:
    """Why ``value`` cannot be a canonical accept length (empty list: it can)."""
    if math.isnan(value) or math.isinf(value):
        return [f"{name} {value}: not a number of tokens"]
    probs: list[str] = []
    if value < 1.0 - _EPS:
        msg = (
            f"{value:g} < 1: looks like extra tokens per cycle; canonical value "
            f"{from_extra_per_cycle(value):.2f}"
        )
        if value >= 0 and num_draft_tokens and num_draft_tokens >= 2:
            msg += (
                f" (if it is an accept rate instead: 1 + {value:g}·({num_draft_tokens}−1) = "
                f"{from_accept_rate(value, num_draft_tokens):.2f})"
            )
        if value < 0:
            msg = f"{value:g} < 0: not a token count at all"
        probs.append(msg)
    elif num_steps is not None and value > num_steps + 1 + _EPS:
        top = num_steps + 1
        msg = (
            f"{value:g} > num_steps+1 = {top} (the most one verify cycle can commit per request): "
            "probably not per request per cycle. It may be completion_tokens/spec_verify_ct of a short "
            "request (counts the prefill token: use (completion_tokens−1)/spec_verify_ct)"
        )
        if value >= 2 * top:
            msg += f", a per-batch sum (divide by the batch size, e.g. {value / top:.1f}+ requests)"
        msg += ", or a throughput/token count rather than a length"
        probs.append(msg)
    return probs


def check_bounds(
    value: float,
    num_steps: int | None = None,
    num_draft_tokens: int | None = None,
    name: str = "accept length",
) -> None:
    """Raise ``ValueError`` with an explanation when ``value`` is not a canonical accept length."""
    probs = bounds_problems(value, num_steps, num_draft_tokens, name)
    if probs:
        raise ValueError("; ".join(probs))


def check_histogram(
    hist: Sequence[int],
    verify_ct: int,
    num_correct_drafts: int,
    num_steps: int | None = None,
) -> list[str]:
    """SGLang's per-request identities: ``Σh == verify_ct`` and ``Σ k·h[k] == num_correct_drafts``.

    Also ``h[k] == 0`` for ``k > num_steps`` when ``num_steps`` is given. Returns problems.
    """
    probs: list[str] = []
    if any(h < 0 for h in hist):
        probs.append(f"negative histogram entries: {list(hist)}")
    total = sum(hist)
    weighted = sum(k * h for k, h in enumerate(hist))
    if total != verify_ct:
        probs.append(f"sum(histogram)={total} != spec_verify_ct={verify_ct}")
    if weighted != num_correct_drafts:
        probs.append(f"sum(k*h[k])={weighted} != spec_num_correct_drafts={num_correct_drafts}")
    if num_steps is not None:
        beyond = {k: h for k, h in enumerate(hist) if k > num_steps and h}
        if beyond:
            probs.append(f"steps accepting more than num_steps={num_steps} drafts: {beyond}")
    return probs


# --------------------------------------------------------------------------------------------
# Reconciliation


@dataclass
class Reconciliation:
    """Which sources agree once each is converted to canonical with its allowed interval."""

    estimates: list[Estimate]
    disagreements: list[tuple[str, str, float]] = field(default_factory=list)  # (a, b, gap)
    out_of_bounds: list[str] = field(default_factory=list)

    @property
    def agree(self) -> bool:
        return not self.disagreements and not self.out_of_bounds

    def message(self) -> str:
        head = "accept-length sources agree" if self.agree else "accept-length sources DISAGREE"
        lines = [head + " (canonical: committed tokens per request per verify cycle, bonus included):"]
        lines += [f"  {e.describe()}" for e in self.estimates]
        lines += [f"  out of bounds: {p}" for p in self.out_of_bounds]
        lines += [f"  {a} vs {b}: intervals apart by {gap:.4f}" for a, b, gap in self.disagreements]
        return "\n".join(lines)


def reconcile(
    estimates: Sequence[Estimate],
    num_steps: int | None = None,
    slack: float = 0.0,
) -> Reconciliation:
    """Pairwise check that the sources' allowed intervals overlap (widened by ``slack`` each).

    ``slack`` covers population differences the caller knows about (a log window vs the requests
    that finished in it); the definitional tolerances are already in each :class:`Estimate`.
    """
    rec = Reconciliation(list(estimates))
    for e in estimates:
        for p in bounds_problems(e.value, num_steps, name=e.source):
            rec.out_of_bounds.append(f"{e.source or e.convention.value}: {p}")
    for i, a in enumerate(estimates):
        for b in estimates[i + 1 :]:
            gap = max(a.low, b.low) - min(a.high, b.high) - 2 * slack
            if gap > _EPS:
                rec.disagreements.append((a.source or a.convention.value, b.source or b.convention.value, gap))
    return rec
