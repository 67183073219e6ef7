"""What the gates judge, as plain data: the reference a measurement is compared against, a relative gate's
pair of measurements, and the run's policy (``alpha``, the tolerance, what a missing baseline means).

A leaf of ``run/``: it imports no other module of the run, so the gates (:mod:`specwatch.run.gates`,
:mod:`specwatch.run.specgates`) judge evidence without the Session, and the one caller that gathers it
(:mod:`specwatch.run.gatekeeper`) depends on both without a circle.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specwatch.judge.paired import RoundPrior
    from specwatch.load.measure import Measurement
    from specwatch.store.driftinput import DriftInput

__all__ = ["Lookup", "Pair", "Policy", "Reference", "References"]


@dataclass(frozen=True)
class Reference:
    """What a drift gate compares against, with what the run knows of its own machine."""

    samples: list[float]
    source: str
    sessions: Sequence[Sequence[float]]  # per recording session, when the baseline kept several
    extra: dict[str, Any]  # as recorded: runs, max_new_tokens, concurrency, ...
    note: str = ""  # which sessions count, or that none was recorded on this machine
    yardsticks: tuple[Any, ...] = ()  # each session's machine yardstick (None: none recorded)
    machine: str | None = None  # this run's machine, labelled as the sessions are (None: a reference file)
    machine_term: Any = None  # the class's hardware machine term of this metric (store.machineterm), when recorded
    #: the session-to-session spread the machine class's baselines measured for this key, and where (None: none)
    class_spread: tuple[float, str] | None = None
    #: this run's machine yardstick (its fingerprint's ``yardstick``; None: none measured or a reference file)
    run_yardstick: Any = None
    #: everything the tolerance is built from, each with where it came from (None: a reference file)
    inputs: DriftInput | None = None


#: ``(profile, workload, metric)`` -> the key's reference, or a message saying why there is none.
Lookup = Callable[[str, str, str], "Reference | str"]


@dataclass(frozen=True)
class References:
    """A gate's references, looked up when it needs one: ``judged`` for a key it judges (a missing one is
    remembered for the summary), ``read`` for a key it only explains with (nothing remembered)."""

    judged: Lookup
    read: Lookup


@dataclass(frozen=True)
class Policy:
    """What the run asks of a gate: its significance level, the drift tolerance requested (the profile's,
    else the run's), whether a gate with nothing to compare against fails, and whether this run records
    baselines instead of comparing."""

    alpha: float
    tolerance: float = 0.05
    require_baseline: bool = False
    update_baselines: bool = False
    explain: bool = False  # a failing drift verdict adds the chain that made its tolerance (pytest -v)


@dataclass(frozen=True)
class Pair:
    """A relative gate's evidence: the measurements of the side expected to be faster (``a``: spec, tuned) and
    of the other (``b``), pooled over their rounds; their profiles' names; the round spread earlier A/B runs
    recorded for this machine class and where it comes from; the checks' findings on both servers; and what
    the evidence itself says is wrong with side a before its speed is judged (a dead draft, speculation off:
    ``cause``, said first by a gate that does not pass)."""

    a: Measurement
    b: Measurement
    names: tuple[str, str]
    workload: str = "single-stream"
    prior: RoundPrior | None = None
    prior_source: str = ""
    findings: tuple[str, ...] = ()
    cause: str = ""
