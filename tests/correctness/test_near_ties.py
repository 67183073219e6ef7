"""The determinism test's judgement without a server: one server asked twice, near-ties told from bugs
exactly as the lossless check tells them (:func:`correctness.faultkit.repeat_report`)."""

from __future__ import annotations

import pytest

from correctness.faultkit import repeat_report
from specwatch.checks import lossless

pytestmark = pytest.mark.correctness


def _scored(ids, chosen, others, prompt=(5, 6)):
    """Scored output: each position's chosen logprob and the other listed tokens' logprobs."""
    return lossless.Scored(tuple(ids), tuple(chosen), tuple(dict(o) for o in others), prompt)


@pytest.mark.parametrize(("margins", "ok"), [((0.010, 0.005), True), ((0.9, 0.8), False)])
def test_a_repeat_flip_passes_only_as_a_near_tie(margins: tuple[float, float], ok: bool) -> None:
    """The determinism test's judgement, without a server: two runs agree on two tokens within
    0.01 nats, then swap tokens 7 and 8; within 4x that noise it is a bf16 near-tie (re-anchored, the
    rest compared), far beyond it a bug."""
    first_m, again_m = margins
    first = [_scored((1, 2, 7, 9), (-0.10, -0.20, -0.70, -0.1), ({}, {}, {8: -0.70 - first_m}, {}))]
    again = [_scored((1, 2, 8, 3), (-0.11, -0.21, -0.70, -0.1), ({}, {}, {7: -0.70 - again_m}, {}))]
    continuation = [_scored((9,), (-0.1,), ({},), None)]
    asked: list[tuple] = []

    def ask(requests, lens):
        asked.append((list(requests), lens))
        return again if len(asked) == 1 else continuation

    report = repeat_report(first, ask, ["p"], 4, "plain")
    assert report.ok is ok, report.message()
    if ok:  # re-anchored on the first run's token: prompt, agreed tokens, then 7
        assert asked[1] == ([(5, 6, 1, 2, 7)], [1]) and len(report.ties) == 1
        assert "near-tie flip at position 2" in report.message()
    else:
        assert len(asked) == 1 and report.differing[0].first_diff == 2
        assert "too wide for numerical noise" in report.message()
