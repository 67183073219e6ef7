"""Acceptance over the prefix cache's life: a fixed greedy set before, after unrelated long prompts evicted it from
the cache, and after ``/flush_cache``; its accept length (Σ completion_tokens / Σ spec_verify_ct, and each
request's) and output must hold (SGLang issue 32176: 4.487 before, 1.589 after eviction, 4.331 after the flush,
no error). And the soak: the set again and again between unrelated traffic, its accept length never falling.

On the reference server (CPU) the speculative server is booted with ``--max-running-requests 4`` (a KV pool of 4
slots x 1,024 positions = 4,096 tokens, turned over by six 1,015-token prompts in under a second; the default 48
slots need 49,152 tokens, about 8 s of CPU prefill) and a set of 4 prompts x 256 ids, 32 tokens each. Its faults are
real and from outside the tester: ``--ref-fault-stale-draft`` biases the draft once a KV pool's worth of prompt
tokens (or the given number) has been prefilled since the last ``/flush_cache``, and a successful flush restores
it; greedy output stays lossless. On real SGLang the speculative server of the profile set runs the default set
(8 prompts x 512 ids, 128 tokens each); the soak runs when ``--specwatch-acceptance-soak N`` asks for it.
"""

from __future__ import annotations

import re

import pytest

from correctness.faultkit import fault_profile
from specwatch.checks import cache_life
from specwatch.checks.cache_life import GreedySet
from specwatch.judge import cachelife
from specwatch.profiles.profile import ServerProfile
from specwatch.run.fixtures import profile_or_skip
from specwatch.run.session import Session

pytestmark = pytest.mark.correctness

WHAT = "the cache-life check"
#: the reference server's set (CPU): small, one request at a time
CPU_SET = GreedySet(prompts=4, prompt_tokens=256, output_tokens=32)
#: the reference server's KV pool for these tests: 4 slots x its context of 1,024 = 4,096 tokens
SMALL_POOL = ("--max-running-requests", "4")
#: the soak that proves the alarm, on a context of 512 (a pool of 2,048 tokens): 6 repetitions, each 3 x 503
#: unrelated prompt tokens (half the pool, rounded up to whole prompts) and a set of 2 x 128 ids; the draft goes
#: stale past 6,000 prompt tokens, in the fourth repetition's unrelated traffic (3 x 1,765 = 5,295 before it)
SOAK_FAULT_REPETITIONS = 6
SOAK_FAULT_SET = GreedySet(prompts=2, prompt_tokens=128, output_tokens=32)
SOAK_FAULT_ARGS = ("--context-length", "512", "--ref-fault-stale-draft", "6000")
PASSES = ("before", "after eviction", "after /flush_cache")


def _subject(session: Session, suffix: str, *faults: str) -> tuple[ServerProfile, GreedySet]:
    """The server the check runs on and its set: the reference server with a small pool (and ``faults``), else the
    profile set's own speculative server (a fault test skips there: the switches are the reference server's)."""
    spec = profile_or_skip(session, "spec", WHAT)
    if (spec.engine == "reference" and not session.config.server_url) or faults:
        return fault_profile(session, "spec", suffix, *SMALL_POOL, *faults), CPU_SET
    return spec, CPU_SET if spec.engine == "reference" else cache_life.GREEDY_SET


def test_accept_length_and_output_hold_over_the_caches_life(specwatch_session: Session) -> None:
    prof, the_set = _subject(specwatch_session, "cache-life")
    result = cache_life.check(specwatch_session, prof, the_set)
    if result.skipped:
        pytest.skip(result.reason)
    print(result.message)
    assert result.passed, result.message
    assert result.reason.startswith("accept length held: "), result.reason
    for name in PASSES:
        assert re.search(rf"\d\.\d\d {re.escape(name)}", result.reason), (name, result.reason)
        assert f"  {name}: accept length " in result.message
    assert "x the KV pool of " in result.message and "(max_total_num_tokens)" in result.message
    assert any(f.check == cache_life.NAME and f.ok for f in specwatch_session.findings_for(prof.name))


def test_a_draft_gone_stale_after_eviction_fails_naming_the_pass_and_its_numbers(specwatch_session: Session) -> None:
    """A KV pool's worth of unrelated prompt tokens turns the draft stale (a fixed bias on its logits, lossless);
    ``/flush_cache`` restores it, as the hierarchical cache's reload did in SGLang issue 32176."""
    prof, the_set = _subject(specwatch_session, "stale-draft", "--ref-fault-stale-draft")
    result = cache_life.check(specwatch_session, prof, the_set)
    print(result.message)
    assert result.failed, result.message
    said = re.fullmatch(r"after eviction accept length (\d\.\d\d) vs (\d\.\d\d) before; "
                        r"after /flush_cache (\d\.\d\d) \(restored\)", result.reason)
    assert said is not None, result.reason
    after, before, restored = (float(x) for x in said.groups())
    assert after < 0.8 * before and restored == before, result.reason
    assert "output changed" not in result.message  # the target verified every draft token
    assert "after eviction: accept length " in result.message and ", allowed ±5%)" in result.message
    assert any(f.check == cache_life.NAME and not f.ok for f in specwatch_session.findings_for(prof.name))


def test_accept_length_holds_over_a_soak(specwatch_session: Session) -> None:
    repetitions = specwatch_session.config.acceptance_soak
    if not repetitions:
        pytest.skip("--specwatch-acceptance-soak N is not set: no soak asked for")
    prof, the_set = _subject(specwatch_session, "cache-life")
    result = cache_life.soak(specwatch_session, prof, repetitions, the_set)
    if result.skipped:
        pytest.skip(result.reason)
    print(result.message)
    assert result.passed, result.message
    assert result.reason.startswith(f"no fall of accept length over {repetitions} repetitions"), result.reason


def test_a_soak_names_the_repetition_where_accept_length_fell(specwatch_session: Session) -> None:
    prof, _ = _subject(specwatch_session, "stale-draft-soak", *SOAK_FAULT_ARGS)
    result = cache_life.soak(specwatch_session, prof, SOAK_FAULT_REPETITIONS, SOAK_FAULT_SET)
    print(result.message)
    assert result.failed, result.message
    said = re.match(rf"accept length fell at repetition 4 of {SOAK_FAULT_REPETITIONS}: (\d\.\d\d) before, "
                    r"(\d\.\d\d) from it \(-\d+\.\d%, change point p=", result.reason)
    assert said is not None, result.reason
    assert float(said[2]) < 0.8 * float(said[1])
    assert result.name == cachelife.SOAK
