"""The environment check's "no view could answer" reason is summarised per process, not per variable.

A tuned server whose workers' ``/proc`` environ is blank, judged from an earlier sibling: each
worker is "likely ok" for every variable. The reason names each process once and the variables
once per process (it used to be one clause per variable and process: about 5700 characters on one
line for the recorded capture below).
"""

from __future__ import annotations

from pathlib import Path

from specwatch.checks.envcheck import check_environment
from specwatch.checks.inspect import inspect_capture
from specwatch.profiles.loading import load_profiles
from specwatch.profiles.profile import TUNED_NCCL
from specwatch.signals.procenv import EnvRead, ProcInfo
from specwatch.store.capture import read_capture

LEAK = Path(__file__).parent / "data" / "captures" / "sglang-eagle3-untuned-leak"
WORKERS = {24434: "sglang::scheduler_TP0", 24435: "sglang::scheduler_TP1", 24436: "sglang::detokenizer"}


def test_blank_tuned_workers_read_as_one_clause_per_process_group() -> None:
    env = inspect_capture(read_capture(LEAK), load_profiles(None).get("eagle3-tuned"))[0]
    assert env.skipped, env.message
    reason = env.reason
    assert "\n" not in reason and len(reason) < 600, (len(reason), reason)
    for pid, title in WORKERS.items():
        assert reason.count(f"(pid {pid})") == 1 and f"{title} (pid {pid})" in reason, reason
    # the three workers share one explanation: said once, with the sibling that suggests they are fine
    assert reason.count("likely ok for all 6 variables") == 1, reason
    assert reason.count("(pid 24433)") == 1 and "an inference never passes a process" in reason
    # every variable is still one finding of its own in the details
    unknown = {(f.pid, f.variable) for f in env.details.unknowns}
    assert unknown == {(pid, var) for pid in WORKERS for var in TUNED_NCCL}


def _proc(pid: int, ppid: int, title: str, env: dict[str, str] | None) -> ProcInfo:
    read = EnvRead("ok", env=env, nbytes=100) if env is not None else EnvRead("retitled", nbytes=100)
    return ProcInfo(pid, ppid, title, [title], read)


def test_variables_the_sibling_does_not_carry_are_named_and_processes_that_differ_are_separate() -> None:
    main = _proc(10, 1, "python -m sglang.launch_server --model m", dict(TUNED_NCCL))
    tracker = _proc(11, 10, "python -c from multiprocessing.resource_tracker import main", {"NCCL_ALGO": "Ring"})
    worker = _proc(12, 10, "sglang::scheduler", None)
    other = _proc(13, 99, "sglang::detokenizer", None)  # another parent: no sibling speaks for it
    report = check_environment([main, tracker, worker, other], TUNED_NCCL, "tuned",
                               starts={10: 1.0, 11: 2.0, 12: 3.0, 13: 3.5})
    reason = report.unknown_reason()
    clauses = reason.split("; likely ok")
    assert len(clauses) == 2, reason  # one inference, for pid 12 only
    assert "likely ok for NCCL_ALGO: its sibling" in reason and "(pid 11)" in reason, reason
    assert reason.count("(pid 12)") == 1 and reason.count("(pid 13)") == 1, reason
