"""Greedy output comparison: first differing position, tolerance for bf16 servers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specwatch.checks.lossless import (
    NOISE_CEILING,
    TIE_FACTOR,
    TOP_LOGPROBS,
    Divergence,
    PromptTrace,
    Scored,
    agreement_noise,
    compare_outputs,
    first_difference,
    tie_bound,
)

ids = st.lists(st.integers(0, 50), max_size=30)


def test_identical_outputs_pass() -> None:
    rep = compare_outputs([[1, 2, 3], [4, 5]], [[1, 2, 3], [4, 5]], ["a", "b"])
    assert rep.ok and rep.identical_fraction == 1.0 and not rep.differing
    assert "2/2 prompts identical (PASS); exact equality" in rep.message()


def test_first_differing_position_per_prompt() -> None:
    rep = compare_outputs([[1, 2, 3, 4], [7, 8, 9]], [[1, 2, 9, 4], [7, 8, 9]], ["p0", "p1"])
    assert not rep.ok
    (d,) = rep.differing
    assert (d.index, d.first_diff, d.baseline_token, d.spec_token, d.common_prefix) == (0, 2, 3, 9, 2)
    msg = rep.message()
    assert "1/2 prompts identical (FAIL)" in msg
    assert "prompt 0 ('p0'): first differing position 2: baseline token 3, speculative token 9" in msg


def test_length_difference_is_a_difference() -> None:
    rep = compare_outputs([[1, 2, 3]], [[1, 2]])
    assert not rep.ok
    d = rep.differing[0]
    assert d.first_diff == 2 and d.baseline_token == 3 and d.spec_token is None
    assert "speculative token <end>" in rep.message()


def test_tolerance_fraction_identical() -> None:
    base = [[1, 2, 3]] * 4
    spec = [[1, 2, 3]] * 3 + [[1, 2, 4]]
    assert not compare_outputs(base, spec).ok
    assert compare_outputs(base, spec, min_identical=0.75).ok
    rep = compare_outputs(base, spec, min_identical=0.8)
    assert not rep.ok and "need ≥ 80%" in rep.message()


def test_tolerance_common_prefix() -> None:
    base = [[1, 2, 3, 4, 5], [1, 2, 3, 4, 5]]
    spec = [[1, 2, 3, 4, 9], [1, 9, 3, 4, 5]]
    rep = compare_outputs(base, spec, min_identical=0.0, min_common_prefix=3)
    assert not rep.ok
    assert "outputs diverge before token 3: prompt 1 at 1" in rep.message()
    assert compare_outputs(base, spec, min_identical=0.0, min_common_prefix=1).ok


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="2 baseline outputs but 1"):
        compare_outputs([[1], [2]], [[1]])
    with pytest.raises(ValueError, match="min_identical"):
        compare_outputs([[1]], [[1]], min_identical=1.5)
    assert not compare_outputs([], []).ok


@given(ids, ids)
def test_first_difference_properties(a: list[int], b: list[int]) -> None:
    pos = first_difference(a, b)
    if pos is None:
        assert a == b
    else:
        assert a[:pos] == b[:pos]
        assert pos == min(len(a), len(b)) or a[pos] != b[pos]
        assert first_difference(b, a) == pos


# ---- near-tie flips: logprobs, noise, margins, re-anchoring -------------------------------------

VOCAB = 6


def _dist(prefix: tuple[int, ...], tie_at: int | None) -> dict[int, float]:
    """A toy target: a clear favourite after every prefix, except a near-tie at length ``tie_at``."""
    top = (sum(prefix) * 7 + 3) % VOCAB
    gap = 0.001 if len(prefix) == tie_at else 1.0
    lp = {t: -5.0 for t in range(VOCAB)}
    lp[top], lp[(top + 1) % VOCAB] = -0.5, -0.5 - gap
    return lp


def _serve(prompt: tuple[int, ...], n: int, *, tie_at: int | None = None, wobble: float = 0.0,
           flip: float = 0.0, fault_at: int | None = None) -> Scored:
    """Greedy decoding of the toy target; ``wobble`` moves odd tokens' logprobs (numerical noise),
    ``flip`` lifts the runner-up at the tie, ``fault_at`` commits the runner-up unverified there."""
    seq, lps, tops = list(prompt), [], []
    for _ in range(n):
        lp = _dist(tuple(seq), tie_at)
        lp = {t: v + (wobble if t % 2 else 0.0) for t, v in lp.items()}
        ranked = sorted(lp, key=lambda t: -lp[t])
        if len(seq) == tie_at:
            lp[ranked[1]] += flip
            ranked = sorted(lp, key=lambda t: -lp[t])
        tok = ranked[1] if len(seq) == fault_at else ranked[0]
        seq.append(tok)
        lps.append(lp[tok])
        tops.append({t: lp[t] for t in ranked[:TOP_LOGPROBS]})
    return Scored(tuple(seq[len(prompt):]), tuple(lps), tuple(tops), prompt)


def _trace(prompt: tuple[int, ...], n: int, max_ties: int = 3, **spec_kw: object) -> tuple[PromptTrace, float | None]:
    base_kw = {k: v for k, v in spec_kw.items() if k == "tie_at"}
    base, spec = _serve(prompt, n, **base_kw), _serve(prompt, n, **spec_kw)  # type: ignore[arg-type]
    noise = agreement_noise([(base, spec)])
    bound = tie_bound(noise)
    t = PromptTrace(prompt, n)
    t.advance(base, spec, bound, max_ties)
    while t.anchor is not None:
        t.advance(_serve(t.anchor, t.remaining, **base_kw), _serve(t.anchor, t.remaining, **spec_kw),  # type: ignore[arg-type]
                  bound, max_ties)
    return t, noise


def test_scored_parses_sglang_logprobs() -> None:
    meta = {"output_token_logprobs": [[-0.1, 7, None], [-0.2, 3, "x"]],
            "output_top_logprobs": [[[-0.1, 7, None], [-2.0, 1, None]], [[-0.2, 3, None]]]}
    s = Scored.from_response([7, 3], meta, [1, 2])
    assert s.logprobs == (-0.1, -0.2) and s.prompt_ids == (1, 2)
    assert s.logprob(0, 1) == -2.0 and s.logprob(1, 3) == -0.2 and s.logprob(1, 9) is None
    assert Scored.from_response([7, 4], meta).logprobs is None  # ids disagree with the logprob entries
    bare = Scored.from_response([7, 3], {})
    assert bare.logprobs is None and bare.top is None and bare.logprob(0, 7) is None
    assert Scored.from_response([7], {"output_token_logprobs": [["x", 7, None]]}).logprobs is None


def test_noise_counts_lower_ranked_tokens_before_the_first_difference() -> None:
    base = Scored((1, 2, 3), (-0.1, -0.1, -0.1), ({1: -0.1, 5: -3.0}, {2: -0.1}, {3: -0.1}))
    spec = Scored((1, 2, 4), (-0.1, -0.11, -0.1), ({1: -0.1, 5: -3.05}, {2: -0.11}, {4: -0.1}))
    worst, n = agreement_noise([(base, spec)])  # type: ignore[misc]
    assert worst == pytest.approx(0.05) and n == 3  # positions 0 (tokens 1, 5) and 1; not 2
    assert agreement_noise([(Scored((1,)), spec)]) is None


def test_divergence_margins_and_verdicts() -> None:
    tie = Divergence(4, 1, 2, baseline_margin=0.001, spec_margin=0.002, bound=0.004)
    assert tie.near_tie and "a near-tie flip (numerical)" in tie.describe()
    wide = Divergence(4, 1, 2, baseline_margin=0.3, spec_margin=0.002, bound=0.004)
    assert not wide.near_tie and "too wide for numerical noise" in wide.describe()
    bug = Divergence(4, 1, 2, baseline_margin=0.3, spec_margin=-0.3, bound=1.0)
    assert not bug.near_tie and "without verification" in bug.describe()
    unknown = Divergence(4, 1, 2, baseline_margin=None, spec_margin=0.0, bound=1.0)
    assert not unknown.near_tie and "not in its top" in unknown.describe()
    assert not Divergence(4, 1, 2, 0.0, 0.0, None).near_tie  # no logprobs: exact comparison


def test_near_tie_flip_is_reanchored_and_the_rest_still_checked() -> None:
    t, noise = _trace((1, 2, 3), 20, tie_at=12, wobble=0.001, flip=0.002)
    assert noise is not None and noise[0] == pytest.approx(0.001)
    assert [d.position for d in t.ties] == [12 - 3] and t.divergence is None
    assert t.base_ids == t.spec_ids and len(t.base_ids) == 20
    rep = compare_outputs([t.base_ids], [t.spec_ids], ["p"], traces=[t], noise=noise)
    assert rep.ok and len(rep.ties) == 1
    msg = rep.message()
    assert "identical after 1 near-tie flip(s)" in msg and "near-tie flip at position 9" in msg
    assert "1 near-tie flip(s) re-anchored" in msg and "x the largest logprob difference" in msg


def test_wide_divergence_fails_with_margins() -> None:
    t, noise = _trace((1, 2, 3), 20, tie_at=12, wobble=0.001, flip=0.05)  # flip far beyond the noise
    assert not t.ties and t.divergence is not None and t.divergence.position == 9
    rep = compare_outputs([t.base_ids], [t.spec_ids], ["p"], traces=[t], noise=noise)
    assert not rep.ok and "too wide for numerical noise" in rep.message()


def test_unverified_token_fails() -> None:
    t, noise = _trace((1, 2, 3), 20, wobble=0.001, fault_at=8)
    assert t.divergence is not None and t.divergence.spec_margin is not None and t.divergence.spec_margin < 0
    rep = compare_outputs([t.base_ids], [t.spec_ids], ["p"], traces=[t], noise=noise)
    assert not rep.ok and "committed a token its own target ranks" in rep.message()
    assert t.divergence.position == 5 and not t.ties


def test_tie_budget_and_missing_prompt_ids() -> None:
    t, _ = _trace((1, 2, 3), 20, max_ties=0, tie_at=12, wobble=0.001, flip=0.002)
    assert not t.ties and t.divergence is not None and t.divergence.near_tie  # over budget: a divergence
    base = _serve((1, 2, 3), 20, tie_at=12)
    spec = _serve((1, 2, 3), 20, tie_at=12, wobble=0.001, flip=0.002)
    bound = TIE_FACTOR * agreement_noise([(base, spec)])[0]  # type: ignore[index]
    blind = PromptTrace(None, 20)  # no prompt ids: cannot continue from the flip
    blind.advance(base, spec, bound)
    assert blind.anchor is None and not blind.ties and blind.divergence is not None
    last = PromptTrace(None, 10)  # a flip at the very last token needs no continuation
    last.advance(_serve((1, 2, 3), 10, tie_at=12), _serve((1, 2, 3), 10, tie_at=12, wobble=0.001, flip=0.002),
                 bound)
    assert len(last.ties) == 1 and last.divergence is None and last.base_ids == last.spec_ids


def test_noise_above_the_ceiling_allows_no_ties() -> None:
    assert tie_bound(None) is None and tie_bound((0.01, 10)) == pytest.approx(TIE_FACTOR * 0.01)
    assert tie_bound((NOISE_CEILING + 0.01, 10)) is None
    # a server whose logits are off everywhere (a wrong position, say): its flips are not near-ties
    t, noise = _trace((1, 2, 3), 20, tie_at=12, wobble=0.8, flip=0.002)
    assert noise is not None and noise[0] > NOISE_CEILING
    assert not t.ties and t.divergence is not None
    rep = compare_outputs([t.base_ids], [t.spec_ids], ["p"], traces=[t], noise=noise)
    assert not rep.ok and "no near-tie allowance" in rep.message() and rep.bound is None


def test_bad_trace_count() -> None:
    with pytest.raises(ValueError, match="1 traces for 2 prompts"):
        compare_outputs([[1], [2]], [[1], [2]], traces=[PromptTrace(None, 1)])
