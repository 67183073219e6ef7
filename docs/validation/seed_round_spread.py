"""Seed baselines/h200x1/round-spread.json from the `specwatch ab` runs of validation section 10.

Each round's head/base ratio is recomputed from the medians the ab log printed (4 significant
digits). Run from the repository root: python docs/validation/seed_round_spread.py
"""

import re
from pathlib import Path

from specwatch.store.roundspread import RoundSpread

LINE = re.compile(r"^\[ab\] round (\d+) (base|head): \S+/decode_tok_s ([\d.]+) tok/s")
spread = RoundSpread.for_class("baselines", "h200x1")
for log in sorted(Path("docs/validation/data/session6").glob("call*-ab-*.txt")):
    medians: dict[tuple[int, str], float] = {}
    for line in log.read_text().splitlines():
        if m := LINE.match(line):
            medians[(int(m[1]), m[2])] = float(m[3])
    rounds = sorted({r for r, _ in medians})
    ratios = [medians[(r, "head")] / medians[(r, "base")] for r in rounds if (r, "head") in medians]
    spread.add("decode_tok_s", ratios, f"validation section 10 (2026-11-30), {log.name}")
    print(log.name, " ".join(f"{(x - 1) * 100:+.2f}%" for x in ratios))
print(spread.save(), spread.prior("decode_tok_s"))
