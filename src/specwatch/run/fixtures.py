"""The fixtures specwatch gives every test: servers by role, the profile matrix and the session.

Servers are session-scoped resources held by the session's pool: each profile boots once per
session (tests are ordered by the server they need), and the pool never runs two servers on the
same GPUs at once. The fixtures below hand out the live server for the current test; tests that
need two servers compare memoised measurements (``specwatch_session.measure``) rather than keeping
both alive.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from specwatch.errors import SpecwatchError
from specwatch.run.activation import activate_or_exit

if TYPE_CHECKING:  # imported only for the annotations: a dormant plugin loads no session or pool
    from specwatch.profiles.profile import ServerProfile
    from specwatch.run.session import Session
    from specwatch.server.pool import RunningServer


@pytest.fixture(scope="session")
def specwatch_session(request: pytest.FixtureRequest) -> Session:
    """The run's Session: config, profiles, pool, memoised measurements and findings."""
    return activate_or_exit(request.config)


def profile_or_skip(session: Session, role: str, why: str = "") -> ServerProfile:
    """The profile of ``role`` (or name); a skip naming what is missing when the profile set has none
    (``why``: what the test needed it for, e.g. "a reference-server fault test")."""
    try:
        return session.profile_for(role)
    except SpecwatchError as exc:
        pytest.skip(f"{why}: {exc}" if why else str(exc))


def _server(session: Session, role: str) -> RunningServer:
    profile_or_skip(session, role)
    return session.server(role)


@pytest.fixture
def baseline_server(specwatch_session: Session) -> RunningServer:
    """The non-speculative reference server (fixtures.baseline in the profile file)."""
    return _server(specwatch_session, "baseline")


@pytest.fixture
def spec_server(specwatch_session: Session) -> RunningServer:
    """The speculative server under test (fixtures.spec)."""
    return _server(specwatch_session, "spec")


@pytest.fixture
def tuned_server(specwatch_session: Session) -> RunningServer:
    """The speculative server with the tuned environment profile (fixtures.tuned)."""
    return _server(specwatch_session, "tuned")


@pytest.fixture
def untuned_server(specwatch_session: Session) -> RunningServer:
    """The same server without the tuning variables (fixtures.untuned)."""
    return _server(specwatch_session, "untuned")


@pytest.fixture
def server(specwatch_session: Session, profile_name: str) -> RunningServer:
    """Each server of the profile matrix in turn (parametrised by ``profile_name``)."""
    return specwatch_session.server(profile_name)
