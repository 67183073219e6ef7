"""The variance components of recorded sessions, and the prediction interval of a new one (pure).

A baseline holds *sessions* (one boot, one pytest run: its samples), each recorded on a *machine*
(one GPU, or one lease of a VM when the session records no GPU identity). Three terms move a
session's median, on the log scale (so each is a relative spread):

- **run noise** ``sigma_run``: the spread of the samples of one session around its median;
- **boot-to-boot** ``sigma_boot``: how far the medians of sessions of one machine wander apart, beyond
  what their own run noise explains (``sigma_within``, the spread of session medians of one machine,
  holds both);
- **machine term** ``sigma_machine``: how far machines' means lie apart, beyond what the sessions of each
  explain (one-way random effects, the method of moments of the unbalanced ANOVA).

The reference for a run is the prediction interval of one more session:

- on a machine the sessions already know (:func:`predict` with ``machine``, the run's own, when enough of the
  sessions were recorded on it): centred on that machine's mean, with the within-machine spread;
- on a new machine (the default, and every run whose machine the baseline does not know): centred on the
  mean of the machines (each weighted by its precision, not by its session count), with the machine term
  added, ``sigma_machine**2 + sigma_within**2 + var(centre)``. Sessions pooled as if exchangeable would
  understate this whenever the sessions come from few machines.

On a known machine the quantile is Student's t over the within-machine degrees of freedom. On a new
machine the machine term rests on ``g - 1`` degrees of freedom (``g`` machines), so its own uncertainty
must widen the interval: the quantile is that of the *generalized pivotal quantity* (GPQ, Weerahandi's
fiducial pivot of the one-way random-effects model) of the new session's deviation, ``Z * sqrt(R_V)``,
where ``R_V`` recomputes the variance above from ``MSB (g-1) / U`` and ``MSW (N-g) / W`` (``U``, ``W``:
chi-square draws on the machine and within-machine degrees of freedom), integrated over ``Z`` exactly and
over ``U, W`` on a fixed stratified grid (deterministic). Measured by simulation from the fitted components
(``docs/reference/drift_gate_simulation.py``, ``tests/unit/test_drift_calibration.py``), its false-alarm
rate holds at ``alpha/2`` below for 2 to 10 reference machines, where the normal plug-in quantile
(5.4% one-sided on 2 machines at alpha 1%) and Satterthwaite's t (2.9%) do not: their degrees of freedom
are large exactly when two machines happen to lie close. With one session per machine the sessions are
exchangeable and the quantile is Student's t over ``N - 1``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

import numpy as np
from scipy import optimize as _opt
from scipy import special as _spec
from scipy import stats as _sps

#: the constant that turns the SD of samples into the SD of their median (normal samples)
MEDIAN_EFFICIENCY = math.sqrt(math.pi / 2.0)
#: the grid of (U, W) over which the new-machine pivot is integrated (stratified, deterministic)
PIVOT_DRAWS = 4096


class MachineSession(list):  # a list, so the drift gate's callers pass it through unchanged
    """One session's samples (a list of floats) and the machine it was recorded on (None: unknown)."""

    machine: str | None

    def __init__(self, samples: Sequence[float] = (), machine: str | None = None) -> None:
        super().__init__(float(x) for x in samples)
        self.machine = machine


def machine_of(session: Sequence[float]) -> str | None:
    """The machine a session was recorded on, when it says."""
    return getattr(session, "machine", None)


def machines_of(sessions: Sequence[Sequence[float]]) -> list[str]:
    """Each session's machine label; sessions that name none share one label (one unknown machine)."""
    return [machine_of(s) or "?" for s in sessions]


@dataclass(frozen=True)
class Components:
    """The variance components of a set of sessions (log scale: relative spreads)."""

    sessions: int
    machines: int
    sigma_run: float  # pooled SD of log samples around their session's median
    sigma_within: float  # SD of session log medians within a machine (boot-to-boot + the run noise of a median)
    sigma_boot: float  # the boot-to-boot term alone
    sigma_machine: float  # the machine term
    df_within: int  # sessions - machines
    samples_per_session: float  # their mean sample count
    centre: float  # log: the precision-weighted mean of the machines' means
    centre_var: float  # its variance
    machine_means: dict[str, tuple[float, int]]  # label -> (mean log median, sessions)
    msb: float = 0.0  # the machines' mean square (g - 1 degrees of freedom; unbalanced one-way ANOVA)
    n0: float = 1.0  # the unbalanced design's effective sessions per machine (E[msb] = n0 machine² + within²)

    def line(self) -> str:
        """'run noise 0.9%, boot-to-boot 1.2%, machine term 2.4% over 3 machines (45 sessions)'."""
        machine = (f"machine term {self.sigma_machine:.1%} over {self.machines} machines" if self.machines > 1
                   else "machine term unmeasured (every session from one machine)")
        return (f"run noise {self.sigma_run:.1%}, boot-to-boot {self.sigma_boot:.1%}, {machine} "
                f"({self.sessions} sessions)")


def _log_medians(sessions: Sequence[Sequence[float]]) -> np.ndarray:
    return np.log([float(np.median(np.asarray(s, dtype=float))) for s in sessions])


def components(sessions: Sequence[Sequence[float]], machines: Sequence[str] | None = None) -> Components:
    """The components of ``sessions`` (2 or more), grouped by ``machines`` (default: each session's own
    label, :func:`machines_of`)."""
    if len(sessions) < 2:
        raise ValueError(f"need at least 2 sessions, got {len(sessions)}")
    labels = list(machines) if machines is not None else machines_of(sessions)
    if len(labels) != len(sessions):
        raise ValueError(f"{len(sessions)} sessions but {len(labels)} machine labels")
    lm = _log_medians(sessions)
    order = list(dict.fromkeys(labels))
    groups = [np.array([i for i, x in enumerate(labels) if x == k]) for k in order]
    n = np.array([g.size for g in groups], dtype=float)
    means = np.array([lm[g].mean() for g in groups])
    big_n, g = len(sessions), len(groups)
    df_w = big_n - g
    ssw = float(sum(((lm[ix] - lm[ix].mean()) ** 2).sum() for ix in groups))
    msw = ssw / df_w if df_w > 0 else 0.0
    if df_w == 0:  # one session per machine: the within-machine spread is not separable from the machine term
        msw = float(lm.var(ddof=1))
    sm2, msb, n0 = 0.0, 0.0, 1.0
    if g > 1 and df_w > 0:
        msb = float((n * (means - lm.mean()) ** 2).sum() / (g - 1))
        n0 = (big_n - float((n**2).sum()) / big_n) / (g - 1)
        sm2 = max(0.0, (msb - msw) / n0)
    w = 1.0 / (sm2 + msw / n) if msw + sm2 > 0 else n
    centre = float((w * means).sum() / w.sum())
    resid = np.concatenate([np.log(np.asarray(s, dtype=float)) - m for s, m in zip(sessions, lm, strict=True)])
    dof = max(int(resid.size) - big_n, 1)
    s_run = float(math.sqrt(float((resid**2).sum()) / dof))
    per_session = float(np.mean([MEDIAN_EFFICIENCY * s_run / math.sqrt(len(s)) for s in sessions]))
    boot = math.sqrt(max(0.0, msw - per_session**2))
    return Components(
        sessions=big_n, machines=g, sigma_run=s_run, sigma_within=math.sqrt(msw), sigma_boot=boot,
        sigma_machine=math.sqrt(sm2), df_within=df_w, samples_per_session=float(np.mean([len(s) for s in sessions])),
        centre=centre, centre_var=float(1.0 / w.sum()),
        machine_means={k: (float(m), int(c)) for k, m, c in zip(order, means, n, strict=True)}, msb=msb, n0=n0,
    )  # fmt: skip


@dataclass(frozen=True)
class PooledTerm:
    """A machine term measured on the hardware rather than by one baseline (:func:`specwatch.judge.machineterm.pool`):
    its variance (log scale), its effective degrees of freedom and where it comes from."""

    variance: float
    df: float
    source: str  # e.g. "6 datasets of the NVIDIA H200 (3 profiles, 2 classes)"

    @property
    def sigma(self) -> float:
        return math.sqrt(self.variance)


@dataclass(frozen=True)
class Prediction:
    """Where one more healthy session's log median lands: around ``centre``, two-sided at ``alpha``.

    ``sd`` is the plug-in SD of that landing (the components as estimated). The quantile ``q`` (so that
    the interval is ``exp(centre ± q·sd)``) accounts for the components' own uncertainty: Student's t
    over ``df``, or, on a new machine of a baseline whose machines each hold several sessions, the GPQ
    mixture ``scales`` (the new session's deviation is ``Normal(0, s²)`` with ``s`` drawn from them)."""

    centre: float  # log
    sd: float  # log
    alpha: float
    new_machine: bool
    components: Components
    df: float | None = None  # Student t degrees of freedom (None with scales, or normal when neither)
    scales: np.ndarray | None = field(default=None, repr=False, compare=False)  # the GPQ's predictive SDs
    machine: str | None = None  # the run's own machine, when it names one
    needed: int = 1  # the sessions of its own a machine needs to be judged as one the sessions know
    term: str = ""  # which machine term a new machine's interval used, and why (empty: the sessions' own)

    def cdf(self, deviation: float) -> float:
        """P(a healthy session's log median lies below ``centre + deviation``)."""
        if self.scales is not None:
            return float(np.mean(_spec.ndtr(deviation / self.scales)))
        if self.sd <= 0:
            return 1.0 if deviation >= 0 else 0.0
        if self.df is not None:
            return float(_sps.t.cdf(deviation / self.sd, self.df))
        return float(_sps.norm.cdf(deviation / self.sd))

    @cached_property
    def half_width(self) -> float:
        """The log half-width ``h`` of the interval: P(a healthy session lies below ``centre - h``) = alpha/2."""
        tail = self.alpha / 2.0
        if self.sd <= 0:
            return 0.0
        if self.scales is not None:
            top = float(self.scales.max()) * float(_sps.norm.isf(tail / 2.0)) + self.sd
            return float(_opt.brentq(lambda h: float(np.mean(_spec.ndtr(-h / self.scales))) - tail, 0.0, top,
                                     xtol=1e-12))
        if self.df is not None:
            return float(_sps.t.isf(tail, self.df)) * self.sd
        return float(_sps.norm.isf(tail)) * self.sd

    @property
    def q(self) -> float:
        """The quantile in units of ``sd`` (the half-width over the plug-in SD)."""
        return self.half_width / self.sd if self.sd > 0 else 0.0

    @property
    def tolerance(self) -> float:
        """The slowdown (relative, below the centre) a healthy session exceeds with probability alpha/2."""
        return float(-math.expm1(-self.half_width))

    @property
    def detects(self) -> float:
        """The slowdown flagged in 19 of 20 sessions (the new session has the predicted spread)."""
        return float(-math.expm1(-(self.half_width + float(_sps.norm.ppf(0.95)) * self.sd)))

    @property
    def centre_value(self) -> float:
        return math.exp(self.centre)

    def change(self, median: float) -> float:
        """``median`` relative to the centre (+0.05: 5% above)."""
        return median / self.centre_value - 1.0

    def p(self, median: float) -> float:
        """Two-sided p of ``median`` under the interval (below ``alpha`` exactly when outside it)."""
        if self.sd <= 0:
            return 1.0 if math.log(median) == self.centre else 0.0
        below = self.cdf(math.log(median) - self.centre)
        return float(min(1.0, 2.0 * min(below, 1.0 - below)))

    @property
    def own(self) -> int:
        """The sessions recorded on the run's own machine (0 when it names none, or none of them is)."""
        return self.components.machine_means.get(self.machine, (0.0, 0))[1] if self.machine else 0

    def _where(self) -> str:
        """Which machine the run is judged as one on, and why."""
        c, m, own = self.components, self.machine, self.own
        if m is None:
            return ("a run on a machine none of them was recorded on is judged against the prediction interval "
                    "for a new machine" if self.new_machine else "judged as a run on the machine they were recorded on")
        if not self.new_machine and c.machines > 1:
            return f"this run's machine ({m}) has {own} of them: judged as a run on it"
        if not self.new_machine:
            return (f"all of them come from this run's machine ({m}): judged as a run on it" if own else
                    f"all of them come from one machine, not this run's ({m}): judged as a run on theirs, without "
                    "a machine term (one machine cannot measure it)")
        if own:
            return (f"this machine ({m}) has {own} session(s) in the baseline; judged as a new machine: record "
                    f"{self.needed - own} more session(s) here to judge it against its own")
        return f"none of them was recorded on this machine ({m}): judged as a new machine"

    @property
    def note(self) -> str:
        c = self.components
        where = self._where()
        text = (f"{c.line()}; {where}: ±{self.tolerance:.1%} around {self.centre_value:.4g}; a slowdown of "
                f"{self.detects:.1%} or more is flagged in 19 of 20 runs")
        if self.term:
            text += f" ({self.term})"
        elif self.new_machine and 1 < c.machines < 6:
            text += (f" (the machine term rests on {c.machines} machines, {c.machines - 1} degree(s) of freedom, "
                     "which widens the interval: record sessions on more machines to narrow it)")
        return text


@lru_cache(maxsize=64)
def _grid(df: int, k: int, shift: int) -> np.ndarray:
    """``k`` stratified chi-square quantiles on ``df`` degrees of freedom, in a fixed order (``shift``)."""
    u = (np.arange(k) + 0.5) / k
    if shift:  # a fixed permutation, so that the U and W grids pair as a Latin hypercube
        u = u[np.random.default_rng(shift).permutation(k)]
    out = np.asarray(_sps.chi2.ppf(u, df))
    out.flags.writeable = False
    return out


@lru_cache(maxsize=64)
def _grid_f(df: float, k: int) -> np.ndarray:
    """:func:`_grid` for a non-integer (effective) degrees of freedom."""
    out = np.asarray(_sps.chi2.ppf((np.arange(k) + 0.5) / k, df))
    out.flags.writeable = False
    return out


def pivot_scales(comp: Components, extra: float = 0.0, draws: int = PIVOT_DRAWS,
                 term: PooledTerm | None = None) -> np.ndarray:
    """The GPQ's predictive SDs of one more session on a new machine: ``sqrt(R_V)`` over a stratified grid
    of (U, W), U ~ chi2(g - 1), W ~ chi2(N - g); ``extra``: a known variance added (a shorter session);
    ``term``: the machine term pooled over the hardware, ``R_m = variance df / U`` with U ~ chi2(df), in
    place of this baseline's own."""
    g, df_w = comp.machines, comp.df_within
    sizes = np.array([c for _, c in comp.machine_means.values()], dtype=float)
    r_w = comp.sigma_within**2 * df_w / _grid(df_w, draws, 1)
    if term is not None:
        r_m = term.variance * term.df / _grid_f(term.df, draws)
    else:
        r_m = np.maximum(0.0, (comp.msb * (g - 1) / _grid(g - 1, draws, 0) - r_w) / comp.n0)
    with np.errstate(divide="ignore"):  # sessions without spread (copies): a centre variance of 0, not a warning
        r_centre = 1.0 / (1.0 / (r_m[:, None] + r_w[:, None] / sizes[None, :])).sum(axis=1)
    return np.sqrt(r_m + r_w + r_centre + extra)


def term_choice(comp: Components, term: PooledTerm | None) -> tuple[bool, str]:
    """Whether a new machine's interval uses the hardware's pooled machine term rather than the baseline's
    own, and the sentence that says which was used: the pooled one when it rests on more degrees of freedom
    than the baseline's ``g - 1``."""
    own = comp.machines - 1
    if term is None or term.df <= 0:
        return False, ""
    if term.df <= own:
        return False, (f"machine term: this baseline's own, {own} degree(s) of freedom, over the hardware's pooled "
                       f"{term.sigma:.1%} on {term.df:.1f}")
    return True, (f"machine term pooled over the hardware: {term.sigma:.1%} on {term.df:.1f} effective degrees of "
                  f"freedom from {term.source}, in place of this baseline's own {comp.sigma_machine:.1%} on {own}")


def predict(comp: Components, *, alpha: float = 0.01, machine: str | None = None,
            n_current: int | None = None, min_sessions: int = 1, term: PooledTerm | None = None) -> Prediction:
    """The prediction interval of one more session: on ``machine`` (the run's own) when at least
    ``min_sessions`` of the sessions were recorded on it, else on a new machine (the note says which, and
    why), with the hardware's pooled machine ``term`` when :func:`term_choice` says so. ``n_current``: the
    new session's sample count (default: as the recorded ones)."""
    extra = 0.0
    if n_current:  # a new session of fewer samples than the recorded ones: its own median is noisier
        per = (MEDIAN_EFFICIENCY * comp.sigma_run) ** 2
        extra = max(0.0, per * (1.0 / n_current - 1.0 / comp.samples_per_session))
    df_w = float(comp.df_within) if comp.df_within > 0 else None
    need = max(1, min_sessions)
    known = comp.machine_means.get(machine or "", (0.0, 0))[1] >= need and comp.machines > 1
    other = comp.machines == 1 and bool(machine) and machine not in comp.machine_means  # one machine, not the run's
    if known or (comp.machines == 1 and not (other and term_choice(comp, term)[0])):
        mean, n = comp.machine_means[machine] if known else next(iter(comp.machine_means.values()))  # type: ignore[index]
        var = comp.sigma_within**2 * (1.0 + 1.0 / n) + extra
        return Prediction(mean, math.sqrt(var), alpha, False, comp, df=df_w, machine=machine, needed=need)
    pooled, said = term_choice(comp, term)
    if pooled and df_w is not None and term is not None:
        scales = pivot_scales(comp, extra, term=term)
        var = term.variance + comp.sigma_within**2 + comp.centre_var + extra
        return Prediction(comp.centre, math.sqrt(var), alpha, True, comp, scales=scales, machine=machine,
                          needed=need, term=said)
    var = comp.sigma_machine**2 + comp.sigma_within**2 + comp.centre_var + extra
    if df_w is None:  # one session per machine: exchangeable sessions, Student t over N - 1
        return Prediction(comp.centre, math.sqrt(var), alpha, True, comp, df=float(comp.sessions - 1),
                          machine=machine, needed=need)
    return Prediction(comp.centre, math.sqrt(var), alpha, True, comp, scales=pivot_scales(comp, extra),
                      machine=machine, needed=need, term=said)


def best_detection(sd: float, slowdown: float, false_alarm_rate: float) -> float:
    """The share of sessions slower by ``slowdown`` that the best one-sided rule flags while it calls
    ``false_alarm_rate`` of healthy ones regressions, when a new session's log median has SD ``sd``
    (the limit the components set: no rule does better on average)."""
    if sd <= 0:
        return 1.0
    z = float(_sps.norm.isf(false_alarm_rate))
    return float(_sps.norm.cdf((-math.log1p(-slowdown) - z * sd) / sd))


__all__ = ["Components", "MachineSession", "PooledTerm", "Prediction", "best_detection", "components", "machine_of",
           "machines_of", "pivot_scales", "predict", "term_choice"]
