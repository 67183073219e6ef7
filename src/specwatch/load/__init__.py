"""Load: the HTTP client, greedy generation, workloads, and measuring them on live servers."""

__all__ = [
    "client",
    "gpuclock",
    "greedy",
    "measure",
    "workload",
]
