"""The draft is alive and speculation is on: a speculative profile's server must speculate, and its draft must
accept something (a draft that accepts nothing reads accept length 1.00 with no error, slower than plain).

On the reference server (CPU) the faults are real and its code path untouched: a launcher that drops the
``--speculative-*`` flags on the way to the server (the profile's ``python`` is a wrapper that forgets them,
as a perf config named for MTP with no speculative config does); a draft model that accepts nothing (the
``-poor`` preset of the spec server's model); a perturbed draft that accepts little (1.17) and must pass. On
real SGLang a dead draft needs its own weights: ``SPECWATCH_DEAD_DRAFT`` names one
(``docs/validation/sglang_models.py --draft-quality 0``), and that test skips without it.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import pytest

from correctness.faultkit import fault_profile
from specwatch.checks import draft_alive
from specwatch.judge import draftalive, speculative
from specwatch.run.fixtures import profile_or_skip
from specwatch.run.session import Session
from specwatch.server.pool import RunningServer

pytestmark = pytest.mark.correctness

#: a draft model path whose first guess is never right (real SGLang only; see the module's docstring)
DEAD_DRAFT_ENV = "SPECWATCH_DEAD_DRAFT"

DROPPER = '''#!{python}
"""A launcher that forgets the speculative settings: every --speculative-* flag and its value is dropped."""
import os
import sys

args, skip = [], False
for arg in sys.argv[1:]:
    if skip:
        skip = False
    elif arg.startswith("--speculative"):
        skip = "=" not in arg
    else:
        args.append(arg)
os.execv({python!r}, [{python!r}, *args])
'''


def test_the_draft_is_alive(specwatch_session: Session, spec_server: RunningServer) -> None:
    m = specwatch_session.measure("spec")
    result = draft_alive.check(specwatch_session, spec_server, m)
    if result.skipped:
        pytest.skip(result.reason)
    print(result.message)
    assert result.ok, result.message
    assert result.reason.startswith("the draft is alive: accept length "), result.reason


def test_speculative_settings_that_never_reach_the_server_fail_naming_them(specwatch_session: Session,
                                                                           tmp_path_factory, boot_and_measure) -> None:
    spec = profile_or_skip(specwatch_session, "spec", "a draft-alive fault test")
    launcher = {} if spec.engine == "reference" else {"launcher": "python -m sglang.launch_server"}
    wrapper = tmp_path_factory.mktemp("spec-dropped") / "python"
    wrapper.write_text(DROPPER.format(python=spec.python if os.path.isabs(spec.python) else sys.executable))
    wrapper.chmod(0o755)
    prof = fault_profile(specwatch_session, "spec", "spec-dropped", python=str(wrapper), **launcher)
    server, m = boot_and_measure(prof)
    assert (m.server_info_after or {}).get("speculative_algorithm") is None, "the wrapper did not drop the flags"
    result = draft_alive.check(specwatch_session, server, m)
    print(result.message)
    assert result.failed, result.message
    assert result.reason.startswith(f"{draftalive.OFF}: /server_info says speculative_algorithm None"), result.reason
    assert (f"speculative_algorithm: the profile asks {spec.speculative.algorithm}, /server_info says None"
            in result.reason), result.reason
    assert "none of the " in result.message and " requests carries meta_info.spec_verify_ct" in result.message
    assert "its command line carries no --speculative-* flag: the settings were dropped" in result.message
    assert any(f.check == draft_alive.NAME and not f.ok for f in specwatch_session.findings_for(prof.name))


def _exact(m) -> float | None:
    """The server's own accept length of a measurement: 1 + Σ spec_num_correct_drafts / Σ spec_verify_ct."""
    est = speculative.from_requests([g.meta_info for g in m.generations])
    return est.value if est is not None else None


def test_a_low_but_alive_draft_passes(specwatch_session: Session, boot_and_measure) -> None:
    """A draft perturbed by a fixed bias (1.17 on ref-tiny, CPU): low, alive, and this check's pass."""
    prof = fault_profile(specwatch_session, "spec", "perturbed-draft", "--ref-fault-perturb-draft", "1.0")
    server, m = boot_and_measure(prof)
    result = draft_alive.check(specwatch_session, server, m)
    print(result.message)
    exact = _exact(m)
    assert exact is not None and exact >= draftalive.DEAD_BELOW, exact
    assert result.passed, result.message
    assert result.reason.startswith("the draft is alive: accept length "), result.reason


def test_a_draft_that_accepts_nothing_fails_naming_the_cause(specwatch_session: Session, boot_and_measure) -> None:
    """On the reference server, the ``-poor`` preset of the spec server's model: its early-exit draft, scaled
    far from its target, accepts none of this workload's drafts on CPU (0 of 282 on ref-tiny). On real SGLang,
    the draft ``SPECWATCH_DEAD_DRAFT`` names."""
    spec = profile_or_skip(specwatch_session, "spec", "a draft-alive fault test")
    if spec.engine == "reference":
        prof = fault_profile(specwatch_session, "spec", "poor-draft", model=f"{spec.model}-poor")
    else:
        dead = os.environ.get(DEAD_DRAFT_ENV)
        if not dead:
            pytest.skip(f"{DEAD_DRAFT_ENV} is not set: no draft model that accepts nothing (make one with "
                        "docs/validation/sglang_models.py --draft-quality 0, the target's shape and seed)")
        if not Path(dead).is_dir():
            pytest.fail(f"{DEAD_DRAFT_ENV}={dead}: no such directory")
        prof = fault_profile(specwatch_session, "spec", "dead-draft",
                             speculative=dataclasses.replace(spec.speculative, draft_model=dead))
    server, m = boot_and_measure(prof)
    exact = _exact(m)
    if exact is not None and exact >= draftalive.DEAD_BELOW:
        pytest.skip(f"{prof.name}: this draft accepts something on this server ({exact:.4f} by its own counts): "
                    "not a dead draft here")
    result = draft_alive.check(specwatch_session, server, m)
    print(result.message)
    assert result.failed, result.message
    assert result.reason.startswith("the draft accepted ") and "accept length 1.00 over the workload" in result.reason
    assert draftalive.CAUSES in result.reason, result.reason
    assert any(f.check == draft_alive.NAME and not f.ok for f in specwatch_session.findings_for(prof.name))
