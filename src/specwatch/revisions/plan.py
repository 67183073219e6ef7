"""What an A/B run plans for each judged key at its first look: the round spread, the tolerance, what it can see.

A key's round spread comes from the machine class's round history (:meth:`RoundSpread.prior_for`: the
earlier runs of the key and of its twins, which served the same model with the same settings and workload),
or the rule's documented conservative default (:data:`specwatch.judge.sequential.DEFAULT_PRIOR`) where none is
recorded. The data outrank the prior: when the first look's rounds do not fit it (the prior rule,
:func:`specwatch.judge.roundprior.decide`), it is set aside and the key is judged on its own rounds
alone; a prior far wider than the rounds is then no reason for a wide tolerance either. Its tolerance is
the one the user gave, or else the smallest that the design resolves at the spread it is judged at
(:func:`specwatch.judge.sequential.resolvable_tolerance`: a healthy head ends "no regression" 19 times
in 20), never below :data:`MIN_TOLERANCE`. Each plan also says the slowdown the design catches 19 times
in 20.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TextIO

from specwatch.judge import roundprior, sequential
from specwatch.judge.roundprior import PriorUse, RoundPrior
from specwatch.store.roundspread import RoundSpread

#: the tolerance used where not even a 90 % tolerance is resolvable (a design of too few rounds)
FALLBACK_TOLERANCE = 0.5
#: the smallest tolerance planned (from a recorded spread or a run's own rounds): two rounds that agree within
#: 0.03 % resolve far less on paper, but a boot of real SGLang at the 8B shape wandered 0.65 % (cv over 4 boots,
#: one H200), and a spread read from 1-3 rounds can be low by luck
MIN_TOLERANCE = 0.01


@dataclass(frozen=True)
class KeyPlan:
    """How one key is judged: its prior round spread (and source), tolerance, and what the design sees."""

    prior: RoundPrior
    source: str
    tolerance: float
    resolvable: float | None  # the smallest tolerance a healthy head settles 19 times in 20 (None: none)
    detectable: float | None  # the smallest slowdown caught 19 times in 20 by the last look (None: none)
    recorded: bool  # the spread comes from recorded rounds, not the default
    use: PriorUse | None = None  # the prior rule's decision on the first look's rounds (None: decided on none)

    def __post_init__(self) -> None:
        if self.use is None:
            object.__setattr__(self, "use", roundprior.decide(self.prior))

    @property
    def decision(self) -> PriorUse:
        """The prior rule's decision: pooled at what weight, or set aside and why."""
        assert self.use is not None
        return self.use

    @property
    def set_aside(self) -> str:
        """Why the prior is not pooled: the first look's rounds do not fit it ("": pooled)."""
        return self.decision.set_aside

    @property
    def pooled_prior(self) -> RoundPrior | None:
        """The prior the looks pool (None: set aside, the key judged on its own rounds alone)."""
        return self.decision.pooled

    def line(self, key: str, design: sequential.Design, chosen: bool) -> str:
        """The plan's progress line: spread, tolerance, and the 'caught 19 times in 20' sentence."""
        if self.recorded:
            spread = f"round spread {self.prior.spread:.2%} over {self.decision.worth} from {self.source}"
        else:
            spread = (f"no round history for it, so the conservative default round spread "
                      f"{self.prior.spread:.0%} worth {self.prior.df} rounds (record some with --record-rounds)")
        if self.set_aside:
            spread += f", set aside: {self.set_aside}: judged on its own rounds alone"
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
             engine: str = "", served: str = "", rounds: Sequence[float] = ()) -> KeyPlan:
    """The plan of one key (``spread``: the class's round history, None when there is none to read; ``engine``
    and ``served``: the engine the key's servers ran and what they served, whose runs alone give its spread;
    ``rounds``: the first look's head/base ratios, which set the prior aside when they do not fit it)."""
    prior, source = spread.prior_for(key, engine, served) if spread is not None else (None, "")
    recorded = prior is not None and prior.spread > 0
    if not recorded:
        prior, source = sequential.DEFAULT_PRIOR, "the default"
    assert prior is not None
    use = roundprior.decide(prior, rounds)
    if use.set_aside and use.own is not None:
        own = round(use.own, 6)
        # tighter: the prior was no reason for a wide tolerance, planned at the rounds' own spread; noisier: a noisy
        # run does not widen the gate, the tolerance stays the prior's (and it may end 'unsure')
        resolvable = _resolvable_own(own, design) if own < prior.spread else _resolvable(prior, design)
        nice = _planned(resolvable)
        chosen = tolerance if tolerance is not None else nice if nice is not None else FALLBACK_TOLERANCE
        return KeyPlan(prior, source, chosen, resolvable, _detectable_own(own, chosen, design), recorded, use)
    resolvable = _resolvable(prior, design)
    nice = _planned(resolvable)
    chosen = tolerance if tolerance is not None else nice if nice is not None else FALLBACK_TOLERANCE
    return KeyPlan(prior, source, chosen, resolvable, _detectable(prior, chosen, design), recorded, use)


@functools.lru_cache(maxsize=512)
def _resolvable(prior: RoundPrior, design: sequential.Design) -> float | None:
    return sequential.resolvable_tolerance(prior, design)


def _planned(resolvable: float | None) -> float | None:
    """The tolerance planned where none is given: the resolvable one rounded up to a figure people write, never
    below MIN_TOLERANCE (None: none resolvable)."""
    return max(MIN_TOLERANCE, sequential.nice_tolerance(resolvable)) if resolvable is not None else None


@functools.lru_cache(maxsize=512)
def _resolvable_own(spread: float, design: sequential.Design) -> float | None:
    return sequential.resolvable_tolerance(None, design, spread=spread)


@functools.lru_cache(maxsize=512)
def _detectable_own(spread: float, tolerance: float, design: sequential.Design) -> float | None:
    return sequential.detectable(None, tolerance, design, spread=spread)


@functools.lru_cache(maxsize=512)
def _detectable(prior: RoundPrior, tolerance: float, design: sequential.Design) -> float | None:
    return sequential.detectable(prior, tolerance, design)


def plan_keys(keys: Iterable[str], spread: RoundSpread | None, design: sequential.Design, tolerance: float | None,
              lead: str, out: TextIO, engine: str = "", served: Mapping[str, str] | None = None,
              rounds: Mapping[str, Sequence[float]] | None = None) -> dict[str, KeyPlan]:
    """Plans of ``keys`` (``served``: key -> what its servers served; ``rounds``: key -> the first look's
    ratios), one progress line each."""
    plans: dict[str, KeyPlan] = {}
    for key in sorted(keys):
        plans[key] = plan_key(key, spread, design, tolerance, engine, (served or {}).get(key, ""),
                              (rounds or {}).get(key, ()))
        print(f"{lead} {plans[key].line(key, design, tolerance is not None)}", file=out, flush=True)
    return plans


def tolerances(plans: Mapping[str, KeyPlan]) -> str:
    """'2.3%' when every key has one tolerance, else the range: for a summary line."""
    values = sorted({p.tolerance for p in plans.values()})
    if not values:
        return "-"
    return f"{values[0]:.1%}" if len(values) == 1 else f"{values[0]:.1%}-{values[-1]:.1%}"


__all__ = ["FALLBACK_TOLERANCE", "MIN_TOLERANCE", "KeyPlan", "plan_key", "plan_keys", "tolerances"]
