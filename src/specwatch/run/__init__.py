"""The pytest face: plugin hooks, activation (dormant until asked), options, fixtures, the session,
ordering, gates (judging evidence) and the gatekeeper (gathering it from the session), the run record and
what a run leaves behind (``summary.persist``).
"""

__all__ = [
    "activation",
    "evidence",
    "fixtures",
    "gatekeeper",
    "gates",
    "machine_probe",
    "options",
    "ordering",
    "plugin",
    "project",
    "record",
    "reference",
    "session",
    "specgates",
    "specread",
    "summary",
]
