"""GPU validation of specwatch, one command for every session: named scenarios, raw output kept as data.

    python docs/validation/harness.py list                       # the scenarios, what each measures
    python docs/validation/harness.py show ab-x1 --set alpha=0.001   # its exact commands; nothing runs
    python docs/validation/harness.py run ab-x1 --deadline 540 --archive "$OUT/ab-x1.tgz"

``run`` writes everything under ``docs/validation/data/<run>/`` (default ``<UTC date>-<scenario>``):
``run.json`` (scenario, settings, code version, machine, every step's command, exit and seconds),
``steps.txt`` (one line per step, as the session scripts wrote it), ``gpu.txt`` (nvidia-smi), one
``<step>.txt`` per step (its whole output), the results files of its pytest runs and the profile
variants it generated (``profiles/``). ``--archive`` also packs that folder into one .tgz (the device
machine returns few files per call); unpack it into docs/validation/data/ and add the run to runs.toml.
``--deadline`` is the call's seconds: no step starts past it, and each step's limit is cut to what is left.

Settings (``--set KEY=VALUE``, see ``show``) choose the profile files, GPUs, counts and thresholds; a
scenario run on CPU variants of the profiles (``--set device=cpu``) checks the plumbing without a GPU.
When ``.whl/*.whl`` exists (the setproctitle wheel carried to a bare device machine), it is installed
into /tmp/site first, and ``src/`` is put on PYTHONPATH, as the session scripts did.

The scenarios replace the per-session scripts (gpu_validate.sh, gpu_session2.sh, gpu_session3[abc].sh,
gpu_next.sh, gpu_ab.sh, gpu_s7[abc].sh; in git before this file): each old stage is a scenario here, and
``list`` names the script each came from. changelog.md tells what each session found.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import sglang_kit  # docs/validation, beside this file: the kit's releases and what their servers need

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "validation" / "data"
FORMAT_VERSION = 1

#: every setting a scenario may read, with its default; ``--set KEY=VALUE`` overrides
SETTINGS: dict[str, str] = {
    "small": "fixtures/profiles/gpu-ref-small.toml",
    "small_tp2": "fixtures/profiles/gpu-ref-small-tp2.toml",
    "large": "fixtures/profiles/gpu-ref-large.toml",
    "large_socket": "fixtures/profiles/gpu-ref-large-tp2-socket.toml",
    "small_sweep": "fixtures/profiles/gpu-ref-small-sweep.toml",
    "large_sweep": "fixtures/profiles/gpu-ref-large-sweep.toml",
    "graph_bs4": "fixtures/profiles/gpu-ref-small-graph-bs4.toml",
    "ab_base": "docs/validation/ab/large-base.toml",
    "ab_slow": "docs/validation/ab/large-slow-180k.toml",
    "ab_base_tp2": "docs/validation/ab/small-tp2-base.toml",
    "ab_slow_tp2": "docs/validation/ab/small-tp2-slow.toml",
    "profile": "large",  # drift-pytest / drift-repeat: which profile setting they measure
    "server": "large-eagle3-tuned",  # ... and which of its servers
    "gpus": "0,1",  # GPUs used one per lane by the scenarios that run a lane per GPU
    "slowdown": "8",  # drift-pytest: --ref-fault-slowdown of the slowed runs (percent)
    "levels": "0,10",  # drift-repeat: slowdowns measured in every repetition (percent), shuffled
    "seed": "7",
    "records": "4",  # drift-pytest: recording sessions per GPU
    "pairs": "3",  # drift-pytest: slowed/healthy pairs per GPU
    "rounds": "2",
    "max_rounds": "4",
    "max_rounds_fa3": "2",
    "sweep_draft": "exact",  # sglang-8b-sweep-x1: the EAGLE-3 draft, "exact" (2.00), "vary" (1.50) or "q0" (1.00)
    "sweep_levels": "1,4,16,48",  # sglang-8b-sweep-x1: the concurrency levels swept
    "sweep_graphs": "on",  # sglang-8b-sweep-x1: "off" leaves out the two verify-graph checks after the sweep
    # sglang-8b-sweep-x1: [workload] output_len; "128" makes every request 128 tokens, so one wave's throughput is not
    # set by its longest request (the lognormal's runs spread over up to 44% of their median at 16 and 48, 2026-12-06)
    "sweep_output_len": '{ dist = "lognormal", median = 128, sigma = 0.4, low = 32, high = 256 }',
    "tolerance": "",  # ab: empty for ab's default (each key's own, from its recorded round spread)
    "alpha": "",  # ab: empty for ab's default
    "metric": "",  # ab: the metric judged; empty for ab's default (output_tok_s and decode_tok_s)
    "device": "",  # "cpu": every profile becomes a CPU variant (a plumbing check, not a measurement)
    "sglang_profile": "fixtures/profiles/sglang-0.5.16-h200.toml",  # sglang-*: the real-SGLang profile
    "sglang_baselines": "docs/validation/sglang/baselines",  # sglang-faults-x1: recorded by sglang-x1
    "sglang_sleep": "6000000",  # sglang-drift-x1: GPU cycles slept after every graph replay (about 3 ms)
    "sgl8b_baselines": "/tmp/sgl8b-baselines",  # sglang-8b-x1 leaves its recorded baselines here, sglang-8b-ab-x1 reads
    "sgl8b_head": "docs/validation/sglang/eagle3-8b-slow3.toml",  # sglang-8b-ab-x1: the head ab judges
    "sgl_release_base": "0.5.15.post1",  # sglang-8b-releases-x1: the older SGLang release of the pair ab judges
    "sgl_release_head": "0.5.16",  # ... and the newer (SGL_RELEASES)
    "sgl_release_server": "eagle3",  # ... and which server: "eagle3" (eagle3-8b-<release>.toml) or "plain"
    "sgl_ladder_max_rounds": "2",  # sglang-8b-ladder-*-x1: ab-ladder's last look (3: a round more for open pairs)
    # sglang-8b-ladder-*-x1: ab-ladder's first look (1: each pair judged on the 8B round history after one round, a
    # second round only for the pairs still open)
    "sgl_ladder_rounds": "2",
    # sglang-8b-ladder-*-x1: the oldest release of the chain (a later one: a shorter ladder, e.g. 0.5.14 for the pairs
    # around 0.5.15.post1 alone: 3 boots a round, over in calls 1 and 2)
    "sgl_ladder_from": "0.5.12",
}


@dataclass(frozen=True)
class Step:
    """One command: its output goes to ``<name>.txt``; ``gpu`` sets CUDA_VISIBLE_DEVICES."""

    name: str
    argv: list[str]
    timeout: int
    gpu: str | None = None
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Repeat:
    """``steps`` again and again (``<name>-1``, ``-2``, ...) while ``min_left`` seconds remain."""

    steps: list[Step]
    min_left: int
    limit: int = 1000


@dataclass(frozen=True)
class Call:
    """A step done in-process (``fn(run_dir)``), logged like a command."""

    name: str
    fn: Callable[[Path, dict[str, str]], str]


Lane = list  # of Step | Repeat | Call, in order
Stage = list  # of Lane, run at the same time


class Plan:
    """What a scenario builds from the settings: profile variants to write, then stages to run."""

    def __init__(self, settings: dict[str, str], run: Path) -> None:
        self.s = settings
        self.run = run
        self.variants: dict[str, str] = {}  # path relative to the repository -> text
        self.stages: list[Stage] = []
        self.py = sys.executable

    def profile(self, path: str, name: str | None = None, defaults: tuple[str, ...] = (),
                replace: tuple[tuple[str, str], ...] = (), append: tuple[str, ...] = ()) -> str:
        """``path`` (a setting's value or a file), or a variant of it in the run's profiles/ folder."""
        path = self.s.get(path, path)
        if self.s["device"]:
            defaults = (*defaults, f'device = "{self.s["device"]}"')
        if not (defaults or replace or append):
            return path
        text = (ROOT / path).read_text()
        for pattern, repl in replace:
            text = re.sub(pattern, repl, text, flags=re.M)
        if defaults:
            text = _with_defaults(text, defaults)
        text += "".join(f"{a}\n" for a in append)
        folder = (ROOT / path).parent
        text = re.sub(r'^(pythonpath = \[)([^\]]*)\]', lambda m: m[1] + ", ".join(
            f'"{(folder / p).resolve()}"' for p in re.findall(r'"([^"]+)"', m[2])) + "]", text, flags=re.M)
        rel = str((self.run / "profiles" / f"{name or Path(path).stem}.toml").relative_to(ROOT))
        self.variants[rel] = text
        return rel

    def pytest(self, name: str, timeout: int, *args: str, gpu: str | None = None,
               baselines: str | None = None, env: dict[str, str] | None = None) -> Step:
        """A pytest run whose report folder, results file and history live in the run folder."""
        run = self.rel(self.run)
        argv = [self.py, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "--specwatch-commit", "{commit}", *args,
                f"--specwatch-report-dir={run}/{name}", f"--specwatch-results={run}/{name}.json",
                f"--specwatch-history={run}/history.sqlite"]
        if baselines:
            argv.append(f"--specwatch-baseline-dir={baselines}")
        return Step(name, argv, timeout, gpu, env or {})

    def cli(self, name: str, timeout: int, *args: str, gpu: str | None = None,
            env: dict[str, str] | None = None) -> Step:
        return Step(name, [self.py, "-m", "specwatch.cli", *args], timeout, gpu, env or {})

    def rel(self, path: Path) -> str:
        return str(path.relative_to(ROOT))

    def gpus(self) -> list[str]:
        return [g for g in self.s["gpus"].split(",") if g]

    def floats(self, key: str) -> list[float]:
        return [float(x) for x in self.s[key].split(",") if x]


def _with_defaults(text: str, lines: tuple[str, ...]) -> str:
    """``lines`` (``key = value``) set in the [defaults] table, replacing the same keys there."""
    keys = {line.split("=", 1)[0].strip() for line in lines}
    block = "".join(f"{x}\n" for x in lines)
    m = re.search(r"^\[defaults\]\n", text, flags=re.M)
    if not m:  # no [defaults]: one before the first table
        first = re.search(r"^\[", text, flags=re.M)
        at = first.start() if first else len(text)
        return f"{text[:at]}[defaults]\n{block}\n{text[at:]}"
    nxt = re.search(r"^\[", text[m.end():], flags=re.M)
    stop = m.end() + nxt.start() if nxt else len(text)
    kept = [x for x in text[m.end():stop].splitlines(keepends=True) if x.split("=", 1)[0].strip() not in keys]
    return text[:m.end()] + block + "".join(kept) + text[stop:]


#: the line of a step's output that the step log repeats: pytest's summary, ab's verdict
FINAL = re.compile(r"^(=*\s*\d+ \w+.* in [\d.]+s|\[ab\] (REGRESSION|UNSURE|no regression))")

SOCKETS = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}
SOCKET_ENV = 'extra_env = { NCCL_P2P_DISABLE = "1", NCCL_SHM_DISABLE = "1" }'
EXPECT_EFFECT = (r"^expect_tuning_effect = false.*$", "expect_tuning_effect = true")


def _slowed(p: Plan, pct: float) -> str:
    base = p.s[p.s["profile"]]
    if not pct:
        return p.profile(base)
    return p.profile(base, f"slow{pct:g}", defaults=(f'extra_args = ["--ref-fault-slowdown", "{pct:g}"]',))


def _merge(pattern: str, dest: str, keep: int) -> Callable[[Path, dict[str, str]], str]:
    """Every results file matching ``pattern`` in the run folder into one baseline, oldest first."""

    def merge(run: Path, env: dict[str, str]) -> str:
        found = sorted(run.glob(pattern), key=lambda f: json.loads(f.read_text()).get("created", ""))
        for f in found:
            subprocess.run([sys.executable, "-m", "specwatch.cli", "baseline", "update", str(f), "--baseline-dir",
                            str(run / dest), "--keep-sessions", str(keep)], check=True, cwd=ROOT,
                           env=env, stdout=subprocess.DEVNULL)
        return f"{len(found)} results file(s) merged into {dest}/ oldest first"

    return merge


def _copy_round_history(cls: str) -> Callable[[Path, dict[str, str]], str]:
    def copy(run: Path, env: dict[str, str]) -> str:
        src = ROOT / "baselines" / cls
        (run / "round-history" / cls).mkdir(parents=True, exist_ok=True)
        if (src / "round-spread.json").exists():
            shutil.copy(src / "round-spread.json", run / "round-history" / cls / "round-spread.json")
        return f"round history of {cls} copied (the verdicts add to the copy)"

    return copy


def _ab(p: Plan, name: str, base: str, head: str, gpu: str | None, timeout: int = 300) -> Step:
    s = p.s
    chosen = [a for opt, key in (("--tolerance", "tolerance"), ("--alpha", "alpha"), ("--metric", "metric"))
              if s[key] for a in (opt, s[key])]  # an empty setting: ab's own default
    return p.cli(name, timeout, "ab", "--base-profile", p.profile(base), "--head-profile", p.profile(head),
                 "--rounds", s["rounds"], "--max-rounds", s["max_rounds"], *chosen,
                 "--round-history", f"{p.rel(p.run)}/round-history", "--record-rounds",
                 "--memo", f"/tmp/specwatch-abmemo-{name}", "--",
                 "-m", "perf", "tests/perf/test_throughput.py", "-k", "drift and decode", "-p", "no:cacheprovider",
                 "-q",
                 "--specwatch-baseline-dir=/tmp/specwatch-none", "--specwatch-yardstick=off",
                 f"--specwatch-report-dir=/tmp/specwatch-reports-{name}", gpu=gpu)


def _yardsticks(p: Plan, when: str = "") -> Lane:
    return [Step(f"yardstick-gpu{g}{when}", [p.py, "-m", "specwatch.load.yardstick", "--json"], 60, g)
            for g in p.gpus()]


def smoke(p: Plan) -> None:
    args = ["--model-path", "ref-small", "--device", p.s["device"] or "cuda", "--speculative-algorithm", "EAGLE3",
            "--speculative-num-steps", "2"]
    p.stages = [[[Step("smoke-tp2", [p.py, "docs/validation/smoke.py", p.rel(p.run), "--", *args, "--tp-size", "2"],
                       200),
                  Step("smoke-tp1", [p.py, "docs/validation/smoke.py", p.rel(p.run), "--", *args], 200, "0")]]]


def perf_x1(p: Plan) -> None:
    p.stages = [[[p.pytest("perf-x1", 400, "-m", "perf", f"--specwatch-profiles={p.profile('small')}", gpu="0")]]]


def suites_x1(p: Plan) -> None:
    small, scratch = p.profile("small"), f"{p.rel(p.run)}/baselines"
    slow = p.profile("small", "slow8", defaults=('extra_args = ["--ref-fault-slowdown", "8"]',))
    k = ["-m", "perf", "tests/perf/test_throughput.py", "-k", "drift and eagle3-tuned", "--specwatch-runs", "10"]
    p.stages = [[[p.pytest("tp1-suite", 330, "-m", "perf or correctness", "tests/perf", "tests/correctness",
                           f"--specwatch-profiles={small}", "--update-baselines", "--specwatch-runs", "10", gpu="0",
                           baselines=scratch),
                  p.pytest("tp1-drift-slow8", 100, *k, f"--specwatch-profiles={slow}", gpu="0", baselines=scratch),
                  p.pytest("tp1-drift-healthy", 100, *k, f"--specwatch-profiles={small}", gpu="0",
                           baselines=scratch)]]]


def suites_x2(p: Plan) -> None:
    scratch = f"{p.rel(p.run)}/baselines"
    sock = p.profile("small_tp2", "socket", defaults=(SOCKET_ENV,), replace=(EXPECT_EFFECT,))
    p.stages = [[[p.pytest("tp2-suite", 300, "-m", "perf", "tests/perf",
                           f"--specwatch-profiles={p.profile('small_tp2')}", "--update-baselines",
                           "--specwatch-runs", "10", baselines=scratch),
                  p.pytest("tp2-socket-tuning", 240, "-m", "perf", "tests/perf/test_gates.py", "-k", "tuned",
                           f"--specwatch-profiles={sock}", "--specwatch-machine-class", "h200x2-socket",
                           "--specwatch-runs", "12", baselines=scratch)]]]


def drift_pytest(p: Plan) -> None:
    k = ["-m", "perf", "tests/perf/test_throughput.py", "-k", f"drift and {p.s['server']}"]
    healthy, slow = _slowed(p, 0), _slowed(p, float(p.s["slowdown"]))
    merged = f"{p.rel(p.run)}/baselines"
    records = [[p.pytest(f"g{g}-record-{i}", 150, *k, f"--specwatch-profiles={healthy}", "--update-baselines",
                         gpu=g, baselines=f"{p.rel(p.run)}/scratch-g{g}")
                for i in range(1, int(p.s["records"]) + 1)] for g in p.gpus()]
    pairs = [[step for i in range(1, int(p.s["pairs"]) + 1) for step in (
        p.pytest(f"g{g}-slow{p.s['slowdown']}-{i}", 120, *k, f"--specwatch-profiles={slow}", gpu=g, baselines=merged),
        p.pytest(f"g{g}-healthy-{i}", 120, *k, f"--specwatch-profiles={healthy}", gpu=g, baselines=merged))]
        for g in p.gpus()]
    p.stages = [records, [[Call("merge-records", _merge("g*-record-*.json", "baselines", 60))]], pairs]


def drift_repeat(p: Plan) -> None:
    """One pytest drift run per level per repetition (levels shuffled, seeded), judged by sensitivity."""
    k = ["-m", "perf", "tests/perf/test_throughput.py", "-k", f"drift and {p.s['server']}"]
    levels = p.floats("levels")
    lanes = []
    for g in p.gpus():
        order = levels[:]
        random.Random(f"{p.s['seed']}-{g}").shuffle(order)
        lanes.append([Repeat([p.pytest(f"g{g}-s{lv:g}", 120, *k, f"--specwatch-profiles={_slowed(p, lv)}", gpu=g,
                                       baselines="/tmp/specwatch-none") for lv in order], min_left=130)])
    groups = [a for lv in levels if lv for a in ("--slowed", f"@{p.rel(p.run)}/g*-s{lv:g}-*.json")]
    judge = Step("sensitivity", [p.py, "docs/validation/sensitivity.py", f"@{p.rel(p.run)}/g*-s0-*.json", *groups,
                                 "--metric", "decode_tok_s"], 120)
    p.stages = [lanes, [[judge]]]


def tuning_x2(p: Plan) -> None:
    sock = p.profile("small_tp2", "socket", defaults=(SOCKET_ENV,),
                     replace=(EXPECT_EFFECT, (r"^alternate_rounds = .*$", "alternate_rounds = 2")),
                     append=("interleave_runs = true", "tuning_min_effect = 0.03"))
    gate = ["-m", "perf", "tests/perf/test_gates.py", "-k", "tuned"]
    p.stages = [[[p.pytest("tp2-socket-small", 400, *gate, f"--specwatch-profiles={sock}",
                           "--specwatch-machine-class", "h200x2-socket"),
                  p.pytest("tp2-nvlink-small", 300, *gate, f"--specwatch-profiles={p.profile('small_tp2')}"),
                  p.pytest("tp2-socket-large", 300, *gate, f"--specwatch-profiles={p.profile('large_socket')}",
                           "--specwatch-machine-class", "h200x2-socket")]]]


def record_x1(p: Plan) -> None:
    small = p.profile("small")
    lanes = [[p.pytest(f"x1-g{g}", 420, "-m", "perf", "tests/perf", f"--specwatch-profiles={small}",
                       "--update-baselines", gpu=g, baselines=f"{p.rel(p.run)}/scratch-g{g}"),
              Repeat([p.pytest(f"x1-g{g}-s", 200, "-m", "perf", "tests/perf/test_throughput.py",
                               f"--specwatch-profiles={small}", "--update-baselines", gpu=g,
                               baselines=f"{p.rel(p.run)}/scratch-g{g}")], min_left=210)] for g in p.gpus()]
    p.stages = [lanes]


def record_x2(p: Plan) -> None:
    one = p.profile("small_tp2", "tp2-1round", replace=((r"^alternate_rounds = .*$", "alternate_rounds = 1"),))
    p.stages = [[[Repeat([p.pytest("x2-s", 240, "-m", "perf", "tests/perf", "-k", "not test_tuned",
                                   f"--specwatch-profiles={one}", "--update-baselines",
                                   baselines=f"{p.rel(p.run)}/scratch-x2")], min_left=250)]]]


def correctness(p: Plan) -> None:
    c = ["-m", "correctness", "tests/correctness"]
    p.stages = [[[p.pytest("correct-tp2", 330, *c, f"--specwatch-profiles={p.profile('small_tp2')}"),
                  p.pytest("correct-tp1", 240, *c, f"--specwatch-profiles={p.profile('small')}", gpu="0")]]]


def matrix_x2(p: Plan) -> None:
    p.stages = [[[p.pytest("matrix-tp2", 560, "-m", "perf", "tests/perf",
                           f"--specwatch-profiles={p.profile('small_tp2')}", "--update-baselines",
                           baselines=f"{p.rel(p.run)}/scratch")]]]


def allreduce(p: Plan) -> None:
    probe = ["--rounds", "6", "--timeout", "60"]
    p.stages = [[[p.cli("allreduce-small-nvlink", 290, "allreduce", p.profile("small_tp2"), *probe),
                  p.cli("allreduce-small-sock", 290, "allreduce", p.profile("small_tp2"), *probe, env=SOCKETS),
                  p.cli("allreduce-large-sock", 290, "allreduce", p.profile("large_socket"), *probe)]]]


def ab_x1(p: Plan) -> None:
    gpus = p.gpus()
    slow = Repeat([_ab(p, "ab-slow", "ab_base", "ab_slow", gpus[0], 400)], min_left=150)
    same = Repeat([_ab(p, "ab-same", "ab_base", "ab_base", gpus[-1], 400)], min_left=150)
    p.stages = [[[Call("round-history", _copy_round_history("h200x1"))]], [_yardsticks(p, "-start")],
                [[slow], [same]] if len(gpus) > 1 else [[Repeat([*slow.steps, *same.steps], min_left=150)]],
                [_yardsticks(p, "-end")]]


def ab_x2(p: Plan) -> None:
    p.stages = [[[Call("round-history", _copy_round_history("h200x2-nvlink"))]],
                [[Repeat([_ab(p, "ab-tp2-slow", "ab_base_tp2", "ab_slow_tp2", None, 320),
                          _ab(p, "ab-tp2-same", "ab_base_tp2", "ab_base_tp2", None, 320)], min_left=130)]]]


def _sweep(p: Plan, name: str, profile: str, timeout: int, gpu: str | None = None,
           env: dict[str, str] | None = None) -> Step:
    return p.pytest(name, timeout, "-m", "perf", "tests/perf/test_sweep.py", f"--specwatch-profiles={profile}",
                    gpu=gpu, env=env)


def sweep(p: Plan) -> None:
    g = p.gpus()
    p.stages = [[[_sweep(p, "sweep-small", p.profile("small_sweep"), 300, g[0])],
                 [_sweep(p, "sweep-large", p.profile("large_sweep"), 480, g[-1])]]]


def sweep_x2(p: Plan) -> None:
    small = p.profile("small_sweep", "small-sweep-tp2", defaults=("tp = 2",))
    large = p.profile("large_sweep", "large-sweep-tp2", defaults=("tp = 2",))
    p.stages = [[[_sweep(p, "sweep-small-tp2", small, 200), _sweep(p, "sweep-small-tp2-sock", small, 200, env=SOCKETS),
                  _sweep(p, "sweep-large-tp2", large, 400)]]]


def graphs(p: Plan) -> None:
    c = ["-m", "correctness", "tests/correctness/test_verify_graphs.py"]
    p.stages = [[[p.pytest("graphs-c16", 130, *c, f"--specwatch-profiles={p.profile('graph_bs4')}", gpu="0"),
                  Step("engine-above-captured", [p.py, "-m", "pytest", "-p", "no:cacheprovider", "-rA",
                                                 "tests/refserver/test_engine.py", "-k", "above_the_largest_captured"],
                       90, "0"),
                  p.pytest("graphs-c16-tp2", 130, *c,
                           f"--specwatch-profiles={p.profile('graph_bs4', 'graph-bs4-tp2', defaults=('tp = 2',))}")]]]


def drift_x2(p: Plan) -> None:
    p.stages = [[[p.pytest("drift-tp2", 330, "-m", "perf", "tests/perf/test_throughput.py", "-k", "drift",
                           f"--specwatch-profiles={p.profile('small_tp2')}")]]]


def steps_large(p: Plan) -> None:
    p.stages = [[[Step("steps-large", [p.py, "benchmarks/refserver_steps.py", "--preset", "ref-large",
                                       "--num-steps", "2", "--max-new", "128", "--iters", "20", "--extra-presets",
                                       "ref-large-perfect,ref-large-poor", "--out", f"{p.rel(p.run)}/steps-large.json"],
                       170, "0")]]]


def yardstick(p: Plan) -> None:
    p.stages = [[_yardsticks(p)]]


def fresh_x1(p: Plan) -> None:
    """A machine the baselines never saw, as a user's run next week: yardstick, drift, yardstick."""
    k = ["-m", "perf", "tests/perf/test_throughput.py", "-k", f"drift and {p.s['server']}"]
    gpu = p.gpus()[0]
    p.stages = [[_yardsticks(p, "-start")[:1]],
                [[p.pytest("fresh-drift", 120, *k, f"--specwatch-profiles={p.profile(p.s['profile'])}", gpu=gpu)]],
                [_yardsticks(p, "-end")[:1]]]




def _sglang_setup(p: Plan, *more: str) -> Step:
    return Step("sglang-setup", [p.py, "docs/validation/sglang_kit.py", "setup", *more], 120)


def sglang_x1(p: Plan) -> None:
    """Real SGLang 0.5.16 + EAGLE-3 on one GPU: both suites at once (two lanes, one GPU), recording baselines."""
    prof, scratch = p.s["sglang_profile"], f"{p.rel(p.run)}/baselines"
    p.stages = [[[_sglang_setup(p)]],
                [[p.pytest("sgl-correctness", 560, "-m", "correctness", "tests/correctness",
                           f"--specwatch-profiles={prof}", gpu="0")],
                 [p.pytest("sgl-perf", 560, "-m", "perf", "tests/perf", f"--specwatch-profiles={prof}",
                           "--update-baselines", gpu="0", baselines=scratch)]]]


def sglang_faults_x1(p: Plan) -> None:
    """Real SGLang 0.5.16 + EAGLE-3, the case study's faults from outside its code, three lanes on one GPU."""
    prof = p.s["sglang_profile"]
    base, slow = "docs/validation/sglang/eagle3-base.toml", "docs/validation/sglang/eagle3-slow.toml"
    recorded = p.s["sglang_baselines"]
    ab = p.cli("sgl-ab-slow", 330, "ab", "--base-profile", base, "--head-profile", slow, "--rounds", "2",
               "--max-rounds", "3", "--memo", "/tmp/specwatch-abmemo-sgl", "--", "-m", "perf",
               "tests/perf/test_throughput.py", "-k", "drift and decode", "-p", "no:cacheprovider", "-q",
               "--specwatch-baseline-dir=/tmp/specwatch-none", "--specwatch-yardstick=off",
               "--specwatch-report-dir=/tmp/specwatch-reports-sgl-ab", gpu="0")
    p.stages = [[[_sglang_setup(p)]],
                [[p.pytest("sgl-correctness-a", 540, "-m", "correctness", "tests/correctness/test_accept_length.py",
                           "tests/correctness/test_faults.py", "tests/correctness/test_env_propagation.py",
                           "tests/correctness/test_lossless.py", "tests/correctness/test_near_ties.py",
                           f"--specwatch-profiles={prof}", gpu="0")],
                 [p.pytest("sgl-graphs", 400, "-m", "correctness", "tests/correctness/test_verify_graphs.py",
                           f"--specwatch-profiles={prof}", gpu="0"),
                  Step("sgl-capture", [p.py, "docs/validation/sglang_capture.py", prof, "sgl-eagle3",
                                       f"{p.rel(p.run)}/capture"], 150, "0")],
                 [p.pytest("sgl-drift-slow", 200, "-m", "perf", "tests/perf/test_throughput.py", "-k",
                           "drift and sgl-eagle3 and not untuned", f"--specwatch-profiles={slow}", gpu="0",
                           baselines=recorded), ab]]]


def sglang_drift_x1(p: Plan) -> None:
    """Real SGLang 0.5.16 + EAGLE-3 alone on one GPU: record a baseline session, then the server slowed from
    outside its code (``sglang_sleep`` GPU cycles after every graph replay) judged against it."""
    base, scratch = "docs/validation/sglang/eagle3-base.toml", f"{p.rel(p.run)}/baselines"
    slow = p.profile("docs/validation/sglang/eagle3-slow.toml", "eagle3-slow",
                     replace=((r'SPECWATCH_SLOWDOWN_GPU_CYCLES = "\d+"',
                               f'SPECWATCH_SLOWDOWN_GPU_CYCLES = "{p.s["sglang_sleep"]}"'),))
    k = ["-m", "perf", "tests/perf/test_throughput.py", "-k", "drift", "--specwatch-yardstick=off"]
    p.stages = [[[_sglang_setup(p),
                  p.pytest("sgl-record", 150, *k, f"--specwatch-profiles={base}", "--update-baselines", gpu="0",
                           baselines=scratch),
                  p.pytest("sgl-slowed", 150, *k, f"--specwatch-profiles={slow}", gpu="0", baselines=scratch)]]]


SGL_BASE = "docs/validation/sglang/eagle3-base.toml"
SGL8B_BASE = "docs/validation/sglang/eagle3-8b-base.toml"
SGL8B_SLOW8 = "docs/validation/sglang/eagle3-8b-slow8.toml"
SGL8B_PERF = "docs/validation/sglang/8b-perf.toml"
SGL8B_V0517 = "docs/validation/sglang/eagle3-8b-0.5.17.toml"
SGL8B_MODELS = "/tmp/sgl/models8b"  # the 8b profiles' model and draft paths
SGL_STORE = "docs/validation/sglang/baselines"  # the real-SGLang validation store: baselines and round spread


def _sgl_ab(p: Plan, name: str, head: str, timeout: int, max_rounds: str, base: str = SGL_BASE,
            round_history: str | None = None, baselines: str = "/tmp/specwatch-none",
            pytest_args: tuple[str, ...] = ()) -> Step:
    """``specwatch ab`` of a healthy real-SGLang EAGLE-3 server (``base``) against ``head``; ``--resume``: a later
    call on the same warm machine continues a run the call limit stopped. ``round_history``: ab's prior (default:
    ab's own, baselines/); ``baselines`` and ``pytest_args``: the measuring pytest runs' baseline folder and more
    arguments (``--update-baselines`` records a session per measurement)."""
    history = ("--round-history", round_history) if round_history else ()
    return p.cli(name, timeout, "ab", "--base-profile", base,
                 "--head-profile", head, "--rounds", "2", "--max-rounds", max_rounds, *history,
                 "--memo", f"/tmp/specwatch-abmemo-{name}", "--resume", "--", "-m", "perf",
                 "tests/perf/test_throughput.py",
                 "-k", "drift and decode", "-p", "no:cacheprovider", "-q",
                 f"--specwatch-baseline-dir={baselines}", *pytest_args,
                 "--specwatch-yardstick=off", f"--specwatch-report-dir=/tmp/specwatch-reports-{name}", gpu="0")


def sglang_ab_x1(p: Plan) -> None:
    """Real SGLang 0.5.16 + EAGLE-3 alone on one GPU: the concurrency-16 row (captured up to 16), then
    ``specwatch ab`` of the healthy server against one slowed from outside its code, to a verdict."""
    prof = p.s["sglang_profile"]
    p.stages = [[[_sglang_setup(p),
                  p.pytest("sgl-graphs-c16", 150, "-m", "correctness", "tests/correctness/test_verify_graphs.py", "-k",
                           "concurrency_16", f"--specwatch-profiles={prof}", gpu="0"),
                  _sgl_ab(p, "sgl-ab-slow", "docs/validation/sglang/eagle3-slow.toml", 420, "3")]]]


def sglang_perf_x1(p: Plan) -> None:
    """Real SGLang 0.5.16 + EAGLE-3 alone on one GPU: ``pytest -m perf`` against the baselines recorded on it
    (no slowdown: every gate should pass or skip with its reason)."""
    prof = p.s["sglang_profile"]
    p.stages = [[[_sglang_setup(p),
                  p.pytest("sgl-perf", 420, "-m", "perf", "tests/perf", f"--specwatch-profiles={prof}", gpu="0",
                           baselines=p.s["sglang_baselines"])]]]


def sglang_versions_x1(p: Plan) -> None:
    """Real SGLang alone on one GPU: ``specwatch ab`` of 0.5.16 (base) against 0.5.17 (head), EAGLE-3 with CUDA
    graphs, both on torch 2.11: did upgrading SGLang slow EAGLE-3? The 0.5.17 site is 0.5.16's kit with the
    overlay (sglang 0.5.17, flashinfer 0.6.15.post1): a call carries one kit, so run this right after a call that
    set up 0.5.16 on the same warm machine, carrying ``.kit/sglang-0.5.17-overlay.tar.xz``."""
    p.stages = [[[_sglang_setup(p, "--if-missing"),
                  Step("sglang-overlay", [p.py, "docs/validation/sglang_kit.py", "overlay"], 120),
                  _sgl_ab(p, "sgl-ab-versions", "docs/validation/sglang/eagle3-0.5.17.toml", 540, "3")]]]


def sglang_aa_x1(p: Plan) -> None:
    """Real SGLang 0.5.16 alone on one GPU: ``specwatch ab`` of the healthy EAGLE-3 server against itself, judged
    with the round spread of its own engine (the rule that replaced the borrowed reference-server spread)."""
    p.stages = [[[_sglang_setup(p, "--if-missing"),
                  _sgl_ab(p, "sgl-ab-same", "docs/validation/sglang/eagle3-base.toml", 420, "2")]]]


def _sgl8b_models(p: Plan) -> Step:
    """The 8b target and draft (docs/validation/sglang_models.py --shape 8b), drawn on the GPU; kept when an earlier
    call on this warm machine made them."""
    return Step("sgl8b-models", [p.py, "docs/validation/sglang_models.py", "--shape", "8b", SGL8B_MODELS,
                                 "--if-missing"], 120, "0")


def _seed_round_spread(dest: str, cls: str = "h200x1") -> Callable[[Path, dict[str, str]], str]:
    """The real-SGLang store's round spread into ``dest`` (a baseline folder in the run), so that the drift gate
    judging against it has the seeded boot spread of its key."""

    def copy(run: Path, env: dict[str, str]) -> str:
        (ROOT / dest / cls).mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / SGL_STORE / cls / "round-spread.json", ROOT / dest / cls / "round-spread.json")
        return f"{SGL_STORE}/{cls}/round-spread.json copied into {dest}/{cls}/"

    return copy


def _keep_baselines(src: str, dest: str) -> Callable[[Path, dict[str, str]], str]:
    """The run's baseline folder to ``dest`` outside the tree (a later call on the same warm machine reads it: /tmp
    is kept between calls, the tree is synced again)."""

    def keep(run: Path, env: dict[str, str]) -> str:
        if not (ROOT / src).is_dir():
            raise OSError(f"{src}: nothing recorded")
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(ROOT / src, dest)
        return f"{src} copied to {dest} ({len(list(Path(dest).rglob('*.json')))} file(s))"

    return keep


def sglang_8b_x1(p: Plan) -> None:
    """Real SGLang 0.5.16 + EAGLE-3 at Llama-3.1-8B's sizes alone on one GPU: an A/A ``specwatch ab`` of the healthy
    server under its seeded boot spread whose four measurements also record baseline sessions (with the seeded
    round spread beside them), kept in ``sgl8b_baselines`` (/tmp survives between calls on a warm machine, the tree
    does not) before the server slowed about 8% from outside its code is judged by the drift gate against them
    (expected: a regression). About 60 s of setup on a fresh machine, 4 boots of 75-110 s, one more for the drift."""
    scratch = f"{p.rel(p.run)}/baselines"
    k = ["-m", "perf", "tests/perf/test_throughput.py", "-k", "drift", "--specwatch-yardstick=off"]
    p.stages = [[[_sglang_setup(p, "--if-missing"), _sgl8b_models(p),
                  Call("round-spread", _seed_round_spread(scratch)),
                  _sgl_ab(p, "sgl8b-ab-same", SGL8B_BASE, 400, "2", base=SGL8B_BASE, round_history=SGL_STORE,
                          baselines=scratch, pytest_args=("--update-baselines",)),
                  Call("keep-baselines", _keep_baselines(scratch, p.s["sgl8b_baselines"])),
                  p.pytest("sgl8b-drift-slow8", 150, *k, f"--specwatch-profiles={SGL8B_SLOW8}", gpu="0",
                           baselines=scratch)]]]


def sglang_8b_ab_x1(p: Plan) -> None:
    """Real SGLang 0.5.16 + EAGLE-3 at Llama-3.1-8B's sizes alone on one GPU: ``specwatch ab`` of the healthy server
    against one slowed about 3% from outside its code, under the seeded boot spread (resumable: a second call on the
    warm machine continues it); then, if time is left, the healthy server's drift against sglang-8b-x1's baselines."""
    p.stages = [[[_sglang_setup(p, "--if-missing"), _sgl8b_models(p),
                  _sgl_ab(p, "sgl8b-ab-slow3", p.s["sgl8b_head"], 560, "3", base=SGL8B_BASE,
                          round_history=SGL_STORE),
                  Repeat([_sgl8b_perf(p)], min_left=300, limit=1)]]]


def _sgl8b_perf(p: Plan) -> Step:
    """``pytest -m perf tests/perf`` of the 8b plain and EAGLE-3 servers (docs/validation/sglang/8b-perf.toml) against
    sglang-8b-x1's baselines, with the seeded round spread beside them (the speculation gate's prior)."""
    return p.pytest("sgl8b-perf", 330, "-m", "perf", "tests/perf", "--specwatch-yardstick=off",
                    f"--specwatch-profiles={SGL8B_PERF}", gpu="0", baselines=p.s["sgl8b_baselines"])


def sglang_8b_bisect_x1(p: Plan) -> None:
    """Real SGLang 0.5.16 at Llama-3.1-8B's sizes alone on one GPU: ``specwatch bisect`` over a short history on top of
    SGLang's own Python sources (docs/validation/sglang_history.py: two harmless commits, one that cannot boot, its
    fix, the commit that sends one-request verify batches to the eager path, one more): it must name that commit and
    skip the broken one. Each step is an ab of 1-3 rounds against the good revision under the 8B shape's recorded
    round spread, at a 10% tolerance: the bad end runs 68% slower (2026-12-04), and at the default 1.6% a healthy
    step needs 3 rounds (6 boots of ~88 s), at 10% one round. The bad end and about three steps: two chained calls
    on one warm machine, the memo in /tmp carrying the first call's rounds over (any judging settings reuse them)."""
    history = "/tmp/sgl-history"
    p.stages = [[[_sglang_setup(p, "--if-missing"), _sgl8b_models(p),
                  Step("sgl-history", [p.py, "docs/validation/sglang_history.py", "/tmp/sgl/site", history], 120),
                  p.cli("sgl8b-bisect", 560, "bisect", "--repo", history, "--good", "HEAD~6", "--bad", "HEAD",
                        "--workdir", ".", "--rounds", "1", "--max-rounds", "3", "--tolerance", "0.1",
                        "--metric", "decode_tok_s",
                        "--round-history", SGL_STORE, "--memo", "/tmp/specwatch-bisect-sgl8b", "--", "-m", "perf",
                        "tests/perf/test_throughput.py", "-k", "drift and decode", "-p", "no:cacheprovider", "-q",
                        "--specwatch-profiles={checkout}/profile-8b.toml",
                        "--specwatch-baseline-dir=/tmp/specwatch-none", "--specwatch-yardstick=off", gpu="0")]]]


def sglang_8b_versions_x1(p: Plan) -> None:
    """Real SGLang at Llama-3.1-8B's sizes alone on one GPU: ``specwatch ab`` of 0.5.16 (base) against 0.5.17
    (head), EAGLE-3 with CUDA graphs, under the 8B shape's recorded round spread: did upgrading SGLang slow EAGLE-3?
    The 0.5.17 site is 0.5.16's kit with the overlay: run it on a warm machine that set up 0.5.16, carrying
    ``.kit/sglang-0.5.17-overlay.tar.xz`` (a later call need not: the site is kept); resumable across calls."""
    p.stages = [[[_sglang_setup(p, "--if-missing"), _sgl8b_models(p),
                  Step("sglang-overlay", [p.py, "docs/validation/sglang_kit.py", "overlay", "--if-missing"], 120),
                  _sgl_ab(p, "sgl8b-ab-versions", SGL8B_V0517, 560, "2", base=SGL8B_BASE, round_history=SGL_STORE)]]]


def sglang_8b_perf_x1(p: Plan) -> None:
    """Real SGLang 0.5.16 at Llama-3.1-8B's sizes alone on one GPU: the whole perf suite of the plain and EAGLE-3
    servers against sglang-8b-x1's baselines (kept in ``sgl8b_baselines`` on the warm machine): healthy drift, the
    speculation gate (EAGLE-3 should beat plain decoding at this shape) and the speculation-health gates."""
    p.stages = [[[_sglang_setup(p, "--if-missing"), _sgl8b_models(p), _sgl8b_perf(p)]]]


SGL8B_STOPFIX = "docs/validation/sglang/8b-stopfix.toml"
SGL8B_Q0 = "/tmp/sgl/models8b-q0"  # the 8b plan with a draft whose first guess is never right (--draft-quality 0)


def sglang_8b_stops_x1(p: Plan) -> None:
    """Real SGLang 0.5.16 at Llama-3.1-8B's sizes alone on one GPU, nothing injected: the stops check on the plain and
    EAGLE-3 servers as released (0.5.16 tests the max_new_tokens cap before the stop) and, in a lane beside it, on the
    same sources with the ordering of SGLang's fix (docs/validation/sglang_history.py --history stopfix); in a third
    lane the phase-graph check on the healthy EAGLE-3 server and on one started with the engine's own switch
    SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH=1, then a capture of a draft whose first guess is never right
    (--draft-quality 0): the raw data the draft checks read. Three servers at most at once on the GPU (13 GiB of
    weights and a 4 GiB KV pool each)."""
    run = p.rel(p.run)
    q0 = p.profile(SGL8B_BASE, "eagle3-8b-q0", replace=(("/tmp/sgl/models8b/", SGL8B_Q0 + "/"),))
    p.stages = [[[_sglang_setup(p, "--if-missing"), _sgl8b_models(p),
                  Step("sgl-stopfix", [p.py, "docs/validation/sglang_history.py", "/tmp/sgl/site", "/tmp/sgl-stopfix",
                                       "--history", "stopfix"], 60)],
                 [Step("sgl8b-models-q0", [p.py, "docs/validation/sglang_models.py", "--shape", "8b", SGL8B_Q0,
                                           "--draft-quality", "0", "--if-missing"], 150, "0")]],
                [[p.pytest("sgl8b-stops", 400, "-m", "correctness", "tests/correctness/test_stops.py",
                           f"--specwatch-profiles={SGL8B_PERF}", gpu="0")],
                 [p.pytest("sgl8b-stops-fixed", 400, "-m", "correctness", "tests/correctness/test_stops.py",
                           f"--specwatch-profiles={SGL8B_STOPFIX}", gpu="0")],
                 [p.pytest("sgl8b-phase-graphs", 330, "-m", "correctness", "tests/correctness/test_phase_graphs.py",
                           f"--specwatch-profiles={SGL8B_PERF}", gpu="0"),
                  Step("sgl8b-capture-q0", [p.py, "docs/validation/sglang_capture.py", q0, "sgl8b-eagle3",
                                            f"{run}/capture-q0"], 200, "0")]]]


def sglang_8b_spec_costs_x1(p: Plan) -> None:
    """Real SGLang 0.5.16 at Llama-3.1-8B's sizes alone on one GPU, three lanes: the stops check on the plain and
    EAGLE-3 servers as released, the same on the sources with the fix's ordering (--history stopfix), and the
    draft-alive checks (the healthy EAGLE-3 server; one whose launcher drops every --speculative-* flag; one whose
    draft's first guess is never right, made with --draft-quality 0 for the same target). Two or three boots a lane,
    one plain server first in the stops lanes (the probes come from its output)."""
    dead = {"SPECWATCH_DEAD_DRAFT": SGL8B_Q0 + "/eagle3"}
    p.stages = [[[_sglang_setup(p, "--if-missing"), _sgl8b_models(p),
                  Step("sgl-stopfix", [p.py, "docs/validation/sglang_history.py", "/tmp/sgl/site", "/tmp/sgl-stopfix",
                                       "--history", "stopfix"], 60)],
                 [Step("sgl8b-models-q0", [p.py, "docs/validation/sglang_models.py", "--shape", "8b", SGL8B_Q0,
                                           "--draft-quality", "0", "--if-missing"], 150, "0")]],
                [[p.pytest("sgl8b-stops", 480, "-m", "correctness", "tests/correctness/test_stops.py",
                           f"--specwatch-profiles={SGL8B_PERF}", gpu="0")],
                 [p.pytest("sgl8b-stops-fixed", 480, "-m", "correctness", "tests/correctness/test_stops.py",
                           f"--specwatch-profiles={SGL8B_STOPFIX}", gpu="0")],
                 [p.pytest("sgl8b-draft-alive", 480, "-m", "correctness", "tests/correctness/test_draft_alive.py",
                           f"--specwatch-profiles={SGL8B_PERF}", gpu="0", env=dead)]]]


def sglang_8b_perf_costs_x1(p: Plan) -> None:
    """Real SGLang 0.5.16 at Llama-3.1-8B's sizes alone on one GPU: the TTFT gate (EAGLE-3 against plain decoding,
    rounds of fresh boots) and the prefix-reuse gate (a multi-turn workload on both servers) of 8b-perf.toml."""
    p.stages = [[[_sglang_setup(p, "--if-missing"), _sgl8b_models(p),
                  p.pytest("sgl8b-perf-costs", 540, "-m", "perf", "tests/perf/test_gates.py",
                           "tests/perf/test_prefix_reuse.py", "-k", "ttft or prefix", "--specwatch-yardstick=off",
                           "--specwatch-baseline-dir=/tmp/specwatch-none", f"--specwatch-profiles={SGL8B_PERF}",
                           gpu="0")]]]


SGL8B_FA3 = "docs/validation/sglang/eagle3-8b-fa3.toml"
SGL8B_EAGER_EXTEND = "docs/validation/sglang/eagle3-8b-eager-extend.toml"


def sglang_8b_extend_x1(p: Plan) -> None:
    """Real SGLang 0.5.16 + EAGLE-3 at Llama-3.1-8B's sizes alone on one GPU: ``specwatch ab`` of the healthy server
    (triton attention, every phase graphed) against the same server with SGLang's own switch
    SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH=1: what an eager draft extend costs, the backend held fixed (resumable).
    The call that carries the kit; sglang-8b-fa3-x1 follows on the same warm machine."""
    p.stages = [[[_sglang_setup(p, "--if-missing"), _sgl8b_models(p),
                  _sgl_ab(p, "sgl8b-ab-eager-extend", SGL8B_EAGER_EXTEND, 480, "2", base=SGL8B_BASE,
                          round_history=SGL_STORE)]]]


def sglang_8b_fa3_x1(p: Plan) -> None:
    """Real SGLang 0.5.16 + EAGLE-3 at Llama-3.1-8B's sizes alone on one GPU with the attention backend SGLang picks by
    itself (FA3 on Hopper, topk 1): sgl-kernel's FA3 installed into the kit (docs/validation/sglang_fa3.py; carry
    .kit/sgl-fa3-hdim128.tar.xz on a warm machine a call with the kit set up), the phase-graph check on that server
    (nothing injected: does it graph draft extend?), then ``specwatch ab`` of the triton server (draft extend
    graphed) against it (resumable)."""
    p.stages = [[[_sglang_setup(p, "--if-missing"), _sgl8b_models(p),
                  Step("sgl-fa3", [p.py, "docs/validation/sglang_fa3.py", "install"], 60),
                  Step("sgl-fa3-probe", [p.py, "docs/validation/sglang_fa3.py", "probe"], 90, "0",
                       {"PYTHONPATH": "/tmp/sgl/site", "CUDA_LAUNCH_BLOCKING": "1"}),
                  p.pytest("sgl8b-phase-graphs-fa3", 200, "-m", "correctness", "tests/correctness/test_phase_graphs.py",
                           "-k", "every_speculative_phase", f"--specwatch-profiles={SGL8B_FA3}", gpu="0"),
                  _sgl_ab(p, "sgl8b-ab-fa3", SGL8B_FA3, 420, p.s["max_rounds_fa3"], base=SGL8B_BASE,
                          round_history=SGL_STORE)]]]


def sglang_8b_fa3_decode_x1(p: Plan) -> None:
    """Real SGLang 0.5.16 + EAGLE-3 at Llama-3.1-8B's sizes with SGLang's default backend on Hopper (FA3), its prefill
    CUDA graphs off (``--cuda-graph-backend-prefill disabled``: the capture that failed with the slim kernels, and
    the engine's own advice in that failure): the phase-graph check reads which decode-time phases it graphed, then
    ``specwatch ab`` of triton (draft extend graphed) against it, both with prefill graphs off, so that the attention
    backend is the one difference. One call on a fresh machine carrying the kit and the slim FA3 kernels together
    (the tree kept small for it); the ab resumes on the same warm machine if the call's limit cuts it."""
    no_prefill = ((r'extra_args = \["--sampling-backend"',
                   'extra_args = ["--cuda-graph-backend-prefill", "disabled", "--sampling-backend"'),)
    fa3 = p.profile(SGL8B_FA3, "eagle3-8b-fa3-no-prefill-graph", replace=no_prefill)
    triton = p.profile(SGL8B_BASE, "eagle3-8b-triton-no-prefill-graph",
                       replace=((r'extra_args = \["--attention-backend", "triton",',
                                 'extra_args = ["--attention-backend", "triton", "--cuda-graph-backend-prefill", '
                                 '"disabled",'),))
    p.stages = [[[_sglang_setup(p, "--if-missing"), _sgl8b_models(p),
                  Step("sgl-fa3", [p.py, "docs/validation/sglang_fa3.py", "install"], 60),
                  p.pytest("sgl8b-phase-graphs-fa3", 200, "-m", "correctness", "tests/correctness/test_phase_graphs.py",
                           "-k", "every_speculative_phase", f"--specwatch-profiles={fa3}", gpu="0"),
                  _sgl_ab(p, "sgl8b-ab-fa3-decode", fa3, 400, p.s["max_rounds_fa3"], base=triton,
                          round_history=SGL_STORE)]]]


def sglang_8b_acceptance_x1(p: Plan) -> None:
    """Real SGLang 0.5.16 at Llama-3.1-8B's sizes alone on one GPU, healthy servers, one pytest run: acceptance over
    the cache's life on the EAGLE-3 server (8 prompts x 512 ids, 128 tokens each, before; after 11 unrelated prompts x
    4,082 tokens, 1.37x the KV pool of 32,768 that --max-total-tokens sets; after /flush_cache), its soak (6
    repetitions, each after 5 x 4,082 unrelated tokens), then the context-length table (128, 1,024, 2,048 and 4,096
    input tokens, the last cut to 3,946 by context_len 4,096) on the EAGLE-3 server, still up, and the plain one,
    gated up to 4,096 tokens. Two boots of about 60 s (in file order: a random order could boot a third); about 60 s
    of requests."""
    p.stages = [[[_sglang_setup(p, "--if-missing"), _sgl8b_models(p),
                  p.pytest("sgl8b-acceptance", 280, "-m", "correctness or perf", "-p", "no:randomly",
                           "tests/correctness/test_acceptance_cache_life.py", "tests/perf/test_context_length.py",
                           "--specwatch-yardstick=off", "--specwatch-baseline-dir=/tmp/specwatch-none",
                           "--specwatch-acceptance-soak=6", "--specwatch-context-gate-until=4096",
                           f"--specwatch-profiles={SGL8B_PERF}", gpu="0")]]]


SGL8B_VARY = "/tmp/sgl/models8b-vary"  # a varying draft for the 8b target: engine-wide 1.50, single requests 1.02-2.00
SGL8B_CTX = "/tmp/sgl/models8b-ctx"  # a draft right for contexts under 1,536 tokens, wrong past them (issue 6783)
SGL8B_Q92 = "/tmp/sgl/models8b-q92"  # a varying draft at the seeds' 1.92 (single requests 1.74-2.00)
ACCEPT_TESTS = ("tests/correctness/test_accept_length.py", "tests/correctness/test_acceptance_concurrency.py")


def _varying_draft(p: Plan, name: str, dest: str, quality: str) -> Step:
    """A varying EAGLE-3 draft (docs/validation/sglang_models.py --draft-profile varying) for the 8b target in
    SGL8B_MODELS, written beside it (the target is read, not copied); kept when an earlier call made the same."""
    return Step(name, [p.py, "docs/validation/sglang_models.py", "--shape", "8b", dest, "--draft-profile", "varying",
                       "--draft-quality", quality, "--target-from", SGL8B_MODELS, "--if-missing"], 120, "0")


def sglang_8b_accept_x1(p: Plan) -> None:
    """Real SGLang 0.5.16 at Llama-3.1-8B's sizes alone on one GPU, nothing injected: two EAGLE-3 drafts whose
    acceptance varies per prompt and position (--draft-profile varying: engine-wide 1.50 with single requests from
    1.02 to 2.00, and the seeds' 1.92), one server each, in two lanes: the accept-length check (every source and the
    averaging each uses), the accept-length-by-concurrency check at c=1, 4, 9 and 16 (each prompt's counts alone
    against the ones its draft was built for, made.json), and on the 1.92 server the case study's claimed 0.92. The
    profiles capture bs 1-8, so c=9 (one above) and c=16 verify eagerly: not an acceptance fault, and the check must
    pass there; a batch-dependent acceptance fault cannot be built into weights (each row of a batch is computed
    alone), so the failing side is the reference server's --ref-fault-batch-draft (CI). Two boots at once of
    75-110 s, then about 30 s of checks each."""
    vary = p.profile(SGL8B_PERF, "8b-perf-vary", replace=(("/tmp/sgl/models8b/eagle3", SGL8B_VARY + "/eagle3"),))
    q92 = p.profile(SGL8B_PERF, "8b-perf-q92", replace=(("/tmp/sgl/models8b/eagle3", SGL8B_Q92 + "/eagle3"),))
    expect = "SPECWATCH_EXPECTED_ACCEPT"
    p.stages = [[[_sglang_setup(p, "--if-missing"), _sgl8b_models(p),
                  _varying_draft(p, "sgl8b-models-vary", SGL8B_VARY, "0.5"),
                  _varying_draft(p, "sgl8b-models-q92", SGL8B_Q92, "0.92")]],
                [[p.pytest("sgl8b-accept-vary", 400, "-m", "correctness", *ACCEPT_TESTS,
                           f"--specwatch-profiles={vary}", gpu="0", env={expect: f"{SGL8B_VARY}/made.json"})],
                 [p.pytest("sgl8b-accept-q92", 400, "-m", "correctness", *ACCEPT_TESTS,
                           "tests/correctness/test_faults.py::test_claimed_092_disagrees_with_the_live_sources",
                           f"--specwatch-profiles={q92}", gpu="0", env={expect: f"{SGL8B_Q92}/made.json"})]]]


#: the SGLang releases sglang-8b-releases-x1 runs, oldest first: 0.5.16's kit, the others an overlay on it
#: (docs/validation/sglang_kit.py, VERSION_PINS); each release's EAGLE-3 profile
SGL_RELEASES: dict[str, str] = {
    "0.5.12": "docs/validation/sglang/eagle3-8b-0.5.12.toml",
    "0.5.13": "docs/validation/sglang/eagle3-8b-0.5.13.toml",
    "0.5.14": "docs/validation/sglang/eagle3-8b-0.5.14.toml",
    "0.5.15.post1": "docs/validation/sglang/eagle3-8b-0.5.15.post1.toml",
    "0.5.16": SGL8B_BASE,
    "0.5.17": SGL8B_V0517,
}
SGL_KIT_RELEASE = "0.5.16"
SGL_OLD_GRAPH_FLAG = ("0.5.12", "0.5.13")  # --cuda-graph-max-bs only (no --cuda-graph-max-bs-decode)


def _release_profile(p: Plan, release: str, server: str) -> str:
    """The 8b profile of ``server`` ("eagle3" or "plain") on SGLang ``release``: the committed EAGLE-3 one, or
    plain-8b.toml with the release's site (and, for 0.5.12 and 0.5.13, the graph limit in the flag they know)."""
    if server == "eagle3":
        return SGL8B_BASE if release == SGL_KIT_RELEASE else SGL_RELEASES[release]
    if release == SGL_KIT_RELEASE:
        return "docs/validation/sglang/plain-8b.toml"
    replace = [(r'^pythonpath = \["/tmp/sgl/site"\]', f'pythonpath = ["/tmp/sgl-{release}/site"]')]
    replace += [(r'^(extra_env = \{.*) \}$', rf'\1, {k} = "{v}" }}') for k, v in sglang_kit.server_env(release).items()]
    if release in SGL_OLD_GRAPH_FLAG:
        replace += [(r"^cuda_graph_max_bs = 8\n", ""),
                    (r'^extra_args = \[', 'extra_args = ["--cuda-graph-max-bs", "8", ')]
    return p.profile("docs/validation/sglang/plain-8b.toml", f"plain-8b-{release}", replace=tuple(replace))


def sglang_8b_releases_x1(p: Plan) -> None:
    """Real SGLang at Llama-3.1-8B's sizes alone on one GPU: ``specwatch ab`` of one SGLang release (setting
    ``sgl_release_base``) against another (``sgl_release_head``; consecutive ones of :data:`SGL_RELEASES`), the
    EAGLE-3 or the plain server (``sgl_release_server``), under the 8B shape's recorded round spread. Every release but
    0.5.16 is an overlay on 0.5.16's kit: a call carries at most one overlay beside the tree, and the sites stay in
    /tmp on a warm machine, so the kit comes in a call before and each overlay in its own call (``--if-missing``
    keeps the kit, the models and each site an earlier call made); resumable across calls. It judges the keys and
    runs the checks of the ladder (``LADDER_METRICS``, ``LADDER_TESTS``): the second ``ab`` that confirms a ladder's
    finding on another machine."""
    base, head, server = p.s["sgl_release_base"], p.s["sgl_release_head"], p.s["sgl_release_server"]
    for key, value in (("sgl_release_base", base), ("sgl_release_head", head)):
        if value not in SGL_RELEASES:
            raise SystemExit(f"harness: {key}={value}: expected one of {', '.join(SGL_RELEASES)}")
    if base == head or server not in ("eagle3", "plain"):
        raise SystemExit(f"harness: sgl_release_base and sgl_release_head must differ ({base}), "
                         f"sgl_release_server must be eagle3 or plain ({server})")
    kit = "docs/validation/sglang_kit.py"
    overlays = [Step(f"sglang-overlay-{r}", [p.py, kit, "overlay", "--version", r, "--if-missing"], 120)
                for r in (base, head) if r != SGL_KIT_RELEASE]
    sites = {r: "/tmp/sgl/site" if r == SGL_KIT_RELEASE else f"/tmp/sgl-{r}/site" for r in (base, head)}
    imports = [Step(f"sglang-versions-{r}", [p.py, kit, "versions", site], 120, "0") for r, site in sites.items()]
    name = f"sgl8b-ab-{server}-{base}-{head}"
    ab = p.cli(name, 560, "ab", "--base-profile", _release_profile(p, base, server), "--head-profile",
               _release_profile(p, head, server), "--rounds", "2", "--max-rounds", "2", "--round-history", SGL_STORE,
               "--memo", f"/tmp/specwatch-abmemo-{name}", "--resume", "--json", f"{p.rel(p.run)}/{name}.json",
               *(a for m in LADDER_METRICS for a in ("--metric", m)), "--", *LADDER_TESTS, "-p", "no:cacheprovider",
               "-q", "--specwatch-baseline-dir=/tmp/specwatch-none", "--specwatch-yardstick=off",
               f"--specwatch-report-dir=/tmp/specwatch-reports-{name}", gpu="0")
    p.stages = [[[_sglang_setup(p, "--if-missing"), _sgl8b_models(p), *overlays, *imports, ab]]]


#: the release chain sglang-8b-ladder-*-x1 judges, oldest first, and its calls: the overlays each call carries
#: (newest first, as round 1 boots them, from 0.5.16's kit down) and the measurements of the ladder's order done
#: by its end (None: to the verdicts). Round 1 boots 0.5.16, 0.5.15.post1, ..., 0.5.12, round 2 back up.
SGL_LADDER = ("0.5.12", "0.5.13", "0.5.14", "0.5.15.post1", "0.5.16")
SGL_LADDER_CALLS: dict[int, tuple[tuple[str, ...], int | None]] = {
    1: ((), 1), 2: (("0.5.15.post1", "0.5.14"), 3), 3: (("0.5.13", "0.5.12"), 6), 4: ((), None)}


#: the keys each release pair is judged on: throughput, and speculation's health from the same runs (accept length,
#: the verify cycle's cost); the plain server has only the first two
LADDER_METRICS = ("output_tok_s", "decode_tok_s", "accept_length", "cycle_ms")


#: what each boot of the ladder runs: the drift measurement, then the checks that read the server it measured (its
#: capture lines, the accept-length sources of that measurement, the draft's acceptance): no request or boot of their
#: own, so each release's pass or fail comes beside its numbers (the stops check needs a plain server: not here)
LADDER_TESTS = ("-m", "perf or correctness", "tests/perf/test_throughput.py", "tests/correctness/test_phase_graphs.py",
                "tests/correctness/test_accept_length.py", "tests/correctness/test_draft_alive.py", "-k",
                "(drift and decode) or every_speculative_phase_is_graphed or sources_reconcile or "
                "every_value_within_bounds or histogram_identities or the_draft_is_alive")


def _sglang_8b_ladder(p: Plan, call: int) -> None:
    """Call ``call`` of four of ``specwatch ab-ladder`` over SGLang 0.5.12 < 0.5.13 < 0.5.14 < 0.5.15.post1 < 0.5.16
    at Llama-3.1-8B's sizes alone on one GPU (the EAGLE-3 or plain server, ``sgl_release_server``), under the 8B
    shape's recorded round spread: each release booted once a round, its measurement shared by its two pairs (5
    boots a round where four abs take 8), every pair's two boots back to back and in the other order the next
    round. Run the four calls back to back on one warm machine: call 1 carries 0.5.16's kit, calls 2 and 3 two
    overlays each (``SGL_LADDER_CALLS``), call 4 nothing; each call installs what it carries (the sites stay in
    /tmp), resumes the ladder from the memo in /tmp and boots on to its ``--stop-after``; the last prints every
    pair's verdict. A call cut short by its limit is made up by the next (the memo keeps every boot made)."""
    server, first, rounds = p.s["sgl_release_server"], p.s["sgl_ladder_rounds"], p.s["sgl_ladder_max_rounds"]
    if server not in ("eagle3", "plain"):
        raise SystemExit(f"harness: sgl_release_server must be eagle3 or plain ({server})")
    if p.s["sgl_ladder_from"] not in SGL_LADDER[:-2]:
        raise SystemExit(f"harness: sgl_ladder_from must be one of {', '.join(SGL_LADDER[:-2])} (a chain of 3 or "
                         f"more), got {p.s['sgl_ladder_from']}")
    chain = SGL_LADDER[SGL_LADDER.index(p.s["sgl_ladder_from"]):]
    kit = "docs/validation/sglang_kit.py"
    carried = [r for c in sorted(SGL_LADDER_CALLS) if c <= call for r in SGL_LADDER_CALLS[c][0] if r in chain]
    overlays = [Step(f"sglang-overlay-{r}", [p.py, kit, "overlay", "--version", r, "--if-missing"], 120)
                for r in carried]
    new = tuple(r for r in SGL_LADDER_CALLS[call][0] if r in chain) or ((SGL_KIT_RELEASE,) if call == 1 else ())
    imports = [Step(f"sglang-versions-{r}", [p.py, kit, "versions",
                                             "/tmp/sgl/site" if r == SGL_KIT_RELEASE else f"/tmp/sgl-{r}/site"],
                    120, "0") for r in new]
    stop = SGL_LADDER_CALLS[call][1]
    name = f"sgl8b-ladder-{server}"
    ladder = p.cli(f"{name}-{call}", 580, "ab-ladder",
                   *(a for r in chain for a in ("--profile", _release_profile(p, r, server))),
                   "--start", "last", "--rounds", first, "--max-rounds", rounds, "--round-history", SGL_STORE,
                   "--memo", f"/tmp/specwatch-abmemo-{name}", "--resume" if call == 1 else "--resume-only",
                   "--drop-unmeasured",
                   "--json", f"{p.rel(p.run)}/{name}.json",
                   *(a for m in LADDER_METRICS for a in ("--metric", m)),
                   *(("--stop-after", str(stop)) if stop else ()), "--", *LADDER_TESTS, "-p", "no:cacheprovider", "-q",
                   "--specwatch-baseline-dir=/tmp/specwatch-none", "--specwatch-yardstick=off",
                   f"--specwatch-report-dir=/tmp/specwatch-reports-{name}", gpu="0")
    memo = Call("ladder-memo", lambda run, env: _copy_tree(Path(f"/tmp/specwatch-abmemo-{name}"), run / "memo"))
    p.stages = [[[_sglang_setup(p, "--if-missing"), _sgl8b_models(p), *overlays, ladder, memo, *imports]]]


def _copy_tree(src: Path, dest: Path) -> str:
    """``src`` copied into ``dest`` (the run folder's, so the archive keeps it): a ladder's memo, every boot's
    entry (its test outcomes), results file and log, from which its verdicts can be judged again."""
    if not src.is_dir():
        raise OSError(f"no memo at {src}")
    shutil.copytree(src, dest, dirs_exist_ok=True)
    return f"{sum(1 for f in dest.rglob('*') if f.is_file())} files in {dest.name}/"


def sglang_8b_ladder_1_x1(p: Plan) -> None:
    _sglang_8b_ladder(p, 1)


def sglang_8b_ladder_2_x1(p: Plan) -> None:
    _sglang_8b_ladder(p, 2)


def sglang_8b_ladder_3_x1(p: Plan) -> None:
    _sglang_8b_ladder(p, 3)


def sglang_8b_ladder_4_x1(p: Plan) -> None:
    _sglang_8b_ladder(p, 4)


def sglang_8b_acceptance_all_x1(p: Plan) -> None:
    """sglang-8b-accept-x1 and sglang-8b-acceptance-x1 in one call: the two varying drafts' lanes beside the cache-life
    check (none of them timed), then the context-length table alone on the GPU (its speedups are timed)."""
    sglang_8b_accept_x1(p)
    setup, accept = p.stages
    sglang_8b_acceptance_x1(p)
    life = p.pytest("sgl8b-cache-life", 280, "-m", "correctness", "tests/correctness/test_acceptance_cache_life.py",
                    "--specwatch-acceptance-soak=6", f"--specwatch-profiles={SGL8B_PERF}", gpu="0")
    context = p.pytest("sgl8b-context-length", 280, "-m", "perf", "tests/perf/test_context_length.py",
                       "--specwatch-yardstick=off", "--specwatch-baseline-dir=/tmp/specwatch-none",
                       "--specwatch-context-gate-until=4096", f"--specwatch-profiles={SGL8B_PERF}", gpu="0")
    p.stages = [setup, [*accept, [life]], [[context]]]


def _draft_models(p: Plan, draft: str) -> tuple[list[Step], str]:
    """The steps that make the EAGLE-3 draft ``draft`` names ("exact": accept length 2.00; "vary": 1.50, varying
    per prompt; "q0": 1.00, a dead draft; "ctx": 2.00 for contexts under 1,536 tokens, 1.00 past them) beside the
    8b target, and the folder it is written to."""
    dests = {"exact": SGL8B_MODELS, "vary": SGL8B_VARY, "q0": SGL8B_Q0, "ctx": SGL8B_CTX}
    if draft not in dests:
        raise SystemExit(f"harness: sweep_draft must be one of {', '.join(dests)}, got {draft!r}")
    models = [_sgl8b_models(p)]
    if draft == "vary":
        models.append(_varying_draft(p, "sgl8b-models-vary", SGL8B_VARY, "0.5"))
    elif draft == "q0":
        models.append(Step("sgl8b-models-q0", [p.py, "docs/validation/sglang_models.py", "--shape", "8b", SGL8B_Q0,
                                               "--draft-quality", "0", "--if-missing"], 150, "0"))
    elif draft == "ctx":
        models.append(Step("sgl8b-models-ctx", [p.py, "docs/validation/sglang_models.py", "--shape", "8b", SGL8B_CTX,
                                                "--draft-profile", "context", "--draft-context", "1536",
                                                "--target-from", SGL8B_MODELS, "--if-missing"], 150, "0"))
    return models, dests[draft]


def _draft_profile(p: Plan, draft: str, dest: str) -> str:
    """SGL8B_PERF with its EAGLE-3 draft swapped for the one ``draft`` names, written to ``dest`` (exact: unchanged)."""
    return SGL8B_PERF if draft == "exact" else p.profile(
        SGL8B_PERF, f"8b-perf-{draft}", replace=(("/tmp/sgl/models8b/eagle3", dest + "/eagle3"),))


def sglang_8b_cache_life_x1(p: Plan) -> None:
    """Real SGLang 0.5.16 at Llama-3.1-8B's sizes alone on one GPU, nothing injected: acceptance over the cache's life
    (the fixed greedy set before, after unrelated traffic of 1.37x the KV pool, after /flush_cache) and its soak (6
    repetitions), with the draft ``sweep_draft`` names (vary: acceptance that differs per prompt and position, so
    the set's accept length is not a constant the check could match by chance). One boot, about 130 s on an H100."""
    models, dest = _draft_models(p, p.s["sweep_draft"])
    p.stages = [[[_sglang_setup(p, "--if-missing"), *models,
                  p.pytest(f"sgl8b-cache-life-{p.s['sweep_draft']}", 400, "-m", "correctness",
                           "tests/correctness/test_acceptance_cache_life.py", "--specwatch-acceptance-soak=6",
                           f"--specwatch-profiles={_draft_profile(p, p.s['sweep_draft'], dest)}", gpu="0")]]]


def sglang_8b_context_x1(p: Plan) -> None:
    """Real SGLang 0.5.16 at Llama-3.1-8B's sizes alone on one GPU, healthy: the context-length table of EAGLE-3
    against plain decoding (128 to 4,096 input tokens, gated up to 4,096) with the draft ``sweep_draft`` names
    (exact, vary or q0) and, on the same two boots, each server's single-stream decode recorded as a baseline session
    (refused when a test of the run fails). About 270 s."""
    models, dest = _draft_models(p, p.s["sweep_draft"])
    prof = _draft_profile(p, p.s["sweep_draft"], dest)
    p.stages = [[[_sglang_setup(p, "--if-missing"), *models,
                  p.pytest("sgl8b-context", 440, "-m", "perf", "tests/perf/test_context_length.py",
                           "tests/perf/test_throughput.py", "-k", "context or (drift and decode)",
                           "--specwatch-yardstick=off", "--update-baselines", "--specwatch-context-gate-until=4096",
                           f"--specwatch-profiles={prof}", gpu="0", baselines=f"{p.rel(p.run)}/baselines")]]]


def sglang_8b_context_fault_x1(p: Plan) -> None:
    """Real SGLang 0.5.16 at Llama-3.1-8B's sizes alone on one GPU, a fault built into the draft's weights and
    nothing else: the context-length table (gated up to 4,096) with the draft whose first guess turns wrong past
    1,536 tokens of context (``sweep_draft=ctx``; its made.json predicts the accept length at each length), expected
    to fail naming the length and the accept length's fall; then acceptance over the cache's life with the varying
    draft (healthy, on this machine). About 275 s and 130 s."""
    ctx, ctx_dest = _draft_models(p, "ctx")
    vary, vary_dest = _draft_models(p, "vary")
    p.stages = [[[_sglang_setup(p, "--if-missing"), *ctx, vary[-1],
                  p.pytest("sgl8b-context-ctx", 330, "-m", "perf", "tests/perf/test_context_length.py",
                           "--specwatch-yardstick=off", "--specwatch-context-gate-until=4096",
                           f"--specwatch-profiles={_draft_profile(p, 'ctx', ctx_dest)}", gpu="0"),
                  p.pytest("sgl8b-cache-life-vary", 200, "-m", "correctness",
                           "tests/correctness/test_acceptance_cache_life.py", "--specwatch-acceptance-soak=6",
                           f"--specwatch-profiles={_draft_profile(p, 'vary', vary_dest)}", gpu="0")]]]


def sglang_8b_bench_serving_x1(p: Plan) -> None:
    """Real SGLang 0.5.16 + EAGLE-3 at Llama-3.1-8B's sizes alone on one GPU: one server booted, measured by specwatch
    (the sweep at concurrency 1, 4 and 8 with --specwatch-server-url: 5 runs of 8 requests of 256 tokens a level) and
    by SGLang's own bench_serving (3 runs a level of the same 8 prompts, written by specwatch bench-prompts, in one
    Python), then specwatch compare-bench (docs/validation/bench_serving_check.py). Estimated: a boot of 60-90 s,
    about 75 s of specwatch, 60-80 s of bench_serving."""
    prof = p.profile(SGL8B_BASE, "eagle3-8b-bench", replace=((r"^runs = 12$", "runs = 5"),),
                     append=("concurrency = [1, 4, 8]", "run_requests = 8"))
    p.stages = [[[_sglang_setup(p, "--if-missing"), _sgl8b_models(p),
                  Step("sgl8b-bench-serving", [p.py, "docs/validation/bench_serving_check.py", prof, "sgl8b-eagle3",
                                               f"{p.rel(p.run)}/bench-serving"], 480, "0")]]]


# runs = 5: the fewest a side whose one-sided Mann-Whitney can reach p < 0.01 (1/252); three runs (the first 8B
# sweep, 2026-12-05) left every level inconclusive however far apart (1.51x at concurrency 1, no overlap)
SWEEP_WORKLOAD = """[workload]
runs = 5
warmup_s = 1.0
dataset = "builtin"
input_words = { dist = "uniform", low = 32, high = 96 }
output_len = { dist = "lognormal", median = 128, sigma = 0.4, low = 32, high = 256 }
seed = 0
concurrency = [1, 4, 16, 48]
"""
SWEEP_OUTPUT = 'output_len = { dist = "lognormal", median = 128, sigma = 0.4, low = 32, high = 256 }'


def sglang_8b_sweep_x1(p: Plan) -> None:
    """Real SGLang 0.5.16 at Llama-3.1-8B's sizes alone on one GPU: the concurrency sweep of plain decoding against
    EAGLE-3 (1, 4, 16 and 48 at once; decode graphs captured up to 8, so 16 and 48 verify eagerly) with the draft
    ``sweep_draft`` names: "exact" (accept length 2.00), "vary" (1.50, varying per prompt) or "q0" (1.00, a dead
    draft): where speculation stops paying. Then the two concurrency-16 verify-graph checks: captured up to 4, the
    check names the batch sizes that ran past the captured ones (the case study's fault, on the real engine);
    captured up to 16, it passes. One draft a call: four boots of 55-75 s and about four minutes of load (5 runs a
    side and level; the 2026-12-05 sweep ran 3 in 292 s, and its graph step, all five checks, was cut at 200 s)."""
    models, dest = _draft_models(p, p.s["sweep_draft"])
    try:
        levels = [int(c) for c in p.s["sweep_levels"].split(",")]
    except ValueError:
        raise SystemExit(f"harness: sweep_levels must be concurrencies like 1,4,16,48, got {p.s['sweep_levels']!r}"
                         ) from None
    if not levels or min(levels) < 1 or len(set(levels)) != len(levels):
        raise SystemExit(f"harness: sweep_levels must be distinct concurrencies of 1 or more, got "
                         f"{p.s['sweep_levels']!r}")
    if p.s["sweep_graphs"] not in ("on", "off"):
        raise SystemExit(f"harness: sweep_graphs must be on or off, got {p.s['sweep_graphs']!r}")
    if str(ROOT / "src") not in sys.path:  # specwatch from this checkout, installed or not
        sys.path.insert(0, str(ROOT / "src"))
    from specwatch.load.dataset import Lengths
    from specwatch.profiles.loading import tomllib

    try:
        Lengths.parse(tomllib.loads(f"x = {p.s['sweep_output_len']}")["x"], "sweep_output_len")
    except Exception as exc:  # a TOML error or specwatch's UsageError: one line, before any device time
        raise SystemExit(f"harness: sweep_output_len must be a length of the profile syntax (128, or "
                         f"{{ dist = ... }}), got {p.s['sweep_output_len']!r}: {exc}") from None
    workload = SWEEP_WORKLOAD.replace("concurrency = [1, 4, 16, 48]", f"concurrency = {levels}").replace(
        SWEEP_OUTPUT, f"output_len = {p.s['sweep_output_len']}")
    swept = p.profile(SGL8B_PERF, f"8b-sweep-{p.s['sweep_draft']}",
                      replace=(("/tmp/sgl/models8b/eagle3", dest + "/eagle3"),
                               (r"^\[workload\][^\[]*", workload + "\n")))
    graph = [p.pytest(f"sgl8b-graphs-{p.s['sweep_draft']}", 200, "-m", "correctness",
                      "tests/correctness/test_verify_graphs.py", "-k", "captured_sizes",
                      f"--specwatch-profiles={swept}", gpu="0")] if p.s["sweep_graphs"] == "on" else []
    p.stages = [[[_sglang_setup(p, "--if-missing"), *models,
                  _sweep(p, f"sgl8b-sweep-{p.s['sweep_draft']}", swept, 570 if not graph else 450, "0"), *graph]]]


def _copy_baselines(cls: str) -> Callable[[Path, dict[str, str]], str]:
    def copy(run: Path, env: dict[str, str]) -> str:
        shutil.copytree(ROOT / "baselines" / cls, run / "baselines" / cls, dirs_exist_ok=True)
        return f"baselines/{cls} copied into the run folder (the recording adds a session to the copy)"

    return copy


def rerecord_x1(p: Plan) -> None:
    """One GPU: a session added to each shipped speculative h200x1 baseline (a copy in the run folder), with
    the keys the suite gates now (accept length, cycle cost): eagle3-tuned, eagle3-untuned, large-eagle3-tuned."""
    keep = f"{p.rel(p.run)}/baselines"
    k = ["-m", "perf", "tests/perf/test_throughput.py", "tests/perf/test_speculation_health.py"]
    p.stages = [[[Call("copy-baselines", _copy_baselines("h200x1")),
                  p.pytest("record-small", 330, *k, "-k", "eagle3", f"--specwatch-profiles={p.profile('small')}",
                           "--update-baselines", gpu="0", baselines=keep),
                  p.pytest("record-large", 240, *k, "-k", "large-eagle3-tuned",
                           f"--specwatch-profiles={p.profile('large')}", "--update-baselines", gpu="0",
                           baselines=keep)]]]


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    came_from: str  # the session script (and stage) it replaces
    build: Callable[[Plan], None]


SCENARIOS = {s.name: s for s in (
    Scenario("smoke", "boot ref-small EAGLE3 at TP=2 and TP=1, 3 requests, the CUDA-graph counters",
             "gpu_smoke.py (session 1)", smoke),
    Scenario("perf-x1", "the shipped one-GPU set, `pytest -m perf` against the committed baselines",
             "session 6, call 4 (a pytest command)", perf_x1),
    Scenario("suites-x1", "one GPU: perf + correctness suites recording baselines, then drift with/without 8%",
             "gpu_validate.sh tp1 (session 1)", suites_x1),
    Scenario("suites-x2", "TP=2: the perf suite recording baselines, then tuned/untuned over sockets",
             "gpu_validate.sh tp2 (session 1)", suites_x2),
    Scenario("drift-pytest", "per GPU: record sessions, merge them oldest first, then slowed/healthy pairs",
             "gpu_validate.sh final, gpu_session2.sh, gpu_session3b.sh, gpu_session3c.sh (sessions 1-3)",
             drift_pytest),
    Scenario("drift-repeat", "per GPU, until the deadline: every slowdown level in shuffled order; sensitivity",
             "drift_experiment.py via gpu_session3a.sh, gpu_session3b.sh, gpu_next.sh tenpct (sessions 2-4)",
             drift_repeat),
    Scenario("tuning-x2", "tuned against untuned at TP=2: sockets (runs interleaved), NVLink, ref-large sockets",
             "gpu_session2.sh, gpu_next.sh socket, gpu_session3c.sh (sessions 2-4)", tuning_x2),
    Scenario("record-x1", "per GPU: the one-GPU matrix timed, recording; then more sessions until the deadline",
             "gpu_next.sh record1 (session 4)", record_x1),
    Scenario("record-x2", "TP=2 recording sessions (one round) until the deadline", "gpu_next.sh record2 (session 4)",
             record_x2),
    Scenario("correctness", "tests/correctness at TP=2, then on one GPU", "gpu_next.sh correct2 (session 5)",
             correctness),
    Scenario("matrix-x2", "the whole TP=2 perf matrix, timed, recording a session", "gpu_next.sh matrix2 (session 5)",
             matrix_x2),
    Scenario("allreduce", "specwatch allreduce: ref-small NVLink and sockets, ref-large sockets",
             "gpu_next.sh allreduce, gpu_s7b.sh allreduce-* (sessions 5, 7)", allreduce),
    Scenario("ab-x1", "specwatch ab, ref-large: slowed vs healthy on one GPU, A/A on the other, round history",
             "gpu_ab.sh, gpu_s7a.sh (sessions 6, 7)", ab_x1),
    Scenario("ab-x2", "specwatch ab at TP=2, ref-small: slowed and A/A in turn until the deadline",
             "gpu_s7c.sh (session 7)", ab_x2),
    Scenario("sweep", "concurrency sweeps on one GPU each: ref-small, ref-large", "gpu_s7c.sh, call D (session 7)",
             sweep),
    Scenario("sweep-x2", "concurrency sweeps at TP=2: ref-small NVLink and sockets, ref-large",
             "gpu_s7b.sh (session 7)", sweep_x2),
    Scenario("graphs", "verify graphs at concurrency 16 (captured for bs 1-4 only), one GPU and TP=2",
             "gpu_s7b.sh, gpu_s7c.sh (session 7)", graphs),
    Scenario("drift-x2", "drift of the shipped TP=2 set against the committed h200x2-nvlink baselines",
             "gpu_s7b.sh drift-tp2 (session 7)", drift_x2),
    Scenario("steps-large", "the engine's step benchmark of ref-large (graphed/eager decode and verify)",
             "gpu_session3a.sh (session 3)", steps_large),
    Scenario("yardstick", "the machine yardstick on each GPU", "gpu_s7a.sh, gpu_s7b.sh (session 7)", yardstick),
    Scenario("sglang-x1", "real SGLang 0.5.16 with EAGLE-3 and CUDA graphs: the kit, the models, both suites "
             "(correctness and perf, recording baselines) side by side on one GPU", "(new: issue 29)", sglang_x1),
    Scenario("sglang-faults-x1", "real SGLang 0.5.16 + EAGLE-3, the case study's faults from outside its code: "
             "accept-length sources and a 0.92 claim, a leaked sitecustomize, lossless, eager verify (no graphs; "
             "batches past the captured sizes), capture/inspect, drift and ab of a slowed server",
             "(new: issue 29)", sglang_faults_x1),
    Scenario("sglang-drift-x1", "real SGLang 0.5.16 + EAGLE-3 alone on one GPU: a baseline session, then the "
             "server slowed from outside its code, judged by the drift gate", "(new: issue 29)", sglang_drift_x1),
    Scenario("sglang-ab-x1", "real SGLang 0.5.16 + EAGLE-3 alone on one GPU: the concurrency-16 verify-graph row, "
             "then specwatch ab of the healthy server against one slowed from outside its code", "(new: issue 29)",
             sglang_ab_x1),
    Scenario("sglang-perf-x1", "real SGLang 0.5.16 + EAGLE-3 alone on one GPU: pytest -m perf against the baselines "
             "recorded on it", "(new: issue 29)", sglang_perf_x1),
    Scenario("sglang-versions-x1", "real SGLang alone on one GPU: specwatch ab of 0.5.16 against 0.5.17 (EAGLE-3, "
             "CUDA graphs; the 0.5.17 overlay on the 0.5.16 kit of the call before)", "(new: issue 29, item 6)",
             sglang_versions_x1),
    Scenario("sglang-aa-x1", "real SGLang 0.5.16 alone on one GPU: specwatch ab of the healthy EAGLE-3 server "
             "against itself, under its own engine's round spread", "(new: issue 29)", sglang_aa_x1),
    Scenario("sglang-8b-x1", "real SGLang 0.5.16 + EAGLE-3 at Llama-3.1-8B's sizes alone on one GPU: A/A ab under "
             "the seeded boot spread, its four boots recording baselines, then drift of the server slowed 8% "
             "(expected: regression)", "(new: issue 36)", sglang_8b_x1),
    Scenario("sglang-8b-ab-x1", "real SGLang 0.5.16 + EAGLE-3 at Llama-3.1-8B's sizes alone on one GPU: ab of the "
             "healthy server against one slowed 3% (resumable), then sglang-8b-perf-x1's suite if 300 s are left",
             "(new: issue 36)", sglang_8b_ab_x1),
    Scenario("sglang-8b-perf-x1", "real SGLang 0.5.16 at Llama-3.1-8B's sizes alone on one GPU: pytest -m perf of the "
             "plain and EAGLE-3 servers against sglang-8b-x1's baselines (drift, speculation and its health)",
             "(new: issue 36)", sglang_8b_perf_x1),
    Scenario("sglang-8b-versions-x1", "real SGLang at Llama-3.1-8B's sizes alone on one GPU: specwatch ab of 0.5.16 "
             "against 0.5.17 (EAGLE-3, CUDA graphs; the 0.5.17 overlay on the 0.5.16 kit of a call before), "
             "resumable", "(new: issue 37)", sglang_8b_versions_x1),
    Scenario("sglang-8b-bisect-x1", "real SGLang 0.5.16 at Llama-3.1-8B's sizes alone on one GPU: specwatch bisect "
             "over a history on SGLang's own sources; names the commit that runs bs-1 verify eagerly, skips the "
             "one that cannot boot (two chained calls)", "(new: issue 37)", sglang_8b_bisect_x1),
    Scenario("sglang-8b-stops-x1", "real SGLang 0.5.16 at Llama-3.1-8B's sizes alone on one GPU, nothing injected: "
             "the stops check as released and with the fix's ordering; captures of draft-extend graphs off and of a "
             "dead draft", "(new: issue 42)", sglang_8b_stops_x1),
    Scenario("sglang-8b-spec-costs-x1", "real SGLang 0.5.16 at Llama-3.1-8B's sizes alone on one GPU, nothing "
             "injected: stops as released and with the fix's ordering; draft alive on a healthy server, one whose "
             "speculative flags never reach it, and a dead draft", "(new: issue 42)", sglang_8b_spec_costs_x1),
    Scenario("sglang-8b-perf-costs-x1", "real SGLang 0.5.16 at Llama-3.1-8B's sizes alone on one GPU: the TTFT and "
             "prefix-reuse gates of EAGLE-3 against plain decoding", "(new: issue 42)", sglang_8b_perf_costs_x1),
    Scenario("sglang-8b-extend-x1", "real SGLang 0.5.16 + EAGLE-3 at Llama-3.1-8B's sizes alone on one GPU: ab of "
             "the healthy server against the same with SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH=1 (what an eager "
             "draft extend costs, triton held fixed)", "(new: issue 42)", sglang_8b_extend_x1),
    Scenario("sglang-8b-fa3-x1", "real SGLang 0.5.16 + EAGLE-3 at Llama-3.1-8B's sizes alone on one GPU, nothing "
             "injected: SGLang's default backend on Hopper (FA3): the phase-graph check, then ab of triton (draft "
             "extend graphed) against it; after sglang-8b-extend-x1 on the same warm machine", "(new: issue 42)",
             sglang_8b_fa3_x1),
    Scenario("sglang-8b-fa3-decode-x1", "real SGLang 0.5.16 + EAGLE-3 at Llama-3.1-8B's sizes with SGLang's default "
             "backend on Hopper (FA3) and prefill graphs off: which speculative phases it graphs", "(new: issue 42)",
             sglang_8b_fa3_decode_x1),
    Scenario("sglang-8b-acceptance-x1", "real SGLang 0.5.16 at Llama-3.1-8B's sizes alone on one GPU, healthy: "
             "accept length and output over the cache's life (before, after eviction by traffic, after /flush_cache) "
             "and a soak; the context-length table of EAGLE-3 against plain decoding, gated up to 4,096 tokens",
             "(new: issue 43, items 3 and 4)", sglang_8b_acceptance_x1),


    Scenario("sglang-8b-accept-x1", "real SGLang 0.5.16 at Llama-3.1-8B's sizes alone on one GPU, nothing injected: "
             "two drafts whose acceptance varies (engine-wide 1.50; the seeds' 1.92): accept-length sources and their "
             "averaging, acceptance by concurrency (1, 4, 9 above the captured 8, 16), the claimed 0.92",
             "(new: issue 43)", sglang_8b_accept_x1),
    Scenario("sglang-8b-releases-x1", "real SGLang at Llama-3.1-8B's sizes alone on one GPU: specwatch ab of two "
             "SGLang releases (sgl_release_base, sgl_release_head: 0.5.12 to 0.5.17), EAGLE-3 or plain; each release "
             "but 0.5.16 an overlay on its kit, carried in a call of its own; resumable", "(new: issue 46)",
             sglang_8b_releases_x1),
    *(Scenario(f"sglang-8b-ladder-{c}-x1", f"call {c} of 4, back to back on one warm machine: specwatch ab-ladder of "
               "SGLang 0.5.12 < 0.5.13 < 0.5.14 < 0.5.15.post1 < 0.5.16 at Llama-3.1-8B's sizes (each release booted "
               "once a round, shared by its two pairs); carry " + (
                   ".kit/sglang-0.5.16.tar.xz (the kit)" if c == 1 else " and ".join(
                       f".kit/sglang-{r}-overlay.tar.xz" for r in SGL_LADDER_CALLS[c][0]) or "nothing"),
               "(new: issue 46)", build)
      for c, build in ((1, sglang_8b_ladder_1_x1), (2, sglang_8b_ladder_2_x1), (3, sglang_8b_ladder_3_x1),
                       (4, sglang_8b_ladder_4_x1))),
    Scenario("sglang-8b-acceptance-all-x1", "sglang-8b-accept-x1 and sglang-8b-acceptance-x1 in one call: two varying "
             "drafts' lanes beside the cache-life check, then the context-length table alone", "(new: issue 43)",
             sglang_8b_acceptance_all_x1),
    Scenario("sglang-8b-context-x1", "real SGLang 0.5.16 at Llama-3.1-8B's sizes alone on one GPU: the context-length "
             "table gated up to 4,096 tokens, and both servers' single-stream decode recorded", "(new: issue 43)",
             sglang_8b_context_x1),
    Scenario("sglang-8b-context-fault-x1", "real SGLang 0.5.16 at Llama-3.1-8B's sizes alone on one GPU: the "
             "context-length table with a draft whose acceptance falls past 1,536 tokens (built into its weights: "
             "expected to fail naming it), then the cache-life check with the varying draft", "(new: issue 43, item 7)",
             sglang_8b_context_fault_x1),
    Scenario("sglang-8b-bench-serving-x1", "real SGLang 0.5.16 + EAGLE-3 at Llama-3.1-8B's sizes alone on one GPU: "
             "specwatch and SGLang's bench_serving on one live server, the same prompts, lengths and concurrency "
             "(1, 4, 8), side by side with specwatch compare-bench", "(new: issue 45)", sglang_8b_bench_serving_x1),
    Scenario("sglang-8b-sweep-x1", "real SGLang 0.5.16 at Llama-3.1-8B's sizes alone on one GPU: the concurrency sweep "
             "of plain decoding against EAGLE-3 (--set sweep_draft=exact|vary|q0), then the verify-graph checks "
             "(batches past the captured sizes named)", "(new: issue 43, item 6)", sglang_8b_sweep_x1),
    Scenario("sglang-8b-cache-life-x1", "real SGLang 0.5.16 at Llama-3.1-8B's sizes alone on one GPU: acceptance "
             "over the cache's life and its soak, with the draft --set sweep_draft=exact|vary|q0 names",
             "(new: issue 43, item 3)", sglang_8b_cache_life_x1),
    Scenario("rerecord-x1", "one GPU: a session with accept length and cycle cost added to each shipped "
             "speculative h200x1 baseline", "(new: issue 31)", rerecord_x1),
    Scenario("fresh-x1", "a new machine: yardstick, drift of ref-large EAGLE3 against the committed baselines, "
             "yardstick", "(new: the user's next-week run)", fresh_x1),
)}


def _gpu_processes() -> list[str] | None:
    """``pid name`` of each process with a GPU context (nvidia-smi); None when nvidia-smi cannot be asked."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,name", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return [ln.strip() for ln in done.stdout.splitlines() if ln.strip()] if done.returncode == 0 else None


def _gpu_after_kill(wait_s: float) -> str:
    """What holds the GPU after a killed step: empty within ``wait_s`` (a server's teardown, or specwatch's reaper at
    work), or the processes still there, named (left behind, or still tearing down when ``wait_s`` is short)."""
    start = time.monotonic()
    left = _gpu_processes()
    if left is None:
        return "no nvidia-smi to ask what holds the GPU"
    while left and time.monotonic() - start < wait_s:
        time.sleep(1.0)
        left = _gpu_processes() or []
    if not left:
        return f"no GPU process left after {time.monotonic() - start:.0f} s"
    return f"GPU processes still there after {time.monotonic() - start:.0f} s: {'; '.join(left)}"


def _expand(argv: list[str], ctx: dict[str, str]) -> list[str]:
    """``{commit}`` and the like filled in; ``@GLOB`` (relative to the repository) becomes the files it matches."""
    out: list[str] = []
    for a in argv:
        a = a.replace("{commit}", ctx["commit"])
        out.extend(sorted(str(p.relative_to(ROOT)) for p in ROOT.glob(a[1:])) if a.startswith("@") else [a])
    return out


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def code_version() -> str:
    sha = _git("rev-parse", "--short=10", "HEAD")
    if not sha:
        return "unknown"
    return sha + ("-dirty" if _git("status", "--porcelain", "--untracked-files=no") else "")


class Runner:
    """Runs a plan's stages under one deadline, logging each step the way the session scripts did."""

    def __init__(self, plan: Plan, deadline: float, commit: str) -> None:
        self.plan, self.deadline, self.t0 = plan, deadline, time.monotonic()
        self.ctx = {"commit": commit}
        self.records: list[dict] = []
        self.lock = threading.Lock()
        self.env = dict(os.environ, PYTHONUNBUFFERED="1")

    def left(self) -> float:
        return self.deadline - (time.monotonic() - self.t0)

    def note(self, line: str) -> None:
        with self.lock, (self.plan.run / "steps.txt").open("a") as f:
            text = f"[{time.monotonic() - self.t0:.0f}s] {line}"
            f.write(text + "\n")
            print(text, flush=True)

    def step(self, step: Step | Call, name: str | None = None) -> None:
        name = name or step.name
        t = time.monotonic()
        if isinstance(step, Call):
            argv = [f"<{step.name}>"]
            try:
                rc, rest = 0, step.fn(self.plan.run, self.env)
            except (OSError, ValueError, subprocess.SubprocessError) as exc:
                rc, rest = 1, str(exc)
        else:
            argv = _expand(step.argv, self.ctx)
            env = dict(self.env, **step.env, **({"CUDA_VISIBLE_DEVICES": step.gpu} if step.gpu is not None else {}))
            limit = max(1, int(min(step.timeout, self.left() - 5)))
            with (self.plan.run / f"{name}.txt").open("w") as out:
                proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                        start_new_session=True)
                try:
                    rc = proc.wait(timeout=limit)
                except subprocess.TimeoutExpired:  # as `timeout -k 10`, but for the step's whole process group
                    rc = 124
                    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 30)):
                        try:
                            os.killpg(proc.pid, sig)
                            proc.wait(timeout=grace)
                            break
                        except (ProcessLookupError, subprocess.TimeoutExpired):
                            continue
                    # waits only for what is left of the call's deadline: the archive must still be written
                    out.write(f"\n[harness] killed at its {limit} s limit; {_gpu_after_kill(max(0.0, self.left()))}\n")
            text = (self.plan.run / f"{name}.txt").read_text(errors="replace")
            last = [ln for ln in text.splitlines() if FINAL.match(ln)]
            rest = last[-1].strip("= ") if last else ""
        seconds = round(time.monotonic() - t)
        with self.lock:
            self.records.append({"name": name, "argv": argv, "gpu": getattr(step, "gpu", None),
                                 "env": getattr(step, "env", {}), "exit": rc, "seconds": seconds})
        self.note(f"{name}: exit {rc} in {seconds} s{'; ' + rest if rest else ''}")

    def lane(self, lane: Lane) -> None:
        for item in lane:
            if isinstance(item, Repeat):
                i = 0
                while i < item.limit and self.left() > item.min_left:
                    i += 1
                    for s in item.steps:
                        if self.left() > item.min_left / 2:
                            self.step(s, f"{s.name}-{i}")
            elif self.left() > 10:
                self.step(item)
            else:
                self.note(f"{item.name}: not started, the deadline is reached")

    def stages(self) -> None:
        for stage in self.plan.stages:
            threads = [threading.Thread(target=self.lane, args=(lane,)) for lane in stage]
            for th in threads:
                th.start()
            for th in threads:
                th.join()


def _setup(env: dict[str, str]) -> str:
    """The carried wheel into /tmp/site (a bare device machine), and src/ on PYTHONPATH."""
    wheels = sorted((ROOT / ".whl").glob("*.whl"))
    paths = [str(ROOT / "src")]
    if wheels:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                        "--target", "/tmp/site", *map(str, wheels)], check=False, capture_output=True)
        paths.insert(0, "/tmp/site")
    env["PYTHONPATH"] = os.pathsep.join([*paths, *filter(None, [env.get("PYTHONPATH", "")])])
    return env["PYTHONPATH"]


def _machine() -> str:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return "no nvidia-smi (CPU)"
    q = subprocess.run([smi, "--query-gpu=index,name,uuid,serial,pci.bus_id,driver_version,clocks.sm,clocks.mem,"
                        "temperature.gpu,power.draw", "--format=csv"], capture_output=True, text=True,
                       check=False).stdout
    q = f"host {os.uname().nodename}\n{q}"  # the GPU's identity (uuid, serial, bus) groups sessions by machine
    topo = subprocess.run([smi, "topo", "-m"], capture_output=True, text=True, check=False).stdout
    return q + topo


def plan_for(name: str, settings: dict[str, str], run: Path) -> Plan:
    plan = Plan(settings, run)
    SCENARIOS[name].build(plan)
    return plan


def _settings(pairs: list[str]) -> dict[str, str]:
    s = dict(SETTINGS)
    for kv in pairs:
        key, sep, value = kv.partition("=")
        if not sep or key not in SETTINGS:
            raise SystemExit(f"harness: --set {kv!r}: expected KEY=VALUE with KEY one of {', '.join(SETTINGS)}")
        s[key] = value
    return s


def _run_dir(name: str | None, scenario: str) -> Path:
    base = DATA / (name or f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d}-{scenario}")
    run, i = base, 1
    while run.exists():
        i += 1
        run = base.with_name(f"{base.name}-{i}")
    return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="harness.py", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    sub.add_parser("list", help="the scenarios")
    for what in ("show", "run"):
        sp = sub.add_parser(what, help="print a scenario's commands" if what == "show" else "run a scenario")
        sp.add_argument("scenario", choices=sorted(SCENARIOS))
        sp.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a setting")
        sp.add_argument("--run", help="the run's folder name under docs/validation/data/ (default: DATE-SCENARIO)")
        sp.add_argument("--deadline", type=float, default=540.0, help="seconds for the whole call (default 540)")
        sp.add_argument("--archive", help="also pack the run folder into this .tgz (e.g. $OUT/run.tgz)")
        sp.add_argument("--commit", help="the code version to record (default: git HEAD, -dirty if changed)")
    a = ap.parse_args(argv)
    if a.what == "list":
        for s in SCENARIOS.values():
            print(f"{s.name:13} {s.summary}\n{'':13} (was {s.came_from})")
        return 0
    settings = _settings(a.set)
    run = _run_dir(a.run, a.scenario)
    plan = plan_for(a.scenario, settings, run)
    if a.what == "show":
        print(f"# {a.scenario}: {SCENARIOS[a.scenario].summary}; output in {plan.rel(run)}/")
        for k in sorted(settings):
            print(f"#   {k} = {settings[k]}")
        for rel in plan.variants:
            print(f"# writes {rel}")
        for i, stage in enumerate(plan.stages, 1):
            for j, lane in enumerate(stage, 1):
                for item in lane:
                    for s in item.steps if isinstance(item, Repeat) else [item]:
                        env = " ".join(f"{k}={v}" for k, v in {**getattr(s, "env", {}), **(
                            {"CUDA_VISIBLE_DEVICES": s.gpu} if getattr(s, "gpu", None) is not None else {})}.items())
                        rep = "" if not isinstance(item, Repeat) else (
                            " (repeated while time lasts)" if item.limit > 1 else
                            f" (if {item.min_left} s are left)")
                        cmd = shlex.join(s.argv) if isinstance(s, Step) else f"<{s.name}: in-process>"
                        print(f"[stage {i} lane {j}] {s.name}{rep}: {env + ' ' if env else ''}{cmd}")
        return 0
    run.mkdir(parents=True)
    for rel, text in plan.variants.items():
        (ROOT / rel).parent.mkdir(parents=True, exist_ok=True)
        (ROOT / rel).write_text(text)
    runner = Runner(plan, a.deadline, a.commit or code_version())
    pythonpath = _setup(runner.env)
    (run / "gpu.txt").write_text(_machine())
    doc = {"version": FORMAT_VERSION, "scenario": a.scenario, "settings": settings, "code": runner.ctx["commit"],
           "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "python": sys.version.split()[0],
           "command": shlex.join(["python", "docs/validation/harness.py", "run", a.scenario,
                                  *[f"--set={kv}" for kv in a.set]]), "pythonpath": pythonpath}
    try:
        runner.stages()
    finally:
        for probe in run.glob("**/probe/*.py"):  # specwatch's generated sitecustomize copies: not evidence
            probe.unlink()
        runner.note("done")
        doc.update(finished=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                   steps=sorted(runner.records, key=lambda r: r["name"]))
        (run / "run.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        if a.archive:
            with tarfile.open(a.archive, "w:gz") as tar:
                tar.add(run, arcname=run.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
