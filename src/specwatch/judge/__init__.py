"""Judging: pure statistics, verdicts, change points and accept-length semantics.

Imports nothing else of specwatch but ``specwatch.errors``.
"""
