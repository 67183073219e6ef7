"""Accept length under each averaging the engine's sources use, from the same counts: which averaging each source
uses, and whether two numbers differ only by averaging.

Pure: stdlib only.

An accept length is a ratio (committed tokens over verify cycles), so its mean depends on what is averaged. How
SGLang 0.5.16 computes each source (srt/ paths of its wheel):

==================================  ===========================================================  =====================
source                              computed in SGLang 0.5.16                                    averaging
==================================  ===========================================================  =====================
Decode line ``accept len``          ``report_decode_stats`` (managers/scheduler_components/       pooled over the verify
                                    metrics_reporter.py): ``spec_num_accept_tokens /              rows of one log window
                                    spec_num_forward_ct``; ``update_spec_metrics`` adds           (a request in a verify
                                    ``num_correct_drafts + bs`` and ``bs`` for each verify        batch is one row)
                                    batch (batch_result_processor.py
                                    ``process_batch_result_decode``)
``sglang:spec_accept_length``       ``self.stats.spec_accept_length``, set in the same function   the last window only
                                    to the same value (observability/metrics_collector.py
                                    ``_log_gauge``)
``/server_info``                    ``get_internal_state`` (managers/scheduler.py):               pooled over every
``avg_spec_accept_length``          ``spec_total_num_accept_tokens / spec_total_num_forward_ct``, verify row since boot
                                    the windows' sums folded in at each Decode line               or the last flush
``/metrics`` counters               ``observe_one_finished_request`` (observability/              pooled over finished
                                    metrics_collector.py), called when a request finishes         requests' tokens (the
                                    (managers/tokenizer_manager.py): ``generation_tokens_total``  prefill token counted)
                                    += its completion tokens, ``spec_verify_calls_total`` += its
                                    ``spec_verify_ct``
``meta_info.spec_accept_length``    ``_calculate_spec_decoding_metrics`` (managers/               per request
                                    tokenizer_manager.py): ``completion_tokens /
                                    spec_verify_ct``; ``spec_verify_ct`` +1 per verify that
                                    committed tokens to the request (batch_result_processor.py
                                    ``_resolve_spec_v2_tokens``)
==================================  ===========================================================  =====================

SGLang's own tests average both ways: the batch accept length of test/kits/spec_server_kits.py is
``Σ completion_tokens / Σ spec_verify_ct`` (pooled; SGLang issue 32176 measured the same), test/send_one.py's is one
request's ``completion_tokens / spec_verify_ct``; benchmark/serving.py prints ``/server_info``'s cumulative value. A
reader who averages the printed Decode lines, or a dashboard that averages the gauge over time, gets a mean over
windows whatever their batch.

When acceptance varies by request the pooled value is below the mean over requests: a request that accepts more
commits its tokens in fewer verify cycles and weighs less in a pooled sum (two requests of 48 tokens, one at 2.00
and one at 1.00, pool to 1.33 and average 1.50). The numbers differ by averaging only, and each is right by its
own definition: :func:`of_requests` and :func:`of_windows` give every averaging from the same counts, and
:func:`explain` says which one a number is.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["AVERAGING", "Averaging", "Mean", "Means", "averaging_of", "explain", "of_requests", "of_windows"]

#: Decode lines print 2 decimals
_ROUNDING = 0.005


class Averaging(str, enum.Enum):
    """What an accept-length mean averages over."""

    POOLED = "pooled over verify cycles"  # Σ committed / Σ verify rows: each verify of each request weighs one
    PER_REQUEST = "mean over requests"  # each request's own ratio, then their mean: each request weighs one
    PER_WINDOW = "mean over log windows"  # each Decode line's value, then their mean: each window weighs one


#: The averaging of each accept-length source, by the names :data:`specwatch.judge.speculative.SOURCES` gives
#: them (the Decode lines as specwatch reads them: each window pooled, the windows weighted by their batch).
AVERAGING: dict[str, Averaging] = {
    "Decode lines": Averaging.POOLED,
    "spec_accept_length gauge": Averaging.POOLED,
    "/server_info avg_spec_accept_length": Averaging.POOLED,
    "meta_info spec_accept_length": Averaging.PER_REQUEST,
    "meta_info": Averaging.POOLED,  # the requests' counts summed: 1 + Σ correct / Σ verify
    "/metrics delta": Averaging.POOLED,
}


def averaging_of(source: str) -> Averaging | None:
    """The averaging of an estimate's source name (``"meta_info of 12 requests (exact)"``: pooled); None when it
    names none of :data:`AVERAGING`."""
    for key in sorted(AVERAGING, key=len, reverse=True):
        if source.startswith(key) or (key.endswith("gauge") and key in source):
            return AVERAGING[key]
    return None


@dataclass(frozen=True)
class Mean:
    """One averaging of the same counts: what was averaged, how, its value and the rounding of its inputs."""

    name: str
    averaging: Averaging
    value: float
    rounding: float = 0.0

    def describe(self) -> str:
        return f"{self.name} {self.value:.4f}"


@dataclass(frozen=True)
class Means:
    """Every averaging of one set of requests (and log windows), with the spread of the per-request values."""

    means: tuple[Mean, ...]
    requests: int = 0
    lowest: float | None = None  # the lowest per-request accept length
    highest: float | None = None

    @property
    def varies(self) -> bool:
        """Whether the requests' accept lengths differ (then the averagings do too)."""
        return self.lowest is not None and self.highest is not None and self.highest - self.lowest > 1e-9

    def of(self, averaging: Averaging) -> list[Mean]:
        return [m for m in self.means if m.averaging is averaging]

    def lines(self) -> list[str]:
        """One line per averaging, then why they differ when they do."""
        out = []
        for kind in Averaging:
            found = self.of(kind)
            if found:
                out.append(f"{kind.value}: " + "; ".join(m.describe() for m in found))
        if self.varies:
            pooled, per_request = self.of(Averaging.POOLED), self.of(Averaging.PER_REQUEST)
            out.append(f"per request {self.lowest:.2f} to {self.highest:.2f} over {self.requests} requests"
                       + (f": the mean over requests is {per_request[0].value - pooled[0].value:+.4f} from the "
                          "pooled value, by averaging only (a request that accepts more commits its tokens in fewer "
                          "verify cycles, so it weighs less when pooled)" if pooled and per_request else ""))
        return out


def _count(meta: Mapping[str, Any], key: str) -> int | None:
    value = meta.get(key)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def of_requests(metas: Sequence[Mapping[str, Any]]) -> Means | None:
    """Every averaging of the requests' ``meta_info`` counts (those that reached a verify cycle); None without any.

    Pooled: ``1 + Σ spec_num_correct_drafts / Σ spec_verify_ct`` (SGLang's Decode-line formula over these
    requests' cycles) and ``Σ completion_tokens / Σ spec_verify_ct`` (its test kits'); per request: the mean of
    ``1 + c / v`` and the mean of ``meta_info.spec_accept_length`` (``completion_tokens / spec_verify_ct``).
    """
    rows = []
    for meta in metas:
        v, ct = _count(meta, "spec_verify_ct"), _count(meta, "completion_tokens")
        if v and v > 0 and ct is not None:
            rows.append((v, ct, _count(meta, "spec_num_correct_drafts")))
    if not rows:
        return None
    n = len(rows)
    sum_v, sum_ct = sum(v for v, _, _ in rows), sum(ct for _, ct, _ in rows)
    means = [Mean("Σ completion_tokens / Σ spec_verify_ct", Averaging.POOLED, sum_ct / sum_v)]
    ratios = [ct / v for v, ct, _ in rows]
    each = ratios
    if all(c is not None for _, _, c in rows):
        exact = [1.0 + c / v for v, _, c in rows]  # type: ignore[operator]
        means.insert(0, Mean("1 + Σ spec_num_correct_drafts / Σ spec_verify_ct", Averaging.POOLED,
                             1.0 + sum(c for _, _, c in rows) / sum_v))  # type: ignore[misc]
        means.append(Mean("mean of 1 + spec_num_correct_drafts / spec_verify_ct", Averaging.PER_REQUEST,
                          sum(exact) / n))
        each = exact
    means.append(Mean("mean of meta_info.spec_accept_length (completion_tokens / spec_verify_ct)",
                      Averaging.PER_REQUEST, sum(ratios) / n))
    return Means(tuple(means), n, min(each), max(each))


def of_windows(windows: Sequence[tuple[float, int]]) -> list[Mean]:
    """The Decode lines' ``(accept len, #running-req)`` averaged both ways: weighted by their batch (pooled: SGLang's
    formula over all their verify rows) and unweighted (a mean over windows); [] without any."""
    if not windows:
        return []
    weights = [max(bs, 1) for _, bs in windows]
    weighted = sum(a * w for (a, _), w in zip(windows, weights, strict=True)) / sum(weights)
    return [Mean(f"Decode lines ({len(windows)}), batch-weighted", Averaging.POOLED, weighted, _ROUNDING),
            Mean(f"Decode lines ({len(windows)}), unweighted", Averaging.PER_WINDOW,
                 sum(a for a, _ in windows) / len(windows), _ROUNDING)]


def explain(value: float, means: Sequence[Mean], rounding: float = _ROUNDING) -> Mean | None:
    """The mean that ``value`` is (within its own ``rounding`` and the mean's), closest first; None when it is none
    of them: then it differs from them by more than averaging."""
    close = [m for m in means if abs(m.value - value) <= rounding + m.rounding + 1e-9]
    return min(close, key=lambda m: abs(m.value - value)) if close else None
