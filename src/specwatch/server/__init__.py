"""A server's lifecycle: the launch (argv, environment), process group, readiness, pool, reaper, GPUs, and what
else shares the host (neighbours)."""

__all__ = [
    "gpu",
    "launch",
    "neighbours",
    "pool",
    "process",
    "reaper",
]
