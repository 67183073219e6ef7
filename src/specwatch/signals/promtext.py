"""Prometheus text exposition parsing and counter deltas (for SGLang's ``/metrics``).

Pure: stdlib only. Samples are keyed by ``(name, frozenset(labels.items()))``. Handles comments
(``# HELP``/``# TYPE``), label values with escapes (``\\\\``, ``\\"``, ``\\n``), ``+Inf``/``-Inf``/
``NaN`` values, optional timestamps and histogram ``_bucket``/``_sum``/``_count`` samples.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

__all__ = ["Exposition", "ParseError", "SampleKey", "delta", "parse_text", "value"]

SampleKey = tuple[str, frozenset[tuple[str, str]]]
_MISSING = object()
_COUNTER_LIKE = ("counter", "histogram", "summary")
_SUFFIXES = ("_bucket", "_sum", "_count", "_total", "_created", "_gsum", "_gcount")


class ParseError(ValueError):
    """A line that is not valid Prometheus text exposition (names the line number)."""


def _parse_float(text: str) -> float:
    t = text.strip()
    low = t.lower()
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    if low == "nan":
        return math.nan
    return float(t)


def _parse_labels(text: str, pos: int, lineno: int) -> tuple[dict[str, str], int]:
    """Parse ``{a="x",b="y"}`` starting at ``text[pos] == '{'``; return (labels, pos after '}')."""
    labels: dict[str, str] = {}
    i = pos + 1
    n = len(text)
    while True:
        while i < n and text[i] in " \t,":
            i += 1
        if i >= n:
            raise ParseError(f"line {lineno}: unterminated label set")
        if text[i] == "}":
            return labels, i + 1
        j = i
        while j < n and (text[j].isalnum() or text[j] in "_:."):
            j += 1
        lname = text[i:j]
        if not lname:
            raise ParseError(f"line {lineno}: bad label name at column {i + 1}")
        while j < n and text[j] in " \t":
            j += 1
        if j >= n or text[j] != "=":
            raise ParseError(f"line {lineno}: expected '=' after label {lname!r}")
        j += 1
        while j < n and text[j] in " \t":
            j += 1
        if j >= n or text[j] != '"':
            raise ParseError(f"line {lineno}: label {lname!r} value must be quoted")
        j += 1
        buf: list[str] = []
        while True:
            if j >= n:
                raise ParseError(f"line {lineno}: unterminated value of label {lname!r}")
            c = text[j]
            if c == "\\" and j + 1 < n:
                nxt = text[j + 1]
                buf.append({"n": "\n", "\\": "\\", '"': '"'}.get(nxt, "\\" + nxt))
                j += 2
                continue
            if c == '"':
                j += 1
                break
            buf.append(c)
            j += 1
        labels[lname] = "".join(buf)
        i = j


@dataclass
class Exposition:
    """Parsed ``/metrics`` text: samples, family types and help strings."""

    samples: dict[SampleKey, float] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    help: dict[str, str] = field(default_factory=dict)
    timestamps: dict[SampleKey, int] = field(default_factory=dict)
    resets: list[SampleKey] = field(default_factory=list)  # set by delta(): counters that went down

    def names(self) -> set[str]:
        return {k[0] for k in self.samples}

    def family_type(self, name: str) -> str:
        """Declared type of the family a sample name belongs to ('untyped' if undeclared)."""
        if name in self.types:
            return self.types[name]
        for suf in _SUFFIXES:
            if name.endswith(suf) and name[: -len(suf)] in self.types:
                base_type = self.types[name[: -len(suf)]]
                if suf == "_created":
                    return "gauge"
                return base_type
        return "untyped"

    def find(self, name: str, /, **label_filter: str | Iterable[str]) -> list[tuple[dict[str, str], float]]:
        """All samples of ``name`` whose labels match the filter (a value or a set of values)."""
        out = []
        for (sname, lset), v in self.samples.items():
            if sname != name:
                continue
            labels = dict(lset)
            if _match(labels, label_filter):
                out.append((labels, v))
        return out

    def has(self, name: str, /, **label_filter: str | Iterable[str]) -> bool:
        return bool(self.find(name, **label_filter))

    def value(self, name: str, /, *, default: object = _MISSING, **label_filter: str | Iterable[str]) -> float:
        """Sum of the samples of ``name`` matching ``label_filter``.

        With no match: ``default`` if given, else ``KeyError`` naming close metric names (a typo
        must not read as 0).
        """
        found = self.find(name, **label_filter)
        if not found:
            if default is not _MISSING:
                return default  # type: ignore[return-value]
            close = difflib.get_close_matches(name, sorted(self.names()), n=3)
            hint = f"; close names: {', '.join(close)}" if close else ""
            what = f"{name}{_fmt_filter(label_filter)}"
            raise KeyError(f"no sample {what} in the exposition{hint}")
        return float(sum(v for _, v in found))

    def histogram(self, name: str, /, **label_filter: str | Iterable[str]) -> list[tuple[float, float]]:
        """Cumulative buckets ``[(le, count), ...]`` of histogram ``name`` summed over matches."""
        acc: dict[float, float] = {}
        for labels, v in self.find(name + "_bucket", **label_filter):
            le = _parse_float(labels.get("le", "+Inf"))
            acc[le] = acc.get(le, 0.0) + v
        return sorted(acc.items())

    def __iter__(self) -> Iterator[tuple[str, dict[str, str], float]]:
        for (name, lset), v in self.samples.items():
            yield name, dict(lset), v

    def __len__(self) -> int:
        return len(self.samples)


def _fmt_filter(flt: Mapping[str, object]) -> str:
    if not flt:
        return ""
    return "{" + ",".join(f"{k}={v!r}" for k, v in sorted(flt.items())) + "}"


def _match(labels: Mapping[str, str], flt: Mapping[str, str | Iterable[str]]) -> bool:
    for k, want in flt.items():
        have = labels.get(k)
        if isinstance(want, str):
            if have != want:
                return False
        elif have not in set(want):
            return False
    return True


def parse_text(text: str) -> Exposition:
    """Parse Prometheus text exposition format 0.0.4 into an :class:`Exposition`."""
    expo = Exposition()
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line[1:].strip().split(None, 2)
            if len(parts) >= 2 and parts[0] == "TYPE":
                expo.types[parts[1]] = parts[2].strip() if len(parts) > 2 else "untyped"
            elif len(parts) >= 2 and parts[0] == "HELP":
                expo.help[parts[1]] = parts[2] if len(parts) > 2 else ""
            continue
        i = 0
        n = len(line)
        while i < n and line[i] not in "{ \t":
            i += 1
        name = line[:i]
        if not name:
            raise ParseError(f"line {lineno}: missing metric name: {raw!r}")
        labels: dict[str, str] = {}
        if i < n and line[i] == "{":
            labels, i = _parse_labels(line, i, lineno)
        rest = line[i:].split()
        if not rest:
            raise ParseError(f"line {lineno}: missing value: {raw!r}")
        try:
            v = _parse_float(rest[0])
        except ValueError as exc:
            raise ParseError(f"line {lineno}: bad value {rest[0]!r}") from exc
        key: SampleKey = (name, frozenset(labels.items()))
        expo.samples[key] = v
        if len(rest) > 1:
            try:
                expo.timestamps[key] = int(rest[1])
            except ValueError as exc:
                raise ParseError(f"line {lineno}: bad timestamp {rest[1]!r}") from exc
    return expo


def value(expo: Exposition, name: str, /, *, default: object = _MISSING, **label_filter: str) -> float:
    """Module-level form of :meth:`Exposition.value`."""
    return expo.value(name, default=default, **label_filter)


def delta(before: Exposition, after: Exposition, include_gauges: bool = False) -> Exposition:
    """``after - before`` for counter-like samples (counters, histogram/summary parts).

    A sample absent from ``before`` counts from 0. A counter that went down (server restarted,
    or metrics reset) is taken as having restarted from 0: its delta is its ``after`` value and
    its key is listed in ``resets``. Gauges are left out unless ``include_gauges`` (then the
    gauge's ``after`` value is kept as-is). ``_created`` samples are always left out.
    """
    out = Exposition(types=dict(after.types), help=dict(after.help))
    for key, v_after in after.samples.items():
        name = key[0]
        if name.endswith("_created"):
            continue
        ftype = after.family_type(name)
        if ftype not in _COUNTER_LIKE or (ftype == "summary" and not name.endswith(("_sum", "_count"))):
            if include_gauges:
                out.samples[key] = v_after
            continue
        v_before = before.samples.get(key, 0.0)
        if math.isnan(v_after) or math.isnan(v_before):
            out.samples[key] = math.nan
        elif v_after < v_before:
            out.samples[key] = v_after
            out.resets.append(key)
        else:
            out.samples[key] = v_after - v_before
    return out
