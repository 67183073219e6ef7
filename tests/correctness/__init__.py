"""Execution-path checks against live servers (marker ``correctness``)."""
