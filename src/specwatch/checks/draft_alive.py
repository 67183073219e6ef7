"""The draft-alive check: on a server whose profile asks for speculation, speculation must run and the draft
must accept something.

Fails, naming the cause, when the server shows no speculation (``/server_info``, the requests'
``spec_verify_ct``, the ``/metrics`` verify counter; with the settings that did not reach it and what the
running server's command line carries), or when every accept-length source of the workload reads 1.00 (a
draft that does not match its target). The judgement is :mod:`specwatch.judge.draftalive`'s; the sources are
:mod:`specwatch.checks.accept_length`'s, each read by its own definition. :func:`evaluate_measurement` judges
a measurement alone (the speculation gate's evidence); :func:`check` adds the server's command line and keeps
the verdict in the session's log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from specwatch.checks import accept_length
from specwatch.checks.verdictlog import VerdictLog, record
from specwatch.engines.registry import native_metrics
from specwatch.judge import draftalive
from specwatch.judge.verdict import Verdict
from specwatch.profiles.profile import ServerProfile, Speculative

if TYPE_CHECKING:
    from collections.abc import Sequence

    from specwatch.load.measure import Measurement
    from specwatch.server.pool import RunningServer

__all__ = ["NAME", "NEEDS", "asked", "check", "evaluate_measurement"]

NAME = draftalive.NAME
#: what the check reads (:data:`specwatch.engines.protocol.CAPABILITIES`); /metrics and Decode lines when there
NEEDS = ("native_api", "meta_info")


def asked(spec: Speculative) -> dict[str, Any]:
    """The profile's speculative settings under their ``/server_info`` keys (None: left to the engine)."""
    return {"speculative_algorithm": spec.algorithm, "speculative_draft_model_path": spec.draft_model,
            "speculative_num_steps": spec.num_steps, "speculative_eagle_topk": spec.eagle_topk,
            "speculative_num_draft_tokens": spec.draft_tokens}


def evaluate_measurement(profile: ServerProfile, measurement: Measurement, *, argv: Sequence[str] | None = None,
                         reported: float | None = None) -> Verdict:
    """:func:`specwatch.judge.draftalive.judge` on one measurement of ``profile``'s server (a plain profile
    skips: it has no draft)."""
    spec = profile.speculative
    if spec is None:
        return Verdict.skip(NAME, "not a speculative server: no draft", profile.name)
    m = measurement
    info = m.server_info_after or None
    names = profile.engine_kind.metrics or native_metrics()
    verify_calls = generated = None
    if m.metrics_delta is not None:
        verify_calls = m.metrics_delta.value(names.verify_calls, default=None)
        generated = m.metrics_delta.value(names.generation_tokens, default=None)
    steps = accept_length.num_steps(profile, info or {})
    ests: list[Any] = []
    notes: list[str] = []
    if steps is not None:
        ests, _, notes = accept_length.measured_estimates(profile, m, steps)
    ndt = spec.draft_tokens or (info or {}).get("speculative_num_draft_tokens")
    return draftalive.judge(profile.name, asked(spec), info, [g.meta_info for g in m.generations], ests,
                            verify_calls=verify_calls, generation_tokens=generated, argv=argv,
                            num_draft_tokens=ndt, reported=reported, notes=notes)


def _argv(server: RunningServer) -> list[str] | None:
    """The running server's command line (None: its process could not be read)."""
    from specwatch.signals import procenv

    pid = server.pid
    if pid is None:
        return None
    main = next((p for p in procenv.walk(pid) if p.pid == pid), None)  # gone or unreadable: not read
    return main.cmdline if main is not None and main.cmdline else None


def check(log: VerdictLog | None, server: RunningServer, measurement: Measurement,
          reported: float | None = None) -> Verdict:
    """Is speculation running and the draft alive on ``server``, over one measured workload (``reported``:
    a value another tool reported, read in its convention)? A pass or fail is kept in ``log``."""
    prof = server.profile
    if why := prof.unable(NAME, NEEDS):
        return Verdict.skip(NAME, why, prof.name)
    if prof.speculative is None:
        return Verdict.skip(NAME, "not a speculative server: no draft", prof.name)
    return record(log, evaluate_measurement(prof, measurement, argv=_argv(server), reported=reported))
