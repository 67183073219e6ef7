"""Peer detectors beside the drift gate in ``python docs/validation/baseline_check.py --leave-one-machine-out``.

Each is run through its own project's code on the same data, and judges a held-out session against the
reference sessions (:data:`specwatch.judge.replay.Detector`); each answers "flagged as slower":

- ``pytest-benchmark``: its flat ``--benchmark-compare-fail=mean:5%`` rule
  (``pytest_benchmark.utils.parse_compare_fail``), on the mean time per token (1 / throughput) of
  the session against that of the pooled reference samples;
- ``asv``: ``asv compare --factor 1.1`` (``asv.commands.compare._is_result_better`` on the statistics of
  ``asv_runner.statistics.compute_stats``: 10% slower and a Mann-Whitney U test at p < 0.002), with the
  same time per token, when asv is installed (``pip install asv``);
- ``otava``: Apache Otava's e-divisive (``otava.analysis.compute_change_points``, its defaults: window
  50, p 0.001) over the series of session medians in recorded order with the held-out session's last:
  flagged when a change point starts at it, downwards, when Otava is importable;
- ``changepoint``: specwatch's own e-divisive (:func:`specwatch.judge.changepoint.detect`, Otava's
  t-test at p 0.001) over the samples of the reference sessions then the held-out one's: flagged when a
  downward change point starts within the held-out session's first samples.

A throughput is turned into a time per unit (1 / x) for the two benchmark tools, which read times; a
latency is passed as it is. Not one of them is imported unless asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from specwatch.judge.replay import Detector, Sessions

#: the peers, in table order
NAMES = ("pytest-benchmark", "asv", "otava", "changepoint")
#: how the table names each
LABELS = {
    "pytest-benchmark": "pytest-benchmark mean:5% (pooled reference)",
    "asv": "asv compare --factor 1.1",
    "otava": "Apache Otava e-divisive (session medians)",
    "changepoint": "judge/changepoint.py (samples, t-test p 0.001)",
}


def _times(samples: Sequence[float], higher_is_better: bool) -> list[float]:
    return [1.0 / x for x in samples] if higher_is_better else [float(x) for x in samples]


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return (s[n // 2] + s[(n - 1) // 2]) / 2.0


def pytest_benchmark(higher_is_better: bool) -> Detector:
    from pytest_benchmark.utils import parse_compare_fail

    rule = parse_compare_fail("mean:5%")

    def flagged(current: Sequence[float], sessions: Sessions) -> bool:
        cur = _times(current, higher_is_better)
        ref = _times([x for s in sessions for x in s], higher_is_better)
        return bool(rule.fails({"mean": sum(cur) / len(cur)}, {"mean": sum(ref) / len(ref)}))

    return flagged


def asv(higher_is_better: bool) -> Detector:
    from asv.commands.compare import _is_result_better
    from asv_runner.statistics import compute_stats

    def flagged(current: Sequence[float], sessions: Sessions) -> bool:
        old = _times([x for s in sessions for x in s], higher_is_better)
        new = _times(current, higher_is_better)
        t_old, s_old = compute_stats(old, 1)
        t_new, s_new = compute_stats(new, 1)
        return bool(_is_result_better(t_old, t_new, (s_old, old), (s_new, new), 1.1))  # old faster by 10%

    return flagged


def otava(higher_is_better: bool) -> Detector:
    from otava.analysis import compute_change_points

    def flagged(current: Sequence[float], sessions: Sessions) -> bool:
        series = [_median(s) for s in sessions] + [_median(current)]
        points, _ = compute_change_points(series, window_len=50, max_pvalue=0.001)
        worse = (lambda c: c < 0) if higher_is_better else (lambda c: c > 0)
        return any(p.index == len(series) - 1 and worse(p.stats.forward_rel_change()) for p in points)

    return flagged


def changepoint(higher_is_better: bool) -> Detector:
    from specwatch.judge.changepoint import detect

    def flagged(current: Sequence[float], sessions: Sessions) -> bool:
        ref = [x for s in sessions for x in s]
        points = detect([*ref, *current], alpha=0.001, min_size=3, test="ttest")
        start = len(ref)
        worse = (lambda m: m < 0) if higher_is_better else (lambda m: m > 0)
        return any(start - 3 <= p.index <= start + 3 and worse(p.magnitude) for p in points)

    return flagged


_MAKERS: dict[str, Callable[[bool], Detector]] = {
    "pytest-benchmark": pytest_benchmark, "asv": asv, "otava": otava, "changepoint": changepoint}


def detector(name: str, higher_is_better: bool) -> Detector | str:
    """The peer's detector, or why it cannot run here (its package is not installed)."""
    try:
        return _MAKERS[name](higher_is_better)
    except ImportError as exc:
        hint = {"asv": "pip install asv", "otava": "pip install --no-deps apache-otava==0.8.0 (see "
                "docs/reference/drift-gate.md)"}.get(name, "")
        return f"not installed ({exc.name or exc}){f': {hint}' if hint else ''}"


__all__ = ["LABELS", "NAMES", "detector"]
