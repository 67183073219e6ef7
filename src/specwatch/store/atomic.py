"""The one atomic file writer: a temporary file in the target's folder, fsync, ``os.replace``.

A reader sees the old file or the new one, never half of either. The new file keeps the mode of
the file it replaces; a file that did not exist gets the mode a plain ``open(path, "w")`` would
give it (0666 less the umask), not the 0600 of ``tempfile.mkstemp``.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path


def _open_temp(target: Path) -> tuple[int, Path]:
    """A new, exclusively created temporary file next to ``target``; the kernel applies the umask."""
    for _ in range(100):
        tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name next to {target}")


def write_text_atomic(path: str | os.PathLike[str], text: str, mode: int | None = None) -> Path:
    """Replace ``path`` with ``text`` (UTF-8) atomically; return the path.

    ``mode``: the permission bits of the result; by default those of the file being replaced, or
    for a new file 0666 less the umask. The parent folder is created when missing. On any failure
    the old file is left as it was and the temporary file is removed.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        try:
            mode = stat.S_IMODE(os.stat(target).st_mode)
        except FileNotFoundError:
            mode = None  # keep what os.open gave the new file: 0666 & ~umask
    fd, tmp = _open_temp(target)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            if mode is not None:
                os.fchmod(fh.fileno(), mode)
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(target.parent)
    return target


def _fsync_dir(folder: Path) -> None:
    """Make the rename itself durable (best effort: not every platform can open a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


__all__ = ["write_text_atomic"]
