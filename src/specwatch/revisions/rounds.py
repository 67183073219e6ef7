"""The A/B measurement: two sides in alternating rounds, judged on the rounds' ratios.

The one round loop of ``specwatch ab`` and of every ``bisect``/``bisect-patches`` step. Round r
measures both sides (A B, then B A, ...), each a fresh pytest run (:func:`specwatch.revisions.step.measure`,
so a fresh boot of the server), so a machine that drifts drifts on both sides. After
``rounds`` rounds the keys are judged (:func:`judge`); while a key is unsure, one more round is
measured, up to ``max_rounds``. A side that cannot be measured (a measurement whose verdict is
skip, or a results file without samples) stops the loop: the caller decides what that means.

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

from specwatch.errors import SpecwatchError, UsageError
from specwatch.judge import paired
from specwatch.revisions.memo import SKIP, Memo, RevisionRun
from specwatch.revisions.step import MeasureConfig, measure, samples_of
from specwatch.store.result import ResultSet
from specwatch.store.roundspread import RoundSpread

#: what is judged unless told otherwise: the throughput the drift gates judge
DEFAULT_METRICS = ("output_tok_s", "decode_tok_s")
DEFAULT_ALPHA = 0.01
#: below this F-test p a verdict's own rounds are called noisier than the round history (a note only:
#: with 2-4 rounds such a test catches too few noisy days to decide on, docs/validation section 12)
NOISY_DAY_P = 0.05
#: the verdict of one key, and of a whole A/B
NO_REGRESSION, REGRESSION, UNSURE = "no_regression", "regression", "unsure"

#: key -> (samples, unit, higher_is_better) of one results file
Found = Mapping[str, tuple[list[float], str, bool]]
#: metric -> (the round spread of earlier A/B runs on this machine class, where it comes from)
Priors = Mapping[str, tuple[paired.RoundPrior, str]]
#: the priors of a machine class (None: unknown class), see :mod:`specwatch.store.roundspread`
PriorSource = Callable[[str | None], Priors]


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
    """How many rounds, what is judged and at which tolerance; identical for every A/B of one command."""

    rounds: int
    max_rounds: int
    tolerance: float
    metrics: tuple[str, ...] = DEFAULT_METRICS
    alpha: float = DEFAULT_ALPHA
    #: baseline folder whose ``<machine-class>/round-spread.json`` gives the round spread of earlier
    #: A/B runs, pooled with the rounds measured (None: the rounds measured alone)
    round_history: str | None = None

    @classmethod
    def make(cls, rounds: int, max_rounds: int, tolerance: float, metrics: Sequence[str] | None = None,
             alpha: float = DEFAULT_ALPHA, round_history: str | Path | None = None) -> RoundSettings:
        """Validated settings (a one-line UsageError otherwise)."""
        if rounds < (1 if round_history not in (None, "none") else 2):
            raise UsageError("--rounds must be at least 2 (one round a side cannot tell drift from a change), or 1 "
                             "with a --round-history whose round spread of earlier runs stands for it")
        if max_rounds < rounds:
            raise UsageError("--max-rounds must be at least --rounds")
        if not 0 < tolerance < 1:
            raise UsageError(f"--tolerance must be a fraction in (0, 1), got {tolerance:g}")
        if not 0 < alpha < 0.5:  # the verdict reads a one-sided 1 - alpha bound of a 1 - 2 alpha interval
            raise UsageError(f"--alpha must be in (0, 0.5), got {alpha:g}")
        chosen = tuple(dict.fromkeys(metrics or DEFAULT_METRICS))
        history = None if round_history in (None, "none") else str(Path(round_history).resolve())
        return cls(int(rounds), int(max_rounds), float(tolerance), chosen, float(alpha), history)

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
        return (f"{self.rounds} alternating rounds (up to {self.max_rounds} while unsure), tolerance "
                f"{self.tolerance:.1%}, metrics {', '.join(self.metrics)}{pooled}")


@dataclass
class KeyVerdict:
    """The A/B verdict of one result key, from its per-round ratios (see :func:`decide`)."""

    key: str
    unit: str
    higher_is_better: bool
    base_median: float
    head_median: float
    n: int
    rounds: paired.PairedRounds
    round_ratios: list[float]
    verdict: str
    message: str
    tolerance: float


def overall(keys: Sequence[KeyVerdict]) -> str:
    """One verdict for all keys: any regression is one; nothing judged or any key unsure is unsure."""
    verdicts = {k.verdict for k in keys}
    if REGRESSION in verdicts:
        return REGRESSION
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

    @property
    def verdict(self) -> str:
        return overall(self.keys)

    @property
    def why_failed(self) -> str:
        """Why the side of ``failed`` could not be measured ('' when none failed)."""
        if self.failed is None:
            return ""
        return self.failed.reason if self.failed.verdict == SKIP else "no samples in its results file"


def decide(rounds: paired.PairedRounds, higher_is_better: bool, tolerance: float, alpha: float) -> tuple[str, str]:
    """(verdict, reason) of paired rounds: regression when head is significantly slower (one-sided
    p < alpha) and worse than the tolerance; no regression when the one-sided 1 - alpha bound rules
    out a slowdown beyond the tolerance; else unsure."""
    # oriented so that > 1 is better
    ratio, low = (rounds.ratio, rounds.low) if higher_is_better else (1 / rounds.ratio, 1 / rounds.high)
    change = f"{(ratio - 1) * 100:+.1f}%"
    # the question is directional (is head slower?): one-sided p, in the worse direction only
    p_worse = rounds.p / 2 if ratio < 1 else 1 - rounds.p / 2
    if p_worse < alpha and ratio < 1 - tolerance:
        return REGRESSION, f"{change} is worse than the {tolerance:.1%} tolerance (one-sided p={p_worse:.2g})"
    if low > 1 - tolerance:
        return NO_REGRESSION, f"{change}; the CI rules out a slowdown beyond {tolerance:.1%}"
    spread = rounds.spread if rounds.pooled_spread is None else rounds.pooled_spread
    return UNSURE, (f"{change}: {rounds.rounds} rounds at a round-to-round spread of {spread:.1%} can neither show "
                    f"nor rule out a slowdown beyond {tolerance:.1%}")


def judge_ratios(ratios: Sequence[float], higher_is_better: bool, tolerance: float, alpha: float,
                 prior: paired.RoundPrior | None) -> tuple[paired.PairedRounds, str, str]:
    """(summary, verdict, reason) of one key's per-round ratios: the rule that ``ab``, both
    bisections and ``ab-power``'s simulation share (the interval at 1 - 2 alpha, so that its lower
    bound is the one-sided 1 - alpha bound :func:`decide` reads)."""
    summary = paired.paired_rounds(ratios, confidence=1 - 2 * alpha, prior=prior)
    verdict, why = decide(summary, higher_is_better, tolerance, alpha)
    return summary, verdict, why


def judge(
    base_rounds: Sequence[Found],
    head_rounds: Sequence[Found],
    *,
    metrics: Sequence[str] = DEFAULT_METRICS,
    tolerance: float = 0.01,
    alpha: float = DEFAULT_ALPHA,
    priors: Priors | None = None,
) -> list[KeyVerdict]:
    """Pure: verdicts of the keys (of ``metrics``) present in every round of both sides.

    ``priors`` (metric -> round spread of earlier A/B runs, and its source): that spread is pooled
    with this run's rounds (:func:`specwatch.judge.paired.paired_rounds`), and the message says so.
    """
    keys = set.intersection(*(set(r) for r in [*base_rounds, *head_rounds])) if base_rounds and head_rounds else set()
    chosen = sorted(k for k in keys if k.rsplit("/", 1)[-1] in metrics)
    out = []
    for key in chosen:
        unit, higher = base_rounds[0][key][1], base_rounds[0][key][2]
        pairs = [(statistics.median(b[key][0]), statistics.median(h[key][0]))
                 for b, h in zip(base_rounds, head_rounds, strict=False)]
        ratios = [h / b for b, h in pairs if b > 0 and h > 0]
        prior, source = (priors or {}).get(key.rsplit("/", 1)[-1], (None, ""))
        if not ratios or (len(ratios) < 2 and prior is None):
            if ratios:  # one round, nothing to say how far a round wanders: never a verdict
                out.append(_one_round_unsure(key, unit, higher, base_rounds, head_rounds, ratios[0], tolerance))
            continue
        summary, verdict, why = judge_ratios(ratios, higher, tolerance, alpha, prior)
        base_all = [x for r in base_rounds for x in r[key][0]]
        head_all = [x for r in head_rounds for x in r[key][0]]
        if prior is None:
            design = f"round-to-round spread {summary.spread:.1%} of these rounds alone"
        elif summary.rounds == 1:
            design = (f"one boot of each side: the boot-to-boot term is the round spread of {source}, "
                      f"{prior.spread:.1%} over {prior.df} df")
        else:
            design = (f"round-to-round spread {summary.spread:.1%}, pooled with {prior.spread:.1%} over {prior.df} "
                      f"df of {source}: {summary.pooled_spread:.1%} over {summary.df} df")
            if (p_noisy := paired.noisier_than_prior(ratios, prior)) < NOISY_DAY_P:
                design += (f"; these rounds wander more than the record ({summary.spread:.1%} against "
                           f"{prior.spread:.1%}, F-test p={p_noisy:.2g}): the pooled spread may understate "
                           f"today's noise, so re-run before trusting a regression")
        message = (f"{why}; head/base {summary.ratio:.3f} [{summary.low:.3f}, {summary.high:.3f}] over "
                   f"{summary.rounds} round(s), each a fresh boot of both sides; {design}")
        out.append(KeyVerdict(key, unit, higher, statistics.median(base_all), statistics.median(head_all),
                              len(head_all), summary, ratios, verdict, message, tolerance))
    return out


def prior_source(settings: RoundSettings, lead: str, out: TextIO) -> PriorSource:
    """The round spread of earlier A/B runs of a machine class, from ``settings.round_history``
    (printed, one line per metric, or why there is none)."""

    def priors(machine_class: str | None) -> Priors:
        if not machine_class or not settings.round_history:
            print(f"{lead} the results record no machine class: judged on these rounds alone", file=out)
            return {}
        spread = RoundSpread.for_class(settings.round_history, machine_class)
        found = {m: (p, spread.describe(m)) for m in settings.metrics if (p := spread.prior(m)) is not None}
        if not found:
            print(f"{lead} no earlier A/B rounds in {spread.path}: judged on these rounds alone", file=out, flush=True)
        for m, (p, where) in found.items():
            first, most = (paired.detectable(p, n, settings.alpha, settings.tolerance)
                           for n in (settings.rounds, settings.max_rounds))
            print(f"{lead} {m}: round spread {p.spread:.2%} over {p.df} df from {where}; at that spread "
                  f"{settings.rounds} round(s) flag a slowdown of {first:.1%} or more 19 times in 20, "
                  f"{settings.max_rounds} rounds {most:.1%}", file=out, flush=True)
        return found

    return priors


def machine_class_of(results: str | None) -> str | None:
    """The machine class a results file records (None when it cannot be read)."""
    try:
        return ResultSet.load(results).machine_class if results else None
    except (SpecwatchError, OSError):
        return None


def _one_round_unsure(key: str, unit: str, higher: bool, base_rounds: Sequence[Found],
                      head_rounds: Sequence[Found], ratio: float, tolerance: float) -> KeyVerdict:
    """The verdict of one round without the round spread of earlier runs: unsure."""
    summary = paired.PairedRounds(1, ratio, 0.0, math.inf, 1.0, 0.0)
    message = (f"{(ratio - 1) * 100:+.1f}% in one round, and no round spread of earlier A/B runs of this machine "
               f"class to say how far a round wanders (record some with --record-rounds, or run more rounds)")
    base_all = [x for r in base_rounds for x in r[key][0]]
    head_all = [x for r in head_rounds for x in r[key][0]]
    return KeyVerdict(key, unit, higher, statistics.median(base_all), statistics.median(head_all), len(head_all),
                      summary, [ratio], UNSURE, message, tolerance)


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
    settle_every_key: bool = False,
) -> Rounds:
    """Measure ``base`` and ``head`` in alternating rounds and judge them (see the module docstring).

    ``ident(side, r)`` names round r's measurement of a side in the memo. ``head_first``: round 1
    measures head first (a revision that does not build then costs no measurement of the other).
    ``lead`` starts every progress line. ``settle_every_key``: measure more rounds while any key is
    unsure, not only while the overall verdict is (``ab`` reports every key). The rounds' pytest
    runs record into a history file of the memo, never the user's. Stops early, with ``failed``
    set, at a side that cannot be measured, and with no keys when the two sides share no key of
    the judged metrics. With ``settings.round_history`` the round spread of earlier A/B runs of
    the machine class (the class the first results file records) is pooled in (:func:`prior_source`).
    """
    history = memo.root / f"history-{session}.sqlite"
    taken: dict[str, list[Found]] = {base.name: [], head.name: []}
    result = Rounds([], 0)
    known: Priors | None = None
    while result.rounds < settings.max_rounds:
        n = result.rounds + 1
        order = (head, base) if (n % 2 == 1) == head_first else (base, head)
        for side in order:
            m = measure(side.checkout, side_config(cfg, side, history), memo, ident(side, n), side.label,
                        reference=None, commit=side.commit, session=session)
            result.measurements.append(m)
            found = samples_of(m.results) if m.verdict != SKIP else {}
            if not found:
                result.failed, result.failed_side = m, side.name
                return result
            taken[side.name].append(found)
            result.last[side.name] = m
            if result.machine_class is None:
                result.machine_class = machine_class_of(m.results)
            print(f"{lead} round {n} {side.name}: {headline(found, settings.metrics)} ({m.seconds:.1f} s)",
                  file=out, flush=True)
        result.rounds = n
        if n < settings.rounds:
            continue
        if known is None:
            known = prior_source(settings, lead, out)(result.machine_class) if settings.round_history else {}
        result.keys = judge(taken[base.name], taken[head.name], metrics=settings.metrics,
                            tolerance=settings.tolerance, alpha=settings.alpha, priors=known)
        settled = [k.verdict != UNSURE for k in result.keys]
        if not result.keys or (all(settled) if settle_every_key else result.verdict != UNSURE):
            return result
        if n < settings.max_rounds:
            unsure = ", ".join(k.key for k in result.keys if k.verdict == UNSURE)
            print(f"{lead} unsure after {n} rounds ({unsure}): one more round", file=out, flush=True)
    return result
