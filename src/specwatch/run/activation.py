"""When specwatch wakes up in a pytest run, and the one Session it then keeps in ``config.stash``.

Shared by the plugin's hooks and the fixtures (so neither imports the other).
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from typing import TYPE_CHECKING

import pytest

from specwatch.run.options import OPTIONS

if TYPE_CHECKING:
    from specwatch.run.session import Session

SESSION_KEY: pytest.StashKey[Session] = pytest.StashKey()
COUNTER_KEY: pytest.StashKey[ReportCounter] = pytest.StashKey()

def activate(config: pytest.Config) -> Session:
    """The run's Session, built on first need (SpecwatchError on a bad option or profile)."""
    if SESSION_KEY in config.stash:
        return config.stash[SESSION_KEY]
    from specwatch.run.options import resolve
    from specwatch.run.project import resolve_project
    from specwatch.run.session import Session

    flags = {o.name: config.getoption(o.ini) for o in OPTIONS}
    explicit = flags.get("project") or os.environ.get("SPECWATCH_PROJECT") or config.getini("specwatch_project")
    project = resolve_project(explicit or None, config.inipath, config.rootpath, config.invocation_params.dir)
    ini = {o.ini: config.getini(o.ini) for o in OPTIONS}
    for key, value in project.ini.items():  # the project's ini keys when pytest read another (or none)
        if ini.get(key) in (None, "", []):
            ini[key] = value
    cfg = resolve(flags, os.environ, ini, rootdir=project.root)
    session = Session(
        cfg, progress=_progress_writer(config), worker_id=os.environ.get("PYTEST_XDIST_WORKER"),
        worker_count=int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")),
    )
    session.project_note = project.note
    session.verbosity = config.get_verbosity()
    session.perf_tests_run = config.stash[COUNTER_KEY].count if COUNTER_KEY in config.stash else 0
    if cfg.profiles or cfg.engine:  # a named profile file is read (and validated) before anything boots
        from specwatch.profiles.loading import check_reachable

        check_reachable(session.profiles, cfg.server_url)  # an openai server needs a URL
    config.stash[SESSION_KEY] = session
    return session


def active(config: pytest.Config) -> Session | None:
    return config.stash.get(SESSION_KEY, None)


def activate_or_exit(config: pytest.Config) -> Session:
    """:func:`activate` from a hook where a usage error must end the run with exit 4, not a traceback."""
    from specwatch.errors import SpecwatchError

    try:
        return activate(config)
    except SpecwatchError as exc:
        pytest.exit(f"specwatch: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)


class ReportCounter:
    """Counts perf tests that ran, also on the xdist controller where the workers' reports arrive."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.count = 0

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" and "perf" in report.keywords:
            self.count += 1
            session = active(self.config)
            if session is not None:
                session.perf_tests_run = self.count


def _progress_writer(config: pytest.Config):
    def write(msg: str) -> None:
        capman = config.pluginmanager.getplugin("capturemanager")
        with capman.global_and_fixture_disabled() if capman else nullcontext():
            config.get_terminal_writer().line(f"[specwatch] {msg}", flush=True)

    return write


def asked_up_front(config: pytest.Config) -> bool:
    """Whether the command line, the ini file or the environment asks for specwatch."""
    if any(config.getoption(o.ini) not in (None, False) for o in OPTIONS):
        return True
    if any(os.environ.get(o.env) for o in OPTIONS) or os.environ.get("SPECWATCH_PROJECT"):
        return True
    if any(config.getini(o.ini) not in (None, "", []) for o in OPTIONS):
        return True
    markexpr = config.option.markexpr or ""
    return "perf" in markexpr or "correctness" in markexpr
