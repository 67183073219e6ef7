"""Load: the HTTP client, greedy generation, datasets and the built-in prompt set, workloads and
load levels, and measuring them on live servers."""

__all__ = [
    "client",
    "dataset",
    "gpuclock",
    "greedy",
    "measure",
    "multiturn",
    "openai_client",
    "promptset",
    "workload",
    "yardstick",
]
