"""The stops judgement (checks/stops.py): probes from a plain output, replies judged alone and against plain.

The engine model below replays SGLang's ``Req.update_finish_state`` (0.5.12-0.5.17: the ``max_new_tokens`` cap is
tested before the stop checks; 0.5.18 and later trim at the stop) over speculative steps that commit several tokens
at once: the judgement must fail the first ordering exactly when some probe's stop lies inside a step that crosses
its cap, and never fail the second.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specwatch.checks import stops, stops_live
from specwatch.checks.stops import Probe, Reply

PLAIN = [7, 3, 9, 4, 11, 5, 8, 2, 6, 10, 12, 13, 14]
TEXTS = ["a", " b", "cd", " e", "fg", "h", " ij", "k", "lm", "n", "o", "p", "q"]


def serve(probe: Probe, output: Sequence[int], steps: Sequence[int], cap_first: bool) -> Reply:
    """A greedy server whose first token comes from the prefill and each later step commits ``steps[i]`` tokens
    (a plain server: steps of 1); ``cap_first``: the length cap is tested before the stop (the upstream bug)."""
    ids: list[int] = []
    sizes = [1, *steps]
    for size in sizes:
        new = list(output[len(ids):len(ids) + size])
        ids += new
        stop_at = next((len(ids) - len(new) + i for i, t in enumerate(new) if t == probe.stop_token_id), None)
        if cap_first and len(ids) >= probe.max_new_tokens:
            return Reply(tuple(ids[:probe.max_new_tokens]), "", probe.max_new_tokens, "length")
        if stop_at is not None and stop_at < probe.max_new_tokens:
            return Reply(tuple(ids[:stop_at + 1]), "", stop_at + 1, "stop", probe.stop_token_id)
        if len(ids) >= probe.max_new_tokens:
            return Reply(tuple(ids[:probe.max_new_tokens]), "", probe.max_new_tokens, "length")
    raise AssertionError("the steps ran out before the cap")


def test_probes_place_a_first_occurring_stop_and_a_cap_just_past_it() -> None:
    out = [5, 6, 5, 7, 8, 9, 10, 11, 12]
    probes = stops.probes_from(["p"], [out], positions=4, overshoots=(1, 2))
    token_probes = [p for p in probes if p.stop_token_id is not None]
    # position 2 repeats token 5 (first seen at 0): no stop there; positions 3 and 4 and 5 give two caps each
    assert [(p.position, p.max_new_tokens) for p in token_probes] == [(3, 5), (3, 6), (4, 6), (4, 7), (5, 7), (5, 8)]
    assert all(p.expected_ids == tuple(out[:p.position + 1]) for p in token_probes)
    assert token_probes[0].sampling() == {"max_new_tokens": 5, "ignore_eos": False, "stop_token_ids": [7]}


def test_stop_strings_complete_exactly_at_their_token() -> None:
    probes = stops.probes_from(["p"], [PLAIN], [TEXTS], positions=4, overshoots=(1,))
    strings = {p.position: p.stop_str for p in probes if p.stop_str is not None}
    # " e" (position 3) has 1 visible character: the last two tokens' text "cd e" is used
    assert strings == {2: "cd", 3: "cd e", 4: "fg", 5: "fgh"}
    for pos, word in strings.items():
        text = "".join(TEXTS[:pos + 1])
        assert text.endswith(word) and text.find(word) == len(text) - len(word)


def test_identical_replies_that_end_at_the_stop_pass() -> None:
    probes = stops.probes_from(["p"], [PLAIN], positions=3)
    plain = [serve(p, PLAIN, [1] * 20, cap_first=True) for p in probes]
    spec = [serve(p, PLAIN, [1] * 20, cap_first=True) for p in probes]
    report = stops.judge(probes, plain, spec, ("plain", "eagle3"))
    assert report.ok is True and report.held == len(probes)
    assert report.finish_counts["eagle3"] == {"stop": len(probes)}


def test_a_cap_tested_before_the_stop_leaks_the_tokens_after_it() -> None:
    probes = stops.probes_from(["p"], [PLAIN], positions=4, overshoots=(1,))
    plain = [serve(p, PLAIN, [1] * 20, cap_first=True) for p in probes]
    spec = [serve(p, PLAIN, [2] * 20, cap_first=True) for p in probes]  # accept length 2.00: steps of 2 tokens
    report = stops.judge(probes, plain, spec, ("plain", "eagle3"))
    assert report.ok is False
    leaks = [f for f in report.findings if f.leaked_ids]
    # steps commit positions (1, 2), (3, 4), (5, 6): a stop at 3 or 5 with the cap one past it leaks one token
    assert sorted(f.probe.position for f in leaks) == [3, 5]
    assert all(f.server == "eagle3" and len(f.leaked_ids) == 1 for f in leaks)
    assert "finished 'length'" in leaks[0].problem
    assert "only eagle3 (speculative) leaks" in report.summary()
    assert "finish reason 'length'" in report.message()


def test_replies_that_never_reach_the_stop_are_set_apart_not_passed() -> None:
    probes = stops.probes_from(["p"], [PLAIN], positions=2, overshoots=(1,))
    other = [PLAIN[0], 99, *PLAIN[2:]]  # a near-tie flip at position 1: the stops at 2 and 3 are never seen
    plain = [serve(p, PLAIN, [1] * 20, cap_first=False) for p in probes]
    spec = [serve(p, other, [1] * 20, cap_first=False) for p in probes]
    report = stops.judge(probes, plain, spec)
    assert report.ok is None and report.held == 0 and len(report.diverged) == len(probes)
    assert "cannot tell" in report.summary()


def test_without_a_plain_server_a_leak_still_fails() -> None:
    probes = stops.probes_from(["p"], [PLAIN], positions=4, overshoots=(1,))
    spec = [serve(p, PLAIN, [2] * 20, cap_first=True) for p in probes]
    report = stops.judge(probes, None, spec, ("(none)", "eagle3"))
    assert report.ok is False and {f.server for f in report.findings} == {"eagle3"}
    alone = stops.judge(probes, None, [serve(p, PLAIN, [1] * 20, cap_first=True) for p in probes], ("(none)", "e"))
    assert alone.ok is True and "judged on e alone (no plain server to compare with)" in alone.summary()


def test_a_stop_string_left_in_the_text_is_a_leak() -> None:
    probe = Probe(0, "p", 2, 4, (7, 3, 9), stop_str="cd")
    leaked = Reply((7, 3, 9, 4), "a bcd e", 4, "length")
    report = stops.judge([probe], None, [leaked])
    assert report.ok is False and report.findings[0].leaked_text == " e"


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(st.integers(1, 4), min_size=12, max_size=12), positions=st.integers(1, 6),
       overshoot=st.integers(1, 3))
def test_only_a_stop_inside_a_step_that_crosses_the_cap_fails(steps: list[int], positions: int,
                                                               overshoot: int) -> None:
    probes = stops.probes_from(["p"], [PLAIN], positions=positions, overshoots=(overshoot,))
    plain = [serve(p, PLAIN, [1] * 20, cap_first=True) for p in probes]
    fixed = [serve(p, PLAIN, steps, cap_first=False) for p in probes]
    assert stops.judge(probes, plain, fixed).ok is True
    buggy = [serve(p, PLAIN, steps, cap_first=True) for p in probes]
    ends = [1]
    for s in steps:
        ends.append(ends[-1] + s)  # the output length after each step
    # a probe leaks when the step that commits its stop also reaches its cap
    leaking = {p.position for p in probes
               if (end := next(e for e in ends if e > p.position)) >= p.max_new_tokens and end > p.position + 1}
    report = stops.judge(probes, plain, buggy)
    assert {f.probe.position for f in report.findings if f.leaked_ids} == leaking
    assert report.ok is (not leaking)


REAL = Path(__file__).resolve().parents[2] / "docs/validation/data/2026-12-05-sglang-8b-spec-costs-x1"


def _recorded(run: str) -> stops_live.StopRun:
    """A real run's probes and both servers' replies (SGLang 0.5.16 at the 8B shape, one H100, 2026-12-05),
    judged again by today's rule."""
    return stops_live.from_json(json.loads((REAL / run / "stops-sgl8b-eagle3.json").read_text()))


def test_real_sglang_0_5_16_leaks_past_a_stop_only_under_speculation() -> None:
    run = _recorded("sgl8b-stops")
    report = run.report
    assert report.ok is False and report.probes == 56
    leaks = [f for f in report.findings if f.leaked_ids or f.leaked_text]
    assert {f.server for f in report.findings} == {"sgl8b-eagle3"}  # the plain server never leaked
    assert len(leaks) == 14 and all(len(f.leaked_ids) <= 1 for f in leaks)
    # accept length 2.00: cycles end at even positions, so only odd stops with the cap one past them leak
    assert {f.probe.position % 2 for f in leaks} == {1}
    assert {f.probe.max_new_tokens - f.probe.position for f in leaks} == {2}
    assert report.finish_counts["sgl8b-plain"] == {"stop": 56}


def test_real_sglang_with_the_fixs_ordering_passes_every_probe() -> None:
    report = _recorded("sgl8b-stops-fixed").report
    assert report.ok is True and report.held == report.probes == 56


def test_a_stops_run_of_another_format_version_is_one_error() -> None:
    data = json.loads((REAL / "sgl8b-stops" / "stops-sgl8b-eagle3.json").read_text())
    data["version"] = 99
    with pytest.raises(ValueError, match="version 99"):
        stops_live.from_json(data)


def test_a_reply_missing_or_mangling_its_fields_is_read_not_crashed_on() -> None:
    odd = Reply.from_response([7, 3], "ab", {"completion_tokens": None, "finish_reason": "stop"})
    assert odd.completion_tokens == 2 and odd.finish_type is None and odd.matched is None
    bare = Reply.from_response([], "", {})
    assert bare.ids == () and bare.completion_tokens == 0
    probe = Probe(0, "p", 2, 4, (7, 3, 9), stop_token_id=9)
    report = stops.judge([probe], None, [bare])
    assert report.ok is None and len(report.diverged) == 1  # an empty reply never reached its stop: no pass
