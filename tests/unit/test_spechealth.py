"""Speculation health, judged (pure): per-prompt verify counts under greedy, where acceptance diverged, which
cause fits, and the aggregate accept length's drift."""

from __future__ import annotations

import pytest

from specwatch.judge import compare, spechealth
from specwatch.judge.spechealth import PromptCount
from specwatch.judge.variance import MachineSession


def _cycles(accepts: list[int]) -> list[int]:
    """Chunk ends of a stream with one chunk per cycle: the prefill token, then each cycle's tokens."""
    ends, total = [1], 1
    for a in accepts:
        total += a
        ends.append(total)
    return ends


def _count(prompt: str, accepts: list[int], ends: list[int] | None = None, output: list[int] | None = None,
           reps: int = 1) -> PromptCount:
    ct = 1 + sum(accepts)
    ids = output if output is not None else list(range(ct))
    chunk_ends = _cycles(accepts) if ends is None else ends
    (p,) = spechealth.prompt_counts([(prompt, 64, len(accepts), ct, ids, chunk_ends)] * reps)
    return p


def test_prompt_counts_group_repetitions_and_know_when_the_stream_covered_every_cycle() -> None:
    accepts = [3, 1, 2, 3]
    full, ends = _cycles(accepts), _cycles(accepts)
    merged_a = [e for i, e in enumerate(ends) if i != 2]  # the client read late once: two cycles in one chunk
    merged_b = [e for i, e in enumerate(ends) if i != 3]
    ct = full[-1]
    reqs = [("p", 64, 4, ct, list(range(ct)), merged_a), ("q", 64, None, 5, [1] * 5, []),
            ("p", 64, 4, ct, list(range(ct)), merged_b)]
    (p,) = spechealth.prompt_counts(reqs)  # q has no verify count: not a speculative request
    assert p.verify_ct == (4, 4) and p.stable and p.completion_tokens == ct
    assert p.bounds == tuple(full)  # the two merged streams together cover every cycle end
    assert p.accept_length == pytest.approx((ct - 1) / 4)
    assert PromptCount.from_dict(p.to_dict()) == p
    (alone,) = spechealth.prompt_counts(reqs[:1])
    assert alone.bounds is None and alone.seen == tuple(merged_a)
    with pytest.raises(ValueError, match="malformed"):
        PromptCount.from_dict({"key": "x"})


def test_an_unchanged_probe_passes_and_a_perturbed_draft_is_named_with_its_first_diverging_token() -> None:
    before = [_count("alpha prompt", [3, 3, 2, 3, 3]), _count("beta prompt", [2, 2, 2, 2, 2, 2])]
    same = spechealth.compare_prompts(list(before), before)
    assert same.ok and same.compared == 2 and not same.changes
    assert same.reason() == "2/2 prompts took their recorded verify counts"
    # the same 15 tokens of alpha (lossless), but the draft is accepted less from its third cycle on
    now = [_count("alpha prompt", [3, 3, 1, 1, 3, 2, 1]), before[1]]
    cmp = spechealth.compare_prompts(now, before)
    assert not cmp.ok and [c.now.index for c in cmp.findings] == [0]
    change = cmp.findings[0]
    assert change.output_same and change.dropped
    assert spechealth.first_divergence(change.before, change.now) == (8, True)  # cycle 3 ends at 9 then, 8 now
    line = change.line()
    assert "prompt 0 ('alpha prompt'): 5 -> 7 verify cycles for 15 tokens (dropped" in line
    assert "acceptance first diverged at output token 8 (verify cycle 3: 2 tokens then, 1 now)" in line
    assert "the draft or its inputs changed" in line
    assert cmp.reason() == ("acceptance dropped on 1/2 greedy prompts: prompt 0 (5 -> 7) (lossless output: the "
                            "draft or its inputs changed)")


def test_where_acceptance_diverged_is_bounded_when_only_one_stream_covered_every_cycle() -> None:
    before = _count("p", [3, 3, 2, 3])
    now_cycles = [3, 2, 1, 2, 3]
    merged = [e for i, e in enumerate(_cycles(now_cycles)) if i not in (3, 4)]  # [1, 4, 6, 12]: 7, 9 unseen
    now = _count("p", now_cycles, ends=merged)
    assert now.bounds is None
    assert spechealth.first_divergence(before, now) == (6, False)  # 6 ends a cycle now, none then
    assert "at or before output token 6" in spechealth.compare_prompts([now], [before]).changes[0].line()
    hidden = _count("p", now_cycles, ends=[1, 4, 9, 12])  # every end it shows is one of before's too
    assert spechealth.first_divergence(before, hidden) is None
    blind = _count("p", [3, 3, 2, 3], ends=[1, 12])
    assert spechealth.first_divergence(blind, _count("p", now_cycles, ends=[1, 12])) is None


def test_a_changed_output_is_explained_by_the_target_or_called_a_correctness_bug() -> None:
    before = [_count("a", [3, 3, 3]), _count("b", [2, 2, 2, 1])]
    now = [_count("a", [3, 3, 1, 2], output=[9] * 10), _count("b", [2, 1, 1, 2, 1], output=[7] * 8)]
    cmp = spechealth.compare_prompts(now, before)
    assert len(cmp.findings) == 2 and not any(c.output_same for c in cmp.changes)
    assert "no plain server could be asked" in cmp.findings[0].cause()
    judged = spechealth.explain(cmp, {now[0].key: True, now[1].key: False})
    assert [c.now.prompt for c in judged.findings] == ["b"]  # a: the plain server's output moved too
    assert "moved with its output" in judged.changes[0].cause()
    assert "a correctness bug" in judged.findings[0].cause()
    assert "diverging output: a correctness bug" in judged.reason()


def test_a_prompt_that_is_not_deterministic_here_matches_any_of_its_counts() -> None:
    before = [_count("a", [3, 3, 3])]
    wobble = spechealth.prompt_counts([("a", 64, 3, 10, list(range(10)), []), ("a", 64, 4, 10, list(range(10)), [])])
    cmp = spechealth.compare_prompts(wobble, before)
    assert cmp.ok and cmp.unstable and "not deterministic in this run: [3, 4]" in "\n".join(cmp.lines())
    other = spechealth.compare_prompts([_count("new prompt", [3])], before)
    assert other.compared == 0 and len(other.unmatched) == 2 and other.ok
    assert "no prompt of the probe has a recorded verify count" in other.reason()


def test_the_aggregate_accept_length_drifts_by_throughputs_machinery_at_its_own_tolerance() -> None:
    cmp, basis = spechealth.accept_drift([1.44] * 8, [1.70] * 8)
    assert cmp.verdict is compare.DriftVerdict.REGRESSION and cmp.tolerance == spechealth.ACCEPT_TOLERANCE
    assert "5.0% tolerance" in basis.note
    steady, _ = spechealth.accept_drift([1.69, 1.70, 1.71] * 3, [1.70] * 8)
    assert steady.verdict is compare.DriftVerdict.NO_CHANGE


def test_the_aggregate_accept_length_is_judged_on_the_runs_own_machine() -> None:
    """Sessions of two machines whose accept lengths differ by 5% (a draft fed other hidden states there):
    a 2% drop on machine A is a regression when the run names A, and within the machine term when not."""
    sessions = [MachineSession([m + d + e for e in (-0.004, 0.0, 0.004)], name)
                for name, m in (("A", 2.0), ("B", 2.1)) for d in (-0.003, 0.0, 0.003)]
    now = [1.96 + e for e in (-0.004, 0.0, 0.004)]
    pooled = [x for s in sessions for x in s]
    on_a, basis = spechealth.accept_drift(now, pooled, sessions=sessions, machine="A")
    assert on_a.verdict is compare.DriftVerdict.REGRESSION and "judged as a run on it" in basis.note
    new, basis = spechealth.accept_drift(now, pooled, sessions=sessions)
    assert new.verdict is not compare.DriftVerdict.REGRESSION and "machine term" in basis.note
