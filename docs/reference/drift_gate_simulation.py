"""How often the drift gate (and its peers) false-alarm and flag 8% on a *new* machine, in worlds drawn from
the variance components of the committed ref-large sessions (docs/reference/drift-gate.md, "Calibration on a
new machine").

    python docs/reference/drift_gate_simulation.py [WORLDS [INTERVAL_WORLDS]]   # defaults 200 and 4000

Three parts, each seeded:

1. **The interval alone** (``INTERVAL_WORLDS`` worlds per row): ``g`` reference machines (machine term), 15
   sessions each (boot-to-boot), 16 samples each (run noise), with the components that
   ``specwatch.judge.variance.components`` fits to ``baselines/h200x1/large-eagle3-tuned.json`` (decode
   tok/s), and one healthy session on a new machine. The rate at which it falls below the interval (the
   one-sided false alarm, promised ``alpha/2`` = 0.5% at the gate's alpha 1%), the rate at which it does 8%
   slower, and the median tolerance, for the gate's quantile (the GPQ of ``judge.variance``) and the
   alternatives evaluated: the normal plug-in quantile (the gate before), Satterthwaite's degrees of freedom
   for the total variance with a t quantile, and a moderated machine term (a prior of stated degrees of
   freedom; right, and at half the true term). Then the gate's rows with no machine term at all.
2. **The full gate and its peers** (``WORLDS`` worlds): each world draws ``g + 1`` machines, holds out each
   in turn and judges 5 of its sessions, as drawn and 8% slower, against the other machines' sessions,
   exactly as ``python docs/validation/baseline_check.py --leave-one-machine-out`` does on the recorded data
   (``g`` = 2, the committed file's case, then 3). The MC error is over held-out machines (their sessions share a draw).
3. **Pooling the machine term across the class's baselines**: which machines (leases) the h200x1 baselines
   share, the data a pooled machine term would rest on.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
from scipy import stats as sps

from specwatch.judge import replay, variance
from specwatch.store.baseline import NOT_BASELINES
from specwatch.store.sessions import baseline_sessions

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "validation"))
import peers  # noqa: E402 (docs/validation is not a package: the peer detectors of baseline_check.py)

ALPHA = 0.01
SESSIONS, SAMPLES, SLOW = 15, 16, 0.92


def _weights(comp: variance.Components, sm2: float) -> tuple[np.ndarray, np.ndarray]:
    n = np.array([c for _, c in comp.machine_means.values()], dtype=float)
    return n, 1.0 / (sm2 + comp.sigma_within**2 / n)


def _linear(comp: variance.Components, msb: float, sm2: float, df_b: float) -> tuple[float, float]:
    """The new-machine variance (machine term from ``msb``) and its Satterthwaite degrees of freedom."""
    msw, g = comp.sigma_within**2, comp.machines
    n, w = _weights(comp, sm2)
    s2, s3 = float((w**2).sum() / w.sum() ** 2), float((w**2 / n).sum() / w.sum() ** 2)
    a = (1.0 + s2) / comp.n0
    b = 1.0 + s3 - a
    var = sm2 + msw + 1.0 / float(w.sum())
    lin = a * msb + b * msw
    df = lin**2 / ((a * msb) ** 2 / df_b + (b * msw) ** 2 / comp.df_within) if g > 1 else math.inf
    return var, df


def half_widths(comp: variance.Components) -> dict[str, float]:
    """The log half-width of the new-machine interval at ALPHA by each method evaluated (the gate's first)."""
    pred = variance.predict(comp, alpha=ALPHA)
    g, tail = comp.machines, ALPHA / 2
    out = {"GPQ (the gate)": pred.half_width, "normal plug-in (before)": float(sps.norm.isf(tail)) * pred.sd}
    _, df = _linear(comp, comp.msb, comp.sigma_machine**2, g - 1)
    out["Satterthwaite t"] = float(sps.t.isf(tail, df)) * pred.sd
    nu0 = 4.0  # a prior worth four more machines
    for name, s0 in (("moderated, prior right", FITTED.sigma_machine),
                     ("moderated, prior half", FITTED.sigma_machine / 2)):
        msb = (nu0 * (comp.n0 * s0**2 + comp.sigma_within**2) + (g - 1) * comp.msb) / (nu0 + g - 1)
        var, df = _linear(comp, msb, max(0.0, (msb - comp.sigma_within**2) / comp.n0), nu0 + g - 1)
        out[f"{name} ({s0:.1%}, 4 df)"] = float(sps.t.isf(tail, df)) * math.sqrt(var)
    return out


def _world(rng: np.random.Generator, comp: variance.Components, g: int, sm: float) -> list[variance.MachineSession]:
    return [variance.MachineSession(np.exp(np.log(205.0) + m + rng.normal(0.0, comp.sigma_boot)
                                           + rng.normal(0.0, comp.sigma_run, SAMPLES)), f"m{j}")
            for j, m in enumerate(rng.normal(0.0, sm, g)) for _ in range(SESSIONS)]


def interval(comp: variance.Components, worlds: int) -> None:
    print(f"\n1. the new-machine interval alone, {worlds} worlds per row: one-sided false alarms (promised "
          f"{ALPHA / 2:.1%}, MC error ±{2 * math.sqrt(ALPHA / 2 * (1 - ALPHA / 2) / worlds):.2%} at 2 SE), 8% flagged, "
          "median tolerance")
    for sm, gs, only_gate in ((comp.sigma_machine, (2, 3, 4, 6, 10), False), (0.0, (2, 3, 6), True)):
        print(f"  machine term {sm:.1%}:")
        for g in gs:
            rng = np.random.default_rng(100 + g)
            counts: dict[str, list] = {}
            for _ in range(worlds):
                ref = variance.components(_world(rng, comp, g, sm))
                new = (np.log(205.0) + rng.normal(0.0, sm) + rng.normal(0.0, comp.sigma_boot)
                       + float(np.median(rng.normal(0.0, comp.sigma_run, SAMPLES))))
                hws = half_widths(ref)
                for name, h in (list(hws.items())[:1] if only_gate else hws.items()):
                    c = counts.setdefault(name, [0, 0, []])
                    c[0] += new < ref.centre - h
                    c[1] += new + math.log(SLOW) < ref.centre - h
                    c[2].append(-math.expm1(-h))
            for name, (fa, det, tols) in counts.items():
                print(f"    {g:>2} machines  {name:<36} {fa / worlds:>7.2%}  {det / worlds:>6.1%}  "
                      f"{float(np.median(tols)):>6.1%}")


def gate_and_peers(comp: variance.Components, worlds: int, g: int) -> None:
    rng = np.random.default_rng(0 if g == 2 else g)  # g = 2: the worlds of the earlier runs of this script
    judge = replay.Judge(True, 0.05, ALPHA, None, n_resamples=100)
    rows = [("specwatch drift gate", judge.flags)]
    rows += [(peers.LABELS[n], d) for n in ("pytest-benchmark", "otava")
             if not isinstance(d := peers.detector(n, True), str)]
    folds: dict[str, list[tuple[int, int]]] = {name: [] for name, _ in rows}
    for _ in range(worlds):
        sessions = _world(rng, comp, g + 1, comp.sigma_machine)
        for j in range(g + 1):
            others = [s for s in sessions if s.machine != f"m{j}"]
            mine = [s for s in sessions if s.machine == f"m{j}"]
            picked = rng.choice(len(mine), 5, replace=False)
            for name, flagged in rows:
                folds[name].append((sum(flagged(list(mine[k]), others) for k in picked),
                                    sum(flagged([x * SLOW for x in mine[k]], others) for k in picked)))
    n = worlds * (g + 1) * 5
    print(f"\n2. the full gate and its peers, {g} reference machines: {worlds} worlds, {n} held-out sessions "
          "(± 2 SE over held-out machines)")
    print(f"  {'detector':<46}  false alarms       flags 8%")
    for name, f in folds.items():
        fa, det = np.array(f, dtype=float).T
        se = [2 * math.sqrt(len(x) * float(x.var(ddof=1))) / n for x in (fa, det)]
        print(f"  {name:<46}  {fa.sum() / n:>6.2%} ±{se[0]:.2%}  {det.sum() / n:>6.1%} ±{se[1]:.1%}")


def pooling() -> None:
    print("\n3. pooling the machine term across h200x1's baselines: the machines (leases) they share")
    labels = {}
    for path in sorted((ROOT / "baselines" / "h200x1").glob("*.json")):
        if path.name in NOT_BASELINES:
            continue
        _, keys = baseline_sessions(path)
        ks = next((k for k in keys if k.metric == "decode_tok_s"), None)
        if ks is not None:
            labels[path.stem] = {m: ks.machines.count(m) for m in dict.fromkeys(ks.machines)}
            print(f"  {path.stem:<20} {len(ks.sessions):>3} sessions: " + ", ".join(
                f"{m[:20]} ({c})" for m, c in labels[path.stem].items()))
    names = list(labels)
    shared = {(a, b): sorted(set(labels[a]) & set(labels[b])) for i, a in enumerate(names) for b in names[i + 1:]}
    most = max(shared.items(), key=lambda kv: len(kv[1]))
    print(f"  large-eagle3-tuned shares {max(len(v) for k, v in shared.items() if 'large-eagle3-tuned' in k)} "
          f"machine(s) with any other; the most any two share is {len(most[1])} ({', '.join(most[1])}): a "
          "correlation of per-lease offsets across configurations needs 3 or more in common")


def main(worlds: int, interval_worlds: int) -> None:
    print(f"fitted to {KEY}: {FITTED.line()}")
    interval(FITTED, interval_worlds)
    for g in (2, 3):
        gate_and_peers(FITTED, worlds, g)
    pooling()


_, _KEYS = baseline_sessions(ROOT / "baselines" / "h200x1" / "large-eagle3-tuned.json")
_DECODE = next(k for k in _KEYS if k.metric == "decode_tok_s")
KEY, FITTED = _DECODE.key, variance.components(_DECODE.sessions)

if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200, int(sys.argv[2]) if len(sys.argv) > 2 else 4000)
