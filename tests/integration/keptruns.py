"""How many runs a recorded result holds: the runs measured, less those its ``dropped_runs`` line names.

A run with a request whose tokens arrived in one burst is no sample of the keys that time the decode window
(:data:`specwatch.judge.levels.DECODE_TIMED`: decode tok/s, mean ITL, ITL and TPOT percentiles); a loaded 2-core
machine makes some. Every other key keeps every run.
"""

from __future__ import annotations

import re
from typing import Any

from specwatch.judge.levels import DECODE_TIMED

DROPPED = re.compile(r"^(\d+) of (\d+) run\(s\) of .* left out of .* \(run ([\d, ]+)\): run (\d+): .+$")


def runs_kept(result: dict[str, Any], runs: int) -> int:
    """``runs`` less the runs ``result`` says it left out. Only a decode-timed key may leave runs out; its line must
    count the runs measured, name as many distinct runs as it says, each one of them, and keep at least one."""
    assert result["extra"]["runs"] == runs, result
    said = result["extra"].get("dropped_runs", "")
    if not said:
        return runs
    assert result["metric"] in DECODE_TIMED, result
    m = DROPPED.match(said)
    assert m is not None, said
    named = [int(i) for i in m[3].split(", ")]
    assert int(m[2]) == runs and len(set(named)) == len(named) == int(m[1]) < runs, said
    assert all(1 <= i <= runs for i in named) and int(m[4]) in named, said
    return runs - len(named)
