"""Helpers of the correctness tests: fault configurations booted through the session's pool.

Fault servers are extra profiles (``dataclasses.replace`` of the profile set's own) booted with
``Session.server_for_profile``; their measurements are kept here, not in the session's
measurements, so they never reach results files or baselines.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from specwatch.checks import lossless
from specwatch.load.measure import Measurement
from specwatch.load.workload import Workload, prompt_set
from specwatch.profiles.profile import ServerProfile
from specwatch.run.fixtures import profile_or_skip
from specwatch.run.session import Session

#: Small and quick: enough verify cycles for several Decode lines per request.
CHECK_WORKLOAD = Workload("correctness-check", runs=3, warmup=1, max_new_tokens=48)
#: The seeded prompt set of the lossless checks.
LOSSLESS_PROMPTS = prompt_set(seed=1234, n=6, words=16)
LOSSLESS_MAX_NEW = 48


def fault_profile(session: Session, role: str, suffix: str, *fault_args: str, needs: tuple[str, ...] = (),
                  sglang_args: tuple[str, ...] | None = None, **changes: Any) -> ServerProfile:
    """The profile of ``role`` with a fault: ``name+suffix``, extra flags, other field changes.

    Skips, saying which, when the run cannot boot it: ``--server-url``, no server for ``role`` (or
    for a role in ``needs``, which the test compares it with), or a fault switch (``fault_args``) on a
    server that is not the reference server (the switches are the reference server's own), unless
    ``sglang_args`` gives the same fault through real SGLang's own flags.
    """
    what = f"a fault test ({' '.join(fault_args) or suffix} on the {role} server)"
    if fault_args:
        what = f"a reference-server fault test ({' '.join(fault_args)} on the {role} server)"
    if session.config.server_url:
        pytest.skip(f"{what}: --server-url: fault configurations cannot be booted")
    base = profile_or_skip(session, role, what)
    for other in needs:
        profile_or_skip(session, other, what)
    if sglang_args is not None and base.engine == "sglang":  # the same fault through SGLang's own flags
        fault_args = sglang_args
    elif fault_args and base.engine != "reference":
        pytest.skip(f"{what}: {' '.join(fault_args)} is a switch of the reference server (engine = \"reference\"); "
                    f"{base.name} runs engine = {base.engine!r}")
    return dataclasses.replace(base, name=f"{base.name}+{suffix}", extra_args=(*base.extra_args, *fault_args),
                               **changes)


def baseline_measurement(session: Session, spec: Measurement) -> Measurement | None:
    """The baseline server's measurement of ``spec``'s workload, when this run took one: the
    verify-graphs check's yardstick for a plain decode step."""
    base = session.profiles.for_role("baseline")
    return session.measurements.get((base.name, spec.workload.name)) if base else None


#: ask(requests, max_new_tokens) -> one server's greedy outputs with logprobs (text prompts or input ids)
Ask = Callable[[Sequence[str | Sequence[int]], int | Sequence[int]], list[lossless.Scored]]


def repeat_report(first: Sequence[lossless.Scored], ask: Ask, prompts: Sequence[str], max_new_tokens: int,
                  name: str) -> lossless.LosslessReport:
    """One server's greedy outputs against the same server asked again, judged exactly as the lossless
    check judges two servers (:mod:`specwatch.checks.lossless`): the runs' own logprobs give the noise
    where they agree and the near-tie bound; after a near-tie flip both runs continue from the same
    prefix (each asked again), and anything else is a divergence."""
    again = ask(prompts, max_new_tokens)
    noise = lossless.agreement_noise(zip(first, again, strict=True))
    bound = lossless.tie_bound(noise)
    traces = [lossless.PromptTrace(o.prompt_ids, max_new_tokens) for o in first]
    for trace, a, b in zip(traces, first, again, strict=True):
        trace.advance(a, b, bound)
    while pending := [t for t in traces if t.anchor is not None]:
        anchors, lens = [t.anchor for t in pending], [t.remaining for t in pending]
        for trace, a, b in zip(pending, ask(anchors, lens), ask(anchors, lens), strict=True):
            trace.advance(a, b, bound)
    return lossless.compare_outputs([t.base_ids for t in traces], [t.spec_ids for t in traces], prompts,
                                    names=(f"{name} (first run)", f"{name} (again)"), traces=traces, noise=noise)
