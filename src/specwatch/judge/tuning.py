"""What a tuned-against-untuned comparison means, in words: shared by the tuned gate and
``specwatch profile allreduce``.

Pure: judging only (:mod:`specwatch.judge.compare`).
"""

from __future__ import annotations

from specwatch.judge import compare

__all__ = ["tuning_effect"]


def tuning_effect(gain: compare.GateResult, min_effect: float) -> tuple[str, str]:
    """What a tuned/untuned gate result means: (sentence, verdict for the table).

    A win needs significance AND a gain of at least ``min_effect``; a significant gain below it is
    "no meaningful effect" (boot-to-boot drift alone reaches 2% with p < 0.01 on the H200 pair).
    """
    size = f"{min_effect * 100:g}%"
    if gain.passed and gain.gain >= min_effect:
        return f"tuning helps: {gain.gain * 100:+.1f}% (p={gain.p_pass:.2g}), at least {size}", "pass"
    if gain.passed:
        return (f"no meaningful effect: {gain.gain * 100:+.1f}% is significant (p={gain.p_pass:.2g}) but "
                f"smaller than the {size} this profile counts as an effect", "no_effect")
    if gain.verdict is compare.GateVerdict.NO_EFFECT:
        return f"no measurable effect: {gain.gain * 100:+.1f}% (p={gain.p_differ:.2g})", "no_effect"
    if gain.verdict is compare.GateVerdict.FAIL:
        return f"tuning makes it worse: {gain.gain * 100:+.1f}% (p={gain.p_fail:.2g})", "fail"
    return f"{gain.verdict.value}: {gain.gain * 100:+.1f}%", gain.verdict.value
