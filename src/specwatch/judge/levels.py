"""Load levels, judged: serving metrics of one run in ``sglang.bench_serving``'s names, and the
crossover level where speculation stops paying.

Pure: numbers in, numbers out. The metric names are bench_serving's (``output_throughput``,
``median_ttft_ms``, ``p99_itl_ms``, ...) so a row here lines up with a bench_serving result; its
definitions too: TTFT per request; ITL per token (a streamed chunk's gap spread over the tokens it
brought); TPOT per request, (e2e − TTFT) / (output tokens − 1); percentiles with numpy's default
(linear) interpolation.

A server that streams tokens in bursts (real SGLang behind a busy client: several chunks arrive in
one read, microseconds apart, then a gap of several decode steps) makes ITL bimodal: one mode near
zero, one at a few steps. Its median then sits on either mode (0.006 ms against 3-12 ms per token
on a real SGLang 0.5.23 server) and is no per-token latency. :func:`burst_share` finds such gaps;
:func:`serving_metrics` leaves out (NaN) each ITL percentile that falls among them, and
:func:`itl_note` says so. The mean ITL (total decode time over tokens) and TPOT do not depend on how
the tokens were grouped: :func:`mean_itl` is what the single-stream ``mean_itl_ms`` reports.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: The percentiles reported for each latency, as bench_serving names them (p50 is its "median").
PERCENTILES: tuple[tuple[str, float], ...] = (("median", 50.0), ("p90", 90.0), ("p99", 99.0))
#: The latencies reported, by bench_serving's stem: ``{percentile}_{stem}_ms``.
LATENCIES = ("ttft", "itl", "tpot", "e2e_latency")

#: metric -> (unit, higher_is_better), in report order.
LEVEL_METRICS: dict[str, tuple[str, bool]] = {
    "output_throughput": ("tok/s", True),
    "request_throughput": ("req/s", True),
    **{f"{p}_{stem}_ms": ("ms", False) for stem in LATENCIES for p, _ in PERCENTILES},
    "accept_length": ("tok/cycle", True),
}


@dataclass(frozen=True)
class RequestTiming:
    """One finished request as the client timed it (seconds)."""

    ttft_s: float
    e2e_s: float
    output_tokens: int
    itl_s: Sequence[float] = ()


#: a gap shorter than this share of the mean gap is a token that came in one burst with the one before
#: it (one read of several streamed chunks), not a per-token latency
BURST_FRACTION = 0.1
#: ITL is bimodal, for the reports, when at least this share of its gaps are burst gaps
BIMODAL_SHARE = 0.1


#: The keys that time a request's decode window (the tokens after its first), which a run whose tokens arrived
#: in one burst has none of: its decode rate is the read's, its gaps near zero. One rule for them all
#: (:meth:`specwatch.load.measure.Measurement.decode_dropped`): such a run is no sample of any of these keys.
DECODE_TIMED: frozenset[str] = frozenset({"decode_tok_s", "mean_itl_ms",
                                          *(f"{p}_{stem}_ms" for stem in ("itl", "tpot") for p, _ in PERCENTILES)})


#: a decode window of more tokens than this, shorter than this many of its measurement's typical per-token
#: intervals, timed the reads of a burst, not decoding
FEW_INTERVALS = 3


@dataclass(frozen=True)
class DecodeWindow:
    """One streamed request's decode window as the client saw it: the time from its first token to its
    last (``e2e - ttft``), the tokens after the first, and the reads (chunks with new tokens) after the first."""

    window_s: float
    tokens: int
    reads: int


def typical_interval(windows: Sequence[DecodeWindow]) -> float | None:
    """The median per-token interval of the windows that read their tokens in more than one chunk (None: none)."""
    xs = sorted(w.window_s / w.tokens for w in windows if w.tokens > 0 and w.reads > 1 and w.window_s > 0)
    return float(np.median(xs)) if xs else None


def unmeasured_decode(window: DecodeWindow, typical_s: float | None) -> str:
    """Why a request has no measurable decode window ("" when it has one), from its own data: the tokens after
    its first arrived in one read (or with the first), or, of more than :data:`FEW_INTERVALS` tokens, in less
    time than that many of the measurement's typical per-token intervals (``typical_s``, :func:`typical_interval`).
    Its decode rate is then the read's, not the server's (real SGLang 0.5.23 on CPU: 64 tokens in one burst, a
    decode time near zero, 179318 tok/s against a median of 267)."""
    if window.tokens < 2:
        return ""  # no token or one after the first: its one gap is one step, however it was read
    ms = f"{window.window_s * 1000:.3g} ms"
    if window.reads <= 1:
        return (f"its {window.tokens} tokens after the first arrived in {'one read' if window.reads else 'the first'} "
                f"({ms} after it): no decode window to time")
    if typical_s and window.tokens > FEW_INTERVALS and window.window_s < FEW_INTERVALS * typical_s:
        return (f"its {window.tokens} tokens after the first arrived within {ms}, under {FEW_INTERVALS} of the "
                f"measurement's typical per-token interval ({typical_s * 1000:.3g} ms): a burst, not a decode window")
    return ""


def mean_itl(itls: Sequence[float]) -> float:
    """The mean inter-token latency (NaN without gaps): decode time over tokens, however the tokens
    were grouped into chunks (bench_serving's ``mean_itl_ms``, in the unit given)."""
    return float(np.mean(itls)) if len(itls) else math.nan


def burst_share(itls: Sequence[float]) -> float:
    """The share of inter-token gaps shorter than :data:`BURST_FRACTION` of the mean gap (0 without gaps)."""
    if len(itls) == 0:
        return 0.0
    x = np.asarray(itls, dtype=float)
    return float(np.mean(x < BURST_FRACTION * x.mean())) if x.mean() > 0 else 0.0


def itl_note(itls: Sequence[float]) -> str | None:
    """What a bimodal ITL distribution (tokens arriving in bursts) means for its numbers; None when it is not."""
    share = burst_share(itls)
    if share < BIMODAL_SHARE:
        return None
    x = np.asarray(itls, dtype=float) * 1000.0
    cut = BURST_FRACTION * float(x.mean())
    slow = x[x >= cut]
    rest = f", the rest {slow.min():.3g}-{slow.max():.3g} ms" if slow.size else ""
    shown = [name for name, q in PERCENTILES if q / 100 <= share]
    return (f"inter-token latency is bimodal: {share:.0%} of the gaps are under {cut:.3g} ms (tokens that arrived "
            f"in one burst with the one before){rest}, so a percentile among the burst gaps is no per-token "
            f"latency{' (' + ', '.join(shown) + ' ITL left out)' if shown else ''}; the mean ITL "
            f"({x.mean():.3g} ms) and TPOT do not depend on the bursts")


def percentiles(values: Sequence[float], scale: float = 1.0) -> dict[str, float]:
    """``{"median": .., "p90": .., "p99": ..}`` of ``values`` times ``scale`` (NaN when empty)."""
    if len(values) == 0:
        return {name: math.nan for name, _ in PERCENTILES}
    qs = np.percentile(np.asarray(values, dtype=float), [q for _, q in PERCENTILES])
    return {name: float(v) * scale for (name, _), v in zip(PERCENTILES, qs, strict=True)}


def serving_metrics(requests: Sequence[RequestTiming], duration_s: float) -> dict[str, float]:
    """bench_serving's throughput and latency metrics of one run of ``requests`` over ``duration_s``
    (first request sent to last one finished). Latencies in ms; an ITL percentile that falls among
    burst gaps is NaN (see the module docstring); ``accept_length`` is not here (it comes from the
    server)."""
    if duration_s <= 0 or not requests:
        raise ValueError(f"serving metrics need requests and a positive duration, got {len(requests)} "
                         f"request(s) over {duration_s} s")
    tpots = [(r.e2e_s - r.ttft_s) / (r.output_tokens - 1) for r in requests if r.output_tokens > 1]
    series = {
        "ttft": [r.ttft_s for r in requests],
        "itl": [x for r in requests for x in r.itl_s],
        "tpot": tpots,
        "e2e_latency": [r.e2e_s for r in requests],
    }
    out = {
        "output_throughput": sum(r.output_tokens for r in requests) / duration_s,
        "request_throughput": len(requests) / duration_s,
    }
    share = burst_share(series["itl"])
    for stem in LATENCIES:
        for name, value in percentiles(series[stem], scale=1000.0).items():
            among_bursts = stem == "itl" and share >= BIMODAL_SHARE and dict(PERCENTILES)[name] / 100 <= share
            out[f"{name}_{stem}_ms"] = math.nan if among_bursts else value
    return out


@dataclass(frozen=True)
class Crossover:
    """Where speculation stops paying along ordered load levels.

    ``level`` is the first level whose verdict is not a pass (None: it paid at every level
    measured); ``verdict`` is that level's verdict ("fail", "no_effect", "inconclusive").
    """

    level: float | None
    verdict: str
    levels: tuple[float, ...]

    @property
    def message(self) -> str:
        if self.level is None:
            return f"speculation paid at every level measured ({_levels(self.levels)}): no crossover up to " \
                   f"{_num(max(self.levels))}" if self.levels else "no levels measured"
        if self.verdict == "inconclusive":  # not shown to pay, not shown to lose: the runs could not tell
            where = (f"at the lowest level measured, {_num(self.level)}" if self.level == self.levels[0]
                     else f"from {_num(self.level)} on")
            return (f"speculation is not shown to pay {where} (inconclusive: the runs tell neither a gain nor a "
                    f"loss there; levels {_levels(self.levels)})")
        if self.level == self.levels[0] and self.verdict == "no_effect":  # no gain shown, none ruled out either
            return (f"speculation is not shown to pay at the lowest level measured, {_num(self.level)} (no measurable "
                    f"effect: the runs tell no difference from the baseline there; levels {_levels(self.levels)})")
        if self.level == self.levels[0]:
            return f"speculation does not pay at the lowest level measured, {_num(self.level)} ({self.verdict})"
        return f"speculation stops paying at {_num(self.level)} ({self.verdict}; levels {_levels(self.levels)})"


def _num(x: float) -> str:
    return f"{x:g}"


def _levels(levels: Sequence[float]) -> str:
    return ", ".join(_num(x) for x in levels)


def crossover(levels: Sequence[tuple[float, str]]) -> Crossover:
    """The first level, in increasing order, whose verdict is not ``"pass"``.

    ``levels``: (level, verdict) pairs, any order; a verdict is a relative gate's ("pass", "fail",
    "no_effect", "inconclusive"). An inconclusive level counts as not paying, as the single-stream
    gate counts it: a speedup that cannot be shown is not a speedup.
    """
    ordered = sorted(levels, key=lambda lv: lv[0])
    values = tuple(float(lv) for lv, _ in ordered)
    if len(set(values)) != len(values):
        raise ValueError(f"levels repeat: {_levels(values)}")
    for level, verdict in ordered:
        if verdict != "pass":
            return Crossover(float(level), verdict, values)
    return Crossover(None, "pass", values)


def crossover_ok(found: Crossover, minimum: float) -> bool:
    """The gate on it: speculation must keep paying below ``minimum`` (a crossover at or above it,
    or none at all, passes)."""
    return found.level is None or found.level >= minimum
