"""A server's lifecycle: the launch (argv, environment), process group, readiness, pool, reaper, GPUs."""

__all__ = [
    "gpu",
    "launch",
    "pool",
    "process",
    "reaper",
]
