"""Reading a file a user named (a profile, a dataset): the one place its problems become one line.

Every failure is a :class:`~specwatch.errors.UsageError` naming the file: missing, a directory, not a
regular file, unreadable, or not UTF-8 text (with the line of the first bad byte). A UTF-8
byte-order mark, as some editors write, is accepted.
"""

from __future__ import annotations

from pathlib import Path

from specwatch.errors import UsageError


def read_user_file(path: str | Path, what: str) -> tuple[bytes, str]:
    """The bytes of the ``what`` (e.g. "profile file", "dataset") at ``path`` and their UTF-8 text."""
    p = Path(path)
    name = str(p) if str(p).isprintable() else repr(str(p))  # one line, whatever the name holds
    try:
        if p.is_dir():
            raise UsageError(f"{name}: is a directory, not a {what}")
        if p.exists() and not p.is_file():
            raise UsageError(f"{name}: not a regular file")
        raw = p.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{what} {name} does not exist") from None
    except OSError as exc:
        raise UsageError(f"{name}: cannot read {what}: {exc.strerror or exc}") from None
    try:
        return raw, raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise UsageError(f"{name}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x}); a {what} must be "
                         "UTF-8") from None
