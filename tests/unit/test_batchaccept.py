"""The accept-length-by-concurrency judgement without a server (checks/batchaccept.py): replies that hold pass,
a level whose accepted drafts fall fails naming the concurrency and the numbers, an output that parts fails unless
its own logprobs show a near tie, and a draft's hidden near tie is allowed only where the batch shapes' logprobs
differ at all. The counts are those of the reference server's spec server (ref-tiny, CPU) on the check's six
prompts, 48 tokens: prompt 0 took 24 verify cycles with 24 correct drafts alone, 45 and 2 in a batch of four
with --ref-fault-batch-draft (tests/correctness/test_acceptance_concurrency.py)."""

from __future__ import annotations

from specwatch.checks import batchaccept, graphcheck
from specwatch.checks.lossless import Scored

#: (spec_verify_ct, spec_num_correct_drafts) of the six prompts alone on ref-tiny
ALONE = [(24, 24), (21, 27), (34, 14), (27, 20), (30, 17), (28, 20)]


def _reply(prompt: int, counts: tuple[int, int], ids: tuple[int, ...] = (5, 6, 7),
           lps: tuple[float, ...] | None = (-0.1, -0.2, -0.3), top: tuple[dict, ...] | None = None
           ) -> batchaccept.Reply:
    scored = Scored(ids, lps, top if top is not None else tuple({} for _ in ids), (1, 2))
    return batchaccept.Reply(prompt, scored, counts[0], counts[1], 48)


def _level(c: int, counts: list[tuple[int, int]], **kw) -> batchaccept.Level:
    order = [j % len(ALONE) for j in range(max(len(ALONE), c))]
    return batchaccept.Level(c, tuple(_reply(p, counts[p], **kw) for p in order))


def test_replies_that_hold_pass_with_every_level_named() -> None:
    ref = _level(1, ALONE)
    report = batchaccept.judge(ref, [_level(4, ALONE), _level(9, ALONE), _level(16, ALONE)])
    assert report.ok and report.compared == 6 + 9 + 16 and not report.partings
    assert report.reason() == "accept length and greedy output held at concurrency 1, 4, 9, 16; per prompt 1.41 to 2.29"
    assert "  c=16: 16 requests, accept length 1.758 pooled (the same prompts at c=1: 1.758); held" in report.message()


def test_acceptance_that_falls_in_batches_fails_at_the_first_concurrency_naming_it() -> None:
    batched = [(45, 2), (44, 3), (45, 2), (47, 0), (46, 1), (43, 4)]
    ref = _level(1, ALONE)
    report = batchaccept.judge(ref, [_level(4, batched), _level(16, batched)])
    assert report.ok is False and report.first_parted == 4
    reason = report.reason()
    assert reason.startswith("accept length parts at concurrency 4: accept length 1.744 at c=1 vs 1.044 at c=4 "
                             "(pooled over the same prompts); prompt 0 2.00 -> 1.04 (spec_verify_ct 24, correct "
                             "drafts 24 at c=1; spec_verify_ct 45, correct drafts 2 at c=4)"), reason
    assert reason.endswith("; also at c=16")
    assert "no logprob" not in reason and "identical where their tokens agree" in reason  # no noise: exact
    assert "  FAIL c=16: 16 of 16 requests parted (accept length; prompts 0, 1, 2, 3, 4, 5)" in report.message()


def test_a_hidden_draft_near_tie_is_allowed_only_where_the_batch_shapes_differ_numerically() -> None:
    """Prompt 2 takes one verify cycle more at c=4. With bit-identical logprobs that is a fault; with logprobs
    that differ by 2e-3 nats between the shapes it is within the near ties a draft may hide (at most 3)."""
    moved = list(ALONE)
    moved[2] = (35, 13)
    exact = batchaccept.judge(_level(1, ALONE), [_level(4, moved)])
    assert exact.ok is False and "prompt 2 1.41 -> 1.37" in exact.reason()
    noisy = batchaccept.judge(_level(1, ALONE), [_level(4, moved, lps=(-0.1, -0.2, -0.302))])
    assert noisy.ok and "c=4 prompt 2 1.41 -> 1.37" in noisy.allowed[0] and "up to 0.002 nats" in noisy.allowed[0]
    far = list(ALONE)
    far[2] = (40, 8)
    assert batchaccept.judge(_level(1, ALONE), [_level(4, far, lps=(-0.1, -0.2, -0.302))]).ok is False
    unscored = batchaccept.judge(_level(1, ALONE, lps=None), [_level(4, moved, lps=None)])
    assert unscored.ok is False and "no logprobs returned" in unscored.reason()


def test_an_output_that_parts_fails_unless_its_logprobs_show_a_near_tie() -> None:
    """Token 7 at c=1, 8 at c=4 on position 2. Margins 0.001 + 0.001 nats against noise 0.01: a near-tie flip (its
    acceptance is not compared past it); margins of 2 nats: a divergence, named with its position."""
    def run(margin: float) -> batchaccept.ConcurrencyReport:
        ref = [_reply(0, (24, 24), (5, 6, 7), (-0.1, -0.2, -0.5), ({}, {}, {8: -0.5 - margin}))]
        got = [_reply(0, (30, 10), (5, 6, 8), (-0.11, -0.2, -0.5), ({}, {}, {7: -0.5 - margin}))]
        return batchaccept.judge(batchaccept.Level(1, tuple(ref)), [batchaccept.Level(4, tuple(got))])

    tie = run(0.001)
    assert tie.ok is None and tie.compared == 0  # nothing left to compare: said, never a silent pass
    assert "output flips at position 2" in tie.allowed[0] and "a near-tie flip (numerical)" in tie.allowed[0]
    bug = run(2.0)
    assert bug.ok is False and bug.partings[0].kind == "output"
    assert bug.reason().startswith("output parts at concurrency 4: "), bug.reason()
    assert bug.reason().endswith("; prompt 0 first differs at position 2 (token 7 at c=1, 8 at c=4): margins 2 (c=1) "
                                 "+ 2 (c=4) nats vs near-tie bound 0.04: too wide for numerical noise"), bug.reason()


def test_the_levels_add_one_above_the_captured_sizes_when_a_batch_can_form_there() -> None:
    assert batchaccept.levels_for(8, 48) == ([(4, ""), (9, "one above the largest captured bs=8"), (16, "")], [])
    assert batchaccept.levels_for(16, 48)[0] == [(4, ""), (16, ""), (17, "one above the largest captured bs=16")]
    levels, notes = batchaccept.levels_for(48, 48)
    assert levels == [(4, ""), (16, "")]
    assert notes == ["no batch above the largest captured bs=48 can form: --max-running-requests 48"]
    levels, notes = batchaccept.levels_for(None, 8)
    assert levels == [(4, ""), (16, "")] and len(notes) == 2 and "batches of at most 8" in notes[1]


def test_the_batch_sizes_each_level_formed_are_in_its_line() -> None:
    level = batchaccept.Level(9, _level(9, ALONE).replies, (graphcheck.BatchUse(8, 3, 0), graphcheck.BatchUse(9, 0, 4)),
                              "one above the largest captured bs=8")
    report = batchaccept.judge(_level(1, ALONE), [level])
    assert ("  c=9 (one above the largest captured bs=8): 9 requests, accept length 1.770 pooled (the same prompts at "
            "c=1: 1.770); held; Decode lines ran graphed at bs 8 and eager at bs 9") in report.message()


def test_no_allowance_where_the_shapes_differ_by_more_than_numerical_noise() -> None:
    """Logprobs 0.9 nats apart where the tokens agree (above lossless's 0.5 ceiling): a one-cycle move fails."""
    moved = list(ALONE)
    moved[2] = (35, 13)
    report = batchaccept.judge(_level(1, ALONE), [_level(4, moved, lps=(-0.1, -0.2, -1.2))])
    assert report.ok is False and "above the 0.5 numerical noise reaches: no near-tie allowance" in report.reason()
