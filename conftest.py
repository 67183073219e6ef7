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

try:
    import specwatch.plugin  # noqa: F401  (installed: the entry point loads it)
except ImportError:  # a bare checkout: make src/ importable and load the plugin by name
    sys.path.insert(0, str(ROOT / "src"))
    pytest_plugins = ["specwatch.plugin"]

from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=100, deadline=None)
settings.register_profile("thorough", max_examples=2000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))
