"""The CPU time of a process tree (signals.proccpu), read from this test's own process."""

from __future__ import annotations

import os
import time

from specwatch.signals.proccpu import tree_cpu_seconds


def test_a_process_trees_cpu_time_grows_with_the_work_it_does_and_not_while_it_sleeps() -> None:
    before = tree_cpu_seconds(os.getpid())
    assert before is not None and before > 0
    end = time.process_time() + 0.2
    while time.process_time() < end:  # burn 0.2 s of CPU
        pass
    busy = tree_cpu_seconds(os.getpid())
    assert busy is not None and busy - before >= 0.15
    time.sleep(0.3)
    slept = tree_cpu_seconds(os.getpid())
    assert slept is not None and slept - busy < 0.1


def test_no_pid_or_a_gone_process_reads_none() -> None:
    assert tree_cpu_seconds(None) is None
    assert tree_cpu_seconds(2**22 + 12345) is None  # beyond pid_max's default: no such process
