"""Judging, pure: statistics, drift and regression verdicts, change points, the accept-length definition,
the one Verdict type of checks and gates. Imports nothing else of specwatch but ``specwatch.errors``.
"""

__all__ = [
    "changepoint",
    "compare",
    "crosscheck",
    "cyclecost",
    "diagnose",
    "draftalive",
    "levels",
    "machineterm",
    "paired",
    "prefixreuse",
    "replay",
    "roundprior",
    "sequential",
    "spechealth",
    "speculative",
    "stats",
    "tuning",
    "variance",
    "verdict",
    "wording",
    "yardstick",
]
