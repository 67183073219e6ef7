"""NCCL's own view of the environment, on logs of the reference server at TP=2 on two H200s (2026-11-29).

fixtures/nccl/ holds the NCCL INFO lines of the tuned and untuned servers of the GPU validation run
(docs/validation/README.md): the tuned workers applied all six variables on both ranks, the untuned
ones none (only the machine's own NCCL_NVLS_ENABLE=0).
"""

from __future__ import annotations

from pathlib import Path

from specwatch.profiles.profile import TUNED_NCCL
from specwatch.signals.ncclenv import compare, parse_nccl_lines

LOGS = Path(__file__).resolve().parents[2] / "fixtures" / "nccl"


def _procs(name: str):
    with open(LOGS / f"h200x2-tp2-{name}.log") as fh:
        return parse_nccl_lines(fh)


def test_tuned_server_ranks_applied_every_tuned_variable() -> None:
    procs = _procs("eagle3-tuned")
    assert sorted(rank for _, rank in procs) == [0, 1]
    diffs = compare(TUNED_NCCL, procs, ignore=("NCCL_NVLS_ENABLE",))
    assert all(d.clean for d in diffs), [d.lines() for d in diffs]
    for proc in procs.values():
        assert proc.applied["NCCL_PROTO"] == "LL" and proc.applied["NCCL_BUFFSIZE"] == "16777216"


def test_untuned_server_ranks_applied_none_of_them() -> None:
    for proc in _procs("eagle3-untuned").values():
        assert not set(TUNED_NCCL) & set(proc.applied)


def test_launched_but_not_applied_is_reported() -> None:
    diffs = compare(TUNED_NCCL, _procs("eagle3-untuned"), ignore=("NCCL_NVLS_ENABLE",))
    assert diffs and all(set(d.not_applied) == set(TUNED_NCCL) for d in diffs)
