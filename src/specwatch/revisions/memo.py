"""The memo of measured revisions: one folder per fingerprint of the settings, one entry per measurement.

An entry is ``<ident>.verdict.json`` (a :class:`RevisionRun`, written atomically), beside it the
measurement's ``<ident>.results.json`` and ``<ident>.log``. Entries of another memo version are
ignored (measured again), never migrated: their verdicts meant something else.
"""

from __future__ import annotations

from collections.abc import Mapping
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


class Memo:
    """One fingerprint directory: ``<ident>.verdict.json``, ``<ident>.results.json``, ``<ident>.log``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def entry_path(self, ident: str) -> Path:
        return self.root / f"{ident}.verdict.json"

    def results_path(self, ident: str) -> Path:
        return self.root / f"{ident}.results.json"

    def log_path(self, ident: str) -> Path:
        return self.root / f"{ident}.log"

    def get(self, ident: str) -> RevisionRun | None:
        """The entry of ``ident``; None when there is none, or it is unreadable or of another version."""
        try:
            data = read_json(self.entry_path(ident), "memo entry")
        except SpecwatchError:
            return None
        if not isinstance(data, dict) or data.get("version") != MEMO_VERSION or "verdict" not in data:
            return None
        return RevisionRun.from_json(data)

    def put(self, measurement: RevisionRun) -> None:
        """Store (replace) an entry atomically."""
        atomic_write_json(self.entry_path(measurement.ident), measurement.to_json())

    def entries(self) -> list[RevisionRun]:
        """Every readable entry of this memo folder."""
        found = [self.get(p.name[: -len(".verdict.json")]) for p in self.root.glob("*.verdict.json")]
        return [m for m in found if m is not None]


def memo_root(path: str | Path | None, default: Path) -> Path:
    """The memo folder: ``--memo`` made absolute, else ``default``; UsageError when it is a file."""
    root = Path(path).resolve() if path else default
    if root.exists() and not root.is_dir():
        raise UsageError(f"--memo {path or root}: a file, not a folder")
    return root
