"""NCCL's own record of the environment it applied: ``NCCL_X set by environment to V`` lines.

Pure: stdlib only. With ``NCCL_DEBUG=INFO`` (``NCCL_DEBUG_SUBSYS`` including ``INIT,ENV``) every
process that creates a communicator prints, per variable it read from its environment::

    <host>:<pid>:<tid> [<dev>] NCCL INFO NCCL_PROTO set by environment to LL
    <host>:<pid>:<tid> [<dev>] NCCL INFO NCCL_BUFFSIZE set by environment to 16777216.

String values have no final period, numeric values have one (stripped here, numeric only). This
is the only view that shows variables a worker set in itself after it started (they are not in
``/proc/<pid>/environ``) and it is unaffected by ``setproctitle`` blanking the environ block.
Caveat: NCCL prints only the variables it actually consulted on that code path, so a launched
variable missing here was either not in the process or not read by NCCL there.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = [
    "ALWAYS_SILENT",
    "NcclProcess",
    "RankDiff",
    "compare",
    "normalize_value",
    "parse_nccl_lines",
]

_PREFIX = r"(?P<host>[\w.\-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<rank>\d+)\] NCCL INFO "
_SET_RE = re.compile(_PREFIX + r"(?P<var>NCCL_[A-Z0-9_]+) set by environment to (?P<val>.*?)\s*$")
_VERSION_RE = re.compile(_PREFIX + r"NCCL version (?P<ver>\S+)")
_NUMERIC_DOT = re.compile(r"^[-+]?\d+\.$")
# Variables that configure NCCL's logging itself; NCCL never prints them as "set by environment".
ALWAYS_SILENT = frozenset({"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"})


def normalize_value(value: str) -> str:
    """Strip NCCL's final '.' from a numeric value (``"16777216."`` -> ``"16777216"``) only."""
    v = value.strip()
    return v[:-1] if _NUMERIC_DOT.match(v) else v


def _same(a: str, b: str) -> bool:
    a, b = normalize_value(a), normalize_value(b)
    if a == b:
        return True
    try:
        return int(a, 0) == int(b, 0)
    except ValueError:
        return False


@dataclass
class NcclProcess:
    """What one (pid, rank) reported: the variables NCCL applied and its version."""

    pid: int
    rank: int  # the number NCCL prints in brackets (the device/rank of the printing thread)
    host: str = ""
    applied: dict[str, str] = field(default_factory=dict)
    version: str | None = None


def parse_nccl_lines(lines: Iterable[str]) -> dict[tuple[int, int], NcclProcess]:
    """Group NCCL INFO lines by (pid, rank). Lines may carry other text before the NCCL prefix.

    The version line is attached to every rank of its pid that has no version yet.
    """
    procs: dict[tuple[int, int], NcclProcess] = {}
    versions: dict[int, str] = {}
    for raw in lines:
        line = raw.rstrip("\r\n")
        if "NCCL INFO" not in line:
            continue
        m = _SET_RE.search(line)
        if m:
            key = (int(m.group("pid")), int(m.group("rank")))
            proc = procs.setdefault(key, NcclProcess(pid=key[0], rank=key[1], host=m.group("host")))
            proc.applied[m.group("var")] = normalize_value(m.group("val"))
            continue
        m = _VERSION_RE.search(line)
        if m:
            key = (int(m.group("pid")), int(m.group("rank")))
            proc = procs.setdefault(key, NcclProcess(pid=key[0], rank=key[1], host=m.group("host")))
            proc.version = m.group("ver")
            versions[key[0]] = m.group("ver")
    for proc in procs.values():
        if proc.version is None and proc.pid in versions:
            proc.version = versions[proc.pid]
    return procs


@dataclass
class RankDiff:
    """Launched vs applied NCCL variables for one (pid, rank)."""

    pid: int
    rank: int
    not_applied: dict[str, str] = field(default_factory=dict)  # launched, NCCL did not report it
    not_launched: dict[str, str] = field(default_factory=dict)  # NCCL applied it, not launched
    mismatched: dict[str, tuple[str, str]] = field(default_factory=dict)  # var -> (launched, applied)
    matched: dict[str, str] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return not (self.not_applied or self.not_launched or self.mismatched)

    def lines(self) -> list[str]:
        """Human-readable lines, one per problem."""
        who = f"pid {self.pid} [rank {self.rank}]"
        out = [
            f"{who}: {v}={val!r} launched but NCCL did not report applying it"
            for v, val in sorted(self.not_applied.items())
        ]
        out += [
            f"{who}: {v}={val!r} applied by NCCL but not in the launch environment"
            for v, val in sorted(self.not_launched.items())
        ]
        out += [
            f"{who}: {v} launched as {a!r} but NCCL applied {b!r}"
            for v, (a, b) in sorted(self.mismatched.items())
        ]
        return out


def compare(
    launched: Mapping[str, str],
    procs: Mapping[tuple[int, int], NcclProcess],
    ignore: Iterable[str] = (),
) -> list[RankDiff]:
    """Per (pid, rank): launched ``NCCL_*`` variables vs what NCCL applied.

    ``launched`` may hold any variables; only ``NCCL_*`` ones are compared. ``ignore`` names
    variables to leave out on both sides (e.g. ones the engine sets itself, such as SGLang's
    ``NCCL_CUMEM_ENABLE``/``NCCL_NVLS_ENABLE``). Processes are returned sorted by (pid, rank).
    """
    skip = set(ignore) | ALWAYS_SILENT
    want = {k: normalize_value(v) for k, v in launched.items() if k.startswith("NCCL_") and k not in skip}
    out: list[RankDiff] = []
    for key in sorted(procs):
        proc = procs[key]
        diff = RankDiff(pid=proc.pid, rank=proc.rank)
        for var, val in want.items():
            if var not in proc.applied:
                diff.not_applied[var] = val
            elif _same(val, proc.applied[var]):
                diff.matched[var] = proc.applied[var]
            else:
                diff.mismatched[var] = (val, proc.applied[var])
        for var, val in proc.applied.items():
            if var not in want and var not in skip:
                diff.not_launched[var] = val
        out.append(diff)
    return out
