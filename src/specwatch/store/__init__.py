"""What outlives a run: results files, baselines, history (SQLite or PostgreSQL), the machine
fingerprint, recorded sessions, baselines rebuilt from the history, and the one atomic writer.
"""

__all__ = [
    "atomic",
    "baseline",
    "benchfile",
    "capture",
    "classspread",
    "driftinput",
    "history",
    "history_base",
    "history_postgres",
    "history_sqlite",
    "machine",
    "machineterm",
    "rebuild",
    "result",
    "roundspread",
    "sessions",
]
