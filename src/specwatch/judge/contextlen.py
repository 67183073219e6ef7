"""Speculation against context length: the accept length and the decode speedup over plain decoding at several
input lengths, and where speculation stops paying.

A draft trained on short contexts drafts worse past them: SGLang issue 6783 found an EAGLE draft trained at 2,048
positions slower than no speculation above 2k tokens of input. The same prompts run on the plain and the
speculative server, one request at a time; a prompt's speedup is its decode tokens per second (the first token's
wait left out) on the speculative server over the plain one's, and a length's speedup is the median over its
prompts. Its accept length is Σ completion_tokens / Σ spec_verify_ct over the speculative server's requests.

By default the verdict reports (rows not gated; the message says what was measured and where speculation stopped
paying); with :attr:`ContextGate.until` set, every measured length up to it must keep a speedup of at least
:attr:`ContextGate.min_speedup` and an accept length within :attr:`ContextGate.accept_drop` of the shortest
length's. Pure: stdlib only.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from specwatch.judge.verdict import ReportRow, Verdict

__all__ = ["NAME", "REPORT_ONLY", "ContextGate", "LengthRun", "judge", "table"]

NAME = "speculation by context length"
#: speculation pays where it decodes faster than plain decoding
PAYS = 1.0


@dataclass(frozen=True)
class LengthRun:
    """One input length on both servers: each prompt's decode tok/s (in prompt order, the same prompts on both; NaN
    where the client could not time it: its tokens came in one burst) and the speculative server's counts summed
    over its requests."""

    input_tokens: int
    plain_tok_s: tuple[float, ...]
    spec_tok_s: tuple[float, ...]
    completion_tokens: int
    verify_ct: int
    asked: int = 0  # the length asked for when the server's input limit cut it (0: measured as asked)

    @property
    def speedups(self) -> list[float]:
        """Per prompt timed on both servers: the speculative server's decode tok/s over the plain server's."""
        return [s / p for s, p in zip(self.spec_tok_s, self.plain_tok_s, strict=True)
                if math.isfinite(s) and math.isfinite(p) and p > 0]

    @property
    def speedup(self) -> float:
        """The median of :attr:`speedups` (NaN without any)."""
        xs = self.speedups
        return float(statistics.median(xs)) if xs else math.nan

    @property
    def timed(self) -> bool:
        """Whether some prompt was timed on both servers."""
        return bool(self.speedups)

    @property
    def untimed(self) -> int:
        """Prompts left out of the speedup: the client could not time one of the servers' replies."""
        return len(self.spec_tok_s) - len(self.speedups)

    @property
    def accept_length(self) -> float | None:
        """Σ completion_tokens / Σ spec_verify_ct (None without a verify cycle)."""
        return self.completion_tokens / self.verify_ct if self.verify_ct else None

    def label(self) -> str:
        """``2,048 tokens`` (or ``3,946 tokens (4,096 asked)`` when cut)."""
        cut = f" ({self.asked:,} asked)" if self.asked and self.asked != self.input_tokens else ""
        return f"{self.input_tokens:,} tokens{cut}"


@dataclass(frozen=True)
class ContextGate:
    """``until``: the longest input (tokens) the gate judges (None: report only); up to it every measured length
    must keep a speedup of at least ``min_speedup`` and an accept length no more than ``accept_drop`` (a fraction)
    below the shortest length's."""

    until: int | None = None
    min_speedup: float = 1.0
    accept_drop: float = 0.25


#: report only, by default
REPORT_ONLY = ContextGate()


def table(runs: Sequence[LengthRun], names: tuple[str, str]) -> list[str]:
    """The measured table, one line per length."""
    spec, plain = names
    w = max(len("input"), *(len(r.label()) for r in runs))
    a, b = max(16, len(plain) + 6), max(16, len(spec) + 6)
    out = [f"  {'input':>{w}}  {plain + ' tok/s':>{a}}  {spec + ' tok/s':>{b}}  {'speedup':>8}  accept length"]
    for r in runs:
        out.append(f"  {r.label():>{w}}  {_med(r.plain_tok_s):>{a}.1f}  {_med(r.spec_tok_s):>{b}.1f}  "
                   f"{_speed(r):>8}  {_acc(r)}")
    return out


def _med(xs: Sequence[float]) -> float:
    kept = [x for x in xs if math.isfinite(x)]
    return float(statistics.median(kept)) if kept else math.nan


def _cliff(runs: Sequence[LengthRun]) -> LengthRun | None:
    """The shortest timed length whose speedup is below :data:`PAYS` (where speculation stops paying)."""
    return next((r for r in runs if r.timed and r.speedup < PAYS), None)


def _fall(runs: Sequence[LengthRun], drop: float) -> LengthRun | None:
    """The shortest length whose accept length fell more than ``drop`` below the shortest length's."""
    ref = runs[0].accept_length
    if ref is None:
        return None
    return next((r for r in runs[1:] if r.accept_length is not None and r.accept_length < (1 - drop) * ref), None)


def judge(runs: Sequence[LengthRun], gate: ContextGate = REPORT_ONLY, *, names: tuple[str, str],
          note: str = "") -> Verdict:
    """The verdict over ``runs`` (shortest first) of the speculative and plain servers ``names``; ``note``: what the
    caller cut or left out (a line of the message). Rows: each length's decode tok/s of both (change = the speedup
    minus 1), its accept length against the shortest length's, and the length where speculation stops paying."""
    spec, plain = names
    if not runs:
        return Verdict.skip(NAME, "no input length was measured", spec)
    runs = sorted(runs, key=lambda r: r.input_tokens)
    ref = runs[0].accept_length
    if ref is None:
        return Verdict.skip(NAME, f"no request of {spec} carries meta_info.spec_verify_ct: not a speculative server, "
                                  "or one that does not count its verify cycles", spec)
    until = gate.until
    gated = [r for r in runs if until is not None and r.input_tokens <= until]
    if until is not None and not gated:
        return Verdict.skip(NAME, f"the gate judges inputs up to {until:,} tokens, and the shortest measured is "
                                  f"{runs[0].input_tokens:,}", spec)
    cliff, fall = _cliff(runs), _fall(runs, gate.accept_drop)
    problems = []
    for r in gated:
        if r.timed and r.speedup < gate.min_speedup:
            problems.append(f"at {r.label()} speculation runs {r.speedup:.2f}x plain decoding (< {gate.min_speedup:g}x;"
                            f" accept length {_acc(r)})")
        if r is not runs[0] and r.accept_length is not None and r.accept_length < (1 - gate.accept_drop) * ref:
            problems.append(f"at {r.label()} accept length {r.accept_length:.2f} vs {ref:.2f} at "
                            f"{runs[0].label()} ({(r.accept_length / ref - 1) * 100:+.1f}%, allowed "
                            f"-{gate.accept_drop:.0%})")
    timed = [r for r in runs if r.timed]
    first = "" if cliff is runs[0] else f"; {_speed(runs[0])} and {_acc(runs[0])} at {runs[0].label()}"
    pays = (f"speculation stops paying at {cliff.label()}: {cliff.speedup:.2f}x plain decoding (accept length "
            f"{_acc(cliff)}{first})" if cliff else
            f"speculation pays at every length timed: {min(r.speedup for r in timed):.2f}x to "
            f"{max(r.speedup for r in timed):.2f}x up to {timed[-1].label()}" if timed else
            "no length's decode could be timed")
    if fall is not None and fall is not cliff:
        pays += (f"; accept length falls to {_acc(fall)} at {fall.label()} (from {ref:.2f} at "
                 f"{runs[0].label()})")
    why = _why(runs[0], cliff) if cliff is not None else ""
    if until is None:
        scope = "report only (no gate: --specwatch-context-gate-until sets the longest input that must pay)"
    else:
        scope = (f"gated up to {until:,} tokens (speedup >= {gate.min_speedup:g}x, accept length within "
                 f"-{gate.accept_drop:.0%} of the shortest input's)")
        if runs[-1].input_tokens < until:
            scope += f"; measured only up to {runs[-1].label()}"
    untimed = [f"{r.label()} ({r.untimed} of {len(r.spec_tok_s)})" for r in runs if r.untimed]
    if untimed:
        scope += ("; prompts whose decode the client could not time (their tokens came in one burst), left out of the "
                  f"speedup: {', '.join(untimed)}")
    unjudged = [r for r in gated if not r.timed]
    if unjudged and not problems:
        return Verdict.skip(NAME, f"the speedup at {', '.join(r.label() for r in unjudged)} could not be timed (the "
                                  "replies came in bursts): the gate cannot judge it; longer outputs "
                                  "(--specwatch-context-output-tokens) give the client decode windows to time", spec)
    reason = "; ".join(problems) if problems else pays
    lines = [f"{NAME} on {spec} against {plain}: {reason}", f"  {scope}", *table(runs, names)]
    if why:
        lines.insert(1, f"  {why}")
    if problems:
        lines.insert(1, f"  {pays}")
    if note:
        lines.append(f"  {note}")
    rows = _rows(runs, gate, names, {id(r) for r in gated}, cliff)
    return Verdict.of(NAME, not problems, "\n".join(lines), reason, profile=spec, rows=rows)


def _why(ref: LengthRun, cliff: LengthRun) -> str:
    """Where the speedup went between the shortest length and the cliff: a speedup is the accept length over a cycle's
    cost in plain decode steps (accept length / speedup), so the loss splits, in log terms, into the accept length's
    fall (the draft) and the cycle's growth (the engine's verify and draft steps over a longer context)."""
    if ref is cliff or not (ref.timed and cliff.timed) or not ref.accept_length or not cliff.accept_length:
        return ""
    if not (ref.speedup > 0 and cliff.speedup > 0) or cliff.speedup >= ref.speedup:
        return ""
    cost_ref, cost = ref.accept_length / ref.speedup, cliff.accept_length / cliff.speedup
    total = math.log(ref.speedup / cliff.speedup)
    draft = math.log(ref.accept_length / cliff.accept_length) / total
    share = min(max(draft, 0.0), 1.0)
    cause = ("mostly the draft: its accept length fell" if share >= 0.5 else "mostly the cycle's cost, not the "
             "draft: a verify cycle costs more plain decode steps as the context grows")
    return (f"why: from {ref.label()} to {cliff.label()} the speedup went {ref.speedup:.2f}x -> {cliff.speedup:.2f}x; "
            f"accept length {ref.accept_length:.2f} -> {cliff.accept_length:.2f} "
            f"({(cliff.accept_length / ref.accept_length - 1) * 100:+.1f}%), a cycle's cost {cost_ref:.2f} -> "
            f"{cost:.2f} plain steps ({(cost / cost_ref - 1) * 100:+.0f}%; accept length / speedup): {share:.0%} of "
            f"the loss is the accept length's, {1 - share:.0%} the cycle's ({cause})")


def _speed(r: LengthRun) -> str:
    return f"{r.speedup:.2f}x" if r.timed else "untimed"


def _acc(r: LengthRun) -> str:
    return f"{r.accept_length:.2f}" if r.accept_length is not None else "-"


def _rows(runs: Sequence[LengthRun], gate: ContextGate, names: tuple[str, str], gated: set[int],
          cliff: LengthRun | None) -> list[ReportRow]:
    spec, plain = names
    ref = runs[0].accept_length
    rows = []
    for r in runs:
        judged = id(r) in gated
        pays = r.timed and r.speedup >= PAYS
        facts = {"input_tokens": r.input_tokens, "asked": r.asked or r.input_tokens, "speedup": r.speedup,
                 "accept_length": r.accept_length, "plain_tok_s": _med(r.plain_tok_s),
                 "spec_tok_s": _med(r.spec_tok_s), "min_speedup": gate.min_speedup, "gated": judged}
        rows.append(ReportRow(key=f"{spec} vs {plain} (context {r.input_tokens}, decode_tok_s)", n=len(r.spec_tok_s),
                              median=_med(r.spec_tok_s), unit="tok/s", baseline_median=_med(r.plain_tok_s),
                              change=r.speedup - 1, samples=tuple(r.spec_tok_s), change_basis="the median speedup",
                              verdict=("untimed" if not r.timed else "regression" if judged and
                                       r.speedup < gate.min_speedup else "pays" if pays else "loses"),
                              gated=judged, extra={"context": facts}))
        if r.accept_length is not None and ref:
            fell = r.accept_length < (1 - gate.accept_drop) * ref
            rows.append(ReportRow(key=f"{spec} (context {r.input_tokens}, accept_length)", n=len(r.spec_tok_s),
                                  median=r.accept_length, unit="tokens/cycle", baseline_median=ref,
                                  change=r.accept_length / ref - 1, higher_is_better=True,
                                  verdict=("regression" if fell and judged else "fell" if fell else "held"),
                                  gated=judged, tolerance=gate.accept_drop, extra={"context": facts}))
    at = cliff.input_tokens if cliff is not None else math.inf
    rows.append(ReportRow(key=f"{spec} vs {plain} context where speculation stops paying", n=len(runs), median=at,
                          unit="tokens", verdict="cliff" if cliff is not None else "no cliff",
                          gated=cliff is not None and id(cliff) in gated,  # the gate judged the length it names
                          extra={"context_cliff": {"input_tokens": None if cliff is None else cliff.input_tokens,
                                                   "pays_at": PAYS,
                                                   "lengths": [r.input_tokens for r in runs]}}))
    return rows
