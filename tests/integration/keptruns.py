"""How many runs a recorded result holds: the runs measured, less those its ``dropped_runs`` line names.

A run with a request whose tokens arrived in one burst is no sample of the keys that time the decode window
(:data:`specwatch.judge.levels.DECODE_TIMED`: decode tok/s, mean ITL, ITL and TPOT percentiles); a loaded 2-core
machine makes some. Every other key keeps every run.
"""

from __future__ import annotations

from typing import Any

from specwatch.judge.levels import DECODE_TIMED


def runs_kept(result: dict[str, Any], runs: int) -> int:
    """``runs`` less the runs ``result`` says it left out; no other key may leave one out."""
    said = result["extra"].get("dropped_runs", "")
    assert not said or result["metric"] in DECODE_TIMED, result
    return runs - (int(said.split(" of ", 1)[0]) if said else 0)
