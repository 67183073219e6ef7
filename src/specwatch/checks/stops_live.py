"""The stops check on live servers: a stop inside an accepted run ends the output there, as plain decoding does.

The judgement is :mod:`specwatch.checks.stops`; this module asks the plain server for its greedy output of each
prompt (EOS honoured, each token's text with it), builds the probes from it, sends every probe to both servers one
at a time (the same batch shape on both) and returns a :class:`~specwatch.judge.verdict.Verdict` named ``stops``
whose details hold the probes and both servers' replies (:func:`to_json`: what a validation run keeps as data).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specwatch.checks import stops
from specwatch.checks.lossless_live import ServerHost
from specwatch.checks.verdictlog import record
from specwatch.judge.verdict import Verdict
from specwatch.load.client import Client, run_sync
from specwatch.profiles.profile import ServerProfile

__all__ = ["FORMAT_VERSION", "NAME", "NEEDS", "StopRun", "ask", "check", "reference", "to_json"]

NAME = "stops"
#: what the live check reads (:data:`specwatch.engines.protocol.CAPABILITIES`)
NEEDS = ("native_api", "meta_info")
FORMAT_VERSION = 1


async def reference(url: str, prompts: Sequence[str], max_new_tokens: int
                    ) -> tuple[list[list[int]], list[list[str] | None]]:
    """Each prompt's greedy output ids (EOS honoured) and each token's own text (None when the server gives none)."""
    ids: list[list[int]] = []
    texts: list[list[str] | None] = []
    extra = {"return_logprob": True, "top_logprobs_num": 0, "return_text_in_logprobs": True}
    async with Client(url) as client:
        for prompt in prompts:
            gen = await client.generate(prompt, max_new_tokens=max_new_tokens, temperature=0.0, ignore_eos=False,
                                        stream=False, extra=extra)
            ids.append(list(gen.output_ids))
            rows = gen.meta_info.get("output_token_logprobs")
            words = [row[2] for row in rows] if isinstance(rows, list) and len(rows) == len(gen.output_ids) \
                and all(isinstance(r, list) and len(r) > 2 and isinstance(r[2], str) for r in rows) else None
            texts.append(words)
    return ids, texts


async def ask(url: str, probes: Sequence[stops.Probe]) -> list[stops.Reply]:
    """Every probe's greedy, non-streamed reply, one request at a time."""
    out = []
    async with Client(url) as client:
        for probe in probes:
            gen = await client.generate(probe.prompt, max_new_tokens=probe.max_new_tokens, temperature=0.0,
                                        ignore_eos=False, stream=False, sampling=probe.sampling())
            out.append(stops.Reply.from_response(gen.output_ids, gen.text, gen.meta_info))
    return out


class StopRun:
    """The probes, both servers' replies and the report: a verdict's details."""

    def __init__(self, probes: list[stops.Probe], plain: list[stops.Reply] | None, spec: list[stops.Reply],
                 report: stops.StopReport) -> None:
        self.probes, self.plain, self.spec, self.report = probes, plain, spec, report


def to_json(run: StopRun) -> dict[str, Any]:
    """Versioned JSON of a run: the probes, each server's replies, the names (what a replay judges again)."""
    return {"version": FORMAT_VERSION, "names": list(run.report.names),
            "probes": [{"prompt_index": p.prompt_index, "prompt": p.prompt, "position": p.position,
                        "max_new_tokens": p.max_new_tokens, "expected_ids": list(p.expected_ids),
                        "stop_token_id": p.stop_token_id, "stop_str": p.stop_str} for p in run.probes],
            "plain": None if run.plain is None else [r.to_json() for r in run.plain],
            "spec": [r.to_json() for r in run.spec]}


def from_json(data: dict[str, Any]) -> StopRun:
    """A run written by :func:`to_json`, judged again by today's rule."""
    if data.get("version") != FORMAT_VERSION:
        raise ValueError(f"stops run: version {data.get('version')!r}, this specwatch reads {FORMAT_VERSION}")
    probes = [stops.Probe(p["prompt_index"], p["prompt"], p["position"], p["max_new_tokens"],
                          tuple(p["expected_ids"]), p.get("stop_token_id"), p.get("stop_str"))
              for p in data["probes"]]
    plain = None if data["plain"] is None else [stops.Reply.from_json(r) for r in data["plain"]]
    spec = [stops.Reply.from_json(r) for r in data["spec"]]
    names = (data["names"][0], data["names"][1])
    return StopRun(probes, plain, spec, stops.judge(probes, plain, spec, names))


def _resolve(host: ServerHost, profile: ServerProfile | str) -> ServerProfile:
    return profile if isinstance(profile, ServerProfile) else host.profile_for(profile)


def check(host: ServerHost, baseline_profile: ServerProfile | str | None, spec_profile: ServerProfile | str,
          prompts: Sequence[str], max_new_tokens: int = 32) -> Verdict:
    """Stops inside accepted runs on the speculative server, against the plain server's replies to the same probes.

    Without a plain server (``baseline_profile`` None, or ``--server-url``) the probes come from the speculative
    server's own output and its replies are judged on their own (a leak past a stop or the cap still fails).
    """
    spec = _resolve(host, spec_profile)
    base = None if baseline_profile is None or host.config.server_url else _resolve(host, baseline_profile)
    if why := spec.unable(NAME, NEEDS) or (base.unable(NAME, NEEDS) if base is not None else None):
        return Verdict.skip(NAME, why, spec.name)
    if spec.speculative is None:
        return Verdict.skip(NAME, "not a speculative server: plain decoding commits one token a step", spec.name)
    source = base if base is not None else spec
    ids, texts = run_sync(reference(host.server_for_profile(source).url, prompts, max_new_tokens))
    probes = stops.probes_from(prompts, ids, texts)
    if not probes:
        return Verdict.skip(NAME, f"{source.name}'s greedy outputs of {len(prompts)} prompts left no stop to place "
                                  "(each ended or repeated itself within a few tokens)", spec.name)
    plain = run_sync(ask(host.server_for_profile(base).url, probes)) if base is not None else None
    replies = run_sync(ask(host.server_for_profile(spec).url, probes))
    report = stops.judge(probes, plain, replies, (base.name if base is not None else "(none)", spec.name))
    run = StopRun(probes, plain, replies, report)
    reason = report.summary()
    return record(host, Verdict.of(NAME, report.ok, report.message(), reason, profile=spec.name, details=run))
