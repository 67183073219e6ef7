"""Pure half of the phase-graphs check: was every phase of a speculative cycle captured as a graph at startup?

A speculative cycle runs several phases (the target's verify, the draft's decode steps, the draft's pass over
the accepted tokens: "draft extend"); each one the engine does not capture runs eagerly on every cycle, with no
message. Which phases a healthy server captures, and what keeps each from being captured (a flag that turns
graphs off, an environment switch, an attention backend without a graphed draft extend, the backend the engine
picks by default on the GPU), are the engine's facts (:class:`specwatch.engines.protocol.PhaseGraphs`); the
phases captured are the startup ``Capture ...`` lines (:class:`specwatch.signals.logscan.CaptureRecord`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specwatch.engines.protocol import PhaseGraphs
from specwatch.signals.logscan import CaptureRecord

__all__ = ["Missing", "PhaseReport", "arg_value", "attention_backend", "captured_phases", "check_phase_graphs"]


@dataclass(frozen=True)
class Missing:
    """A phase that should have been captured and was not, and why (``cause`` "" when nothing shown explains it)."""

    phase: str
    cause: str = ""


@dataclass
class PhaseReport:
    """Which phases were expected and captured, each missing one with its cause; ``ok`` None: cannot tell."""

    ok: bool | None
    expected: tuple[str, ...]
    captured: dict[str, list[int] | None] = field(default_factory=dict)  # phase -> its begin line's bs
    missing: list[Missing] = field(default_factory=list)
    why_not: str = ""  # when ok is None

    def reason(self) -> str:
        """One line: what failed and why, what passed, or why it cannot tell."""
        if self.ok is None:
            return self.why_not
        if self.ok:
            return f"every speculative phase captured as a graph: {', '.join(self.expected)}"
        return "; ".join(f"{m.phase} NOT captured as a graph: it runs eagerly every cycle ("
                         + (m.cause or "cause unknown: no flag, switch or attention backend the server was "
                            "started with explains it") + ")" for m in self.missing)

    def message(self) -> str:
        """The reason, then each expected phase and whether it was captured."""
        lines = [self.reason()]
        for phase in self.expected:
            if phase in self.captured:
                bs = self.captured[phase]
                lines.append(f"  {phase}: captured" + (f" (bs={bs})" if bs else ""))
            else:
                lines.append(f"  {phase}: not captured")
        extra = [p for p in self.captured if p not in self.expected]
        if extra:
            lines.append(f"  also captured: {', '.join(extra)}")
        if self.missing:  # the fact is the server's; its cost depends on the shape, batch and backend
            lines.append("  what it costs here: `specwatch ab` of this server against one that graphs the phase (a "
                         "backend that captures it, or without the switch); an eager phase can cost nothing where the "
                         "step is GPU-bound, and a backend without its graph can still be the faster one")
        return "\n".join(lines)


def captured_phases(captures: Sequence[CaptureRecord]) -> dict[str, list[int] | None]:
    """Each phase a ``Capture`` line names (begin or end), with the batch sizes of its begin line, in order."""
    out: dict[str, list[int] | None] = {}
    for rec in captures:
        if rec.name not in out or (out[rec.name] is None and rec.bs):
            out[rec.name] = list(rec.bs) if rec.bs else None
    return out


def arg_value(argv: Sequence[str], flag: str) -> str | None:
    """The value of ``flag`` on a command line (``--flag V`` or ``--flag=V``, the last one wins); "" for a flag
    given without a value; None when absent."""
    value: str | None = None
    for i, arg in enumerate(argv):
        if arg == flag:
            nxt = argv[i + 1] if i + 1 < len(argv) else ""
            value = "" if nxt.startswith("--") else nxt
        elif arg.startswith(flag + "="):
            value = arg[len(flag) + 1:]
    return value


def _key(flag: str) -> str:
    """``--attention-backend`` -> ``attention_backend`` (the ``/server_info`` key of a flag)."""
    return flag.lstrip("-").replace("-", "_")


def _int(value: object) -> int | None:
    try:
        return int(str(value))
    except ValueError:
        return None


def _graphs_off(facts: PhaseGraphs, argv: Sequence[str], server_info: Mapping[str, Any]) -> str | None:
    """The flag that turned every decode-phase graph off, as written, or None."""
    for flag, wanted in facts.graphs_off:
        given = arg_value(argv, flag)
        if given is not None and (wanted is None or given == wanted):
            return flag if wanted is None else f"{flag} {wanted}"
        resolved = server_info.get(_key(flag))
        if resolved is not None and resolved is not False and (wanted is None or resolved == wanted):
            return flag if wanted is None else f"{flag} {wanted}"
    return None


def _default_gpu(facts: PhaseGraphs, gpus: Sequence[str]) -> str | None:
    """The first GPU name with a word of ``facts.default_gpus`` in it, or None."""
    for name in gpus:
        if set(name.replace("-", " ").split()) & set(facts.default_gpus):
            return name
    return None


def attention_backend(facts: PhaseGraphs, argv: Sequence[str], server_info: Mapping[str, Any], *,
                      topk: int | None, gpus: Sequence[str]) -> tuple[str | None, str]:
    """The draft extend's attention backend and how it is known: (name, words), or (None, why unknown).

    A flag on the command line first (``facts.backend_flags``, most specific first), then what ``/server_info``
    resolved, then the engine's default on the GPU, said as ``facts.default_words`` only when the GPU, the topk
    and the page size are all within the default's conditions."""
    flags = list(facts.backend_flags)
    if facts.decode_mode and len(flags) > 1:
        mode_flag, mode, swap = facts.decode_mode
        mode_now = arg_value(argv, mode_flag) or server_info.get(_key(mode_flag))
        if mode_now == mode:
            flags[1] = swap
    for flag in flags:
        value = arg_value(argv, flag)
        if value:
            return value, f"{flag} {value}"
    resolved = next((str(server_info[_key(f)]) for f in flags if server_info.get(_key(f))), None)
    if resolved is not None and resolved != facts.default_backend:
        return resolved, f"{resolved} (the server resolved it, no backend flag given)"
    gpu = _default_gpu(facts, gpus)
    page = arg_value(argv, facts.page_size_flag) if facts.page_size_flag else None
    page = page or server_info.get(_key(facts.page_size_flag or "")) or None
    within = ((topk is None or topk <= facts.default_max_topk)
              and (page is None or (_int(page) or 0) <= facts.default_max_page_size))
    if facts.default_backend and gpu and within:
        page_words = f"page size {page}" if page is not None else "page size unset"
        return facts.default_backend, (f"{facts.default_words} (no {flags[-1]} given; GPU {gpu}, topk "
                                       f"{topk if topk is not None else 'unset'}, {page_words})")
    if resolved is not None:
        return resolved, f"{resolved} (the server resolved it, no backend flag given: the engine's default)"
    on = f" ({', '.join(gpus)})" if gpus else " (no GPU name)"
    return None, f"no backend flag given and the engine's default on this GPU is not known{on}"


def _extend_causes(facts: PhaseGraphs, argv: Sequence[str], env: Mapping[str, str],
                   server_info: Mapping[str, Any], *, topk: int | None, gpus: Sequence[str]) -> list[str]:
    causes = []
    if facts.extend_switch and facts.switched_on(env.get(facts.extend_switch)):
        causes.append(f"{facts.extend_switch}={env[facts.extend_switch]} is set in the server's environment: it "
                      "turns the draft extend capture off")
    if facts.extend_backends:
        name, how = attention_backend(facts, argv, server_info, topk=topk, gpus=gpus)
        if name is not None and name not in facts.extend_backends:
            causes.append(f"the draft extend's attention backend is {how}, whose draft extend is not captured "
                          f"(captured only for {', '.join(facts.extend_backends)}); pick one of those with "
                          f"{facts.backend_flags[0]} (the draft only) or {facts.backend_flags[-1]}")
    return causes


def check_phase_graphs(
    facts: PhaseGraphs,
    captures: Sequence[CaptureRecord],
    *,
    algorithm: str,
    num_steps: int | None,
    topk: int | None = None,
    argv: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    server_info: Mapping[str, Any] | None = None,
    gpus: Sequence[str] = (),
    device: str | None = None,
) -> PhaseReport:
    """Judge which of the phases ``facts`` expects of ``algorithm`` were captured, and why each missing one was not.

    ``argv`` and ``env``: the server's command line and environment; ``server_info``: what ``/server_info``
    resolved (optional); ``gpus``: the GPU names (nvidia-smi); ``device``: where the server runs ("cpu": no
    CUDA graphs exist, so the check cannot tell)."""
    env = env or {}
    info = server_info or {}
    expected = facts.expected(algorithm, num_steps)
    captured = captured_phases(captures)
    devices = {r.device for r in captures}
    if device == "cpu" or (devices and "CUDA" not in devices):
        where = device.upper() if device else "/".join(sorted(devices))
        return PhaseReport(None, expected, captured,
                           why_not=f"the server runs on {where}, where no CUDA graphs exist: nothing to capture")
    missing = [p for p in expected if p not in captured]
    if not missing:
        return PhaseReport(True, expected, captured)
    off = _graphs_off(facts, argv, info)
    out = []
    for phase in missing:
        causes = [f"{off} is set: no decode-phase graph is captured"] if off else []
        if phase == facts.draft_extend:
            causes += _extend_causes(facts, argv, env, info, topk=topk, gpus=gpus)
        out.append(Missing(phase, "; also ".join(causes)))
    return PhaseReport(False, expected, captured, out)
