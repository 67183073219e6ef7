"""The memo of measured revisions: one folder per fingerprint of the settings, one entry per measurement.

An entry is ``<ident>.entry.json`` (a :class:`RevisionRun`, written atomically), beside it the
measurement's ``<ident>.results.json`` and ``<ident>.log``. Entries of another memo version are
ignored (measured again), never migrated: their verdicts meant something else.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from specwatch.errors import SpecwatchError, UsageError
from specwatch.store.result import atomic_write_json, read_json

#: the verdict of one revision, as ``git bisect run`` understands it
GOOD, BAD, SKIP = "good", "bad", "skip"
MEMO_VERSION = 3  # 2: a step is an A/B against good in alternating rounds; 3: judged look after look (alpha spent)


@dataclass
class RevisionRun:
    """The memoised outcome of measuring one revision (a commit or a patch prefix)."""

    ident: str  # commit sha, or "prefix-<k>-<hash>"
    label: str  # subject line or patch description
    verdict: str  # good | bad | skip
    reason: str
    pytest_rc: int | None
    results: str | None  # path of the results file in the memo directory
    seconds: float
    measured: str  # ISO date
    session: str  # id of the bisection run that measured it
    # a step's verdict entry: {"kind": "step", "rounds": n, "keys": [...], ...}; {} for one measurement
    detail: dict[str, Any] = field(default_factory=dict)
    #: one measurement's tests and their outcomes, from its JUnit file: "<module>::<test>" -> "passed",
    #: "failed: <first line>", "skipped: <reason>" or "error: <first line>" (empty for entries written before)
    outcomes: dict[str, str] = field(default_factory=dict)
    cached: bool = field(default=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("cached")
        data["version"] = MEMO_VERSION
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RevisionRun:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data and k != "cached"}
        return cls(**known, cached=True)


#: an entry's file: one measurement (a round of a side) or one step's verdict, a :class:`RevisionRun` either way
ENTRY = ".entry.json"
#: the name entries had before (read, never written): memos recorded by earlier versions keep working
LEGACY_ENTRY = ".verdict.json"


class Memo:
    """One fingerprint directory: ``<ident>.entry.json``, ``<ident>.results.json``, ``<ident>.log``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def entry_path(self, ident: str) -> Path:
        """Where ``ident``'s entry is written (and read; an earlier version's ``.verdict.json`` is read too)."""
        return self.root / f"{ident}{ENTRY}"

    def results_path(self, ident: str) -> Path:
        return self.root / f"{ident}.results.json"

    def log_path(self, ident: str) -> Path:
        return self.root / f"{ident}.log"

    def get(self, ident: str) -> RevisionRun | None:
        """The entry of ``ident``; None when there is none, or it is unreadable or of another version."""
        path = self.entry_path(ident)
        if not path.exists() and (self.root / f"{ident}{LEGACY_ENTRY}").exists():
            path = self.root / f"{ident}{LEGACY_ENTRY}"
        try:
            data = read_json(path, "memo entry")
        except SpecwatchError:
            return None
        if not isinstance(data, dict) or data.get("version") != MEMO_VERSION or "verdict" not in data:
            return None
        return RevisionRun.from_json(data)

    def put(self, measurement: RevisionRun) -> None:
        """Store (replace) an entry atomically."""
        atomic_write_json(self.entry_path(measurement.ident), measurement.to_json())

    def finish(self, session: str) -> None:
        """Mark an A/B run as ended with a verdict: :func:`stopped_runs` no longer offers it to ``--resume``."""
        (self.root / f"{session}.finished").touch()

    def entries(self) -> list[RevisionRun]:
        """Every readable entry of this memo folder."""
        idents = {p.name[: -len(suffix)] for suffix in (ENTRY, LEGACY_ENTRY) for p in self.root.glob(f"*{suffix}")}
        found = [self.get(ident) for ident in sorted(idents)]
        return [m for m in found if m is not None]


def stopped_runs(memo: Memo, sides: tuple[str, str] = ("base", "head")) -> list[tuple[str, int]]:
    """The A/B runs this memo holds, newest first, as (session, whole rounds): a round is whole when both
    ``sides`` were measured in it with results files that read (idents ``<side>-<revision>-<session>-r<n>``, as ab
    names them; a truncated results file makes its round one to measure again).
    A run stopped by Ctrl-C, ``kill`` or a call's time limit keeps its whole rounds here for ``ab --resume``; a run
    that ended with a verdict is marked (:meth:`Memo.finish`) and left out."""
    seen: dict[str, set[tuple[str, int]]] = {}
    newest: dict[str, float] = {}
    for m in memo.entries():
        found = _IDENT.match(m.ident)
        if found is None or found["side"] not in sides or not _measured(m):
            continue
        seen.setdefault(found["session"], set()).add((found["side"], int(found["round"])))
        newest[found["session"]] = max(newest.get(found["session"], 0.0), memo.entry_path(m.ident).stat().st_mtime)
    out = []
    for session, done in seen.items():
        whole = 0
        while all((side, whole + 1) in done for side in sides):
            whole += 1
        if whole and not (memo.root / f"{session}.finished").exists():
            out.append((session, whole))
    return sorted(out, key=lambda s: newest[s[0]], reverse=True)


def whole_rounds(memo: Memo, idents: Callable[[int], Sequence[str]]) -> int:
    """How many rounds, from round 1 on, have every measurement ``idents(round)`` names in the memo with results:
    what a bisection step stopped by Ctrl-C, ``kill`` or a call's time limit keeps for its next run (a half-measured
    round is measured again: a round's two sides belong together in time)."""
    whole = 0
    while all(_measured(memo.get(ident)) for ident in idents(whole + 1)):
        whole += 1
    return whole


def measured(memo: Memo, ident: str) -> RevisionRun | None:
    """``ident``'s entry when it is a measurement with a readable results file (None otherwise: measure it)."""
    m = memo.get(ident)
    return m if _measured(m) else None


def _measured(m: RevisionRun | None) -> bool:
    """A measurement with a readable results file (a truncated or broken one is measured again)."""
    if m is None or m.verdict == SKIP or not m.results:
        return False
    try:
        read_json(Path(m.results), "results file")
    except SpecwatchError:
        return False
    return True


_IDENT = re.compile(r"^(?P<side>[a-z]+)-.+-(?P<session>[0-9a-f]{12})-r(?P<round>\d+)$")


def ab_round_ident(side: str, revision: str, session: str, n: int) -> str:
    """The memo ident of an A/B run's round ``n`` of ``side`` (``<side>-<revision>-<session>-r<n>``); the one
    place it is built (:data:`_IDENT` parses it)."""
    return f"{side}-{revision}-{session}-r{n}"


def ladder_ident(rung: str, session: str, n: int) -> str:
    """The memo ident of an ``ab-ladder`` run's round ``n`` of one rung (``ladder-<rung>-<session>-r<n>``)."""
    return f"ladder-{rung}-{session}-r{n}"


def stopped_ladders(memo: Memo) -> list[tuple[str, int]]:
    """The ``ab-ladder`` runs this memo holds that ended without a verdict, newest first, as (session, measurements
    with a readable results file): ``ab-ladder --resume`` keeps every one of them (a ladder stops between
    measurements, and each is a boot of its own)."""
    count: dict[str, int] = {}
    newest: dict[str, float] = {}
    for m in memo.entries():
        found = _IDENT.match(m.ident)
        if found is None or found["side"] != "ladder" or not _measured(m):
            continue
        session = found["session"]
        count[session] = count.get(session, 0) + 1
        newest[session] = max(newest.get(session, 0.0), memo.entry_path(m.ident).stat().st_mtime)
    out = [(s, n) for s, n in count.items() if not (memo.root / f"{s}.finished").exists()]
    return sorted(out, key=lambda s: newest[s[0]], reverse=True)


def step_round_ident(step: str, side: str, n: int) -> str:
    """The memo ident of a bisection step's round ``n`` of ``side`` (``<step>-<side>-r<n>``)."""
    return f"{step}-{side}-r{n}"


def memo_root(path: str | Path | None, default: Path) -> Path:
    """The memo folder: ``--memo`` made absolute, else ``default``; UsageError when it is a file."""
    root = Path(path).resolve() if path else default
    if root.exists() and not root.is_dir():
        raise UsageError(f"--memo {path or root}: a file, not a folder")
    return root
