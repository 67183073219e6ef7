"""The CPU time a server's processes used: ``/proc/<pid>/stat`` of the process and its descendants (psutil).

On a shared machine a server's wall-clock times hold the time it waited for a CPU while other processes ran;
its CPU time does not. A measurement reads it around each run (:mod:`specwatch.load.measure`), so a server
that decodes on the CPU can be timed by the work it did rather than by when the machine let it do it.
"""

from __future__ import annotations

__all__ = ["tree_cpu_seconds"]


def tree_cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds of ``pid`` and its living descendants so far; None when it cannot be read."""
    if not pid:
        return None
    import psutil  # local: only when a server is measured

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except (psutil.Error, OSError):
        return None
    total = 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
        except (psutil.Error, OSError):  # a child that exited in between: its time is gone with it
            continue
        total += t.user + t.system
    return total
