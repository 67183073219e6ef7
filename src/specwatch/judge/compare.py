"""Verdicts on one metric: current samples against reference samples, with the reasons.

Rule (asv's, made explicit): a change is a REGRESSION or an IMPROVEMENT only when the relative
change of medians passes the tolerance AND a two-sided Mann-Whitney U test is significant. When
it is not significant, the verdict says why and what it would take:

- the sample sizes cannot reach ``alpha`` at all (3 vs 3 runs can never give p < 0.01)
  → INCONCLUSIVE, with the runs needed;
- the CI of the ratio lies inside ``1 ± tolerance`` → NO_CHANGE (equivalence shown);
- the runs spread more than ``noisy_cv`` → NOISY, with the noise and the runs needed to see the
  tolerance (the case study's 52.8–68.1 tok/s runs);
- the test could not see an effect of the tolerance's size (MDE > tolerance) → INCONCLUSIVE;
- otherwise → NO_CHANGE (the test had the power and found nothing).

A reference with ``MIN_SESSIONS`` or more recording sessions adds a second condition: the current median must
also lie outside the prediction interval of one more session (:mod:`specwatch.judge.variance`: run noise,
boot-to-boot and, for sessions of several machines, the machine term; a run is judged as one on its own machine
when it has ``MIN_SESSIONS`` of them, else as one on a new machine). A change that the runs call significant
but the interval does not is NOISY, with the smallest change the sessions can flag.

``relative_gate`` judges "a ≥ b × (1 + margin)" (speculative vs baseline, tuned vs untuned) with
one-sided Mann-Whitney tests of a against b scaled by (1 + margin).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np

from specwatch.errors import UsageError
from specwatch.judge import stats, variance, wording, yardstick

DEFAULT_TOLERANCE = 0.05
DEFAULT_ALPHA = 0.01
DEFAULT_POWER = 0.8
DEFAULT_NOISY_CV = 0.05
#: Recording sessions a reference needs before its session-to-session spread is used.
MIN_SESSIONS = 3


class DriftVerdict(str, enum.Enum):
    """Outcome of a comparison with a reference."""

    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    NO_CHANGE = "no_change"
    INCONCLUSIVE = "inconclusive"
    NOISY = "noisy"


class GateVerdict(str, enum.Enum):
    """Outcome of a relative gate "a ≥ b × (1 + margin)"."""

    PASS = "pass"
    FAIL = "fail"
    NO_EFFECT = "no_effect"
    INCONCLUSIVE = "inconclusive"


def _check(samples: Sequence[float], name: str) -> np.ndarray:
    x = np.asarray(samples, dtype=float).ravel()
    if x.size == 0:
        raise UsageError(f"{name}: no samples to compare")
    if not np.all(np.isfinite(x)) or np.any(x <= 0):
        raise UsageError(f"{name}: samples must be finite and positive, got {x.tolist()}")
    return x


@dataclass(frozen=True)
class Comparison:
    """A verdict and every number behind it. ``ratio`` is median(current) / median(reference)."""

    verdict: DriftVerdict
    ratio: float
    ci_low: float
    ci_high: float
    confidence: float
    p: float
    p_min: float
    cv_current: float
    cv_reference: float
    mde: float
    runs_needed: int | None  # None: the noise is too large for a count to mean anything
    n_current: int
    n_reference: int
    median_current: float
    median_reference: float
    higher_is_better: bool
    tolerance: float
    alpha: float
    message: str
    sessions: int = 1  # recording sessions of the reference
    session_spread: float | None = None  # SD of the reference's log session medians (K ≥ MIN_SESSIONS)
    session_p: float | None = None
    session_mde: float | None = None

    @property
    def change(self) -> float:
        """Relative change of medians (+0.05 = 5% higher)."""
        return self.ratio - 1.0

    @property
    def is_regression(self) -> bool:
        """True only for a significant change worse than the tolerance."""
        return self.verdict is DriftVerdict.REGRESSION

    def to_dict(self) -> dict:
        """JSON-ready dict (verdict as its string value)."""
        d = asdict(self)
        d["verdict"] = self.verdict.value
        return d


def compare(
    current: Sequence[float],
    reference: Sequence[float],
    *,
    higher_is_better: bool = True,
    tolerance: float = DEFAULT_TOLERANCE,
    alpha: float = DEFAULT_ALPHA,
    power: float = DEFAULT_POWER,
    noisy_cv: float = DEFAULT_NOISY_CV,
    confidence: float | None = None,
    n_resamples: int = stats.DEFAULT_RESAMPLES,
    seed: int = stats.DEFAULT_SEED,
    reference_sessions: Sequence[Sequence[float]] | None = None,
    prediction: variance.Prediction | None = None,
) -> Comparison:
    """Compare current with reference samples of one metric; see the module docstring for the rule.

    ``confidence`` of the ratio CI defaults to ``1 - alpha``. Samples must be positive.
    ``reference_sessions``: the reference's samples per recording session, when it has several (each
    may name its machine, :class:`specwatch.judge.variance.MachineSession`); ``prediction``: the
    interval of a new session made from them (default: :func:`specwatch.judge.variance.predict` of them).
    """
    if tolerance <= 0 or not 0 < alpha < 1:
        raise UsageError(f"tolerance must be > 0 and alpha in (0, 1), got {tolerance}, {alpha}")
    cur = _check(current, "current")
    ref = _check(reference, "reference")
    conf = 1.0 - alpha if confidence is None else confidence
    med_c, med_r = float(np.median(cur)), float(np.median(ref))
    lo, hi = stats.bootstrap_ratio_ci(cur, ref, confidence=conf, n_resamples=n_resamples, seed=seed)
    sess = prediction
    if sess is None and reference_sessions is not None and len(reference_sessions) >= MIN_SESSIONS:
        for s in reference_sessions:
            _check(s, "reference session")
        sess = variance.predict(variance.components(reference_sessions), alpha=alpha, n_current=int(cur.size))
    if sess is not None:  # judged from the interval's centre, not the pooled median (which weights
        shift = med_r / sess.centre_value  # machines by their session count); the run-noise CI moves with it
        med_r, lo, hi = sess.centre_value, lo * shift, hi * shift
    ratio = med_c / med_r
    mw = stats.mann_whitney(cur, ref)
    p, p_min = mw.p_two_sided, mw.p_min_two_sided
    cv_c, cv_r = stats.cv(cur), stats.cv(ref)
    mde = stats.minimum_detectable_effect(cv_c, cur.size, cv_r, ref.size, alpha=alpha, power=power)
    noise = max(cv_c, cv_r)
    need = stats.runs_needed(tolerance, noise, alpha=alpha, power=power)
    change = ratio - 1.0
    better = change if higher_is_better else -change  # > 0: better
    significant = p < alpha
    nums = (
        f"median {med_c:.4g} vs {med_r:.4g} ({wording.pct(change)}), ratio {ratio:.3f} "
        f"[{lo:.3f}, {hi:.3f}], p={wording.fmt_p(p)}, n={cur.size}/{ref.size}"
    )
    tol = f"{tolerance * 100:g}%"
    session_p = None
    if sess is not None:
        session_p = sess.p(med_c)
        where = "a new machine" if sess.new_machine else "this machine"
        nums += (f"; {sess.components.sessions} baseline sessions of {sess.components.machines} machine(s) "
                 f"predict {sess.centre_value:.4g} ±{wording.noise(sess.tolerance)} for {where}, "
                 f"session p={wording.fmt_p(session_p)}")
    within_sessions = session_p is not None and significant and session_p >= alpha and abs(change) > tolerance

    if within_sessions:
        assert sess is not None
        verdict = DriftVerdict.NOISY
        what = ("the spread of machines and boots" if sess.new_machine else "this machine's session-to-session drift")
        msg = (
            f"noisy: {wording.pct(change)} is within {what} ({sess.components.sessions} baseline sessions, "
            f"{sess.components.machines} machine(s)); only changes beyond ±{wording.noise(sess.tolerance)} can be "
            f"flagged against them; {nums}"
        )
    elif significant and better < -tolerance:
        verdict = DriftVerdict.REGRESSION
        msg = f"regression: {nums}; worse than the {tol} tolerance"
    elif significant and better > tolerance:
        verdict = DriftVerdict.IMPROVEMENT
        msg = f"improvement: {nums}; better than the {tol} tolerance"
    elif significant:
        verdict = DriftVerdict.NO_CHANGE
        msg = f"no change: {nums}; significant but within the {tol} tolerance"
    elif p_min >= alpha:
        verdict = DriftVerdict.INCONCLUSIVE
        k = stats.runs_to_reach_p(alpha)
        need = None if need is None else max(need, k)
        msg = (
            f"inconclusive: n={cur.size}/{ref.size} cannot reach p<{alpha:g} "
            f"(smallest possible p={wording.fmt_p(p_min)}); need ≥ {k} runs per side; {nums}"
        )
    elif 1.0 - tolerance <= lo and hi <= 1.0 + tolerance:
        verdict = DriftVerdict.NO_CHANGE
        msg = f"no change: {nums}; the CI lies within ±{tol}"
    elif noise > noisy_cv:
        verdict = DriftVerdict.NOISY
        msg = (
            f"noisy: run-to-run noise {wording.noise(noise)} (cv), need {wording.runs(need)} runs per side to see "
            f"{tol}; {nums}"
        )
    elif mde > tolerance:
        verdict = DriftVerdict.INCONCLUSIVE
        msg = (f"inconclusive: noise {wording.noise(noise)}, need {wording.runs(need)} runs per side to see {tol}; "
               f"{nums}")
    else:
        verdict = DriftVerdict.NO_CHANGE
        msg = f"no change: {nums}; not significant, and {tol} would have been seen"
    if sess is None and verdict in (DriftVerdict.REGRESSION, DriftVerdict.IMPROVEMENT):
        k = len(reference_sessions) if reference_sessions else 1
        msg += (f"; judged on runs alone: the reference holds {k} recording session(s) of this metric, too few "
                f"(< {MIN_SESSIONS}) to tell the machine's own drift between sessions from a change")
    return Comparison(
        verdict=verdict,
        ratio=ratio,
        ci_low=lo,
        ci_high=hi,
        confidence=conf,
        p=p,
        p_min=p_min,
        cv_current=cv_c,
        cv_reference=cv_r,
        mde=mde,
        runs_needed=need,
        n_current=int(cur.size),
        n_reference=int(ref.size),
        median_current=med_c,
        median_reference=med_r,
        higher_is_better=higher_is_better,
        tolerance=tolerance,
        alpha=alpha,
        message=msg,
        sessions=sess.components.sessions if sess else len(reference_sessions or ()) or 1,
        session_spread=sess.sd if sess else None,
        session_p=session_p,
        session_mde=sess.tolerance if sess else None,
    )


@dataclass(frozen=True)
class DriftBasis:
    """The tolerance a drift verdict uses and a sentence on where it came from; ``prediction``: the
    interval of a new session that set it, when the sessions were enough."""

    tolerance: float
    note: str
    prediction: variance.Prediction | None = None
    floor: bool = False  # set by the class's spread, wider than requested, for a baseline of too few sessions


def drift_basis(requested: float, sessions: Sequence[Sequence[float]] | None,
                class_spread: tuple[float, str] | None, alpha: float = DEFAULT_ALPHA,
                n_current: int | None = None, machine: str | None = None,
                term: variance.PooledTerm | None = None, higher_is_better: bool = True) -> DriftBasis:
    """The drift tolerance from data (the one owner of this rule).

    With ``MIN_SESSIONS`` or more recording sessions, their variance components set it
    (:mod:`specwatch.judge.variance`: run noise, boot-to-boot, and the machine term when they name
    several machines): the half-width of the prediction interval of one more session at ``alpha``, on
    ``machine`` when ``MIN_SESSIONS`` of them name it, else on a new machine, whatever was requested; the
    note says whether the requested tolerance is within reach and the smallest slowdown flagged 19 times
    in 20; ``term``: the hardware's pooled machine term, for a new machine when it has more degrees of freedom
    (:func:`specwatch.judge.variance.term_choice`). With fewer, the machine class's spread (``class_spread``:
    spread and where measured) gives a floor, so a healthy server's boot-to-boot wander is not called a
    regression (for a metric where lower is better, the same spread upward: a slowdown by a factor, not a
    fraction); without either, the requested tolerance, and the note says how many more sessions to record.
    Sessions that all share one median (spread 0: copies, or made by hand) count as too few."""
    n = len(sessions or ())
    if n >= MIN_SESSIONS:
        pred = variance.predict(variance.components(list(sessions or ())), alpha=alpha, n_current=n_current,
                                machine=machine, min_sessions=MIN_SESSIONS, term=term)
        if pred.components.sigma_within > 0 or pred.components.sigma_machine > 0:
            note = f"tolerance {pred.tolerance:.1%} from the baseline's {n} sessions: {pred.note}"
            if pred.tolerance > requested:
                note += (f"; the requested {requested:.1%} is below what these sessions can resolve (specwatch ab "
                         "resolves small changes in one session)")
            return DriftBasis(pred.tolerance, note, pred)
        # Sessions of a real machine never share one median: these are copies, or made by hand. A
        # spread of 0 would make any change "beyond drift"; judge as if they measured no spread.
        head = f"the baseline's {n} sessions all have the same median (spread 0, which measures no drift)"
        record = "record sessions of the machine to judge by its own spread"
    else:
        head = f"only {n} recording session(s)"
        record = (f"record {MIN_SESSIONS - n} more session(s) (each --update-baselines adds one; every session "
                  f"is kept) to judge by this baseline's own spread")
    if class_spread is not None:
        spread, where = class_spread
        dt = stats.drift_tolerance(spread, n, alpha, known=False)
        spread_tol = dt.tolerance if higher_is_better else float(math.expm1(-math.log1p(-dt.tolerance)))
        tol = max(requested, spread_tol)
        return DriftBasis(tol, f"{head}: the machine class's session spread {spread:.1%} "
                               f"({where}) sets the tolerance to {tol:.1%}; {record}", floor=tol > requested)
    return DriftBasis(requested, f"{head} and no session spread measured for this machine "
                                 f"class: the requested {requested:.1%} tolerance, which may call the machine's own "
                                 f"drift a regression; {record}")


def drift(
    current: Sequence[float],
    reference: Sequence[float],
    *,
    higher_is_better: bool = True,
    requested: float = DEFAULT_TOLERANCE,
    alpha: float = DEFAULT_ALPHA,
    sessions: Sequence[Sequence[float]] | None = None,
    class_spread: tuple[float, str] | None = None,
    session_scores: Sequence[float | None] | None = None,
    run_score: float | None = None,
    n_resamples: int = stats.DEFAULT_RESAMPLES,
    machine: str | None = None,
    machine_term: variance.PooledTerm | None = None,
) -> tuple[Comparison, DriftBasis]:
    """The drift verdict of a run against a baseline: :func:`compare` at the tolerance of :func:`drift_basis`.

    ``sessions`` may name the machine each was recorded on (:class:`specwatch.judge.variance.MachineSession`):
    sessions of several machines are judged with the machine term, the run as one on a new machine unless
    ``machine`` (the run's own) names ``MIN_SESSIONS`` of them: then as one on it; the note says which, and why.
    ``n_resamples``: of the ratio's bootstrap CI (a replay of many verdicts may take fewer: no regression
    verdict depends on it). ``machine_term``: the hardware's pooled machine term (:mod:`specwatch.judge.machineterm`).

    ``session_scores`` (one per session, None where a session has no comparable machine yardstick)
    and ``run_score``: when :func:`specwatch.judge.yardstick.decide` says so, the run and the sessions
    are compared normalised by the yardstick, at the tolerance of the normalised spread; the note
    (and then the message) says so, or why not when any session carries a yardstick.
    """
    said = ""
    if sessions and session_scores is not None:
        adj = yardstick.normalise(current, reference, sessions, session_scores, run_score,
                                  higher_is_better=higher_is_better, alpha=alpha)
        said = "" if adj.decision.quiet else adj.decision.reason
        if adj.decision.use_normalised:
            raw_c, raw_r = float(np.median(current)), float(np.median(reference))
            said += f"; as measured: median {raw_c:.4g} vs {raw_r:.4g} ({wording.pct(raw_c / raw_r - 1)})"
        current, reference, sessions = adj.current, adj.reference, adj.sessions
    basis = drift_basis(requested, sessions, class_spread, alpha, n_current=len(current), machine=machine,
                        term=machine_term, higher_is_better=higher_is_better)
    cmp = compare(current, reference, higher_is_better=higher_is_better, tolerance=basis.tolerance, alpha=alpha,
                  prediction=basis.prediction, n_resamples=n_resamples)
    if basis.floor and cmp.verdict is DriftVerdict.NO_CHANGE and abs(cmp.change) > requested:  # not "no change"
        cmp = replace(cmp, verdict=DriftVerdict.NOISY, message=f"noisy: {wording.pct(cmp.change)} is beyond the "
                      f"requested {requested:.1%} but within the {basis.tolerance:.1%} that the machine class's spread "
                      f"leaves a baseline of {len(sessions or ())} session(s): a boot of a healthy server may differ "
                      "this much; "
                      + cmp.message.removeprefix("no change: ").rsplit("; ", 1)[0])
    if said:
        basis = DriftBasis(basis.tolerance, f"{basis.note}; {said}", basis.prediction)
        if said.startswith("normalised"):
            cmp = replace(cmp, message=f"{cmp.message}; {said}")
    return cmp, basis


@dataclass(frozen=True)
class GateResult:
    """Outcome of ``relative_gate``. ``gain`` is median(a)/median(b) − 1 in the better direction."""

    verdict: GateVerdict
    gain: float
    ratio: float
    ci_low: float
    ci_high: float
    margin: float
    p_pass: float
    p_fail: float
    p_differ: float
    cv_a: float
    cv_b: float
    runs_needed: int | None  # None: the noise is too large for a count to mean anything
    n_a: int
    n_b: int
    message: str

    @property
    def passed(self) -> bool:
        """True only for a significant win of at least the margin."""
        return self.verdict is GateVerdict.PASS

    def to_dict(self) -> dict:
        """JSON-ready dict (verdict as its string value)."""
        d = asdict(self)
        d["verdict"] = self.verdict.value
        return d


def relative_gate(
    a: Sequence[float],
    b: Sequence[float],
    *,
    margin: float = 0.0,
    higher_is_better: bool = True,
    alpha: float = DEFAULT_ALPHA,
    power: float = DEFAULT_POWER,
    names: tuple[str, str] = ("a", "b"),
    n_resamples: int = stats.DEFAULT_RESAMPLES,
    seed: int = stats.DEFAULT_SEED,
    effect: float | None = None,
) -> GateResult:
    """Judge "a beats b by at least ``margin``" (a ≥ b·(1+margin), or a ≤ b/(1+margin) for latency).

    ``effect`` is the change that the "need ~N runs" advice is sized for (default: the margin, or
    the default tolerance when there is none).

    A negative margin is a bound rather than a win: "a is at most |margin| worse than b" (for
    example speculation on a machine where it is not expected to pay, such as the CPU smoke set).

    PASS: a is significantly beyond b·(1+margin) (one-sided Mann-Whitney, p < alpha).
    NO_EFFECT: a and b are not significantly different at all ("no measurable effect"; never a win).
    FAIL: a is significantly short of b·(1+margin).
    INCONCLUSIVE: a differs from b but neither of the above is significant (or n is too small).
    """
    if margin <= -1 or not 0 < alpha < 1:
        raise UsageError(f"margin must be > -1 and alpha in (0, 1), got {margin}, {alpha}")
    na, nb = names
    xa = _check(a, na)
    xb = _check(b, nb)
    target = 1.0 + margin
    # Work in "better is larger" terms: compare a against b scaled to the target.
    scaled_b = xb * target if higher_is_better else xb / target
    mw_t = stats.mann_whitney(xa, scaled_b)
    p_pass = mw_t.p_greater if higher_is_better else mw_t.p_less
    p_fail = mw_t.p_less if higher_is_better else mw_t.p_greater
    p_differ = stats.mann_whitney(xa, xb).p_two_sided
    ratio = float(np.median(xa) / np.median(xb))
    gain = ratio - 1.0 if higher_is_better else 1.0 / ratio - 1.0
    lo, hi = stats.bootstrap_ratio_ci(xa, xb, confidence=1 - alpha, n_resamples=n_resamples, seed=seed)
    cv_a, cv_b = stats.cv(xa), stats.cv(xb)
    effect = effect if effect else (margin if margin > 0 else DEFAULT_TOLERANCE)
    need = stats.runs_needed(effect, max(cv_a, cv_b), alpha=alpha, power=power, alternative="greater")
    p_min = stats.min_attainable_p(xa.size, xb.size, "greater")
    want = f"{na} ≥ {nb}×{target:g}" if higher_is_better else f"{na} ≤ {nb}/{target:g}"
    nums = (
        f"{na}/{nb} median ratio {ratio:.3f} [{lo:.3f}, {hi:.3f}], gain {wording.pct(gain)}, "
        f"n={xa.size}/{xb.size}"
    )
    if p_min >= alpha:
        verdict = GateVerdict.INCONCLUSIVE
        k = stats.runs_to_reach_p(alpha, alternative="greater")
        msg = (
            f"inconclusive: n={xa.size}/{xb.size} cannot reach p<{alpha:g}; need ≥ {k} runs "
            f"per side to judge {want}; {nums}"
        )
        need = None if need is None else max(need, k)
    elif p_pass < alpha:
        verdict = GateVerdict.PASS
        msg = f"pass: {want} (p={wording.fmt_p(p_pass)}); {nums}"
    elif p_differ >= alpha and p_fail >= alpha:
        verdict = GateVerdict.NO_EFFECT
        msg = (
            f"no measurable effect: {na} vs {nb} p={wording.fmt_p(p_differ)}; {nums}; "
            f"need {wording.runs(need, '~')} runs per side to see {effect * 100:g}%"
        )
    elif p_fail < alpha:
        verdict = GateVerdict.FAIL
        msg = f"fail: not {want} (p={wording.fmt_p(p_fail)} that it falls short); {nums}"
    else:
        verdict = GateVerdict.INCONCLUSIVE
        msg = (
            f"inconclusive: {na} differs from {nb} (p={wording.fmt_p(p_differ)}) but {want} is not shown "
            f"(p={wording.fmt_p(p_pass)}); need {wording.runs(need, '~')} runs per side; {nums}"
        )
    return GateResult(
        verdict=verdict,
        gain=gain,
        ratio=ratio,
        ci_low=lo,
        ci_high=hi,
        margin=margin,
        p_pass=p_pass,
        p_fail=p_fail,
        p_differ=p_differ,
        cv_a=cv_a,
        cv_b=cv_b,
        runs_needed=need,
        n_a=int(xa.size),
        n_b=int(xb.size),
        message=msg,
    )


__all__ = ["Comparison", "DriftBasis", "DriftVerdict", "GateResult", "GateVerdict", "compare", "drift", "drift_basis",
           "relative_gate"]
