"""Greedy output comparison: first differing position, tolerance for bf16 servers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specwatch.lossless import compare_outputs, first_difference

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
