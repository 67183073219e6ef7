"""Acceptance over the cache's life, judged: the set's passes (before, after eviction, after /flush_cache) and the
soak's series (:mod:`specwatch.judge.cachelife`), the eviction sized from a real server's KV pool and the set's
prompts (:mod:`specwatch.checks.cache_life`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from specwatch.checks.cache_life import EVICT_FACTOR, Eviction, GreedySet
from specwatch.judge.cachelife import Allowance, OutputChange, Pass, Reading, judge, soak
from specwatch.load.multiturn import TOKEN_HIGH, TOKEN_LOW

ROOT = Path(__file__).resolve().parents[2]
PASSES = ("before", "after eviction", "after /flush_cache")


def _pass(name: str, ratios: list[tuple[int, int]], cached: int | None = 0) -> Pass:
    return Pass(name, tuple(Reading(ct, v, 512, cached) for ct, v in ratios))


def _issue_32176() -> list[Pass]:
    """SGLang issue 32176 (0.5.15.post1, hierarchical cache): Σ completion_tokens / Σ spec_verify_ct of a fixed greedy
    set read 4.487 before, 1.589 after long unrelated requests evicted it and the cache loaded it back, 4.331 after
    /flush_cache; here as 4 requests of 1,000 verify cycles whose counts sum to those ratios."""
    def spread(total: int) -> list[tuple[int, int]]:
        return [(total // 4 + (1 if i < total % 4 else 0), 250) for i in range(4)]

    return [_pass("before", spread(4487)), _pass("after eviction", spread(1589), cached=480),
            _pass("after /flush_cache", spread(4331))]


def test_the_public_reports_numbers_fail_naming_the_pass_and_the_flush_that_restored_it() -> None:
    v = judge(_issue_32176(), profile="eagle3")
    assert v.failed, v.message
    assert v.reason == "after eviction accept length 1.59 vs 4.49 before; after /flush_cache 4.33 (restored)"
    assert v.message.startswith("acceptance over the cache's life on eagle3: " + v.reason)
    assert "after eviction: accept length 1.59 vs 4.49 before (-64.6%, allowed ±5%)" in v.message
    assert "  after eviction: accept length 1.5890 (1,589 tokens / 1,000 verify cycles over 4 requests); 1,920 of " \
           "2,048 prompt tokens cached" in v.message
    # each request fell too, with its output unchanged: the worst is named
    assert "after eviction: request " in v.message and "per request) with its output unchanged" in v.message


def test_a_set_that_holds_passes_with_every_passs_value() -> None:
    same = [(130, 64), (120, 70), (128, 50), (100, 60)]
    v = judge([_pass(n, same) for n in PASSES])
    assert v.passed, v.message
    assert v.reason == ("accept length held: 1.96 before, 1.96 after eviction, 1.96 after /flush_cache; outputs "
                        "identical in every pass (4 requests)")


def test_a_flush_that_does_not_restore_is_named_too() -> None:
    before, low = [(200, 100)] * 4, [(120, 100)] * 4
    v = judge([_pass("before", before), _pass("after eviction", before), _pass("after /flush_cache", low)])
    assert v.failed
    assert v.reason == "after eviction 2.00 (held); after /flush_cache accept length 1.20 vs 2.00 before"


def test_an_output_that_changed_fails_and_a_near_tie_flip_is_told_apart() -> None:
    same = [(200, 100)] * 4
    passes = [_pass(n, same) for n in PASSES]
    bug = OutputChange(2, 17, near_tie=False, detail="token 5 before, 9 now; margins 3.1 + -2.9 nats")
    v = judge(passes, {"after eviction": [bug]})
    assert v.failed
    assert v.reason == ("after eviction: request 2: output changed at output position 17 (token 5 before, 9 now; "
                        "margins 3.1 + -2.9 nats)")
    # a near-tie flip changes the rest of that request legitimately: its accept length is not compared
    moved = [(200, 100), (200, 100), (120, 100), (200, 100)]
    flip = OutputChange(2, 40, near_tie=True, detail="margins 0.002 + 0.001 nats vs near-tie bound 0.03")
    v = judge([passes[0], _pass("after eviction", moved), passes[2]], {"after eviction": [flip]},
              Allowance(overall=0.25))
    assert v.passed, v.message
    assert v.reason.endswith("outputs identical but for 1 near-tie flip(s) (numerical), named below")
    assert "after eviction: request 2: a near-tie flip (numerical) at output position 40" in v.message


def test_one_request_that_moved_fails_though_the_sets_ratio_held() -> None:
    before = [(200, 100)] * 10
    after = [(200, 100)] * 9 + [(140, 100)]  # the set: 1,940 / 1,000 = -3%
    v = judge([_pass("before", before), _pass("after eviction", after), _pass("after /flush_cache", before)])
    assert v.failed
    assert v.reason == ("after eviction: request 9 accept length 1.40 vs 2.00 before (-30.0%, allowed ±20% per "
                        "request) with its output unchanged")


def test_passes_without_verify_counts_skip_saying_why() -> None:
    plain = Pass("before", (Reading(64, None),))
    v = judge([plain, Pass("after eviction", (Reading(64, None),))], profile="plain")
    assert v.skipped
    assert "carries meta_info.spec_verify_ct (not a speculative server" in v.reason


def test_a_soak_whose_accept_length_steps_down_names_the_repetition() -> None:
    series = [2.13] * 3 + [1.19] * 3  # the reference server's stale-draft soak, tests/correctness
    v = soak(series, profile="eagle3")
    assert v.failed
    assert v.reason.startswith("accept length fell at repetition 4 of 6: 2.13 before, 1.19 from it (-44.1%, change "
                               "point p=")
    assert "per repetition: 2.13, 2.13, 2.13, 1.19, 1.19, 1.19" in v.message


def test_a_steady_or_noisy_soak_passes_and_a_short_one_skips() -> None:
    steady = soak([4.49, 4.50, 4.48, 4.49, 4.51, 4.49, 4.50, 4.48])
    assert steady.passed, steady.message
    assert steady.reason.startswith("no fall of accept length over 8 repetitions")
    small = soak([4.49, 4.49, 4.49, 4.45, 4.45, 4.45])  # -0.9%: below the 5% that counts
    assert small.passed, small.message
    rise = soak([3.0] * 3 + [4.0] * 3)
    assert rise.passed and "1 rise(s) named below" in rise.reason and "(+33.3%" in rise.message
    short = soak([4.49, 1.59, 4.33])
    assert short.skipped and short.reason == "3 repetition(s): a change point needs at least 6 (3 a side)"


def test_the_eviction_is_sized_from_the_servers_kv_pool() -> None:
    """``/server_info`` of real SGLang 0.5.23 (fixtures/sglang/real: TinyLlama, a 4,096-token pool, inputs up to
    2,042 tokens), and the 8B validation servers (their log: max_total_num_tokens=32768, context_len=4096, so
    max_req_input_len = min(4095, 32767) - 5 = 4090: SGLang's tp_worker.py get_worker_info)."""
    info = json.loads((ROOT / "fixtures" / "sglang" / "real" / "server_info.json").read_text())
    ev = Eviction.for_pool(info["max_total_num_tokens"], info["max_req_input_len"])
    assert (ev.prompts, ev.prompt_tokens) == (3, 2034)
    assert ev.tokens >= EVICT_FACTOR * 4096 and (ev.prompts - 1) * ev.prompt_tokens < EVICT_FACTOR * 4096
    big = Eviction.for_pool(32768, 4090)
    assert (big.prompts, big.prompt_tokens) == (math.ceil(1.25 * 32768 / 4082), 4082) == (11, 4082)
    assert big.describe() == ("11 unrelated prompts x 4,082 tokens = 44,902 prompt tokens, 1.37x the KV pool of "
                              "32,768 (max_total_num_tokens)")
    assert Eviction.for_pool(1000, 4090).prompt_tokens == 1000  # never longer than the pool


def test_the_sets_prompts_are_fixed_ordinary_ids_unrelated_to_the_eviction() -> None:
    s = GreedySet(prompts=3, prompt_tokens=64, output_tokens=8, seed=1)
    first, again = s.ids(), s.ids()
    assert first == again and len(first) == 3 and all(len(p) == 64 for p in first)
    assert all(TOKEN_LOW <= t < TOKEN_HIGH for p in first for t in p)
    evict = Eviction(2, 64, 1000).ids("life")
    assert not {tuple(p[:16]) for p in first} & {tuple(p[:16]) for p in evict}
    assert Eviction(2, 64, 1000).ids("soak-0") != Eviction(2, 64, 1000).ids("soak-1")


@pytest.mark.parametrize("n", [0, 1])
def test_fewer_than_two_passes_skip(n: int) -> None:
    assert judge([_pass("before", [(10, 5)])] * n).skipped
