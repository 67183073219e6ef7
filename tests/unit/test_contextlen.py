"""Speculation against context length, judged (:mod:`specwatch.judge.contextlen`): the table, where speculation
stops paying, the gate and its skips; the lengths fitted to a real server's input limit
(:mod:`specwatch.checks.context_length`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from specwatch.checks.context_length import ContextSweep
from specwatch.judge.contextlen import ContextGate, LengthRun, judge

ROOT = Path(__file__).resolve().parents[2]
NAMES = ("sgl8b-eagle3", "sgl8b-plain")
#: real SGLang 0.5.16 at the 8B shape on an H200 (docs/validation/data/2026-12-04-sglang-8b-perf-x1,
#: sgl8b-perf.json: single-stream decode_tok_s, the first three runs; EAGLE-3 accept length 2.00)
PLAIN_8B = (223.5, 223.4, 223.5)
EAGLE3_8B = (346.3, 345.9, 346.1)


def _runs() -> list[LengthRun]:
    """The recorded 8B numbers at the short length, then a draft that falls past 2k: accept length 2.00, 1.95, then
    1.30 at 3,946 tokens (4,096 asked), where speculation stops paying."""
    return [LengthRun(128, PLAIN_8B, EAGLE3_8B, 768, 384),
            LengthRun(2048, (210.0, 209.0, 211.0), (318.0, 320.0, 319.0), 768, 394),
            LengthRun(3946, (200.0, 201.0, 199.0), (185.0, 184.0, 186.0), 768, 591, asked=4096)]


def test_by_default_the_table_is_reported_naming_where_speculation_stops_paying() -> None:
    v = judge(_runs(), names=NAMES)
    assert v.passed, v.message
    # the accept length fell at the same length: said once
    assert v.reason == ("speculation stops paying at 3,946 tokens (4,096 asked): 0.93x plain decoding (accept length "
                        "1.30; 1.55x and 2.00 at 128 tokens)")
    assert "report only (no gate: --specwatch-context-gate-until sets the longest input that must pay)" in v.message
    assert "\n  3,946 tokens (4,096 asked)              200.0               185.0     0.93x  1.30" in v.message
    rows = {r.key: r for r in v.rows}
    assert not any(r.gated for r in v.rows)  # reported, never a regression
    speed = rows["sgl8b-eagle3 vs sgl8b-plain (context 128, decode_tok_s)"]
    assert (speed.median, speed.baseline_median, speed.verdict) == (346.1, 223.5, "pays")
    assert math.isclose(speed.change, 346.1 / 223.5 - 1, rel_tol=1e-3)
    assert rows["sgl8b-eagle3 vs sgl8b-plain (context 3946, decode_tok_s)"].verdict == "loses"
    assert rows["sgl8b-eagle3 (context 3946, accept_length)"].verdict == "fell"
    cliff = rows["sgl8b-eagle3 vs sgl8b-plain context where speculation stops paying"]
    assert (cliff.median, cliff.verdict) == (3946, "cliff")


def test_the_gate_fails_naming_the_length_where_speculation_stopped_paying() -> None:
    v = judge(_runs(), ContextGate(until=4096), names=NAMES)
    assert v.failed
    assert v.reason.startswith("at 3,946 tokens (4,096 asked) speculation runs 0.93x plain decoding (< 1x; accept "
                               "length 1.30); at 3,946 tokens (4,096 asked) accept length 1.30 vs 2.00 at 128 tokens "
                               "(-35.0%, allowed -25%)")
    rows = {r.key: r for r in v.rows}
    assert rows["sgl8b-eagle3 vs sgl8b-plain (context 3946, decode_tok_s)"].is_bad
    assert not rows["sgl8b-eagle3 vs sgl8b-plain (context 2048, decode_tok_s)"].is_bad
    # the summary row names a length the gate judged: the table must not call it "not gated" (it did, 2026-12-05)
    cliff = rows["sgl8b-eagle3 vs sgl8b-plain context where speculation stops paying"]
    assert cliff.gated and cliff.verdict == "cliff"
    cut = {r.key: r for r in judge(_runs(), ContextGate(until=2048), names=NAMES).rows}
    assert not cut["sgl8b-eagle3 vs sgl8b-plain context where speculation stops paying"].gated  # past what was gated
    # up to 2,048 tokens it pays: that gate passes, and says the longer input was reported, not judged
    ok = judge(_runs(), ContextGate(until=2048), names=NAMES)
    assert ok.passed, ok.message
    assert not {r.key: r for r in ok.rows}["sgl8b-eagle3 vs sgl8b-plain (context 3946, decode_tok_s)"].gated
    assert "gated up to 2,048 tokens (speedup >= 1x, accept length within -25% of the shortest input's)" in ok.message


def test_the_gate_says_what_it_could_not_measure() -> None:
    v = judge(_runs()[:2], ContextGate(until=8192), names=NAMES)
    assert v.passed
    assert "gated up to 8,192 tokens" in v.message and "measured only up to 2,048 tokens" in v.message
    assert judge(_runs(), ContextGate(until=64), names=NAMES).skipped  # nothing measured that short


def test_untimed_prompts_are_left_out_and_an_untimed_gated_length_skips() -> None:
    burst = LengthRun(32, (math.nan, 700.0, math.nan), (800.0, 790.0, 805.0), 48, 24)
    v = judge([burst, *_runs()[:2]], names=NAMES)
    assert "left out of the speedup: 32 tokens (2 of 3)" in v.message
    assert math.isclose(burst.speedup, 790.0 / 700.0)
    blind = LengthRun(32, (math.nan,) * 3, (800.0, 790.0, 805.0), 48, 24)
    s = judge([blind, *_runs()[:2]], ContextGate(until=2048), names=NAMES)
    assert s.skipped and "the speedup at 32 tokens could not be timed" in s.reason


def test_a_plain_server_in_the_speculative_role_skips() -> None:
    v = judge([LengthRun(128, PLAIN_8B, PLAIN_8B, 768, 0)], names=NAMES)
    assert v.skipped and "carries meta_info.spec_verify_ct" in v.reason


def test_lengths_are_cut_to_a_real_servers_input_limit() -> None:
    """Real SGLang 0.5.23's /server_info (fixtures/sglang/real): inputs up to max_req_input_len = 2,042 tokens."""
    info = json.loads((ROOT / "fixtures" / "sglang" / "real" / "server_info.json").read_text())
    sweep = ContextSweep(output_tokens=128)
    fitted, note = sweep.fit(info["max_req_input_len"])
    assert fitted == [(128, 128), (1024, 1024), (1898, 2048)]  # 2,048 and 4,096 both cut to 1,898: measured once
    assert note == ("cut to the server's input limit: 2,048, 4,096 tokens asked, 1,898 measured (max_req_input_len "
                    "2,042 less 128 output tokens and 16 spare)")
    assert ContextSweep(lengths=(128,)).fit(4090) == ([(128, 128)], "")
    ids = sweep.ids(1024)
    assert len(ids) == 3 and all(len(p) == 1024 for p in ids) and ids == sweep.ids(1024) and ids != sweep.ids(128)


def test_each_prompt_ends_in_the_same_tail_at_every_length_after_a_prefix_of_its_own() -> None:
    """Like for like: prompt i continues the same tokens at 128, 1,024, 1,898 (a real limit's cut) and 4,096 input
    tokens, so a change of acceptance between lengths is the context's, not the prompt's; a limit below the
    shortest length keeps the tail's last tokens."""
    sweep = ContextSweep(output_tokens=128)
    short = sweep.ids(128)
    for n in (1024, 1898, 4096):
        ids = sweep.ids(n)
        assert [len(p) for p in ids] == [n] * 3 and [p[-128:] for p in ids] == short
        assert len({tuple(p[:-128]) for p in ids}) == 3  # each prompt's prefix its own
    assert sweep.ids(64) == [p[-64:] for p in short]
    assert "each ending in the same 128 tokens at every length" in sweep.describe()


def test_a_server_that_never_pays_is_named_at_its_shortest_input() -> None:
    """The reference server on 2 CPU cores (ref-tiny, 128 output tokens: the medians of a run of this test's perf
    test): its draft step costs nearly a target step, so speculation loses at 128 input tokens and pays at 879,
    where the plain server's attention over the whole prefix slows it."""
    runs = [LengthRun(128, (704.0,), (468.5,), 384, 196), LengthRun(879, (189.8,), (401.4,), 384, 191, asked=1024)]
    v = judge(runs, names=("eagle3", "plain"))
    assert v.reason == "speculation stops paying at 128 tokens: 0.67x plain decoding (accept length 1.96)"


def test_the_varying_drafts_accept_length_is_the_same_at_every_length_with_shared_tails() -> None:
    """By the varying draft's construction (docs/validation/sglang_models.py: the target's next token depends on the
    last one, the draft's guess on the one before), a request's accept length is fixed by its prompt's last token.
    The 2026-12-05 run's prompts, a different draw at each length, predict exactly the four accept lengths real SGLang
    measured (1.8373 at 128 tokens, 1.1925 at 1,024: the gate's -35%); the sweep's prompts now predict one value at
    every length, so only the context can move it."""
    import sys

    sys.path.insert(0, str(ROOT / "docs" / "validation"))
    import claims  # noqa: F401  (first: it registers its claim modules in the page's order)
    import claims_acceptance
    import sglang_models

    old = claims_acceptance.predicted_context_accept([128, 1024, 2048, 3946])
    assert [round(old[n], 4) for n in (128, 1024, 2048, 3946)] == [1.8373, 1.1925, 1.4066, 1.4328]
    right, f = sglang_models.right_tokens(0, 0.5), sglang_models.cycle_map(0)
    sweep = ContextSweep(output_tokens=128)
    now = {n: sum(sglang_models.walk(f, right, p[-1], 128)[0] for p in sweep.ids(n)) for n in (128, 1024, 2048, 3946)}
    assert len(set(now.values())) == 1, now


def _real(n: int, plain: tuple[float, ...], spec: tuple[float, ...], verify: int, asked: int = 0) -> LengthRun:
    return LengthRun(n, plain, spec, 384, verify, asked)


#: real SGLang 0.5.16 at the 8B shape on H100s (docs/validation/data): the exact draft (2026-12-05-sglang-8b-context-x1,
#: accept length 2.00 at every length) and the draft built to turn wrong past 1,536 tokens of context
#: (2026-12-06-sglang-8b-context-fault-x1); 3 prompts of 128 output tokens a length
ENGINE_CLIFF = [_real(128, (175.8, 175.8, 175.8), (277.6, 277.5, 277.3), 192),
                _real(1024, (163.3, 163.4, 163.4), (217.4, 217.5, 218.0), 192),
                _real(2048, (153.1, 153.4, 153.0), (175.3, 175.1, 175.1), 192),
                _real(3946, (138.2, 138.3, 138.1), (128.5, 128.7, 128.5), 192, asked=4096)]
DRAFT_CLIFF = [_real(128, (176.2,) * 3, (278.8,) * 3, 192), _real(1024, (164.5,) * 3, (218.1,) * 3, 192),
               _real(2048, (153.4,) * 3, (88.5,) * 3, 381), _real(3946, (138.3,) * 3, (65.0,) * 3, 381, asked=4096)]


def test_the_message_says_whether_the_draft_or_the_cycle_lost_the_speedup() -> None:
    """A speedup is the accept length over a cycle's cost in plain steps: at the cliff the message splits the loss
    between them, so a user knows whether to look at the draft or at the engine's verify over a long context."""
    engine = judge(ENGINE_CLIFF, ContextGate(until=4096), names=("spec", "plain"))
    assert not engine.ok
    why = next(ln for ln in engine.message.splitlines() if ln.lstrip().startswith("why:"))
    assert "accept length 2.00 -> 2.00 (+0.0%)" in why and "1.27 -> 2.15 plain steps (+70%" in why
    assert "0% of the loss is the accept length's, 100% the cycle's" in why and "not the draft" in why
    draft = judge(DRAFT_CLIFF, ContextGate(until=4096), names=("spec", "plain"))
    why = next(ln for ln in draft.message.splitlines() if ln.lstrip().startswith("why:"))
    assert "from 128 tokens to 2,048 tokens" in why and "2.00 -> 1.01 (-49.6%)" in why
    assert "68% of the loss is the accept length's, 32% the cycle's (mostly the draft" in why


def test_no_why_where_speculation_pays_or_never_paid() -> None:
    pays = judge(ENGINE_CLIFF[:3], ContextGate(until=2048), names=("spec", "plain"))
    assert pays.ok and "why:" not in pays.message
    never = [_real(n, (100.0,) * 3, (90.0,) * 3, 192) for n in (128, 1024)]
    assert "why:" not in judge(never, names=("spec", "plain")).message  # the cliff is the shortest: nothing to split
