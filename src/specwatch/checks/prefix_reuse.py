"""The prefix-reuse check on live servers: does the speculative server keep the prompt-cache hits of the plain one?

Both servers run the same multi-turn workload (:mod:`specwatch.load.multiturn`), one after the other, each with
its cache flushed first; :func:`specwatch.judge.prefixreuse.judge` compares their deep-turn hit rates and TTFT
p50s and returns a :class:`~specwatch.judge.verdict.Verdict` named ``prefix reuse``.
"""

from __future__ import annotations

from dataclasses import replace

from specwatch.checks.host import LiveHost, pair_skip
from specwatch.checks.verdictlog import record
from specwatch.judge import prefixreuse
from specwatch.judge.verdict import Verdict
from specwatch.load.client import run_sync
from specwatch.load.multiturn import MultiTurn, run_multi_turn
from specwatch.profiles.profile import ServerProfile

__all__ = ["NAME", "NEEDS", "check", "probe_of"]

NAME = prefixreuse.NAME
#: what the live check reads (:data:`specwatch.engines.protocol.CAPABILITIES`): input ids sent to the native
#: API, each reply's ``meta_info`` (``cached_tokens``)
NEEDS = ("native_api", "meta_info")


def probe_of(workload: MultiTurn) -> MultiTurn:
    """The probe run before the workload: its first session's first two turns, alone on the server (a server
    that caches none of them has no prefix cache, and the whole workload need not run)."""
    return replace(workload, sessions=1, turns=2, concurrency=1, name="reuse probe")


def check(host: LiveHost, plain: ServerProfile, spec: ServerProfile, workload: MultiTurn,
          allowance: prefixreuse.Allowance = prefixreuse.DEFAULT_ALLOWANCE) -> Verdict:
    """Run ``workload`` on the plain server, then on the speculative one, and judge the speculative server's
    deep-turn prefix reuse against the plain server's; first a probe (:func:`probe_of`) on the plain server, which
    skips at once when it keeps no prefix. A pass or fail is kept in the host's log."""
    if (skip := pair_skip(host, NAME, NEEDS, plain, spec, "the comparison")) is not None:
        return skip
    shape = workload.describe()
    host.progress(shape)
    plain_url = host.server_for_profile(plain).url
    probed = run_sync(run_multi_turn(plain_url, probe_of(workload), plain.name, host.progress))
    if (skip := prefixreuse.probe(probed, spec.name)) is not None:
        return skip
    runs = {p.name: run_sync(run_multi_turn(host.server_for_profile(p).url, workload, p.name, host.progress))
            for p in (plain, spec)}
    verdict = prefixreuse.judge(runs[plain.name], runs[spec.name], allowance, live_tokens=workload.live_tokens())
    if not verdict.skipped:
        verdict = replace(verdict, message=f"{verdict.message}\n{shape}")
    return record(host, verdict)
