"""The A/B measurement: two sides in alternating rounds, judged look after look on the rounds' ratios.

The one round loop of ``specwatch ab`` and of every ``bisect``/``bisect-patches`` step. Round r
measures both sides (A B, then B A, ...), each a fresh pytest run (:func:`specwatch.revisions.step.measure`,
so a fresh boot of the server), so a machine that drifts drifts on both sides. From round
``rounds`` on, every round is a look (:mod:`specwatch.judge.sequential`, the one rule): each key
still open is judged, and it is settled at the first look where it crosses a boundary
(regression, or no regression). The run stops as soon as the outcome is known: at the first
regression of any key (the gate has failed), or when every key is settled "no regression". More
rounds go only while some key is still open, up to ``max_rounds``; a key still open then is
*slower* when its rounds show the head slower (a real slowdown, not shown beyond the tolerance),
else *unsure*. Alpha is spent across the looks, so stopping early and adding rounds keep the
false-alarm rate. A side that cannot be measured (a measurement whose verdict is skip, or a
results file without samples) stops the loop: the caller decides what that means.

Each alternating round is one pair: the runs inside a boot share that boot's luck, so the rounds,
not the runs, are the independent samples.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from specwatch.errors import SpecwatchError, UsageError
from specwatch.judge import paired, roundprior, sequential
from specwatch.revisions.memo import SKIP, Memo, RevisionRun
from specwatch.revisions.plan import KeyPlan, plan_key, plan_keys
from specwatch.revisions.step import MeasureConfig, measure, samples_of, served_of
from specwatch.store.result import ResultSet
from specwatch.store.roundspread import RoundSpread

#: what is judged unless told otherwise: the throughput the drift gates judge
DEFAULT_METRICS = ("output_tok_s", "decode_tok_s")
DEFAULT_ALPHA = 0.01
#: the first look after two rounds (A B, B A: each side once first), the last after four
DEFAULT_ROUNDS, DEFAULT_MAX_ROUNDS = 2, 4
#: below this F-test p a verdict's own rounds are called noisier than the round history
NOISY_DAY_P = 0.05
#: the verdict of one key, and of a whole A/B
NO_REGRESSION, REGRESSION, UNSURE, SLOWER = "no_regression", "regression", "unsure", "slower"
_VERDICT = {sequential.REGRESSION: REGRESSION, sequential.NO_REGRESSION: NO_REGRESSION,
            sequential.UNDECIDED: UNSURE, sequential.SLOWER: SLOWER}

#: key -> (samples, unit, higher_is_better) of one results file
Found = Mapping[str, tuple[list[float], str, bool]]


@dataclass(frozen=True)
class Side:
    """One side of the comparison: where it is measured and what identifies it."""

    name: str  # "base"/"head" (ab), "good"/"step" or "base"/"step" (bisect)
    label: str  # revision and subject, or profile file
    checkout: Path
    commit: str  # what --specwatch-commit records
    ident: str  # memo ident stem
    extra_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class RoundSettings:
    """The design of every A/B of one command: looks, tolerance, what is judged, the error rates."""

    rounds: int  # rounds before the first look
    max_rounds: int  # the last look
    tolerance: float | None  # None: each key's own, the smallest its design settles at its round spread
    metrics: tuple[str, ...] = DEFAULT_METRICS
    alpha: float = DEFAULT_ALPHA
    #: baseline folder whose ``<machine-class>/round-spread.json`` gives the round spread of earlier
    #: A/B runs, pooled with the rounds measured (None: the rule's conservative default spread)
    round_history: str | None = None
    spending: str = sequential.POCOCK
    miss: float = sequential.DEFAULT_MISS

    @classmethod
    def make(cls, rounds: int, max_rounds: int, tolerance: float | None, metrics: Sequence[str] | None = None,
             alpha: float = DEFAULT_ALPHA, round_history: str | Path | None = None,
             spending: str = sequential.POCOCK) -> RoundSettings:
        """Validated settings (a one-line UsageError otherwise)."""
        if rounds < (1 if round_history not in (None, "none") else 2):
            raise UsageError("--rounds must be at least 2 (one round a side cannot tell drift from a change), or 1 "
                             "with a --round-history whose round spread of earlier runs stands for it")
        if max_rounds < rounds:
            raise UsageError("--max-rounds must be at least --rounds")
        if max_rounds > sequential.MAX_LOOKS:
            raise UsageError(f"--max-rounds must be at most {sequential.MAX_LOOKS}, got {max_rounds}")
        if tolerance is not None and not 0 < tolerance < 1:
            raise UsageError(f"--tolerance must be a fraction in (0, 1), got {tolerance:g}")
        if not 0 < alpha < 0.5:  # the verdict reads a one-sided bound
            raise UsageError(f"--alpha must be in (0, 0.5), got {alpha:g}")
        if spending not in sequential.SPENDING:
            raise UsageError(f"--spending must be one of {', '.join(sequential.SPENDING)}, got {spending!r}")
        chosen = tuple(dict.fromkeys(metrics or DEFAULT_METRICS))
        history = None if round_history in (None, "none") else str(Path(round_history).resolve())
        return cls(int(rounds), int(max_rounds), None if tolerance is None else float(tolerance), chosen,
                   float(alpha), history, spending)

    @property
    def design(self) -> sequential.Design:
        return sequential.Design(self.rounds, self.max_rounds, self.alpha, self.miss, self.spending)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["metrics"] = list(self.metrics)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RoundSettings:
        return cls(**{**data, "metrics": tuple(data["metrics"])})

    def anchor(self) -> str:
        """What the fingerprint of a memo directory takes from these settings."""
        return json.dumps(self.to_json(), sort_keys=True)

    def describe(self) -> str:
        pooled = f", round spread pooled with {self.round_history}" if self.round_history else ""
        tol = f"tolerance {self.tolerance:.1%}" if self.tolerance is not None else "each key's own tolerance"
        return (f"looks after rounds {self.rounds}-{self.max_rounds} (alpha {self.alpha:g} spent across them), "
                f"{tol}, metrics {', '.join(self.metrics)}{pooled}")


@dataclass
class KeyVerdict:
    """The A/B verdict of one result key, from its per-round ratios (see :func:`judge_key`)."""

    key: str
    unit: str
    higher_is_better: bool
    base_median: float
    head_median: float
    n: int
    rounds: paired.PairedRounds  # the summary at the look that settled it (the last look when open)
    round_ratios: list[float]  # every round measured, also those after it was settled
    verdict: str
    message: str
    tolerance: float
    decided_at: int | None = None  # rounds at the look that settled it (None: still open)
    #: each side's spread from sample to sample within a boot (median absolute deviation over the median, the
    #: median over its rounds); None where not measured
    base_jitter: float | None = None
    head_jitter: float | None = None

    @property
    def uneven(self) -> str | None:
        """:func:`uneven_sides`' words for this key, or None."""
        return uneven_sides(self.base_jitter, self.head_jitter)

    @property
    def faster(self) -> str | None:
        """:func:`faster_by`'s words for this key once settled "no regression", else None (an open key's interval
        is not yet one to report)."""
        if self.verdict != NO_REGRESSION:
            return None
        return faster_by(self.rounds, self.higher_is_better, self.tolerance)


#: sides whose sample-to-sample spread within a boot differs this many times are uneven (:attr:`KeyVerdict.uneven`)
UNEVEN = 5.0
#: ... when the noisier side's spread is at least this (below it, both are quiet)
UNEVEN_FLOOR = 0.002


def uneven_sides(base: float | None, head: float | None) -> str | None:
    """Words for sides whose noise within a boot differs ``UNEVEN`` times or more (the noisier one at least
    ``UNEVEN_FLOOR``), or None: the round history, measured on other runs, may then understate this pair's
    round-to-round spread, so such a key is not settled before its second round (:func:`judge`)."""
    if base is None or head is None:
        return None
    low, high = sorted((base, head))
    if high < UNEVEN_FLOOR or high < UNEVEN * low:
        return None
    noisy, calm = ("base", "head") if base > head else ("head", "base")
    return (f"{noisy} varies {high:.2%} from sample to sample within a boot, {calm} {low:.2%}: the sides differ in "
            f"noise, so the round spread from other runs may understate this pair's")


def jitter(rounds_of: Sequence[Found], key: str) -> float | None:
    """A side's spread of ``key`` from sample to sample within a boot: each round's median absolute deviation over
    its median, the median over the rounds (None when a round has fewer than 3 samples or a median of 0)."""
    spreads = []
    for found in rounds_of:
        samples = found[key][0]
        mid = statistics.median(samples) if len(samples) >= 3 else 0.0
        if not mid:
            return None
        spreads.append(statistics.median(abs(x - mid) for x in samples) / abs(mid))
    return statistics.median(spreads) if spreads else None


def overall(keys: Sequence[KeyVerdict]) -> str:
    """One verdict for all keys: any regression is one; else any key shown slower is slower (a finding,
    not noise); else nothing judged or any key unsure is unsure."""
    verdicts = {k.verdict for k in keys}
    if REGRESSION in verdicts:
        return REGRESSION
    if SLOWER in verdicts:
        return SLOWER
    if UNSURE in verdicts or not keys:
        return UNSURE
    return NO_REGRESSION


@dataclass
class Rounds:
    """What :func:`alternate` measured and judged."""

    keys: list[KeyVerdict]
    rounds: int  # rounds completed
    measurements: list[RevisionRun] = field(default_factory=list)
    last: dict[str, RevisionRun] = field(default_factory=dict)  # side name -> its last usable measurement
    failed: RevisionRun | None = None  # the measurement the loop stopped at: its side could not be measured
    failed_side: str | None = None
    machine_class: str | None = None  # as the first measurement's results file records it
    engine: str = ""  # the engine(s) its servers ran, as that results file records them ("" when it does not)
    served: dict[str, str] = field(default_factory=dict)  # key -> what its servers served, as that file records it
    plans: dict[str, KeyPlan] = field(default_factory=dict)
    #: side name -> the outcomes of the tests each of its boots ran, in round order (what its JUnit files say)
    outcomes: dict[str, list[dict[str, str]]] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        return overall(self.keys)

    @property
    def why_failed(self) -> str:
        """Why the side of ``failed`` could not be measured ('' when none failed)."""
        if self.failed is None:
            return ""
        return self.failed.reason if self.failed.verdict == SKIP else "no samples in its results file"


def slower_by(summary: paired.PairedRounds, higher_is_better: bool, tolerance: float) -> str:
    """'slower by 2.2% [0.5%, 3.4%]: real, not shown beyond the 2.3% tolerance': a slower verdict's words."""
    by, near, far = (1 - summary.ratio, 1 - summary.high, 1 - summary.low) if higher_is_better else (
        summary.ratio - 1, summary.low - 1, summary.high - 1)
    return f"slower by {by:.1%} [{near:.1%}, {far:.1%}]: real, not shown beyond the {tolerance:.1%} tolerance"


def faster_by(summary: paired.PairedRounds, higher_is_better: bool, tolerance: float) -> str | None:
    """'faster by 13.7% [11.7%, 17.0%], beyond the 2.0% tolerance' where the whole interval lies past the tolerance
    on the good side (a change as large as a regression, the other way: a finding to explain, not a failure); else
    None."""
    by, near, far = (summary.ratio - 1, summary.low - 1, summary.high - 1) if higher_is_better else (
        1 - summary.ratio, 1 - summary.high, 1 - summary.low)
    if not near > tolerance:
        return None
    return f"faster by {by:.1%} [{near:.1%}, {far:.1%}], beyond the {tolerance:.1%} tolerance"


def judge_ratios(ratios: Sequence[float], higher_is_better: bool, tolerance: float, design: sequential.Design,
                 prior: paired.RoundPrior | None) -> tuple[paired.PairedRounds, str, str]:
    """(summary, verdict, reason) of one key at the look after ``len(ratios)`` rounds: the rule
    (:func:`specwatch.judge.sequential.look`) that ``ab``, both bisections and ``ab-power`` share.
    The summary's ``low``/``high`` are head/base bounds at the look's nominal levels, ``p`` the
    one-sided p of "head is not slower"."""
    logs = np.log(np.asarray(ratios, dtype=float))
    sign = 1.0 if higher_is_better else -1.0
    got = sequential.look(sign * logs[None, :], prior, tolerance, design)
    mean, low, high = float(got.mean[0]), float(got.low[0]), float(got.high[0])
    lo, hi = (math.exp(low), math.exp(high)) if higher_is_better else (math.exp(-high), math.exp(-low))
    summary = paired.PairedRounds(len(ratios), math.exp(sign * mean), lo, hi, float(got.p[0]), float(got.spread[0]),
                                  float(got.pooled[0]) if prior is not None else None, got.df)
    verdict = _VERDICT[int(got.code[0])]
    change, a_k, m_k = f"{(math.exp(mean) - 1) * 100:+.1f}%", *design.nominal(len(ratios))
    if verdict == REGRESSION:
        why = (f"{change} is worse than the {tolerance:.1%} tolerance and shown slower (one-sided p={got.p[0]:.2g} "
               f"below this look's {a_k:.2g})")
    elif verdict == NO_REGRESSION:
        why = f"{change}; the bounds rule out a slowdown beyond {tolerance:.1%} (at this look's {m_k:.2g})"
    elif verdict == SLOWER:
        why = (f"{slower_by(summary, higher_is_better, tolerance)} (one-sided p={got.p[0]:.2g} below the last look's "
               f"{a_k:.2g})")
    else:
        why = (f"{change}: {len(ratios)} round(s) at a round-to-round spread of {got.pooled[0]:.1%} can neither show "
               f"nor rule out a slowdown beyond {tolerance:.1%}")
    return summary, verdict, why


def judge_key(ratios: Sequence[float], higher_is_better: bool, plan: KeyPlan,
              design: sequential.Design, settle_from: int = 1,
              why_later: str = "") -> tuple[paired.PairedRounds, str, str, int | None]:
    """(summary, verdict, reason, settled at) of one key: its looks replayed in order, settled at the
    first that crosses a boundary; open (unsure) when none does. ``settle_from``: no look before this round
    settles it (``why_later`` says why, when that leaves it open)."""
    found = None
    for n in range(design.first, min(len(ratios), design.last) + 1):
        found = judge_ratios(ratios[:n], higher_is_better, plan.tolerance, design, plan.pooled_prior)
        if found[1] != UNSURE and n >= settle_from:
            return (*found, n)
    assert found is not None
    if found[1] != UNSURE:  # crossed a boundary before settle_from: open, and why
        return found[0], UNSURE, f"{found[2]}; not settled before round {settle_from}: {why_later}", None
    return (*found, None)


def _message(why: str, summary: paired.PairedRounds, plan: KeyPlan, ratios: Sequence[float], decided: int | None,
             stopped: int, design: sequential.Design) -> str:
    """A key's verdict message: the reason, the bounds, where the spread came from, when it settled."""
    judged = ratios[:summary.rounds]
    if plan.set_aside:
        spread = (f"round-to-round spread {summary.spread:.2%} over {summary.df} df, its own alone: the round spread "
                  f"{plan.prior.spread:.1%} of {plan.source} is set aside ({plan.set_aside})")
    else:
        spread = (f"round-to-round spread {summary.spread:.1%}, pooled with {plan.prior.spread:.1%} over "
                  f"{plan.decision.worth} of {plan.source}: {summary.pooled_spread:.1%} over {summary.df} df")
    if not plan.set_aside and len(judged) >= 2 and (p := roundprior.noisier_p(judged, plan.prior)) < NOISY_DAY_P:
        record = "the record" if plan.recorded else "the default round spread"
        spread += (f"; these rounds wander more than {record} ({summary.spread:.1%} against {plan.prior.spread:.1%},"
                   f" F-test p={p:.2g}): the run is noisier than its record")
    if decided is not None:
        when = f"settled at the look after round {decided}"
    elif stopped < design.last:
        when = f"still open when the run stopped after round {stopped}"
    else:
        when = f"still open at the last look (round {design.last})"
    return (f"{why}; head/base {summary.ratio:.3f} [{summary.low:.3f}, {summary.high:.3f}] over {summary.rounds} "
            f"round(s), each a fresh boot of both sides; {spread}; {when}")


def key_ratios(base_rounds: Sequence[Found], head_rounds: Sequence[Found], key: str) -> list[float]:
    """A key's head/base ratio of each round: the ratio of the two sides' medians (rounds without a positive median
    on both sides left out)."""
    pairs = [(statistics.median(b[key][0]), statistics.median(h[key][0]))
             for b, h in zip(base_rounds, head_rounds, strict=False)]
    return [h / b for b, h in pairs if b > 0 and h > 0]


def judge(base_rounds: Sequence[Found], head_rounds: Sequence[Found], settings: RoundSettings,
          plans: Mapping[str, KeyPlan] | None = None) -> list[KeyVerdict]:
    """Pure: verdicts of the keys (of ``settings.metrics``) present in every round of both sides.

    ``plans``: each key's round spread and tolerance (:mod:`specwatch.revisions.plan`); a key
    without one is planned on the settings alone (the given tolerance, the default round spread).
    """
    keys = set.intersection(*(set(r) for r in [*base_rounds, *head_rounds])) if base_rounds and head_rounds else set()
    chosen = sorted(k for k in keys if k.rsplit("/", 1)[-1] in settings.metrics)
    design = settings.design
    out = []
    for key in chosen:
        unit, higher = base_rounds[0][key][1], base_rounds[0][key][2]
        ratios = key_ratios(base_rounds, head_rounds, key)
        if len(ratios) < design.first:
            continue
        plan = (plans or {}).get(key) or plan_key(key, None, design, settings.tolerance)
        noise = jitter(base_rounds, key), jitter(head_rounds, key)
        words = uneven_sides(*noise)
        summary, verdict, why, decided = judge_key(ratios, higher, plan, design, 2 if words else 1,
                                                   f"{words}, so its spread is measured on this pair first")
        base_all = [x for r in base_rounds for x in r[key][0]]
        head_all = [x for r in head_rounds for x in r[key][0]]
        message = _message(why, summary, plan, ratios, decided, len(ratios), design)
        out.append(KeyVerdict(key, unit, higher, statistics.median(base_all), statistics.median(head_all),
                              len(head_all), summary, ratios, verdict, message, plan.tolerance, decided, *noise))
    return out


def round_spread_of(settings: RoundSettings, machine_class: str | None, lead: str, out: TextIO) -> RoundSpread | None:
    """The machine class's round history (None when there is none to read), and a line when there is none."""
    if not settings.round_history:
        print(f"{lead} no --round-history: every key is judged at the default round spread", file=out, flush=True)
        return None
    if not machine_class:
        print(f"{lead} the results record no machine class: every key is judged at the default round spread",
              file=out, flush=True)
        return None
    return RoundSpread.for_class(settings.round_history, machine_class)


def engine_of(results: str | None) -> str:
    """The engine(s) a results file's machine records (``sglang``; ``""`` when it cannot be read)."""
    try:
        return str(ResultSet.load(results).machine.get("engine") or "") if results else ""
    except (SpecwatchError, OSError):
        return ""


def neighbours_of(results: str | None) -> list[str]:
    """The other inference servers and GPU processes a results file's measurements saw on the host ([]: none, or
    it cannot be read)."""
    try:
        found = ResultSet.load(results).results if results else []
    except (SpecwatchError, OSError):
        return []
    return list(dict.fromkeys(str(n) for r in found for n in (r.extra.get("shared_with") or ())))


def engine_label_of(results: str | None) -> str:
    """``sglang 0.5.16``: the engine and version a results file's machine records ('' when none or unreadable)."""
    from specwatch.store.machine import engine_text

    try:
        return engine_text(ResultSet.load(results).machine) if results else ""
    except (SpecwatchError, OSError):
        return ""


def machine_class_of(results: str | None) -> str | None:
    """The machine class a results file records (None when it cannot be read)."""
    try:
        return ResultSet.load(results).machine_class if results else None
    except (SpecwatchError, OSError):
        return None


def side_config(cfg: MeasureConfig, side: Side, history: Path) -> MeasureConfig:
    """The measurement settings of one side: ``{checkout}`` replaced, its own history file."""
    return replace(
        cfg,
        pytest_args=(*(a.replace("{checkout}", str(side.checkout)) for a in cfg.pytest_args), *side.extra_args,
                     f"--specwatch-history={history}"),
        setup=cfg.setup.replace("{checkout}", str(side.checkout)) if cfg.setup else None,
    )


def headline(found: Found, metrics: Sequence[str]) -> str:
    """The judged keys' medians of one measurement, for a progress line."""
    parts = [f"{k} {statistics.median(v[0]):.4g} {v[1]}" for k, v in sorted(found.items())
             if k.rsplit("/", 1)[-1] in metrics]
    return "; ".join(parts[:3]) or "no key of the judged metrics"


def alternate(
    base: Side,
    head: Side,
    *,
    cfg: MeasureConfig,
    memo: Memo,
    session: str,
    settings: RoundSettings,
    ident: Callable[[Side, int], str],
    head_first: bool,
    lead: str,
    out: TextIO,
    kept_rounds: int = 0,
) -> Rounds:
    """Measure ``base`` and ``head`` in alternating rounds and judge them (see the module docstring).
    ``kept_rounds``: rounds 1 to this are read from the memo (a stopped run's whole rounds, ``ab --resume``).

    ``ident(side, r)`` names round r's measurement of a side in the memo. ``head_first``: round 1
    measures head first (a revision that does not build then costs no measurement of the other).
    ``lead`` starts every progress line. The rounds' pytest runs record into a history file of the
    memo, never the user's. Stops early, with ``failed`` set, at a side that cannot be measured,
    and with no keys when the two sides share no key of the judged metrics. Each key is planned
    (round spread, tolerance, what the design catches) at the first look, from the round history of
    the machine class that the first results file records.
    """
    history = memo.root / f"history-{session}.sqlite"
    taken: dict[str, list[Found]] = {base.name: [], head.name: []}
    result = Rounds([], 0)
    while result.rounds < settings.max_rounds:
        n = result.rounds + 1
        order = (head, base) if (n % 2 == 1) == head_first else (base, head)
        for side in order:
            kept = memo.get(ident(side, n)) if n <= kept_rounds else None
            m = kept or measure(side.checkout, side_config(cfg, side, history), memo, ident(side, n), side.label,
                                reference=None, commit=side.commit, session=session)
            result.measurements.append(m)
            found = samples_of(m.results) if m.verdict != SKIP else {}
            if not found:
                result.failed, result.failed_side = m, side.name
                return result
            taken[side.name].append(found)
            result.outcomes.setdefault(side.name, []).append(m.outcomes)
            result.last[side.name] = m
            if result.machine_class is None:
                result.machine_class = machine_class_of(m.results)
                result.engine = engine_of(m.results)
                result.served = served_of(m.results)
            print(f"{lead} round {n} {side.name}: {headline(found, settings.metrics)} ({m.seconds:.1f} s"
                  f"{', kept from the stopped run' if kept else ''})", file=out, flush=True)
        result.rounds = n
        if n < settings.rounds:
            continue
        if not result.plans:
            shared = set.intersection(*(set(r) for r in [*taken[base.name], *taken[head.name]]))
            spread = round_spread_of(settings, result.machine_class, lead, out)
            judged = [k for k in shared if k.rsplit("/", 1)[-1] in settings.metrics]
            result.plans = plan_keys(judged, spread, settings.design, settings.tolerance, lead, out, result.engine,
                                     result.served, {k: key_ratios(taken[base.name], taken[head.name], k)
                                                     for k in judged})
        result.keys = judge(taken[base.name], taken[head.name], settings, result.plans)
        open_keys = [k.key for k in result.keys if k.verdict == UNSURE]
        if not result.keys or result.verdict == REGRESSION or not open_keys:
            return result
        if n < settings.max_rounds:
            settled = len(result.keys) - len(open_keys)
            also = f"; {settled} key(s) settled, measured on but no longer judged" if settled else ""
            print(f"{lead} still open after {n} rounds ({', '.join(open_keys)}): one more round{also}",
                  file=out, flush=True)
    return result
