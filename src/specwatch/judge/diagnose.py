"""Why is speculation slow? The numbers a failing perf test prints about itself.

Speculation wins only if the tokens committed per cycle pay for the cycle:
``accept_length > cycle_time / decode_step_time`` where ``cycle_time`` = draft + verify. The
client sees both times directly: a speculative server streams one chunk per cycle, a plain server
one chunk per decode step, so the median gaps between chunks are the two times.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class SpecDiagnosis:
    """The speculative economics of one workload."""

    accept_length: float | None  # canonical: committed tokens per request per verify cycle
    cycle_ms: float | None  # draft + verify, per cycle
    decode_step_ms: float | None  # the baseline server's decode step
    spec_tok_s: float | None = None
    baseline_tok_s: float | None = None

    @property
    def break_even(self) -> float | None:
        """The accept length at which speculation only ties plain decoding."""
        if self.cycle_ms and self.decode_step_ms:
            return self.cycle_ms / self.decode_step_ms
        return None

    def lines(self) -> list[str]:
        out: list[str] = []
        if self.spec_tok_s and self.baseline_tok_s:
            change = self.spec_tok_s / self.baseline_tok_s - 1
            out.append(f"throughput: speculative {self.spec_tok_s:.1f} tok/s vs baseline "
                       f"{self.baseline_tok_s:.1f} tok/s ({change:+.1%})")
        if self.accept_length is not None:
            out.append(f"accept length: {self.accept_length:.2f} committed tokens per verify cycle (bonus included)")
        if self.cycle_ms and self.decode_step_ms:
            out.append(f"cycle time: {self.cycle_ms:.2f} ms per draft+verify cycle vs {self.decode_step_ms:.2f} ms per "
                       f"baseline decode step ({self.cycle_ms / self.decode_step_ms:.1f}x)")
        be = self.break_even
        if be is not None:
            verdict = ""
            if self.accept_length is not None:
                verdict = (" -> speculation LOSES: accept length is below break-even" if self.accept_length < be
                           else " -> accept length is above break-even")
            out.append(f"break-even accept length: {be:.2f} (= cycle time / decode step time){verdict}")
        return out


def median_gap_ms(gaps_per_request: Iterable[Sequence[float]]) -> float | None:
    """Median time between streamed chunks across requests, in ms (None with no gaps)."""
    flat = [g for gaps in gaps_per_request for g in gaps]
    return 1000 * statistics.median(flat) if flat else None
