"""Parsing what a server shows from outside: SGLang log lines, Prometheus text, NCCL debug lines (pure)."""
