"""Root conftest: hypothesis profiles and the suite's data directories.

The specwatch plugin itself (options, fixtures, hooks) is loaded through its pytest11 entry point
(`pip install -e .`); when running from a bare checkout it is loaded from src/ here.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).parent
FIXTURES = ROOT / "fixtures"


def _entry_point_installed() -> bool:
    from importlib.metadata import entry_points

    return any(ep.value == "specwatch.run.plugin" for ep in entry_points(group="pytest11"))


if not _entry_point_installed():  # a bare checkout (PYTHONPATH=src, or nothing): load the plugin by name
    if str(ROOT / "src") not in sys.path:
        sys.path.insert(0, str(ROOT / "src"))
    pytest_plugins = ["specwatch.run.plugin"]

from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=100, deadline=None)
settings.register_profile("thorough", max_examples=2000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))
