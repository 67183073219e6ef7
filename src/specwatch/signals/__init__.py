"""What a server shows from outside, parsed: SGLang log lines, Prometheus text, NCCL debug lines,
process trees, their environments and CPU time, the probe's records, ``CUDA_VISIBLE_DEVICES``, what
``nvidia-smi`` prints. Imports nothing
else of specwatch but ``specwatch.errors``.
"""

__all__ = [
    "busywindows",
    "devices",
    "logscan",
    "ncclenv",
    "nvidiasmi",
    "probe",
    "proccpu",
    "procenv",
    "promtext",
]
