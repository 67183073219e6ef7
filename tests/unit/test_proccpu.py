"""The CPU time of a process tree (signals.proccpu), read from a tree this test starts: a sleeping parent
whose child burns CPU, then sleeps (the test's own process could have other children under xdist)."""

from __future__ import annotations

import subprocess
import sys
import time

from specwatch.signals.proccpu import tree_cpu_seconds

#: a parent that sleeps while its child burns 0.4 s of CPU once told to (a line on stdin, so that the
#: test's first reading comes before the burn however late a loaded host schedules it) and then sleeps,
#: printing "done" when it has
TREE = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", '''
import sys, time
sys.stdin.readline()
end = time.process_time() + 0.4
while time.process_time() < end:
    pass
print("done", flush=True)
time.sleep(60)
'''])
child.wait()
"""


def test_a_process_trees_cpu_time_counts_its_childrens_work_and_not_their_sleep() -> None:
    tree = subprocess.Popen([sys.executable, "-c", TREE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        start = tree_cpu_seconds(tree.pid)
        assert start is not None
        assert tree.stdin is not None
        tree.stdin.write("go\n")
        tree.stdin.flush()
        assert tree.stdout is not None and tree.stdout.readline().strip() == "done"  # the child's burn is over
        burnt = tree_cpu_seconds(tree.pid)
        assert burnt is not None and burnt - start >= 0.3  # the child's work, though the parent slept
        time.sleep(0.3)
        slept = tree_cpu_seconds(tree.pid)
        assert slept is not None and slept - burnt < 0.05  # both asleep
    finally:
        import psutil

        for proc in psutil.Process(tree.pid).children(recursive=True):
            proc.kill()
        tree.kill()
        tree.wait()


def test_no_pid_or_a_gone_process_reads_none() -> None:
    assert tree_cpu_seconds(None) is None
    assert tree_cpu_seconds(2**22 + 12345) is None  # beyond pid_max's default: no such process
