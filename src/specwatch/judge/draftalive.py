"""Is the draft alive, and is speculation running at all, on a server whose profile asks for it?

Pure: stdlib and :mod:`specwatch.judge.speculative` only.

Two faults look alike from the throughput alone (a speculative server no faster than a plain one, or slower)
and are told apart here before anything is called slow:

* **speculation off**: the profile asks for a speculative algorithm, the server runs none. ``/server_info``
  says ``speculative_algorithm`` None, or no request carries ``meta_info.spec_verify_ct`` (SGLang writes the
  ``spec_*`` fields only for a request that took a verify cycle), or the requests' verify cycles sum to 0.
  The settings the profile asks for and ``/server_info`` does not show are named, and, where the server's own
  command line was read, whether they were on it (dropped on the way: a launcher, a wrapper, an
  ``extra_args`` override) or on it and not applied.
* **a dead draft**: speculation runs and the draft accepts nothing: the accept length reads 1.00 (within
  the Decode lines' rounding, :data:`DEAD_BELOW`) from every source of the workload. A genuinely low but
  alive draft (1.04, 1.3) passes. A value reported in another convention is read as
  :func:`specwatch.judge.speculative.bounds_problems` reads it: below 1 it is accepted drafts per cycle
  (the 0.92-vs-1.92 case), so a reported 0.00 is a dead draft and a reported 0.92 a live one (1.92).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specwatch.judge import speculative
from specwatch.judge.verdict import Verdict

__all__ = ["CAUSES", "DEAD_BELOW", "NAME", "OFF", "accepted_counts", "judge", "reported_estimate",
           "speculation_off", "unreached"]

NAME = "draft alive"
#: An accept length below this reads 1.00 at the Decode lines' two decimals: no draft token accepted.
DEAD_BELOW = 1.0 + speculative.LOG_ROUNDING
#: What an accept length of 1.00 on a running speculative server points at.
CAUSES = ("a draft that does not match its target (wrong algorithm EAGLE vs EAGLE3, wrong draft weights, "
          "a broken hidden-state input)")
#: The first words of the speculation-off failure.
OFF = "speculation configured in the profile but not running on the server"
_NONE = (None, "", "NONE", "None", "null")


def unreached(asked: Mapping[str, Any], info: Mapping[str, Any]) -> list[str]:
    """Each setting the profile asks for (``asked``: ``/server_info`` key -> value, None: left to the engine)
    that ``/server_info`` does not show, as ``key: the profile asks X, /server_info says Y``."""
    out = []
    for key, want in asked.items():
        if want is None:
            continue
        got = info.get(key)
        same = str(got).upper() == str(want).upper() if key == "speculative_algorithm" else got == want
        if not same:
            out.append(f"{key}: the profile asks {want}, /server_info says {got}")
    return out


def _flags(argv: Sequence[str]) -> list[str]:
    """The speculative flags of a command line, each with its value (``--speculative-algorithm EAGLE3``)."""
    out = []
    for i, arg in enumerate(argv):
        if arg.startswith("--speculative"):
            value = argv[i + 1] if "=" not in arg and i + 1 < len(argv) and not argv[i + 1].startswith("--") else ""
            out.append(f"{arg} {value}".strip())
    return out


def speculation_off(info: Mapping[str, Any] | None, metas: Sequence[Mapping[str, Any]], *,
                    verify_calls: float | None = None, generation_tokens: float | None = None) -> list[str]:
    """The evidence that the server runs no speculation ([]: none says so).

    Each line is one source: ``/server_info``'s ``speculative_algorithm``; the requests' ``spec_verify_ct``
    (absent from every request that generated 2 or more tokens, or summing to 0); the ``/metrics`` verify
    counter (its delta 0, or no such counter) only beside one of those, never alone."""
    lines = []
    if info and info.get("speculative_algorithm") in _NONE:
        lines.append(f"/server_info says speculative_algorithm {info.get('speculative_algorithm')!r}")
    decoded = [m for m in metas if int(m.get("completion_tokens") or 0) >= 2]
    carrying = [m for m in metas if m.get("spec_verify_ct") is not None]
    if decoded and not carrying:
        lines.append(f"none of the {len(metas)} requests carries meta_info.spec_verify_ct (the server writes it "
                     "for every request that took a verify cycle)")
    elif carrying and not sum(int(m["spec_verify_ct"]) for m in carrying):
        lines.append(f"the {len(carrying)} requests' spec_verify_ct sum to 0 verify cycles")
    if lines and generation_tokens:
        if verify_calls is None:
            lines.append(f"/metrics has no verify-call counter ({generation_tokens:g} tokens generated)")
        elif not verify_calls:
            lines.append(f"/metrics: 0 verify calls over {generation_tokens:g} generated tokens")
    return lines


def accepted_counts(metas: Sequence[Mapping[str, Any]], num_draft_tokens: int | None) -> tuple[int, int] | None:
    """(accepted, proposed) draft tokens summed over the requests that report both counts: SGLang's
    ``spec_num_correct_drafts`` and ``spec_num_proposed_drafts`` (else ``spec_verify_ct`` x
    (num_draft_tokens - 1), its own formula); None when no request says."""
    correct = proposed = 0
    seen = False
    for m in metas:
        v, c = m.get("spec_verify_ct"), m.get("spec_num_correct_drafts")
        if v is None or c is None:
            continue
        p = m.get("spec_num_proposed_drafts")
        if p is None and num_draft_tokens is not None:
            p = int(v) * (num_draft_tokens - 1)
        if p is None:
            continue
        correct, proposed, seen = correct + int(c), proposed + int(p), True
    return (correct, proposed) if seen else None


def reported_estimate(value: float, source: str = "reported value") -> speculative.Estimate | str:
    """A reported accept-length-like number as a canonical estimate, or why it cannot be one.

    Read as :func:`speculative.bounds_problems` reads it: 1 or more is canonical; from 0 to 1 it is accepted
    drafts per cycle, converted with :func:`speculative.from_extra_per_cycle` (0.92 -> 1.92, 0.00 -> 1.00)."""
    problems = speculative.bounds_problems(value)
    if not problems:
        return speculative.Estimate(value, value, value, source, speculative.Convention.WINDOW, "canonical")
    if 0.0 <= value < 1.0:
        canon = speculative.from_extra_per_cycle(value)
        return speculative.Estimate(canon, canon, canon, f"{source} {value:g} read as accepted drafts per cycle",
                                    speculative.Convention.EXTRA_PER_CYCLE, problems[0])
    return f"{source} {value:g}: " + "; ".join(problems)


def _counted(counts: tuple[int, int] | None) -> str:
    """``accepted C of N proposed tokens`` (or that no request counted them)."""
    if counts is None:
        return "accepted no proposed token, within rounding (no request reported its counts)"
    c, n = counts
    share = f" ({100 * c / n:.2f}%)" if n and c else ""
    return f"accepted {c} of {n} proposed tokens{share}"


def judge(profile: str, asked: Mapping[str, Any], info: Mapping[str, Any] | None,
          metas: Sequence[Mapping[str, Any]], estimates: Sequence[speculative.Estimate], *,
          verify_calls: float | None = None, generation_tokens: float | None = None,
          argv: Sequence[str] | None = None, num_draft_tokens: int | None = None,
          reported: float | None = None, notes: Sequence[str] = ()) -> Verdict:
    """The draft-alive verdict of one measured workload of a server whose profile asks for speculation.

    ``asked``: the profile's speculative settings under their ``/server_info`` keys; ``info``: the server's
    ``/server_info`` (None: not read); ``metas``: the requests' ``meta_info``; ``estimates``: the workload's
    accept-length sources, each canonical (:mod:`specwatch.checks.accept_length` gathers them);
    ``verify_calls``/``generation_tokens``: the ``/metrics`` deltas (None: no such counter); ``argv``: the
    running server's command line (None: not read); ``reported``: a value another tool reported."""
    missing = unreached(asked, info or {})
    off = speculation_off(info, metas, verify_calls=verify_calls, generation_tokens=generation_tokens)
    if off:
        lines = [f"{OFF}: " + "; ".join(off)]
        if info is None:
            lines.append("  /server_info: not read")
        lines += [f"  did not reach the server: {m}" for m in missing]
        if argv is not None:
            flags = _flags(argv)
            lines.append(f"  its command line carries {' '.join(flags)}, yet the server did not apply them" if flags
                         else "  its command line carries no --speculative-* flag: the settings were dropped before "
                              "the server started (a launcher, a wrapper, an extra_args override)")
        lines += [f"  note: {n}" for n in notes]
        reason = f"{OFF}: {off[0]}" + (f"; {missing[0]}" if missing else "")
        return Verdict.of(NAME, False, "\n".join(lines), reason, profile=profile)
    ests = list(estimates)
    if reported is not None:
        got = reported_estimate(reported)
        if isinstance(got, str):
            return Verdict.skip(NAME, f"{got}: not an accept length in any convention", profile)
        ests.append(got)
    if not ests:
        return Verdict.skip(NAME, "no accept-length source answered" + "".join(f"; {n}" for n in notes), profile)
    dead = [e for e in ests if e.value < DEAD_BELOW]
    said = "; ".join(f"{e.source or e.convention.value} {e.value:.4f}" for e in ests)
    counts = accepted_counts(metas, num_draft_tokens)
    running = (info or {}).get("speculative_algorithm")
    extra = [f"  did not reach the server: {m}" for m in missing] + [f"  note: {n}" for n in notes]
    if dead and len(dead) < len(ests):
        return Verdict.skip(NAME, f"the sources disagree on whether the draft accepts anything ({said}): the "
                                  "accept-length check reconciles them", profile)
    if dead:
        head = (f"the draft {_counted(counts)}: accept length 1.00 over the workload, every source agreeing "
                f"({said}); speculation runs ({running or 'algorithm not shown'}) but the draft never matches: "
                f"{CAUSES}")
        if missing:
            head += f"; {missing[0]}"
        return Verdict.of(NAME, False, "\n".join([head, *extra]), head, profile=profile)
    low = min(e.value for e in ests)
    msg = f"the draft is alive: accept length {low:.2f} at the lowest ({said})"
    if counts is not None:
        msg += f"; it {_counted(counts)}"
    return Verdict.of(NAME, True, "\n".join([msg, *extra]), msg, profile=profile)
