"""The machine term of a piece of hardware, pooled over every baseline measured on it (pure).

A baseline's own machine term rests on ``g - 1`` degrees of freedom (``g`` machines), and a baseline of one
profile seldom has more than 3 machines. But the term belongs to the hardware: a lease whose GPUs are slow is
slow for every profile. Each *dataset* (one profile's sessions of one metric, in one machine class, grouped by
machine) with sessions on 2 or more machines gives an unbiased moment estimate of the term's variance (log
scale), ``e = (MSB - MSW) / n0`` (:func:`specwatch.judge.variance.components`), with variance about
``2 (sigma_m² + c)² / (g - 1)``, ``c = MSW / n0`` being what the machines' means owe to their sessions' own
spread. :func:`pool` averages them with inverse-variance weights ``(g - 1) / (sigma_m² + c)²``, iterated to a
fixed point, and gives the pooled estimate its effective degrees of freedom ``sum (g - 1) (sigma_m² / (sigma_m²
+ c))²`` (Satterthwaite): a dataset whose sessions are too noisy to place a machine adds almost none, one of many
tight sessions per machine adds its full ``g - 1``. The drift gate then integrates a new machine's interval over
``sigma_m² df / chi2(df)`` (:func:`specwatch.judge.variance.pivot_scales`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from specwatch.judge.variance import Components, PooledTerm

#: fixed-point iterations of the weights (the estimate settles in a handful)
ITERATIONS = 50


@dataclass(frozen=True)
class Dataset:
    """One dataset's share of the pooled term."""

    name: str
    machines: int
    sessions: int
    estimate: float  # (MSB - MSW) / n0, unclipped (log-scale variance)
    within: float  # c = MSW / n0: the machines' means' own noise in that estimate
    df: float  # its effective degrees of freedom in the pool

    @property
    def sigma(self) -> float:
        """Its own machine term (clipped at 0)."""
        return max(0.0, self.estimate) ** 0.5


@dataclass(frozen=True)
class Pool:
    """The pooled machine term and each dataset's share in it."""

    term: PooledTerm
    datasets: tuple[Dataset, ...]


def usable(comp: Components) -> bool:
    """Whether a dataset says anything about the machine term: 2 or more machines and a within-machine spread."""
    return comp.machines > 1 and comp.df_within > 0


def pool(datasets: Mapping[str, Components], source: str = "") -> Pool | None:
    """The machine term pooled over ``datasets`` (name -> components) that are :func:`usable`; None when none is,
    or when the pooled estimate is 0 (then no dataset measured a term, and none is assumed)."""
    use = {k: c for k, c in datasets.items() if usable(c)}
    if not use:
        return None
    k = {n: float(c.machines - 1) for n, c in use.items()}
    est = {n: (c.msb - c.sigma_within**2) / c.n0 for n, c in use.items()}
    within = {n: c.sigma_within**2 / c.n0 for n, c in use.items()}
    s2 = max(1e-12, sum(k[n] * est[n] for n in use) / sum(k.values()))
    for _ in range(ITERATIONS):
        w = {n: k[n] / (s2 + within[n]) ** 2 for n in use}
        s2 = max(1e-12, sum(w[n] * est[n] for n in use) / sum(w.values()))
    if s2 <= 1e-12:
        return None
    shares = tuple(Dataset(n, use[n].machines, use[n].sessions, est[n], within[n],
                           k[n] * (s2 / (s2 + within[n])) ** 2) for n in use)
    df = sum(d.df for d in shares)
    src = source or f"{len(shares)} dataset(s)"
    return Pool(PooledTerm(s2, df, src), shares)


__all__ = ["ITERATIONS", "Dataset", "Pool", "pool", "usable"]
