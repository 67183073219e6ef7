"""Where the specwatch package lives (the one owner of paths derived from ``__file__``), and the
default history and baseline paths that the plugin, the CLI and the store share."""

from __future__ import annotations

import os
from pathlib import Path

#: the ``specwatch`` package folder
PACKAGE_DIR = Path(__file__).resolve().parent
#: the folder that holds the package (``src/`` in a checkout, ``site-packages`` when installed)
IMPORT_ROOT = PACKAGE_DIR.parent
#: where a run's history goes unless ``--specwatch-history`` / ``--history`` says otherwise
DEFAULT_HISTORY = ".specwatch/history.sqlite"
#: where baselines (and each machine class's A/B round spread) live unless told otherwise
DEFAULT_BASELINE_DIR = "baselines"


def with_specwatch_importable(pythonpath: str | None) -> str:
    """``pythonpath`` with the folder that holds specwatch first, so a child can ``-m specwatch...``."""
    parts = [str(IMPORT_ROOT)] + [p for p in (pythonpath or "").split(os.pathsep) if p and p != str(IMPORT_ROOT)]
    return os.pathsep.join(parts)
