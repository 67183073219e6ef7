"""The accept-length-by-concurrency check on a live server: the same greedy prompts one at a time, then at
concurrency 4, 16 and one above the largest batch size the server captured as a CUDA graph; every reply's output
and accepted drafts must be its prompt's at concurrency 1 (judged by :mod:`specwatch.checks.batchaccept`).

The captured sizes come from the server's capture lines or ``/server_info`` (:func:`specwatch.checks.graphcheck.
captured_verify_bs`); a server that captured none (a CPU, graphs off) is read at the capture limit it resolved
(``/server_info`` ``cuda_graph_max_bs_decode``, ``cuda_graph_max_bs`` before SGLang 0.5.14, else the profile's
``cuda_graph_max_bs``). At each level the prompts are repeated until the level has as many requests as it has in
flight (prompt ``j % len(prompts)``), and the Decode lines written while it ran say which batch sizes formed and
whether they verified as graphs. Returns a :class:`~specwatch.judge.verdict.Verdict` named ``accept length by
concurrency``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from specwatch.checks import batchaccept, graphcheck, lossless
from specwatch.checks.verdictlog import VerdictLog, record
from specwatch.judge.verdict import Verdict
from specwatch.load.client import Client, Generation, run_sync
from specwatch.load.greedy import greedy_at_concurrency
from specwatch.load.workload import prompt_set
from specwatch.signals.logscan import LogWindow

if TYPE_CHECKING:
    from specwatch.server.pool import RunningServer

__all__ = ["MAX_NEW_TOKENS", "NAME", "NEEDS", "PROMPTS", "capture_top", "check"]

NAME = "accept length by concurrency"
#: what the live check reads (:data:`specwatch.engines.protocol.CAPABILITIES`); Decode lines and capture lines
#: are read when the server has them
NEEDS = ("native_api", "meta_info")
#: Six seeded prompts: their last tokens differ, so a draft whose acceptance varies along the text (the validation
#: models' varying draft) gives each its own accept length
PROMPTS = prompt_set(seed=1234, n=6, words=12)
MAX_NEW_TOKENS = 48


def capture_top(server_info: Mapping[str, Any], log_path: str | os.PathLike[str] | None, profile_limit: int | None
                ) -> tuple[int | None, str]:
    """The largest batch size the server's verify replays as a graph, and what it is (a phrase for messages); a
    server that captured none is read at its capture limit."""
    captures = LogWindow(log_path, start=0).capture_records() if log_path else []
    captured = graphcheck.captured_verify_bs(server_info, captures)
    if captured:
        return max(captured), f"the largest captured bs={max(captured)}"
    found = graphcheck.capture_limit(server_info)
    limit = found[0] if found else ((server_info.get("cuda_graph_config") or {}).get("decode") or {}).get("max_bs")
    if isinstance(limit, int) and limit > 0:
        return limit, f"the capture limit bs={limit} of /server_info (nothing captured)"
    if profile_limit:
        return profile_limit, f"the profile's cuda_graph_max_bs={profile_limit} (nothing captured)"
    return None, ""


def _replies(prompts: Sequence[int], gens: Sequence[Generation]) -> tuple[batchaccept.Reply, ...]:
    return tuple(batchaccept.Reply.of(p, lossless.Scored.from_response(g.output_ids, g.meta_info,
                                                                       g.prompt_token_ids), g.meta_info)
                 for p, g in zip(prompts, gens, strict=True))


def _level(server: RunningServer, texts: Sequence[str], max_new_tokens: int, concurrency: int, why: str = ""
           ) -> batchaccept.Level:
    """One level: ``max(len(texts), concurrency)`` requests, ``concurrency`` in flight, with its Decode lines."""
    order = [j % len(texts) for j in range(max(len(texts), concurrency))]
    window = LogWindow(server.log_path) if server.log_path else None
    gens = run_sync(greedy_at_concurrency(server.url, [texts[j] for j in order], max_new_tokens, concurrency,
                                          top_logprobs=lossless.TOP_LOGPROBS))
    batches: tuple[graphcheck.BatchUse, ...] = ()
    if window is not None:
        window.close()
        batches = tuple(graphcheck.batch_use(window.decode_records()))
    return batchaccept.Level(concurrency, _replies(order, gens), batches, why)


async def _info(url: str) -> dict[str, Any]:
    async with Client(url) as client:
        return await client.server_info()


def check(log: VerdictLog | None, server: RunningServer, prompts: Sequence[str] = PROMPTS,
          max_new_tokens: int = MAX_NEW_TOKENS, base_levels: Sequence[int] = batchaccept.BASE_LEVELS) -> Verdict:
    """Ask ``prompts`` at each concurrency of ``base_levels`` and one above the captured batch sizes; fail naming
    the concurrency at which a reply's output or accepted drafts part from its prompt's alone. A pass or fail is
    kept in ``log``."""
    prof = server.profile
    if why := prof.unable(NAME, NEEDS):
        return Verdict.skip(NAME, why, prof.name)
    if prof.speculative is None:
        return Verdict.skip(NAME, "not a speculative server: it accepts no drafts", prof.name)
    if not prompts:
        return Verdict.skip(NAME, "no prompts to ask", prof.name)
    info = run_sync(_info(server.url))
    top, what = capture_top(info, server.log_path, prof.cuda_graph_max_bs)
    chosen, notes = batchaccept.levels_for(top, graphcheck.max_running(info), base_levels, what)
    if server.log_path is None:
        notes.append("no log file (--server-url): the batch sizes each level formed are not read")
    reference = _level(server, prompts, max_new_tokens, 1)
    levels = [_level(server, prompts, max_new_tokens, c, why) for c, why in chosen]
    report = batchaccept.judge(reference, levels, notes)
    if report.ok is None:
        return Verdict.skip(NAME, report.reason(), prof.name)
    return record(log, Verdict.of(NAME, report.ok, report.message(), report.reason(), profile=prof.name,
                                  details=report))
