"""Validation rules for parsed TOML: each rule says what it expects and converts a value or fails.

A rule (:class:`Rule`) pairs the phrase an error shows ("an integer ≥ 1") with a converter; a table
schema maps field names to :class:`Field` rules, and :func:`check_table` checks a table against it,
naming the path of the bad value. Hand-written rather than pydantic (not a dependency of specwatch):
the messages are exact one-liners ("FILE: TABLE.FIELD: expected WHAT, got VALUE"), and booleans are
never taken for integers. Used by :mod:`specwatch.profiles.profile`.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


class Invalid(Exception):
    """A value that does not fit its rule. ``at`` is the path below the field being checked
    (``.num_steps``, ``[2]``); the caller prefixes the file and the field. ``message`` replaces the
    standard "expected X, got Y" when a rule has more to say."""

    def __init__(self, expected: str, value: Any = None, *, at: str = "", message: str | None = None) -> None:
        super().__init__(expected)
        self.expected, self.value, self.at = expected, value, at
        self.message = message if message is not None else f"expected {expected}, got {show(value)}"

    def under(self, prefix: str) -> Invalid:
        self.at = prefix + self.at
        return self


@dataclass(frozen=True)
class Rule:
    """What one field accepts: ``expected`` is the phrase an error shows; ``convert`` returns the
    value to store or raises :class:`Invalid`."""

    expected: str
    convert: Callable[[Any], Any]


def show(value: Any, depth: int = 0) -> str:
    """A value as a short, single-line TOML-like text for an error message."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = repr(value)  # repr escapes newlines and every other non-printable character
    elif isinstance(value, (int, float)):
        text = repr(value) if not isinstance(value, int) or abs(value) < 10**30 else "a huge integer"
    elif isinstance(value, dict):
        items = [f"{path_key(k)} = {show(v, depth + 1)}" for k, v in list(value.items())[:4]]
        items += ["..."] * (len(value) > 4)
        text = "{}" if not value else "{ ... }" if depth > 1 else "{ " + ", ".join(items) + " }"
    elif isinstance(value, list):
        items = [show(v, depth + 1) for v in value[:6]] + ["..."] * (len(value) > 6)
        text = "[ ... ]" if depth > 1 and value else "[" + ", ".join(items) + "]"
    elif hasattr(value, "isoformat"):  # TOML dates and times
        text = value.isoformat()
    else:
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def path_key(name: Any) -> str:
    """A table key as written in a field path: bare when TOML allows it, quoted (escaped) otherwise."""
    name = str(name)
    return name if re.fullmatch(r"[A-Za-z0-9_-]{1,60}", name) else show(name)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def integer(low: int, high: int | None = None) -> Rule:
    """An integer (not a bool, not a float) in [low, high]."""
    expected = f"an integer ≥ {low}" if high is None else f"an integer in [{low}, {high}]"

    def convert(value: Any) -> int:
        if type(value) is not int or value < low or (high is not None and value > high):
            raise Invalid(expected, value)
        return value

    return Rule(expected, convert)


def number(low: float, high: float | None = None, *, low_open: bool = False, high_open: bool = False,
           meaning: str = "") -> Rule:
    """A finite number (an integer is fine; not a bool, NaN or inf) within the bounds, as a float."""
    if high is None:
        expected = f"a number {'>' if low_open else '≥'} {low:g}"
    else:
        expected = f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    expected += f" ({meaning})" if meaning else ""

    def convert(value: Any) -> float:
        try:
            x = float(value) if _is_number(value) else math.nan
        except OverflowError:
            x = math.nan
        ok = math.isfinite(x) and (x > low if low_open else x >= low)
        if ok and high is not None:
            ok = x < high if high_open else x <= high
        if not ok:
            raise Invalid(expected, value)
        return x

    return Rule(expected, convert)


def text(pattern: re.Pattern[str] | None = None, expected: str = "a non-empty string", *,
         allow_empty: bool = False) -> Rule:
    """A string with no NUL character (it goes into an argv or an environment), non-empty unless allowed."""

    def convert(value: Any) -> str:
        ok = isinstance(value, str) and (allow_empty or value) and "\0" not in value
        if not ok or (pattern and not pattern.fullmatch(value)):
            raise Invalid(expected, value)
        return value

    return Rule(expected, convert)


def choice(*options: str, fold_case: bool = False) -> Rule:
    """One of ``options`` (compared in upper case with ``fold_case``)."""
    expected = "one of " + ", ".join(repr(o) for o in options)

    def convert(value: Any) -> str:
        key = value.upper() if fold_case and isinstance(value, str) else value
        if not isinstance(key, str) or key not in options:
            raise Invalid(expected, value)
        return key

    return Rule(expected, convert)


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise Invalid("true or false", value)
    return value


BOOLEAN = Rule("true or false", _boolean)


NON_EMPTY = text()


STRING = text(expected="a string", allow_empty=True)


def array_of(item: Rule, expected: str, *, hint_for_string: bool = False) -> Rule:
    """An array whose every element fits ``item``; stored as a tuple."""

    def convert(value: Any) -> tuple[Any, ...]:
        if isinstance(value, str) and hint_for_string:
            # A string is not split (quoting rules inside a TOML string would be a second, silent
            # layer of escaping): say which array the user most likely meant.
            try:
                words = shlex.split(value)
            except ValueError:
                words = value.split()
            suggestion = json.dumps(words)  # a TOML array too, escaped onto one line
            suggestion = suggestion if len(suggestion) <= 120 else suggestion[:116] + " ..."
            raise Invalid(expected, value, message=f"expected {expected}, got the string {show(value)}; a string is "
                                                    f"not split into arguments, write {suggestion}")
        if not isinstance(value, list):
            raise Invalid(expected, value)
        out = []
        for i, element in enumerate(value):
            try:
                out.append(item.convert(element))
            except Invalid as exc:
                raise exc.under(f"[{i}]") from None
        return tuple(out)

    return Rule(expected, convert)


@dataclass(frozen=True)
class Field:
    """One field of a profile table: its rule and what it means (for readers of this schema)."""

    rule: Rule
    doc: str


def check_table(fields: Mapping[str, Field], value: Any, expected: str) -> dict[str, Any]:
    """A TOML table checked against ``fields``: unknown keys and bad values raise Invalid naming the key."""
    if not isinstance(value, dict):
        raise Invalid(expected, value)
    unknown = [k for k in value if k not in fields]
    if unknown:
        raise Invalid(expected, message=f"unknown key(s) {', '.join(path_key(k) for k in unknown)}; "
                                         f"known: {', '.join(fields)}")
    out: dict[str, Any] = {}
    for key, raw in value.items():
        try:
            out[key] = fields[key].rule.convert(raw)
        except Invalid as exc:
            raise exc.under(f".{key}") from None
    return out


def one_line(text: str) -> str:
    """Whatever went into a message, it stays one line."""
    return " ".join(text.split()) if len(text.splitlines()) > 1 else text
