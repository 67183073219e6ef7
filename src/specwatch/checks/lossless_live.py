"""The lossless check on live servers: greedy output of the speculative server equals the baseline's.

The comparison itself (near-tie flips, re-anchoring, the report) is :mod:`specwatch.checks.lossless`;
this module asks the two servers for their greedy outputs (:mod:`specwatch.load.greedy`) through a
:class:`ServerHost` (the run's Session is one), keeps them in the host's
:class:`~specwatch.checks.lossless.GreedyMemo`, and returns a :class:`~specwatch.judge.verdict.Verdict`
named ``lossless``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Protocol

from specwatch.checks import lossless as judge
from specwatch.checks.lossless import GreedyMemo
from specwatch.checks.verdictlog import VerdictLog, record
from specwatch.judge.verdict import Verdict
from specwatch.load.client import run_sync
from specwatch.load.greedy import greedy_generations
from specwatch.profiles.profile import ServerProfile

if TYPE_CHECKING:
    from specwatch.server.pool import RunningServer

__all__ = ["NAME", "NEEDS", "ServerHost", "check", "generate_scored", "greedy_outputs", "scored_outputs"]

NAME = "lossless"
#: what the live check reads (:data:`specwatch.engines.protocol.CAPABILITIES`)
NEEDS = ("native_api", "meta_info")


class _ServerUrl(Protocol):
    @property
    def server_url(self) -> str | None: ...  # --server-url: the only reachable server (read only: Config is frozen)


class ServerHost(VerdictLog, Protocol):
    """What the lossless check needs from its caller: profiles, servers, the memo, the verdict log."""

    greedy_outputs: GreedyMemo

    @property
    def config(self) -> _ServerUrl: ...

    def profile_for(self, role_or_name: str) -> ServerProfile: ...

    def server_for_profile(self, profile: ServerProfile) -> RunningServer: ...

    def live_profiles(self) -> Collection[str]: ...


async def generate_scored(url: str, requests: Sequence[str | Sequence[int]], max_new_tokens: int | Sequence[int],
                          *, logprobs: bool = True) -> list[judge.Scored]:
    """Greedy outputs of text prompts or input-id lists, one request at a time (the same batch shape
    on both servers), with SGLang's output logprobs (top ``TOP_LOGPROBS``) and prompt token ids.
    A server that rejects those fields (HTTP 4xx) is asked again without them: its outputs are
    then compared exactly."""
    gens = await greedy_generations(url, requests, max_new_tokens,
                                    top_logprobs=judge.TOP_LOGPROBS if logprobs else None)
    out = []
    for req, gen in zip(requests, gens, strict=True):
        sent_ids = None if isinstance(req, str) else req
        prompt_ids = gen.prompt_token_ids if gen.prompt_token_ids is not None else sent_ids
        out.append(judge.Scored.from_response(gen.output_ids, gen.meta_info, prompt_ids))
    return out


def _resolve(host: ServerHost, profile: ServerProfile | str) -> ServerProfile:
    return profile if isinstance(profile, ServerProfile) else host.profile_for(profile)


def scored_outputs(host: ServerHost, profile: ServerProfile | str, prompts: Sequence[str],
                   max_new_tokens: int) -> list[judge.Scored]:
    """Greedy (temperature 0) outputs of ``profile`` for ``prompts`` with logprobs, kept in the host's memo."""
    prof = _resolve(host, profile)
    return host.greedy_outputs.get(prof.name, prompts, max_new_tokens, lambda: run_sync(
        generate_scored(host.server_for_profile(prof).url, prompts, max_new_tokens)))


def greedy_outputs(host: ServerHost, profile: ServerProfile | str, prompts: Sequence[str],
                   max_new_tokens: int) -> list[list[int]]:
    """Greedy output ids of ``profile`` for ``prompts`` (from the host's memo)."""
    return [list(o.ids) for o in scored_outputs(host, profile, prompts, max_new_tokens)]


def _live_first(host: ServerHost, *profiles: ServerProfile) -> list[ServerProfile]:
    live = set(host.live_profiles())
    return sorted(profiles, key=lambda p: p.name not in live)


def _trace_outputs(host: ServerHost, base: ServerProfile, spec: ServerProfile, first: dict[str, list[judge.Scored]],
                   max_new_tokens: int) -> tuple[list[judge.PromptTrace], tuple[float, int] | None]:
    """Compare prompt by prompt; after each near-tie flip ask both servers to continue from the
    same prefix (all pending prompts of a round on one server, then the other)."""
    noise = judge.agreement_noise(zip(first[base.name], first[spec.name], strict=True))
    bound = judge.tie_bound(noise)
    traces = [judge.PromptTrace(b.prompt_ids, max_new_tokens) for b in first[base.name]]
    for t, b, s in zip(traces, first[base.name], first[spec.name], strict=True):
        t.advance(b, s, bound)
    while pending := [t for t in traces if t.anchor is not None]:
        anchors, lens = [t.anchor for t in pending], [t.remaining for t in pending]
        seg = {p.name: run_sync(generate_scored(host.server_for_profile(p).url, anchors, lens))  # type: ignore[arg-type]
               for p in _live_first(host, base, spec)}
        for t, b, s in zip(pending, seg[base.name], seg[spec.name], strict=True):
            t.advance(b, s, bound)
    return traces, noise


def check(
    host: ServerHost,
    baseline_profile: ServerProfile | str,
    spec_profile: ServerProfile | str,
    prompts: Sequence[str],
    max_new_tokens: int,
    min_identical: float = 1.0,
    min_common_prefix: int | None = None,
) -> Verdict:
    """Greedy outputs of the speculative server must equal the baseline's, token for token.

    Exact by default: right for float32 servers (the reference server on CPU), where the verify
    forward and the baseline's decode step compute the same logits. bf16/fp16 GPU servers verify
    several positions per request in one batch while the baseline decodes one: different batch
    shapes select different kernels and reduction orders, the logits differ in the last bits, and
    a near-tie can flip the argmax, after which the continuations legitimately diverge. For those
    pass ``min_identical`` (fraction of prompts that must be identical) and/or
    ``min_common_prefix`` (tokens every prompt must share from the start). Outputs are kept per
    profile in the host's memo, so each server is booted (one at a time) at most once for them;
    the server that is already live is asked first. A pass or fail is kept in the host's log.
    """
    base, spec = _resolve(host, baseline_profile), _resolve(host, spec_profile)
    if why := spec.unable(NAME, NEEDS) or base.unable(NAME, NEEDS):
        return Verdict.skip(NAME, why, spec.name)
    if host.config.server_url:
        return Verdict.skip(NAME, f"--server-url: only one server ({host.config.server_url}) is reachable; the "
                                  "comparison needs the baseline and the speculative one", spec.name)
    first = {p.name: scored_outputs(host, p, prompts, max_new_tokens) for p in _live_first(host, base, spec)}
    traces, noise = _trace_outputs(host, base, spec, first, max_new_tokens)
    rep = judge.compare_outputs([t.base_ids for t in traces], [t.spec_ids for t in traces], prompts,
                                min_identical, min_common_prefix, names=(base.name, spec.name), traces=traces,
                                noise=noise)
    if rep.ok:
        reason = f"{len(rep.diffs) - len(rep.differing)}/{len(rep.diffs)} prompts identical"
        if rep.ties:
            where = ", ".join(f"position {t.position} ({t.baseline_margin:.3g}+{t.spec_margin:.3g} ≤ {t.bound:.3g} "
                              "nats)" for t in rep.ties)
            reason += f", across {len(rep.ties)} near-tie flip(s) re-anchored: {where}"
    else:
        firsts = ", ".join(f"prompt {d.index} at position {d.first_diff}" for d in rep.differing)
        reason = "; ".join(rep.problems) + f"; first differing positions: {firsts}"
    return record(host, Verdict.of(NAME, rep.ok, rep.message(), reason, profile=spec.name, details=rep))
