"""Where the specwatch package lives: the one owner of paths derived from ``__file__``."""

from __future__ import annotations

import os
from pathlib import Path

#: the ``specwatch`` package folder
PACKAGE_DIR = Path(__file__).resolve().parent
#: the folder that holds the package (``src/`` in a checkout, ``site-packages`` when installed)
IMPORT_ROOT = PACKAGE_DIR.parent


def with_specwatch_importable(pythonpath: str | None) -> str:
    """``pythonpath`` with the folder that holds specwatch first, so a child can ``-m specwatch...``."""
    parts = [str(IMPORT_ROOT)] + [p for p in (pythonpath or "").split(os.pathsep) if p and p != str(IMPORT_ROOT)]
    return os.pathsep.join(parts)
