"""Prefix reuse end to end on CPU: `pytest -m perf tests/perf/test_prefix_reuse.py` against a plain and a speculative
reference server.

The reference server keeps a static KV slot per request and no prefix cache: every reply says ``cached_tokens: 0``.
A probe on the plain server (one session's first two turns) then finds nothing of the resent prompt cached, and
the gate skips saying so (the workload cannot tell) instead of passing, without running the whole workload. The
run also shows that the second turn's prompt resent the first prompt and its output: the prompt tokens the server
counted are the workload's sizes to the token.
"""

from __future__ import annotations

import re
from pathlib import Path

from perfrun import pair_profile, run_perf

from specwatch.load.multiturn import MultiTurn

SHAPE = "sessions=4,turns=3,concurrency=2,first_tokens=32,user_tokens=8,output_tokens=8"


def test_without_a_prefix_cache_the_gate_skips_saying_why(tmp_path: Path) -> None:
    out = run_perf(tmp_path, pair_profile(), ["test_prefix_reuse.py"], "-p", "no:randomly", "-s",
                   "--specwatch-machine-class=ci-cpu", f"--specwatch-prefix-workload={SHAPE}", timeout=300)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-4000:]
    assert "1 skipped" in text, text[-4000:]
    wl = MultiTurn.parse(SHAPE)
    assert f"live prefixes need {wl.live_tokens():,} KV tokens" in text  # the pool a user would size, printed
    skip = next(ln for ln in text.splitlines() if ln.startswith("SKIPPED"))
    second = wl.prompt_tokens(1)  # the probe's second turn resent the first prompt and its output
    assert (f"prefix reuse on eagle3: not checked: the plain server plain cached none of the {second:,} tokens of a "
            "resent prompt (one session's second turn, alone on the server): no prefix cache") in skip, skip
    for turn in range(2):  # the server's own prompt counts
        said = re.search(rf"plain reuse probe turn {turn}: (\d+)/(\d+) prompt tokens cached", text)
        assert said is not None, text[-4000:]
        assert (int(said[1]), int(said[2])) == (0, wl.prompt_tokens(turn))
    assert "multi-turn turn 0" not in text  # the probe said enough: the workload did not run
