"""Fixtures of the correctness tests (helpers in faultkit.py)."""

from __future__ import annotations

import pytest

from correctness.faultkit import CHECK_WORKLOAD
from specwatch.load.measure import Measurement, measure
from specwatch.profiles.profile import ServerProfile
from specwatch.run.session import Session
from specwatch.server.pool import RunningServer


@pytest.fixture(autouse=True)
def _sglang_servers_only(request: pytest.FixtureRequest) -> None:
    """Every correctness test reads SGLang's signals (/generate meta_info, /server_info, log lines, the
    process tree): on an ``engine = "openai"`` server it skips with the profile's reason
    (:meth:`ServerProfile.sglang_only`, the one owner), before anything is measured."""
    if "specwatch_session" not in request.fixturenames:
        return  # a test that judges recorded numbers needs no server
    session: Session = request.getfixturevalue("specwatch_session")
    for role in ("spec", "baseline", "tuned", "untuned"):
        prof = session.profiles.for_role(role)
        why = prof.sglang_only(request.node.name) if prof is not None else None
        if why:
            pytest.skip(why)


@pytest.fixture(scope="session")
def fault_runs() -> dict[str, tuple[RunningServer, Measurement]]:
    """Booted fault servers and their measurement, per profile name (kept for the whole session)."""
    return {}


@pytest.fixture
def boot_and_measure(specwatch_session: Session, fault_runs: dict[str, tuple[RunningServer, Measurement]]):
    """``boot_and_measure(profile)`` -> (server, measurement of CHECK_WORKLOAD), memoised per profile."""

    def run(profile: ServerProfile) -> tuple[RunningServer, Measurement]:
        if profile.name not in fault_runs:
            server = specwatch_session.server_for_profile(profile)
            fault_runs[profile.name] = (server, measure(server, CHECK_WORKLOAD, specwatch_session.progress))
        return fault_runs[profile.name]

    return run
