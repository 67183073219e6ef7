"""The verdict of ``specwatch ab`` and ``specwatch ab-ladder`` as a versioned JSON file (``--json FILE``).

What the printed report says, for a CI job or a page to read without parsing text: each pair's verdict, each
judged key's change with its interval, tolerance and per-round ratios, the versions a ladder dropped, the tests
each version's boots ran (:mod:`specwatch.revisions.outcomes`) and the exit code. Written atomically, once the
verdict is known; a run that ends without one (a usage error, a side not measured, a stopped ladder) writes none.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specwatch.errors import UsageError
from specwatch.revisions import outcomes
from specwatch.revisions.rounds import KeyVerdict, Rounds
from specwatch.store.result import atomic_write_json

#: 1: the first layout
FORMAT_VERSION = 1


def check_path(path: str | Path | None, flag: str = "--json") -> Path | None:
    """The verdict file's path, checked before anything is measured (UsageError: its folder does not exist, or
    it is a folder)."""
    if path is None:
        return None
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{flag} {path}: a folder, not a file")
    if not p.resolve().parent.is_dir():
        raise UsageError(f"{flag} {path}: no folder {p.resolve().parent}")
    return p


def _num(x: float | None) -> float | None:
    """A JSON number, or null where it is not finite."""
    return None if x is None or not math.isfinite(x) else round(float(x), 6)


def key_json(k: KeyVerdict) -> dict[str, Any]:
    """One judged key: head/base ratio with its interval at the settling look (``change``/``low``/``high`` as
    fractions), the tolerance, the verdict and its words, every round's ratio; ``faster``: the words of a change
    whose interval lies past the tolerance on the good side, else null; ``uneven``: the words of sides whose noise
    within a boot differs five times or more, else null (both added in layout 1, fields more)."""
    r = k.rounds
    return {"key": k.key, "unit": k.unit, "higher_is_better": k.higher_is_better, "verdict": k.verdict,
            "change": _num(r.ratio - 1), "low": _num(r.low - 1), "high": _num(r.high - 1), "p": _num(r.p),
            "tolerance": _num(k.tolerance), "base_median": _num(k.base_median), "head_median": _num(k.head_median),
            "rounds": r.rounds, "decided_at": k.decided_at, "round_ratios": [_num(x) for x in k.round_ratios],
            "message": k.message, "faster": k.faster, "uneven": k.uneven}


def pair_json(base: str, head: str, pair: Rounds) -> dict[str, Any]:
    """One judged pair: its names, verdict, rounds and keys."""
    return {"base": base, "head": head, "verdict": pair.verdict, "rounds": pair.rounds, "engine": pair.engine,
            "machine_class": pair.machine_class, "keys": [key_json(k) for k in pair.keys]}


def checks_json(boots: Sequence[Sequence[Mapping[str, str]]], names: Sequence[str]) -> list[dict[str, Any]]:
    """Each test beside the numbers (skipped everywhere: left out): its outcome per version (null: did not run)."""
    return [{"test": row.test, "differs": row.differs, "outcomes": dict(zip(names, row.cells, strict=True))}
            for row in outcomes.rows_of(boots)]


def write(path: str | Path, command: str, verdict: str, exit_code: int, pairs: Sequence[dict[str, Any]],
          checks: Sequence[dict[str, Any]], **more: Any) -> Path:
    """The verdict file, atomically."""
    data = {"version": FORMAT_VERSION, "command": command, "verdict": verdict, "exit_code": exit_code,
            "pairs": list(pairs), "checks": list(checks), **more}
    return atomic_write_json(path, data)
