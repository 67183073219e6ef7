"""Results files: one run's samples per profile/workload/metric (docs/architecture.md).

Also the persistence helpers shared with ``baseline``: sorted, indented, versioned JSON written
atomically (:mod:`specwatch.store.atomic`), and a loader that migrates older versions and rejects
unknown ones with a UsageError that says what to do.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specwatch.errors import UsageError
from specwatch.store.atomic import write_text_atomic

RESULTS_VERSION = 1
Migration = Callable[[dict], dict]
# from-version -> function returning the data at from-version + 1. Empty while v1 is the only one.
RESULTS_MIGRATIONS: dict[int, Migration] = {}
#: How deeply lists and objects may nest in a JSON file specwatch reads. Its own files nest a few
#: levels; far deeper ones overflow Python's recursion in the parser or in what reads the data next.
MAX_JSON_DEPTH = 100
#: The magnitudes a sample may have (or be 0): far beyond any measurement, and narrow enough that the
#: statistics on samples (ratios of medians, squares, sums over thousands) cannot overflow a float.
SAMPLE_RANGE = (1e-150, 1e150)


def utc_now() -> str:
    """Current UTC time, ISO 8601 with seconds (sorts as text)."""
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def dumps(data: Any) -> str:
    """The one on-disk JSON style: sorted keys, 2-space indent, trailing newline."""
    return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def atomic_write_json(path: str | os.PathLike[str], data: Any) -> Path:
    """Write ``data`` to ``path`` atomically in the one JSON style (:func:`specwatch.store.atomic.write_text_atomic`:
    temporary file in the same folder, fsync, os.replace, the replaced file's mode kept).

    The text is built first, so a value JSON cannot hold (NaN) fails before anything is written.
    """
    return write_text_atomic(path, dumps(data))


def _nests_deeper(data: Any, limit: int) -> bool:
    """Whether lists and objects nest more than ``limit`` levels in ``data`` (walked without recursion)."""
    stack = [(data, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            if depth > limit:
                return True
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return False


def parse_json(text: str) -> Any:
    """``json.loads`` for a file handed to specwatch; ValueError (never RecursionError) when it is not
    JSON or nests deeper than :data:`MAX_JSON_DEPTH` (which would overflow the parser or what reads it)."""
    try:
        data = json.loads(text)
    except RecursionError:
        too_deep = True
    else:
        too_deep = _nests_deeper(data, MAX_JSON_DEPTH)
    if too_deep:
        raise ValueError(f"lists or objects nested more than {MAX_JSON_DEPTH} levels deep")
    return data


def read_json(path: str | os.PathLike[str], kind: str) -> Any:
    """The parsed JSON of a file; UsageError (one line, naming the file) when it cannot be read."""
    p = Path(path)
    try:
        return parse_json(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{kind} file not found: {p}") from None
    except IsADirectoryError:
        raise UsageError(f"{kind} file {p} is a directory, not a file") from None
    except (OSError, ValueError) as exc:  # ValueError: UnicodeDecodeError, JSONDecodeError, too deep
        raise UsageError(f"{kind} file {p} is not readable JSON: {exc}") from None


def migrate(data: Any, kind: str, current: int, migrations: Mapping[int, Migration], where: str) -> dict:
    """``data`` brought to version ``current`` through ``migrations``; UsageError when it cannot be.

    The one place where versions are checked: every reader of a versioned document goes through it.
    """
    if not isinstance(data, dict) or "version" not in data:
        raise UsageError(f"{kind} file {where} has no \"version\" field; is it a specwatch {kind} file?")
    version = data["version"]
    if not isinstance(version, int) or isinstance(version, bool):
        raise UsageError(f"{kind} file {where}: version must be an integer, got {version!r}")
    if version > current:
        raise UsageError(
            f"{kind} file {where} has version {version}, newer than this specwatch reads ({current}); "
            "upgrade specwatch"
        )
    while version < current:
        step = migrations.get(version)
        if step is None:
            raise UsageError(
                f"{kind} file {where} has version {version}, which this specwatch cannot migrate "
                f"(reads {current}); re-record it"
            )
        data = step(data)
        version += 1
        data["version"] = version
    return data


def load_versioned(
    path: str | os.PathLike[str], kind: str, current: int, migrations: Mapping[int, Migration]
) -> dict:
    """Read a versioned JSON file, migrating it to ``current``; UsageError when it cannot."""
    return migrate(read_json(path, kind), kind, current, migrations, str(Path(path)))


def show_value(value: Any, render: Callable[[Any], str] = repr) -> str:
    """A value as a message shows it, by ``render`` (``json.dumps`` for a field of a JSON file):
    short, whatever its size."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        if value.bit_length() > 14000:  # str() refuses more than 4300 digits
            return "an integer of over 4000 digits"
        digits = str(value)
        return f"{digits[:8]}... ({len(digits.lstrip('-'))} digits)"
    text = render(value)
    return text if len(text) <= 40 else text[:37] + "..."


def is_finite_number(value: Any) -> bool:
    """Whether ``value`` is an int or float (not a bool) that is finite as a float (an int of 400 digits is not)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value) if isinstance(value, float) else abs(value) <= sys.float_info.max


def finite_samples(samples: Any, where: str, *, positive: bool = False) -> list[float]:
    """The samples as floats; UsageError naming ``where`` unless a list of finite numbers of the magnitudes
    of :data:`SAMPLE_RANGE` (or 0), and above 0 when ``positive`` (a baseline's, which every comparison
    divides by and takes the log of)."""
    if not isinstance(samples, (list, tuple)):
        raise UsageError(f"{where}: samples must be a list of numbers")
    low, high = SAMPLE_RANGE
    out = []
    for s in samples:
        if isinstance(s, bool) or not isinstance(s, (int, float)) or (isinstance(s, float) and not math.isfinite(s)):
            raise UsageError(f"{where}: sample {show_value(s)} is not a finite number")
        if positive and s <= 0:
            raise UsageError(f"{where}: sample {show_value(s)} is not positive: samples must be finite and positive")
        if abs(s) > high or 0 < abs(s) < low:
            raise UsageError(f"{where}: sample {show_value(s)} is out of range: samples must be finite, of magnitude "
                             f"{low:g} to {high:g}{'' if positive else ' (or 0)'}")
        out.append(float(s))
    return out


def make_key(profile: str, workload: str, metric: str) -> str:
    """'<profile>/<workload>/<metric>'."""
    return f"{profile}/{workload}/{metric}"


@dataclass
class Result:
    """Samples of one metric of one workload on one profile, with its unit and direction."""

    key: str
    profile: str
    workload: str
    metric: str
    unit: str
    higher_is_better: bool
    samples: list[float]
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def make(
        cls,
        profile: str,
        workload: str,
        metric: str,
        *,
        unit: str,
        higher_is_better: bool,
        samples: Iterable[float],
        extra: Mapping[str, Any] | None = None,
    ) -> Result:
        """Build a Result with its key derived from profile/workload/metric."""
        key = make_key(profile, workload, metric)
        return cls(key, profile, workload, metric, unit, higher_is_better,
                   finite_samples(list(samples), key), dict(extra or {}))  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (samples kept in run order)."""
        return {
            "key": self.key, "profile": self.profile, "workload": self.workload,
            "metric": self.metric, "unit": self.unit, "higher_is_better": self.higher_is_better,
            "samples": list(self.samples), "extra": dict(self.extra),
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Result:
        """Validate and build; UsageError names the missing or bad field."""
        if not isinstance(data, Mapping):
            raise UsageError(f"each result must be an object, got {type(data).__name__} {data!r:.60}")
        key = data.get("key")
        if key is not None and not isinstance(key, str):
            raise UsageError(f"result {key!r}: field 'key' must be a string")
        where = str(key or "result")
        for name in ("profile", "workload", "metric", "unit"):
            if not isinstance(data.get(name), str):
                raise UsageError(f"{where}: field {name!r} must be a string")
        if not isinstance(data.get("higher_is_better"), bool):
            raise UsageError(f"{where}: field 'higher_is_better' must be true or false")
        extra = data.get("extra", {})
        if not isinstance(extra, dict):
            raise UsageError(f"{where}: field 'extra' must be an object")
        key = key or make_key(data["profile"], data["workload"], data["metric"])
        return cls(key, data["profile"], data["workload"], data["metric"], data["unit"],
                   data["higher_is_better"], finite_samples(data.get("samples"), where), dict(extra))  # fmt: skip


@dataclass
class ResultSet:
    """One run's results file: results plus the machine fingerprint, commit and creation time."""

    results: list[Result] = field(default_factory=list)
    machine: dict[str, Any] = field(default_factory=dict)
    commit: str | None = None
    created: str = field(default_factory=utc_now)

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for r in self.results:
            if r.key in seen:
                raise UsageError(f"duplicate result key {r.key!r}")
            seen.add(r.key)

    def add(self, result: Result) -> None:
        """Append one result (its key must be new)."""
        if any(r.key == result.key for r in self.results):
            raise UsageError(f"duplicate result key {result.key!r}")
        self.results.append(result)

    def get(self, key: str) -> Result | None:
        """The result with this key, or None."""
        return next((r for r in self.results if r.key == key), None)

    def keys(self) -> list[str]:
        """Keys, sorted."""
        return sorted(r.key for r in self.results)

    def profiles(self) -> list[str]:
        """Profiles present, sorted."""
        return sorted({r.profile for r in self.results})

    def for_profile(self, profile: str) -> list[Result]:
        """Results of one profile, sorted by key."""
        return sorted((r for r in self.results if r.profile == profile), key=lambda r: r.key)

    @property
    def machine_class(self) -> str | None:
        """The machine class recorded in the fingerprint, if any."""
        mc = self.machine.get("machine_class")
        return mc if isinstance(mc, str) else None

    def to_dict(self) -> dict[str, Any]:
        """The on-disk form (results sorted by key)."""
        return {
            "version": RESULTS_VERSION,
            "created": self.created,
            "commit": self.commit,
            "machine": dict(self.machine),
            "results": [r.to_dict() for r in sorted(self.results, key=lambda r: r.key)],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ResultSet:
        """Build from the current on-disk form."""
        results = data.get("results")
        if not isinstance(results, list):
            raise UsageError("results file: field 'results' must be a list")
        machine = data.get("machine") or {}
        if not isinstance(machine, dict):
            raise UsageError("results file: field 'machine' must be an object")
        if not isinstance(machine.get("machine_class", ""), str):
            raise UsageError("results file: field 'machine.machine_class' must be a string")
        commit = data.get("commit")
        if commit is not None and not isinstance(commit, str):
            raise UsageError("results file: field 'commit' must be a string or null")
        if not isinstance(data.get("created") or "", str):
            raise UsageError("results file: field 'created' must be a string")
        return cls(
            results=[Result.from_dict(r) for r in results],
            machine=dict(machine),
            commit=str(commit) if commit is not None else None,
            created=str(data.get("created") or utc_now()),
        )

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write atomically as sorted, indented JSON."""
        return atomic_write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ResultSet:
        """Read a results file (older versions migrated, newer or unknown ones rejected)."""
        return cls.from_document(read_json(path, "results"), path)

    @classmethod
    def from_document(cls, data: Any, path: str | os.PathLike[str]) -> ResultSet:
        """From the parsed JSON of the results file ``path``: migrated, then validated."""
        if isinstance(data, dict) and "metrics" in data and "profile" in data and "results" not in data:
            raise UsageError(f"{path} is a baseline file, not a results file")
        data = migrate(data, "results", RESULTS_VERSION, RESULTS_MIGRATIONS, str(Path(path)))
        try:
            return cls.from_dict(data)
        except UsageError as exc:
            raise UsageError(f"results file {path}: {str(exc).removeprefix('results file: ')}") from None
