"""Busy decode windows: the Decode lines whose ``gen throughput`` timed decoding only.

Pure: stdlib only, over :mod:`specwatch.signals.logscan`'s records. SGLang 0.5.23 divides a Decode
line's tokens by the time since the previous Decode line (``metrics_reporter.py``:
``last_decode_stats_tic``, not reset when the server goes idle), so the windows of a server that waits
between requests read far below its decode rate (a real STANDALONE server's read 3.07 tok/s). The
reference server prints the same lines by the same rule.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from specwatch.signals.logscan import DecodeRecord, PrefillRecord, Record

__all__ = ["FIRST_LINE", "NO_RATE", "PREFILL_IN_WINDOW", "BusyWindows", "busy_windows"]


@dataclass(frozen=True)
class BusyWindows:
    """The Decode lines whose windows held decode batches only, and why the others were left out.

    A Decode line's ``gen throughput`` is the window's decode tokens over the time since the previous
    Decode line of its scheduler (SGLang 0.5.23 ``metrics_reporter.py``: ``last_decode_stats_tic``,
    not reset when the server goes idle), so a window in which the server waited for a request, or
    prefilled one, under-reports the decode rate. A window is busy when the previous Decode line of
    the same ranks is among the records and no Prefill line of those ranks came in between: a server
    that ran out of requests needs a new one, and a new one is prefilled first.
    """

    windows: tuple[DecodeRecord, ...]
    lines: int  # Decode lines read
    excluded: dict[str, int] = field(default_factory=dict)  # reason -> lines left out for it
    #: for each window, the sequences prefilled before it (``#new-seq`` of the Prefill lines of all ranks)
    prefilled: tuple[int, ...] = ()
    sequences: int = 0  # sequences prefilled over all the records

    def by_request_group(self, group: int, groups: int) -> tuple[tuple[DecodeRecord, ...], ...] | None:
        """The windows of each of ``groups`` consecutive groups of ``group`` requests (a measurement's timed
        runs, one after another), by the sequences prefilled before each window; None when the Prefill lines
        do not count ``group · groups`` sequences (a chunked or a retracted prefill, a log that does not begin
        at the first group): then the windows cannot be told apart by group."""
        if group < 1 or groups < 1 or self.sequences != group * groups:
            return None
        out: list[list[DecodeRecord]] = [[] for _ in range(groups)]
        for rec, n in zip(self.windows, self.prefilled, strict=True):
            out[min(max(n - 1, 0) // group, groups - 1)].append(rec)
        return tuple(tuple(g) for g in out)


#: The reasons :func:`busy_windows` gives for leaving a Decode line out.
FIRST_LINE = "first line (its window began before the records)"
PREFILL_IN_WINDOW = "a prefill in the window (a request arrived: prefill and any idle time before it)"
NO_RATE = "no decode rate"


def busy_windows(records: Iterable[Record]) -> BusyWindows:
    """The busy Decode windows of a run of records, in order (see :class:`BusyWindows`)."""
    kept: list[DecodeRecord] = []
    excluded: dict[str, int] = {}
    seen: set[tuple[tuple[str, int], ...]] = set()  # ranks with a Decode line so far
    prefilled: set[tuple[tuple[str, int], ...]] = set()  # ranks with a Prefill line since their last Decode line
    lines = sequences = 0
    before: list[int] = []
    for rec in records:
        ranks = tuple(sorted(rec.ranks.items()))
        if isinstance(rec, PrefillRecord):
            prefilled.add(ranks)
            sequences += rec.new_seq
        if not isinstance(rec, DecodeRecord):
            continue
        lines += 1
        why = (FIRST_LINE if ranks not in seen else PREFILL_IN_WINDOW if ranks in prefilled
               else NO_RATE if rec.gen_tput <= 0 or rec.running <= 0 else "")
        seen.add(ranks)
        prefilled.discard(ranks)
        if why:
            excluded[why] = excluded.get(why, 0) + 1
        else:
            kept.append(rec)
            before.append(sequences)
    return BusyWindows(tuple(kept), lines, excluded, tuple(before), sequences)
