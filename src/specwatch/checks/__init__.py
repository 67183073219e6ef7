"""The execution-path checks, one module per check; each returns a :class:`specwatch.judge.verdict.Verdict`.

=====================  ==================================  =========================================
check                  on a live server (and recorded      pure judge
                       data: ``evaluate``)
=====================  ==================================  =========================================
environment            :mod:`.environment`                 :mod:`.envcheck`, :mod:`.envtree`
verify graphs          :mod:`.verify_graphs`               :mod:`.graphcheck`
phase graphs           :mod:`.phase_graphs`                :mod:`.phasegraphs`
accept length          :mod:`.accept_length`               :mod:`specwatch.judge.speculative`,
                                                           :mod:`specwatch.judge.averaging`
accept length by       :mod:`.accept_concurrency`          :mod:`.batchaccept`
concurrency
draft alive            :mod:`.draft_alive`                 :mod:`specwatch.judge.draftalive`
lossless               :mod:`.lossless_live`               :mod:`.lossless`
stops                  :mod:`.stops_live`                  :mod:`.stops`
prefix reuse           :mod:`.prefix_reuse`                :mod:`specwatch.judge.prefixreuse`
cache life, soak       :mod:`.cache_life`                  :mod:`specwatch.judge.cachelife`
context length         :mod:`.context_length`              :mod:`specwatch.judge.contextlen`
all-reduce tuning      :mod:`.allreduce` (CLI)             :mod:`.allreduce_ranks` (rank processes)
=====================  ==================================  =========================================

A saved capture of a server (``specwatch inspect``) is judged by :mod:`.inspect` through the same
``evaluate`` functions. A live check keeps its pass or fail in the caller's
:class:`.verdictlog.VerdictLog` (the run's Session); checks never import :mod:`specwatch.run`.
"""

__all__ = [
    "accept_concurrency",
    "accept_length",
    "allreduce",
    "allreduce_ranks",
    "batchaccept",
    "cache_life",
    "context_length",
    "draft_alive",
    "envcheck",
    "environment",
    "envtree",
    "graphcheck",
    "host",
    "inspect",
    "lossless",
    "lossless_live",
    "phase_graphs",
    "phasegraphs",
    "prefix_reuse",
    "stops",
    "stops_live",
    "verdictlog",
    "verify_graphs",
]
