"""pytest plugin: options, markers and thin hooks that delegate to the run's Session.

Imports nothing heavy at import time; pytest loads this module in every run of every project
where specwatch is installed.
"""

from __future__ import annotations

from typing import TypeGuard

import pytest

from specwatch.errors import InfraError
from specwatch.run.activation import COUNTER_KEY, ReportCounter, activate, activate_or_exit, active, asked_up_front
from specwatch.run.options import OPTIONS

MARKERS = (
    "perf: throughput, drift and gate measurements against live servers (the main job: pytest -m perf)",
    "correctness: execution-path checks against live servers (env propagation, graphs, accept length, lossless)",
    "specwatch_server(name): the server profile or fixture role a test needs (used to order tests)",
)
#: fixtures whose use in a test asks for specwatch
FIXTURES = ("specwatch_session", "baseline_server", "spec_server", "tuned_server", "untuned_server", "server",
            "profile_name")


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
    """Register markers and fixtures. The plugin stays dormant (loads no profile, reorders nothing,
    prints nothing) until the run asks for specwatch: an option, ini key or SPECWATCH_* variable, a
    ``-m`` expression naming perf or correctness, or a collected test with a specwatch marker or
    fixture. Asked for up front, it validates the profiles before anything is collected (exit 4)."""
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)
    from specwatch.run import fixtures

    config.pluginmanager.register(fixtures, "specwatch.run.fixtures")
    counter = ReportCounter(config)
    config.stash[COUNTER_KEY] = counter
    config.pluginmanager.register(counter, "specwatch.reports")
    if asked_up_front(config):
        from specwatch.errors import SpecwatchError

        try:
            activate(config)
        except SpecwatchError as exc:
            raise pytest.UsageError(f"specwatch: {exc}") from None


def _uses_specwatch(item: pytest.Item) -> bool:
    """Whether a collected test asks for specwatch: one of its markers or fixtures."""
    if any(item.get_closest_marker(m.split(":")[0].split("(")[0]) for m in MARKERS):
        return True
    return bool(set(FIXTURES) & set(getattr(item, "fixturenames", ())))


def pytest_report_header(config: pytest.Config) -> list[str]:
    session = active(config)
    if session is None:
        return []
    perf_run = "perf" in (config.option.markexpr or "") or bool(config.getoption("specwatch_profiles"))
    return session.header_lines(perf_run)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "profile_name" in metafunc.fixturenames:
        session = activate_or_exit(metafunc.config)
        names = sorted(session.profiles.servers)
        metafunc.parametrize("profile_name", names, ids=names, scope="session")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    session = active(config)
    if session is None:
        if not any(_uses_specwatch(item) for item in items):
            return  # dormant: a project that does not use specwatch runs unchanged
        session = activate_or_exit(config)
    items[:] = session.order_items(items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    report = yield
    session = active(item.config)
    if report.failed and session is not None:
        session.failed(item, call.excinfo, report)
        if report.failed and _infra(call.excinfo) and item.config.getoption("tbstyle") == "auto":
            # could not measure: the message says why; a traceback of aiohttp or subprocess does not
            report.longrepr = f"could not measure: {call.excinfo.value}\n(--tb=long shows the traceback)"
    return report


def _infra(excinfo: pytest.ExceptionInfo[BaseException] | None) -> TypeGuard[pytest.ExceptionInfo[BaseException]]:
    return excinfo is not None and excinfo.errisinstance(InfraError)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    session = active(config)
    for line in session.summary_lines() if session is not None else ():
        terminalreporter.write_line(line)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    run = active(session.config)
    if run is None:
        return
    # on an xdist worker, workeroutput carries its record to the controller
    workeroutput = getattr(session.config, "workeroutput", None)
    session.exitstatus = run.finish(int(exitstatus), workeroutput)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """xdist controller: a worker finished; gather the record it sent."""
    from specwatch.run.record import PAYLOAD_KEY

    output = getattr(node, "workeroutput", None)
    run = active(node.config)
    if run is None and (output or {}).get(PAYLOAD_KEY):
        run = activate_or_exit(node.config)
    if run is not None:
        run.worker_down(node.gateway.id, output, error)


def pytest_unconfigure(config: pytest.Config) -> None:
    session = active(config)
    if session is not None:
        session.close()
