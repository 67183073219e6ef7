"""How the judge's verdicts write numbers: a change, a noise level, a p-value, a count of runs."""

from __future__ import annotations


def pct(x: float) -> str:
    """A relative change: ``+5.0%``."""
    return f"{x * 100:+.1f}%"


def noise(x: float) -> str:
    """A spread or noise level: ``5.0%``."""
    return f"{x * 100:.1f}%"


def fmt_p(p: float) -> str:
    """A p-value: two significant digits, or an exponent below 0.001."""
    return f"{p:.2g}" if p >= 0.001 else f"{p:.1e}"


def runs(need: int | None, about: str = "") -> str:
    """'12' ('~12'), or what to say when the noise is too large for a count of runs."""
    return f"{about}{need}" if need is not None else "an unknown number of"


__all__ = ["fmt_p", "noise", "pct", "runs"]
