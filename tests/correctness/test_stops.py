"""A stop inside an accepted run ends the output there: speculation changes nothing a client sees at a stop."""

from __future__ import annotations

import json

import pytest

from correctness.faultkit import LOSSLESS_PROMPTS
from specwatch.checks import stops_live
from specwatch.run.fixtures import profile_or_skip
from specwatch.run.session import Session

pytestmark = pytest.mark.correctness

#: three seeded prompts, 24 output tokens each: up to 6 stop positions x (token, string) x 2 caps per prompt
PROMPTS = LOSSLESS_PROMPTS[:3]
REFERENCE_TOKENS = 24


def test_stops_inside_accepted_runs_match_plain_decoding(specwatch_session: Session) -> None:
    """The plain server is asked first (the probes come from its output), then the speculative one: one boot each."""
    spec = profile_or_skip(specwatch_session, "spec", "the stops check")
    base = None if specwatch_session.config.server_url else profile_or_skip(
        specwatch_session, "baseline", "the stops check compares the speculative server's replies with it")
    result = stops_live.check(specwatch_session, base, spec, PROMPTS, REFERENCE_TOKENS)
    if result.skipped:
        pytest.skip(result.reason)
    run = result.details
    folder = specwatch_session.config.path(specwatch_session.config.report_dir)
    if folder is not None:  # the probes and both servers' replies, for a replay of today's rule
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"stops-{spec.name}.json").write_text(
            json.dumps(stops_live.to_json(run), indent=1, sort_keys=True) + "\n")
    print(result.message)
    assert run.report.probes == len(run.probes) > 0
    assert result.ok, result.message
    assert run.report.held > 0 and run.report.held + len(run.report.diverged) == run.report.probes
    # every reply ended at its stop or its cap, never past either
    for probe, reply in zip(run.probes, run.spec, strict=True):
        assert len(reply.ids) <= probe.max_new_tokens, (probe.describe(), reply)
