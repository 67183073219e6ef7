"""A server's lifecycle: launch, process group, readiness, pool, reaper, GPUs and the machine fingerprint."""
