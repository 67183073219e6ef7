"""What an A/B run plans for each judged key before it judges: the round spread, the tolerance, what it can see.

A key's round spread comes from the machine class's round history (:meth:`RoundSpread.prior_for`:
the key's own earlier runs, else its metric's), or the rule's documented conservative default
(:data:`specwatch.judge.sequential.DEFAULT_PRIOR`) where none is recorded. Its tolerance is the
one the user gave, or else the smallest that the design resolves at that spread
(:func:`specwatch.judge.sequential.resolvable_tolerance`: a healthy head ends "no regression" 19
times in 20). Each plan also says the slowdown the design catches 19 times in 20.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TextIO

from specwatch.judge import sequential
from specwatch.judge.paired import RoundPrior
from specwatch.store.roundspread import RoundSpread

#: the tolerance used where not even a 90 % tolerance is resolvable (a design of too few rounds)
FALLBACK_TOLERANCE = 0.5


@dataclass(frozen=True)
class KeyPlan:
    """How one key is judged: its prior round spread (and source), tolerance, and what the design sees."""

    prior: RoundPrior
    source: str
    tolerance: float
    resolvable: float | None  # the smallest tolerance a healthy head settles 19 times in 20 (None: none)
    detectable: float | None  # the smallest slowdown caught 19 times in 20 by the last look (None: none)
    recorded: bool  # the spread comes from recorded rounds, not the default

    def line(self, key: str, design: sequential.Design, chosen: bool) -> str:
        """The plan's progress line: spread, tolerance, and the 'caught 19 times in 20' sentence."""
        if self.recorded:
            worth = f" (counted as {sequential.MAX_PRIOR_DF})" if self.prior.df > sequential.MAX_PRIOR_DF else ""
            spread = f"round spread {self.prior.spread:.2%} over {self.prior.df} df{worth} from {self.source}"
        else:
            spread = (f"no round history for it, so the conservative default round spread "
                      f"{self.prior.spread:.0%} worth {self.prior.df} rounds (record some with --record-rounds)")
        rounds = f"{design.first}-{design.last} rounds" if design.first < design.last else f"{design.last} rounds"
        if chosen:
            tol = f"tolerance {self.tolerance:.1%} (given)"
            if self.resolvable is None or self.resolvable > self.tolerance:
                can = f"{self.resolvable:.1%}" if self.resolvable is not None else "no tolerance below 90%"
                tol += (f", but at this spread {rounds} settle a healthy head 19 times in 20 only at {can}: "
                        f"expect 'unsure'")
        elif self.resolvable is not None:
            tol = f"tolerance {self.tolerance:.1%} (the smallest that {rounds} settle at this spread)"
        else:
            tol = f"tolerance {self.tolerance:.1%} (no smaller one settles at this spread in {rounds})"
        caught = (f"a slowdown of {self.detectable:.1%} or more would have been caught 19 times in 20"
                  if self.detectable is not None else "no slowdown below 99% is caught 19 times in 20")
        return f"{key}: {spread}; {tol}; {caught}"


def plan_key(key: str, spread: RoundSpread | None, design: sequential.Design, tolerance: float | None,
             engine: str = "") -> KeyPlan:
    """The plan of one key (``spread``: the class's round history, None when there is none to read; ``engine``:
    the engine the key's servers ran, whose runs alone give a spread borrowed from other keys)."""
    prior, source = spread.prior_for(key, engine) if spread is not None else (None, "")
    recorded = prior is not None and prior.spread > 0
    if not recorded:
        prior, source = sequential.DEFAULT_PRIOR, "the default"
    assert prior is not None
    resolvable = _resolvable(prior, design)
    nice = sequential.nice_tolerance(resolvable) if resolvable is not None else None
    chosen = tolerance if tolerance is not None else nice if nice is not None else FALLBACK_TOLERANCE
    return KeyPlan(prior, source, chosen, resolvable, _detectable(prior, chosen, design), recorded)


@functools.lru_cache(maxsize=512)
def _resolvable(prior: RoundPrior, design: sequential.Design) -> float | None:
    return sequential.resolvable_tolerance(prior, design)


@functools.lru_cache(maxsize=512)
def _detectable(prior: RoundPrior, tolerance: float, design: sequential.Design) -> float | None:
    return sequential.detectable(prior, tolerance, design)


def plan_keys(keys: Iterable[str], spread: RoundSpread | None, design: sequential.Design, tolerance: float | None,
              lead: str, out: TextIO, engine: str = "") -> dict[str, KeyPlan]:
    """Plans of ``keys``, one progress line each."""
    plans: dict[str, KeyPlan] = {}
    for key in sorted(keys):
        plans[key] = plan_key(key, spread, design, tolerance, engine)
        print(f"{lead} {plans[key].line(key, design, tolerance is not None)}", file=out, flush=True)
    return plans


def tolerances(plans: Mapping[str, KeyPlan]) -> str:
    """'2.3%' when every key has one tolerance, else the range: for a summary line."""
    values = sorted({p.tolerance for p in plans.values()})
    if not values:
        return "-"
    return f"{values[0]:.1%}" if len(values) == 1 else f"{values[0]:.1%}-{values[-1]:.1%}"


__all__ = ["FALLBACK_TOLERANCE", "KeyPlan", "plan_key", "plan_keys", "tolerances"]
