"""How often each detector false-alarms and flags 8% on a *new* machine, in worlds drawn from the variance
components of the committed ref-large sessions (docs/reference/drift-gate.md, "Why the targets are out of
reach").

    python docs/reference/drift_gate_simulation.py [WORLDS]        # default 300; Otava's row needs otava

Each world draws 3 machines (machine term), 15 sessions each (boot-to-boot), 16 samples each (run noise),
with the components that ``specwatch.judge.variance.components`` fits to
``baselines/h200x1/large-eagle3-tuned.json`` (decode tok/s); then holds out each machine in turn and judges 5
of its sessions, as drawn and 8% slower, against the other two machines' sessions, exactly as
``specwatch baseline check --leave-one-machine-out`` does on the recorded data.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from specwatch.cli import peers
from specwatch.judge import replay, variance
from specwatch.store.sessions import baseline_sessions

ROOT = Path(__file__).resolve().parents[2]


def main(worlds: int) -> None:
    _, keys = baseline_sessions(ROOT / "baselines" / "h200x1" / "large-eagle3-tuned.json")
    ks = next(k for k in keys if k.metric == "decode_tok_s")
    comp = variance.components(ks.sessions)
    print(f"fitted to {ks.key}: {comp.line()}")
    rng = np.random.default_rng(0)
    judge = replay.Judge(True, 0.05, 0.01, None, n_resamples=100)
    rows = [("specwatch drift gate", judge.flags)]
    rows += [(peers.LABELS[n], d) for n in ("pytest-benchmark", "otava")
             if not isinstance(d := peers.detector(n, True), str)]
    counts = {name: [0, 0, 0] for name, _ in rows}
    for _ in range(worlds):
        machines = rng.normal(0.0, comp.sigma_machine, 3)
        sessions = [variance.MachineSession(np.exp(np.log(205.0) + m + rng.normal(0.0, comp.sigma_boot)
                                                   + rng.normal(0.0, comp.sigma_run, 16)), f"m{j}")
                    for j, m in enumerate(machines) for _ in range(15)]
        for j in range(3):
            others = [s for s in sessions if s.machine != f"m{j}"]
            mine = [s for s in sessions if s.machine == f"m{j}"]
            for k in rng.choice(len(mine), 5, replace=False):
                for name, flagged in rows:
                    counts[name][0] += flagged(list(mine[k]), others)
                    counts[name][1] += flagged([x * 0.92 for x in mine[k]], others)
                    counts[name][2] += 1
    print(f"{worlds} worlds, {worlds * 15} held-out sessions")
    print(f"{'detector':<46}  false alarms  flags 8%")
    for name, (fa, det, n) in counts.items():
        print(f"{name:<46}  {fa / n:>12.1%}  {det / n:>8.1%}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
