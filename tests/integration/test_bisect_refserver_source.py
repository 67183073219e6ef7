"""Bisection over a server's own sources on CPU: the CPU variant of the H200 bisection over SGLang's (issue 37).

docs/validation/sglang_history.py builds a history on top of a server package; on the H200 the package is SGLang
0.5.16's, here it is the reference server's own (``src/specwatch`` copied into the history, its profile's
``pythonpath`` putting that copy first, so each revision's code is what serves). One commit cannot boot (a syntax
error in the engine: skipped, never blamed), one makes every decode step spin 4 ms more (the slowing change in the
server's code, as a real regression is, about 4x slower), and the bisection must name it. The H200 run of the
same builder is the harness scenario sglang-8b-bisect-x1.
"""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from perfrun import PLAIN_CPU

from specwatch.revisions.gitbisect import bisect_commits

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "validation"))
from sglang_history import Edit, Source, build  # noqa: E402  (docs/validation is not a package)

ENGINE = "refserver/engine.py"
PROFILE = PLAIN_CPU.format(extra='pythonpath = ["src"]')
SOURCE = Source("specwatch", "src", "refserver", "profile.toml", PROFILE)
DECODE_LOOP = "        for i, (r, toks) in enumerate(zip(batch, commits, strict=True)):\n"
HISTORY = (
    Edit("reference server as it is"),
    Edit("engine: say what the busy-wait is for", ENGINE, "def _spin(seconds: float) -> None:\n",
         "# _spin: real CPU work, for the faults that slow the server on purpose\n"),
    Edit("engine: a typo", ENGINE, "def _spin(seconds: float) -> None:\n", "def broken(:\n", boots=False),
    Edit("engine: fix the typo", undo=2),
    Edit("engine: re-check the batch after every decode step", ENGINE, DECODE_LOOP,
         "        _spin(0.004)  # re-check the batch (the slowing change)\n", slows=True),
    Edit("docs: engine notes", ENGINE, "def _spin(seconds: float) -> None:\n", "# notes: see refserver docs\n",
         slows=True),
)


def test_the_history_is_built_on_the_reference_servers_own_sources(tmp_path: Path) -> None:
    made = build(ROOT / "src", tmp_path / "repo", HISTORY, SOURCE)
    assert [e.message for _, e in made] == [e.message for e in HISTORY]
    engine = (tmp_path / "repo" / "src" / "specwatch" / ENGINE).read_text()
    assert "_spin(0.004)  # re-check the batch" in engine and "def broken(:" not in engine
    shown = subprocess.run(["git", "-C", str(tmp_path / "repo"), "show", f"{made[2][0]}:src/specwatch/{ENGINE}"],
                           check=True, capture_output=True, text=True).stdout
    assert "def broken(:" in shown


# nightly: 3-4 bisect steps of 2-4 rounds each boot the server 12-30 times (5-12 min on 2 cores); the default run
# builds the history (above, and tests/unit/test_sglang_history.py) and bisects a profile history in
# tests/unit/test_bisect.py
@pytest.mark.nightly
def test_bisect_names_the_commit_in_the_servers_code_that_slowed_it(tmp_path: Path) -> None:
    made = build(ROOT / "src", tmp_path / "repo", HISTORY, SOURCE)
    shas = [sha for sha, _ in made]
    out = io.StringIO()
    outcome = bisect_commits(
        repo=tmp_path / "repo", good=shas[0], bad=shas[-1], workdir=ROOT, memo=tmp_path / "memo", out=out,
        # a tolerance the 4x slowdown clears by far and a 2-core machine's rounds (20-25 % apart beside a CI run)
        # can rule out for the healthy commits: at the default one (28 %) they ended unsure there, candidates only
        timeout_s=300, round_history=str(ROOT / "baselines"), tolerance=0.5,
        pytest_args=["-m", "perf", str(ROOT / "tests" / "perf" / "test_throughput.py"), "-k", "drift and decode",
                     "-p", "no:cacheprovider", "--specwatch-profiles={checkout}/profile.toml",
                     f"--specwatch-report-dir={tmp_path / 'reports'}", "--specwatch-runs=5", "--specwatch-warmup=1"],
    )
    text = out.getvalue()
    assert outcome.first_bad == shas[4], text
    assert outcome.last_good == shas[3], text
    verdicts = {m.ident: m.verdict for m in outcome.visited}
    assert verdicts.get(shas[2], "skip") == "skip", text  # the commit that cannot boot is never blamed
    assert all(verdicts.get(s) != "bad" for s in shas[:4]), text
    assert shas[4][:10] in text and "checkout restored" in text
