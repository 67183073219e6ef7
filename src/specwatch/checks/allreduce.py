"""What the NCCL tuning does to the interconnect itself: all-reduce timed under the tuned and the
untuned server's environments, side by side.

The served throughput answers "does the tuning help this server"; this answers "does it change
the all-reduce at all on this machine". The case study chased the variables for a week; on the
H200 NVLink pair a graphed 14 KB all-reduce moves by 1.5% with them and over sockets by 11%
(shared/ref/device-facts.md), and neither reached ref-small's served tok/s (docs/validation/,
sections 8 and 9). Each round runs the rank processes afresh under each environment in turn
(untuned, tuned), so the machine's drift falls on both sides, and each launch's median is one
sample of the gates' own ``relative_gate`` (time: lower is better): 6 rounds are the fewest whose
6-against-6 rank test can reach p < 0.01.

    specwatch allreduce fixtures/profiles/gpu-ref-small-tp2.toml --rounds 6
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from specwatch.checks.allreduce_ranks import TIMINGS_DONE
from specwatch.errors import InfraError, UsageError
from specwatch.judge import compare
from specwatch.paths import with_specwatch_importable
from specwatch.profiles.profile import ProfileSet, ServerProfile
from specwatch.server.process import die_with_parent, kill_process_group

#: Message sizes timed by default: ref-small's decode and verify all-reduces (1 and 3 tokens of
#: d=1024 in bf16), and the case study's 14 KB one (7168 bf16 values: one token of a d=7168 model).
DEFAULT_SIZES = (2048, 6144, 14336)


@dataclass(frozen=True)
class ProbeRun:
    """One launch of the rank processes: microseconds per all-reduce, per message size in bytes."""

    samples_us: dict[int, list[float]]
    backend: str
    graphed: bool
    world: int
    note: str = ""  # e.g. the ranks hung in the teardown, after their timings were written


@dataclass(frozen=True)
class SizeEffect:
    """Tuned against untuned for one message size, pooled over the rounds."""

    size: int
    untuned_us: float
    tuned_us: float
    gate: compare.GateResult
    sentence: str

    def line(self) -> str:
        g = self.gate
        return (f"{self.size:>8} B  untuned {self.untuned_us:8.1f} µs  tuned {self.tuned_us:8.1f} µs  "
                f"time {(g.ratio - 1) * 100:+.1f}% [{(g.ci_low - 1) * 100:+.1f}, {(g.ci_high - 1) * 100:+.1f}]; "
                f"{self.sentence}")


def probe_env(profile: ServerProfile, managed: set[str], base: Mapping[str, str] | None = None, *,
              run_dir: Path | None = None) -> dict[str, str]:
    """The environment a server of ``profile`` would start with (:func:`specwatch.server.launch.server_environment`,
    without the recording probe), with specwatch importable for the rank processes. Files the
    environment needs (an ``env_apply = "sitecustomize"`` setter) go under ``run_dir`` (default: a
    fresh temporary folder)."""
    from specwatch.server.launch import server_environment

    folder = run_dir if run_dir is not None else Path(tempfile.mkdtemp(prefix="specwatch-allreduce-env-"))
    env, _ = server_environment(profile, managed=managed, run_dir=folder, base_env=base, with_probe=False)
    env["PYTHONPATH"] = with_specwatch_importable(env.get("PYTHONPATH"))
    return env


def run_probe(env: Mapping[str, str], *, world: int, sizes: Sequence[int], device: str, graphed: bool,
              calls: int = 20, samples: int = 30, timeout_s: float = 180.0, hang_rank: int = -1,
              hang_teardown: bool = False) -> ProbeRun:
    """Launch the ranks under ``env`` and read their timings; InfraError (the whole process group
    killed) when they fail or outlive ``timeout_s``, saying what each rank printed last: an NCCL
    hang must not hang the run, and must leave something to debug from. A hang after every rank
    timed every size (NCCL's teardown of a communicator that CUDA graphs captured) keeps the
    timings, with a note. ``hang_rank``, ``hang_teardown``: faults for the tests (that rank never
    joins; every rank hangs in the teardown)."""
    with tempfile.TemporaryDirectory(prefix="specwatch-allreduce-") as tmp:
        out = Path(tmp) / "times.json"
        argv = [sys.executable, "-m", "specwatch.checks.allreduce_ranks", "--world", str(world), "--device", device,
                "--sizes", ",".join(str(s) for s in sizes), "--calls", str(calls), "--samples", str(samples),
                "--out", str(out), "--log-dir", tmp, *(["--graphed"] if graphed else []),
                *(["--hang-rank", str(hang_rank)] if hang_rank >= 0 else []),
                *(["--hang-teardown"] if hang_teardown else [])]
        # die_with_parent: a kill -9 of the caller takes the launcher, and with it its ranks, along
        proc = subprocess.Popen(argv, env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                preexec_fn=die_with_parent)
        try:
            log, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_process_group(proc, grace=0.0)
            log, _ = proc.communicate()
            if out.exists() and all(TIMINGS_DONE in rank_log(Path(tmp), r) for r in range(world)):
                doc = json.loads(out.read_text())
                note = (f"the ranks hung in the teardown (destroy_process_group) after every size was timed; "
                        f"killed after {timeout_s:g} s, the timings kept")
                return ProbeRun({int(k): list(v) for k, v in doc["samples_us"].items()}, doc["backend"],
                                bool(doc["graphed"]), int(doc["world"]), note)
            raise InfraError(f"the all-reduce probe ({world} ranks, {device}) did not finish in {timeout_s:g} s; "
                             f"killed (an NCCL hang or a rank that never joined). What each rank printed last:\n"
                             f"{rank_tails(Path(tmp), world, log)}") from None
        if proc.returncode != 0 or not out.exists():
            raise InfraError(f"the all-reduce probe failed (exit {proc.returncode}). What each rank printed last:\n"
                             f"{rank_tails(Path(tmp), world, log)}")
        doc = json.loads(out.read_text())
    return ProbeRun({int(k): list(v) for k, v in doc["samples_us"].items()}, doc["backend"], bool(doc["graphed"]),
                    int(doc["world"]))


def launch_medians(runs: Sequence[ProbeRun]) -> dict[int, list[float]]:
    """Each size's median per launch: the launch is the unit. Samples of one launch share its
    communicator, buffers and placement and are not independent; pooled, two gloo launches a side
    once called a 14 KB all-reduce 88% faster at p = 2.5e-6 under NCCL variables gloo never reads."""
    out: dict[int, list[float]] = {}
    for r in runs:
        for size, xs in r.samples_us.items():
            out.setdefault(size, []).append(_median(xs))
    return out


def rank_log(log_dir: Path, rank: int) -> str:
    """What rank ``rank`` wrote to its ``rank-<r>.log`` ('' when it wrote nothing)."""
    path = log_dir / f"rank-{rank}.log"
    return path.read_text(errors="replace") if path.exists() else ""


def rank_tails(log_dir: Path, world: int, launcher_output: str, lines: int = 4) -> str:
    """The last ``lines`` lines each rank wrote to its ``rank-<r>.log`` (NCCL's own lines included),
    and the launcher's own, indented: what a hang or a failure leaves to debug from."""
    parts = []
    for rank in range(world):
        tail = [ln for ln in rank_log(log_dir, rank).splitlines() if ln.strip()][-lines:]
        parts.append(f"  rank {rank}: " + ("\n    ".join(tail) if tail else "(nothing: the rank never started)"))
    launcher = [ln for ln in (launcher_output or "").splitlines() if ln.strip()][-lines * 2:]
    if launcher:
        parts.append("  launcher: " + "\n    ".join(launcher))
    return "\n".join(parts)


def tuning_effects(untuned: Sequence[ProbeRun], tuned: Sequence[ProbeRun], *, min_effect: float,
                   alpha: float = compare.DEFAULT_ALPHA) -> list[SizeEffect]:
    """Per size: tuned against untuned microseconds over the launches' medians (lower is better),
    judged like the tuned gate: a win needs significance and at least ``min_effect``."""
    from specwatch.judge.tuning import tuning_effect

    u, t = launch_medians(untuned), launch_medians(tuned)
    effects = []
    for size in sorted(u.keys() & t.keys()):
        gate = compare.relative_gate(t[size], u[size], higher_is_better=False, alpha=alpha, effect=min_effect,
                                     names=("tuned", "untuned"))
        sentence, _ = tuning_effect(gate, min_effect)
        effects.append(SizeEffect(size, _median(u[size]), _median(t[size]), gate, sentence))
    return effects


def _median(xs: Sequence[float]) -> float:
    import statistics

    return float(statistics.median(xs))


#: the most ranks the probe starts (all on this host: one process each)
MAX_RANKS = 64


def tuned_and_untuned(ps: ProfileSet) -> tuple[ServerProfile, ServerProfile]:
    """The profile set's tuned and untuned servers; UsageError when it has none or they run TP=1."""
    t, u = ps.for_role("tuned"), ps.for_role("untuned")
    if t is None or u is None:
        raise UsageError(f"{ps.source}: no tuned and untuned servers ([fixtures] tuned / untuned) to compare")
    if min(t.tp, u.tp) < 2:
        raise UsageError(f"{ps.source}: {t.name} and {u.name} run tensor parallel {min(t.tp, u.tp)}: "
                         "there is no all-reduce to time")
    if max(t.tp, u.tp) > MAX_RANKS:
        raise UsageError(f"{ps.source}: {t.name} and {u.name} run tensor parallel {max(t.tp, u.tp)}: the probe "
                         f"starts every rank on this host, at most {MAX_RANKS}")
    return t, u


def main(profiles: str | None, *, rounds: int, sizes: Sequence[int], graphed: str, device: str, calls: int,
         samples: int, timeout_s: float, progress: Callable[[str], None] = print) -> list[SizeEffect]:
    """The ``specwatch allreduce`` command: alternate untuned and tuned launches, print the table."""
    from specwatch.profiles.loading import load_profiles
    from specwatch.server.launch import managed_variables

    if rounds < 2 or calls < 1 or samples < 1 or not sizes or min(sizes) < 1:
        raise UsageError("--rounds must be ≥ 2 (launches are the unit), --calls and --samples ≥ 1, sizes positive")
    ps = load_profiles(profiles)
    tuned, untuned = tuned_and_untuned(ps)
    dev = device if device != "auto" else _auto_device(tuned)
    use_graphs = dev == "cuda" if graphed == "auto" else graphed == "yes"
    if use_graphs and dev != "cuda":
        raise UsageError("--graphed yes needs --device cuda")
    managed = managed_variables(ps.servers.values())
    runs: dict[str, list[ProbeRun]] = {"untuned": [], "tuned": []}
    with tempfile.TemporaryDirectory(prefix="specwatch-allreduce-env-") as envdir:
        for r in range(rounds):
            for role, prof in (("untuned", untuned), ("tuned", tuned)):
                progress(f"[specwatch] all-reduce probe, round {r + 1}/{rounds}: {prof.name} ({prof.tp} ranks, "
                         f"{dev}, {'graphed' if use_graphs else 'eager'})")
                env = probe_env(prof, managed, run_dir=Path(envdir) / f"{role}-{r}")
                runs[role].append(run_probe(env, world=prof.tp, sizes=sizes, device=dev, graphed=use_graphs,
                                            calls=calls, samples=samples, timeout_s=timeout_s))
                if runs[role][-1].note:
                    progress(f"[specwatch] {prof.name}: {runs[role][-1].note}")
    effects = tuning_effects(runs["untuned"], runs["tuned"], min_effect=ps.gates.tuning_min_effect)
    first = runs["tuned"][0]
    progress(f"all-reduce, {first.world} ranks over {first.backend}, {'CUDA graph' if first.graphed else 'eager'}, "
             f"{rounds} launches a side (the unit: each one's median of {samples} samples of {calls} calls); "
             f"{tuned.name} against {untuned.name}:")
    for e in effects:
        progress("  " + e.line())
    return effects


def _auto_device(profile: ServerProfile) -> str:
    if profile.device in ("cuda", "cpu"):
        return profile.device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
