"""What a server shows from outside, parsed: SGLang log lines, Prometheus text, NCCL debug lines,
process trees, their environments and CPU time, the probe's records, ``CUDA_VISIBLE_DEVICES``, what
``nvidia-smi`` prints, what an interpreter has installed (asked of it without importing the package).
Imports nothing else of specwatch but ``specwatch.errors`` and the engines' process signatures
(:mod:`specwatch.engines`).
"""

__all__ = [
    "busywindows",
    "devices",
    "installed",
    "logscan",
    "ncclenv",
    "nvidiasmi",
    "probe",
    "proccpu",
    "procenv",
    "promtext",
]
