"""pytest plugin: options, markers and thin hooks that delegate to the run's Session.

Imports nothing heavy at import time; pytest loads this module in every run of every project
where specwatch is installed.
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
MARKERS = (
    "perf: throughput, drift and gate measurements against live servers (the main job: pytest -m perf)",
    "correctness: execution-path checks against live servers (env propagation, graphs, accept length, lossless)",
    "specwatch_server(name): the server profile or fixture role a test needs (used to order tests)",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("specwatch", "specwatch: speculative-decoding performance checks")
    for opt in OPTIONS:
        extra = f" [env {opt.env}, ini {opt.ini}]"
        if opt.is_flag:
            group.addoption(opt.flag, *opt.aliases, action="store_true", default=None, dest=opt.ini,
                            help=opt.help + extra)
        else:
            group.addoption(opt.flag, *opt.aliases, default=None, dest=opt.ini, metavar=opt.name.upper(),
                            help=opt.help + extra)
        parser.addini(opt.ini, help=opt.help, default=None)


def pytest_configure(config: pytest.Config) -> None:
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)
    from specwatch.errors import SpecwatchError, UsageError
    from specwatch.run import fixtures
    from specwatch.run.options import resolve
    from specwatch.run.project import resolve_project
    from specwatch.run.session import Session

    flags = {o.name: config.getoption(o.ini) for o in OPTIONS}
    explicit = flags.get("project") or os.environ.get("SPECWATCH_PROJECT") or config.getini("specwatch_project")
    try:
        project = resolve_project(explicit or None, config.inipath, config.rootpath, config.invocation_params.dir)
        ini = {o.ini: config.getini(o.ini) for o in OPTIONS}
        for key, value in project.ini.items():  # the project's ini keys when pytest read another (or none)
            if ini.get(key) in (None, "", []):
                ini[key] = value
        cfg = resolve(flags, os.environ, ini, rootdir=project.root)
    except UsageError as exc:
        raise pytest.UsageError(f"specwatch: {exc}") from None
    session = Session(
        cfg, progress=_progress_writer(config), worker_id=os.environ.get("PYTEST_XDIST_WORKER"),
        worker_count=int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")),
    )
    session.project_note = project.note
    if cfg.profiles or cfg.engine:  # a named profile file is read (and validated) before anything boots
        try:
            session.profiles  # noqa: B018
        except SpecwatchError as exc:
            raise pytest.UsageError(f"specwatch: {exc}") from None
    config.stash[SESSION_KEY] = session
    config.pluginmanager.register(fixtures, "specwatch.run.fixtures")
    config.pluginmanager.register(_ReportCounter(session), "specwatch.reports")


class _ReportCounter:
    """Counts perf tests that ran, also on the xdist controller where the workers' reports arrive."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" and "perf" in report.keywords:
            self.session.perf_tests_run += 1


def pytest_report_header(config: pytest.Config) -> list[str]:
    if SESSION_KEY not in config.stash:
        return []
    perf_run = "perf" in (config.option.markexpr or "") or bool(config.getoption("specwatch_profiles"))
    return config.stash[SESSION_KEY].header_lines(perf_run)


def _progress_writer(config: pytest.Config):
    def write(msg: str) -> None:
        capman = config.pluginmanager.getplugin("capturemanager")
        with capman.global_and_fixture_disabled() if capman else nullcontext():
            config.get_terminal_writer().line(f"[specwatch] {msg}", flush=True)

    return write


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "profile_name" in metafunc.fixturenames:
        session = metafunc.config.stash[SESSION_KEY]
        names = sorted(session.profiles.servers)
        metafunc.parametrize("profile_name", names, ids=names, scope="session")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items[:] = config.stash[SESSION_KEY].order_items(items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    report = yield
    if report.failed:
        item.config.stash[SESSION_KEY].failed(item, call.excinfo, report)
    return report


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    for line in config.stash[SESSION_KEY].summary_lines():
        terminalreporter.write_line(line)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # on an xdist worker, workeroutput carries its run to the controller
    workeroutput = getattr(session.config, "workeroutput", None)
    session.exitstatus = session.config.stash[SESSION_KEY].finish(int(exitstatus), workeroutput)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """xdist controller: a worker finished; gather what it measured."""
    node.config.stash[SESSION_KEY].worker_down(node.gateway.id, getattr(node, "workeroutput", None), error)


def pytest_unconfigure(config: pytest.Config) -> None:
    if SESSION_KEY in config.stash:
        config.stash[SESSION_KEY].close()
