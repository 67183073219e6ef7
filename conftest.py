"""Root conftest: hypothesis profiles and the suite's data directories.

The specwatch plugin itself (options, fixtures, hooks) is loaded through its pytest11 entry point
(`pip install -e .`); when running from a bare checkout it is loaded from src/ here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Generator
from pathlib import Path

import pytest

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


#: Folders of tests that boot servers and run pytest or specwatch in subprocesses (10-170 s each on
#: CI's 2 cores): started first on every xdist worker.
LONG_FIRST = ("tests/integration/",)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> Generator[None, None, None]:
    """Start the long tests first on every xdist worker, each group in pytest-randomly's order.

    With ``--dist worksteal`` a long test drawn last sets the end of the run (one 150 s test started
    at minute 8 ends it at 10:30). xdist's worksteal hands each of the W workers one contiguous share
    of the collection at the start (``n // W`` of what is left, in turn) and steals from the back of
    a queue: the long tests, dealt round-robin, open each share, the short ones fill it and are what
    gets stolen. A wrapper registered after pytest-randomly's (a conftest is), so this runs after its
    shuffle; every worker collects the same shuffled order and so deals the same shares.
    """
    yield
    long_ = [it for it in items if it.nodeid.startswith(LONG_FIRST)]
    if not long_:
        return
    short = [it for it in items if not it.nodeid.startswith(LONG_FIRST)]
    workers = max(1, int(getattr(config, "workerinput", {}).get("workercount", 1)))
    ordered: list[pytest.Item] = []
    left = len(items)
    for w in range(workers):
        size = left // (workers - w)
        mine = long_[w::workers]
        fill = max(0, size - len(mine))
        ordered += mine + short[:fill]
        del short[:fill]
        left -= size
    items[:] = ordered + short
