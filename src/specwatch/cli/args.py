"""Option types and the parser of the ``specwatch`` command: every bad value is one line, exit 2."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from specwatch.errors import EXIT_USAGE, UsageError


class Parser(argparse.ArgumentParser):
    """argparse with the CLI's error rule: one line on stderr (no usage block), exit 2."""

    def error(self, message: str) -> NoReturn:
        where = self.prog.removeprefix("specwatch").strip()
        self.exit(EXIT_USAGE, f"specwatch: {where + ': ' if where else ''}{message} (see `{self.prog} --help`)\n")


def number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def int_at_least(low: int) -> Callable[[str], int]:
    """Type of an integer option ≥ ``low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    return parse


positive_int = int_at_least(1)


def byte_sizes(text: str) -> list[int]:
    """Comma-separated positive byte counts."""
    try:
        sizes = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"comma-separated byte counts, got {text!r}") from None
    if min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"byte counts must be positive, got {text!r}")
    return sizes


def positive_float(text: str) -> float:
    """A finite number > 0."""
    value = number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
    return value


def fraction(text: str) -> float:
    """A number strictly between 0 and 1 (a significance level)."""
    value = number(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1 (exclusive), got {text}")
    return value


def existing_file(text: str) -> str:
    """The path of a file that exists (not a directory)."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory, not a file")
    if not path.exists():
        raise argparse.ArgumentTypeError(f"no such file: {text}")
    return text


def folder(path: str, what: str, *, must_exist: bool) -> Path:
    """``path`` as a folder; UsageError when it is a file (or, with ``must_exist``, missing)."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise UsageError(f"{what} {path} is a file, not a folder")
    if must_exist and not p.exists():
        raise UsageError(f"{what} {path} does not exist")
    return p
