"""The 8B shape's fleet baseline: every healthy real-SGLang 0.5.16 session at Llama-3.1-8B's sizes under data/,
recorded lease by lease into a validation store, and what the drift gate judges a new machine of each class at.

    python docs/validation/fleet_8b.py            # rewrite docs/validation/sglang/baselines-8b/ from data/; the table
    python docs/validation/fleet_8b.py --check    # exit 1 if that store is not what data/ gives
    python docs/validation/fleet_8b.py --list     # every candidate file: included or excluded, and why

A *candidate* is any results file (or baseline file) under ``data/*/`` holding samples of
``sgl8b-eagle3/single-stream/decode_tok_s`` or ``sgl8b-plain/...``. Each is classified, first match wins:

1. :data:`RULES`, reviewed by hand, each naming the evidence in the run's own record (a file of the run that must
   say which profile served it; ``{commit}`` is the results file's commit), which is checked on every build;
2. a harness step (the run's ``run.json``) that wrote the file (``--specwatch-results``, or ``results-latest.json``
   in its ``--specwatch-report-dir``): included when it served one of :data:`HEALTHY_PROFILES` with no extra
   environment (the faults of the validation runs come in by profile or by environment) and exited 0;
3. anything else is *unclassified*: the build stops and names it, so no run is silently left out or let in.

Included and checked on the file itself: engine 0.5.16, the healthy server's served identity (:data:`SERVED`:
the project's target, and for EAGLE-3 its 2.00-accept draft in /tmp/sgl/models8b), a machine class and a GPU UUID.
A session's lease is its GPU's (:func:`specwatch.store.machine.session_machine`: a hash of the GPU UUIDs, each
fresh device machine one); the same session found twice (a report folder's copy, a memo carried to a second
call) is recorded once. An H100 and an H200 are different machine classes and never pooled.

Left out, and why (the full list: ``--list``): the bisection's steps (revisions of the bisected history, two of
them slowed 68-79%), 0.5.17 (the version ab's head), the 8% slowed profile (``eagle3-8b-slow8.toml``), the drafts
of other acceptance (``8b-perf-q92.toml``, ``8b-perf-vary.toml``), the dead draft (``SPECWATCH_DEAD_DRAFT``).
Not candidates: ab runs whose output kept per-round medians but no samples (``sgl8b-ab-eager-extend.txt``,
``sgl8b-ab-fa3*.txt``, ``sgl8b-ab-slow3.txt``: a session needs its runs' samples), and the boots of
``2026-12-04-issue36-boots.json`` (medians without samples or a GPU UUID).

The store is written with specwatch's own API (:meth:`specwatch.store.baseline.BaselineStore.record`, one session
at a time, oldest first; :func:`specwatch.store.machineterm.write` for each class's ``machine-term.json``), and
judged with the drift gate's own inputs (:func:`specwatch.store.driftinput.drift_input`, the builder the gate
calls). Run from the repository root, with specwatch importable (``PYTHONPATH=src``).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import shutil
import statistics
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specwatch.errors import UsageError
from specwatch.judge import compare, replay
from specwatch.store import machineterm
from specwatch.store.baseline import NOT_BASELINES, BaselineStore, load_baseline
from specwatch.store.driftinput import DriftInput, drift_input
from specwatch.store.machine import run_machine, session_machine
from specwatch.store.result import Result, ResultSet

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
STORE = HERE / "sglang" / "baselines-8b"
COMMAND = "python docs/validation/fleet_8b.py"

SERVERS = ("sgl8b-eagle3", "sgl8b-plain")
WORKLOAD = "single-stream"
METRIC = "decode_tok_s"
ENGINE_VERSION = "0.5.16"
#: the profiles whose servers are the healthy 8B shape (the same flags, kit, models and workload)
HEALTHY_PROFILES = ("docs/validation/sglang/8b-perf.toml", "docs/validation/sglang/eagle3-8b-base.toml",
                    "docs/validation/sglang/plain-8b.toml")
#: what each healthy server serves (a result's ``served``, before its workload)
SERVED = {"sgl8b-eagle3": "sglang model=/tmp/sgl/models8b/target tp=1 spec=EAGLE3//tmp/sgl/models8b/eagle3/2/1/3",
          "sgl8b-plain": "sglang model=/tmp/sgl/models8b/target tp=1"}
#: the machine label a run on a machine none of the sessions came from is judged with
NEW_MACHINE = "host:a-new-machine"
#: the slowdown the fleet is asked about
SLOWDOWN = 0.08


@dataclass(frozen=True)
class Rule:
    """A hand-reviewed classification of the candidate files matching ``pattern`` (under data/)."""

    pattern: str
    include: bool
    why: str
    record: str = ""  # a file of the run (relative to the run's folder) that must contain ``says``
    says: str = ""  # "{commit}": the results file's commit


_AB_SAME = ("base /work/main/docs/validation/sglang/eagle3-8b-base.toml, "
            "head /work/main/docs/validation/sglang/eagle3-8b-base.toml")
_PERF = "--specwatch-profiles=docs/validation/sglang/8b-perf.toml"
RULES: tuple[Rule, ...] = (
    Rule("2026-12-04-sglang-8b-x1/baselines/h200x1/sgl8b-eagle3.json", True,
         "the A/A ab of eagle3-8b-base.toml against itself recorded each round's sessions here (--update-baselines)",
         "sgl8b-ab-same.txt", _AB_SAME),
    Rule("2026-12-04-sglang-8b-aa-x1/plain-base-r1.results.json", True,
         "round 1's base side of the A/A ab of plain-8b.toml against itself", "commands.txt",
         "--base-profile docs/validation/sglang/plain-8b.toml --head-profile docs/validation/sglang/plain-8b.toml"),
    Rule("2026-12-04-sglang-8b-bisect-x1*/memo/*-good-r*.results.json", True,
         "the bisection's good end: SGLang 0.5.16's sources as released, on eagle3-8b-base.toml's server",
         "sgl-history.txt", "{commit} sglang 0.5.16 as released"),
    Rule("2026-12-04-sglang-8b-bisect-x1*/memo/*-step-r*.results.json", False,
         "a revision of the bisected history, not the released sources (its [slow] commits ran 68-79% slower)"),
    Rule("2026-12-04-sglang-8b-versions-x1/memo/base-*.results.json", True,
         "the base side (0.5.16) of the version ab", "sgl8b-ab-versions.txt",
         "[ab] base /work/main/docs/validation/sglang/eagle3-8b-base.toml"),
    Rule("2026-12-04-sglang-8b-versions-x1/memo/head-*.results.json", False,
         "SGLang 0.5.17, the version ab's head: another engine"),
    Rule("2026-12-05-sgl8b-perf-costs/*results*.json", True,
         "pytest -m perf of 8b-perf.toml by hand, nothing injected", "commands.txt", _PERF),
    Rule("2026-12-05-sgl8b-perf-costs/report/results-latest.json", True,
         "the report folder's copy of results.json", "commands.txt", _PERF),
    Rule("2026-12-05-sglang-8b-context-x1/ctx*.json", True,
         "pytest -m perf of 8b-perf.toml by hand, nothing injected (its context-length gate failed: where "
         "speculation stops paying, a finding of the table, not of the single-stream servers)", "commands.txt", _PERF),
    Rule("2026-12-05-sglang-8b-context-x1/ctx/results-latest.json", True,
         "the report folder's copy of ctx.json", "commands.txt", _PERF),
    Rule("2026-12-05-sglang-8b-ladder-3-x1/memo/*/ladder-4-eagle3-8b-base-*.results.json", True,
         "the release ladder's 0.5.16 boot (eagle3-8b-base.toml), nothing injected",
         "sgl8b-ladder-eagle3-3.txt", "eagle3-8b-base: sgl8b-eagle3/single-stream/accept_length"),
    Rule("2026-12-05-sglang-8b-ladder-3-x1/memo/*/ladder-[0-3]-*.results.json", False,
         "the release ladder's boots of SGLang 0.5.12 to 0.5.15.post1: other engines"),
    Rule("2026-12-06-sglang-8b-ladder-3-x1/memo/*/ladder-4-eagle3-8b-base-*.results.json", True,
         "the release ladder's 0.5.16 boot on an H100 (eagle3-8b-base.toml), nothing injected",
         "sgl8b-ladder-eagle3-3.txt", "eagle3-8b-base: sgl8b-eagle3/single-stream/accept_length"),
    Rule("2026-12-06-sglang-8b-ladder-3-x1/memo/*/ladder-[0-3]-*.results.json", False,
         "the release ladder's boots of SGLang 0.5.12 to 0.5.15.post1: other engines"),
    Rule("2026-12-06-sglang-8b-ladder-4-x1/memo/*/ladder-4-eagle3-8b-base-*.results.json", True,
         "the second H200 release ladder's two 0.5.16 boots (eagle3-8b-base.toml), nothing injected",
         "sgl8b-ladder-eagle3-4.txt", "eagle3-8b-base: sgl8b-eagle3/single-stream/accept_length"),
    Rule("2026-12-06-sglang-8b-ladder-4-x1/memo/*/ladder-[0-3]-*.results.json", False,
         "the second H200 release ladder's boots of SGLang 0.5.12 to 0.5.15.post1: other engines"),
)


@dataclass(frozen=True)
class Decision:
    """How one candidate file is classified."""

    rel: str
    include: bool | None  # None: unclassified
    why: str


@dataclass(frozen=True)
class Session:
    """One healthy session of one server: its single-stream results and where they were measured."""

    server: str
    machine_class: str
    lease: str  # session_machine's label: host:<hash of the GPU UUIDs>
    gpu: str
    recorded: str
    commit: str | None
    fingerprint: dict[str, Any] = field(repr=False)
    results: tuple[Result, ...] = field(repr=False)
    source: str = ""


# ---- candidates and their classification ---------------------------------------------------------------------

def _holds_samples(doc: Any) -> bool:
    """Whether a results or baseline document holds decode samples of a healthy server's name."""
    if not isinstance(doc, dict):
        return False
    if isinstance(doc.get("results"), list):
        return any(isinstance(r, dict) and r.get("profile") in SERVERS and r.get("workload") == WORKLOAD
                   and r.get("metric") == METRIC and r.get("samples") for r in doc["results"])
    metric = (doc.get("metrics") or {}).get(f"{WORKLOAD}/{METRIC}") if isinstance(doc.get("metrics"), dict) else None
    return doc.get("profile") in SERVERS and isinstance(metric, dict) and bool(metric.get("samples"))


def candidates(data: Path = DATA) -> list[str]:
    """Every file under ``data/*/`` holding decode samples of ``sgl8b-eagle3`` or ``sgl8b-plain`` (relative paths)."""
    out = []
    for path in sorted(data.glob("*/**/*.json")):
        if "probe-records" in path.parts or path.name in NOT_BASELINES or path.name == "run.json":
            continue
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if _holds_samples(doc):
            out.append(path.relative_to(data).as_posix())
    return out


def _step_of(data: Path, rel: str) -> dict[str, Any] | None:
    """The harness step of the run's ``run.json`` that wrote ``rel`` (its results file or its report's copy)."""
    run = data / rel.split("/", 1)[0] / "run.json"
    if not run.exists():
        return None
    for step in json.loads(run.read_text()).get("steps", []):
        for arg in step.get("argv", []):
            key, _, value = str(arg).partition("=")
            if (key == "--specwatch-results" and value.endswith(rel)) or (
                    key == "--specwatch-report-dir" and f"{value}/results-latest.json".endswith(rel)):
                return dict(step)
    return None


def _by_step(step: dict[str, Any]) -> tuple[bool, str]:
    """Whether a harness step served a healthy profile with nothing injected, and why (not)."""
    profiles = [str(a).partition("=")[2] for a in step.get("argv", []) if str(a).startswith("--specwatch-profiles=")]
    name = step.get("name", "?")
    if not profiles or any(p not in HEALTHY_PROFILES for p in profiles):
        return False, f"step {name} served {', '.join(profiles) or 'no profile named'}, not a healthy 8B profile"
    if step.get("env"):
        return False, f"step {name} ran with {', '.join(sorted(step['env']))} set (a fault or another draft)"
    if step.get("exit") != 0:
        return False, f"step {name} exited {step.get('exit')}"
    return True, f"step {name} of the harness: {profiles[0]}, nothing injected, exit 0"


def _commit_of(path: Path) -> str:
    try:
        return str(json.loads(path.read_text()).get("commit") or "")
    except (OSError, ValueError):
        return ""


def classify(rel: str, data: Path = DATA, rules: Sequence[Rule] = RULES) -> Decision:
    """The decision on one candidate: the first rule that matches (its evidence checked), else its harness step."""
    for rule in rules:
        if fnmatch.fnmatch(rel, rule.pattern):
            if rule.include and rule.record:
                record = data / rel.split("/", 1)[0] / rule.record
                says = rule.says.format(commit=_commit_of(data / rel))
                if not record.exists() or says not in record.read_text():
                    raise UsageError(f"fleet_8b.py: {rel}: the rule {rule.pattern!r} rests on {record} saying "
                                     f"{says!r}, which it does not: review the rule")
            return Decision(rel, rule.include, rule.why)
    step = _step_of(data, rel)
    if step is not None:
        ok, why = _by_step(step)
        return Decision(rel, ok, why)
    return Decision(rel, None, "no rule and no harness step names it: add a Rule to docs/validation/fleet_8b.py")


def decisions(data: Path = DATA) -> list[Decision]:
    """Every candidate's decision."""
    return [classify(rel, data) for rel in candidates(data)]


# ---- the sessions of the included files ---------------------------------------------------------------------

def _check(server: str, machine: dict[str, Any], extra: dict[str, Any], where: str) -> None:
    """A file a rule let in must still be what the rule says: engine 0.5.16, the healthy server's served identity."""
    version = machine.get("engine_version")
    served = str(extra.get("served") or "").split(" | ")[0]
    if version != ENGINE_VERSION or served != SERVED[server] or not machine.get("machine_class"):
        raise UsageError(f"fleet_8b.py: {where}: {server} is engine {version}, class {machine.get('machine_class')}, "
                         f"served {served!r}: not the healthy 8B server ({SERVED[server]!r} on {ENGINE_VERSION})")


def _gpu(fingerprint: dict[str, Any]) -> str:
    uuids = (fingerprint.get("gpu_identity") or {}).get("gpu_uuids") or []
    if not uuids:
        raise UsageError("fleet_8b.py: a session without a GPU UUID has no lease")
    return ",".join(uuids)


def sessions_of(rel: str, data: Path = DATA) -> list[Session]:
    """The single-stream sessions of the healthy servers in one included file (a baseline file: each of its
    recorded sessions)."""
    path = data / rel
    doc = json.loads(path.read_text())
    out = []
    if isinstance(doc.get("results"), list):
        rs = ResultSet.load(path)
        for server in SERVERS:
            mine = tuple(r for r in rs.for_profile(server) if r.workload == WORKLOAD and r.samples)
            if not any(r.metric == METRIC for r in mine):
                continue
            _check(server, rs.machine, next(r for r in mine if r.metric == METRIC).extra, rel)
            fp = dict(rs.machine)
            out.append(Session(server, str(rs.machine_class), run_machine(fp, rs.commit, rs.created), _gpu(fp),
                               str(rs.created), rs.commit, fp, mine, rel))
        return out
    base = load_baseline(path)
    decode = base.get(WORKLOAD, METRIC)
    assert decode is not None  # a candidate holds it
    _check(base.profile, base.machine, decode.extra, rel)
    metrics = [m for m in base.metrics.values() if m.workload == WORKLOAD]
    for sess in decode.sessions:
        when = sess.get("recorded")
        results = []
        for m in metrics:
            same = next((s for s in m.sessions if s.get("recorded") == when and s.get("samples")), None)
            if same is not None:
                results.append(Result.make(base.profile, m.workload, m.metric, unit=m.unit,
                                           higher_is_better=m.higher_is_better, samples=same["samples"],
                                           extra=m.extra))
        fp = {**base.machine, "host_id": sess.get("host"),
              "gpu_identity": sess.get("gpu_identity") or base.machine.get("gpu_identity")}
        out.append(Session(base.profile, base.machine_class, session_machine(sess), _gpu(fp), str(when),
                           sess.get("commit"), fp, tuple(sorted(results, key=lambda r: r.key)), rel))
    return out


def collect(data: Path = DATA) -> tuple[list[Session], list[Decision]]:
    """Every healthy session (oldest first, each once) and every candidate's decision; UsageError naming any
    unclassified candidate."""
    found = decisions(data)
    loose = [d.rel for d in found if d.include is None]
    if loose:
        raise UsageError(f"fleet_8b.py: {len(loose)} candidate file(s) neither included nor excluded: "
                         f"{', '.join(loose)}; add a Rule (docs/validation/fleet_8b.py) saying which and why")
    seen: dict[tuple[str, str, str], Session] = {}
    for d in found:
        if d.include:
            for s in sessions_of(d.rel, data):
                seen.setdefault((s.server, s.lease, s.recorded), s)
    return sorted(seen.values(), key=lambda s: (s.recorded, s.server)), found


# ---- the store ----------------------------------------------------------------------------------------------

def write_store(sessions: Iterable[Session], root: Path) -> list[Path]:
    """The store at ``root`` (replaced): each session recorded in order by the baseline store's own API, then each
    class's machine term pooled over its baselines; the files written."""
    if root.exists():
        shutil.rmtree(root)
    store, written = BaselineStore(root), set()
    classes: list[str] = []
    for s in sessions:
        first = (s.machine_class, s.server) not in written
        written.add((s.machine_class, s.server))
        classes += [] if s.machine_class in classes else [s.machine_class]
        store.record(s.machine_class, s.server, s.fingerprint, s.commit, list(s.results), recorded=s.recorded,
                     replace=first)
    for cls in classes:
        machineterm.write(root, cls, command=COMMAND)
    return sorted(root.glob("*/*.json"))


def _comparable(path: Path) -> Any:
    doc = json.loads(path.read_text())
    if path.name == machineterm.FILE_NAME:
        doc.pop("recorded", None)  # when it was pooled, not what
    return doc


def differs(root: Path, sessions: Sequence[Session]) -> list[str]:
    """The files of ``root`` that are not what ``sessions`` give (missing, extra or different)."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "store"
        write_store(sessions, fresh)
        want = {p.relative_to(fresh).as_posix(): _comparable(p) for p in fresh.glob("*/*.json")}
        have = {p.relative_to(root).as_posix(): _comparable(p) for p in root.glob("*/*.json")} if root.exists() else {}
    return sorted(k for k in set(want) | set(have) if want.get(k) != have.get(k))


# ---- what the gate judges a new machine at ------------------------------------------------------------------

@dataclass(frozen=True)
class Judged:
    """A server's baseline in one class, and the drift gate's tolerance for a run on a new machine of it."""

    machine_class: str
    server: str
    sessions: int
    per_lease: dict[str, int]  # lease -> its sessions
    inputs: DriftInput
    basis: compare.DriftBasis
    requested: float
    alpha: float

    @property
    def leases(self) -> int:
        return len(self.per_lease)

    def lease_medians(self) -> dict[str, float]:
        """Each lease's median of its sessions' medians, in recorded order."""
        out: dict[str, list[float]] = {}
        for s in self.inputs.sessions:
            out.setdefault(s.machine or "?", []).append(statistics.median(s))
        return {k: statistics.median(v) for k, v in out.items()}

    @property
    def spread(self) -> float | None:
        """The lease-to-lease spread the sessions measure (their machine term; None: fewer than 2 leases or
        no within-lease spread to separate it from)."""
        pred = self.basis.prediction
        if pred is None or pred.components.machines < 2 or pred.components.df_within < 1:
            return None
        return pred.components.sigma_machine

    @property
    def flags(self) -> float | None:
        """How often a session :data:`SLOWDOWN` slower on a new machine is flagged (None: no interval)."""
        pred = self.basis.prediction
        # flagged when the slowed session lands below the interval: deviation + log(1 - s) < -half_width
        return None if pred is None else pred.cdf(-pred.half_width - math.log1p(-SLOWDOWN))


def judge(root: Path, requested: float = 0.05, alpha: float = 0.01) -> list[Judged]:
    """Each baseline of the store judged as the drift gate judges a run on a new machine of its class."""
    store, out = BaselineStore(root), []
    for cls, server in store.available():
        base = store.require(cls, server)
        inp = drift_input(store, base, WORKLOAD, METRIC, machine=NEW_MACHINE,
                          engine=str(base.machine.get("engine") or ""))
        if isinstance(inp, str):
            raise UsageError(f"fleet_8b.py: {inp}")
        per: dict[str, int] = {}
        for s in inp.sessions:
            per[s.machine or "?"] = per.get(s.machine or "?", 0) + 1
        out.append(Judged(cls, server, len(inp.sessions), per, inp, inp.basis(requested, alpha), requested, alpha))
    return out


@dataclass(frozen=True)
class HeldOut:
    """Each lease held out in turn and judged, session by session, against the sessions of the other leases by the
    drift gate's verdict (:func:`specwatch.judge.replay.leave_one_machine_out`): as recorded and slowed."""

    judged: int
    false_alarms: int
    flagged: int  # of the sessions slowed by SLOWDOWN


def held_out(j: Judged) -> HeldOut | None:
    """The leave-one-lease-out replay of a baseline of 3 or more leases (None: fewer, nothing left to judge by), when
    every lease held out leaves at least 3 sessions: with fewer, the gate judges by the requested tolerance instead of
    the interval :func:`judged_line` reports, and the replay would answer another question (3 H100 leases of one
    session each: ±16.3% for a new machine, but 5% with one held out)."""
    if j.leases < 3 or j.sessions - max(j.per_lease.values()) < 3:
        return None
    scale = round(1.0 - SLOWDOWN, 6)
    gate = replay.Judge(j.inputs.higher_is_better, j.requested, j.alpha, None, n_resamples=200)
    rate = replay.leave_one_machine_out([("gate", gate.flags)], j.inputs.sessions,
                                        higher_is_better=j.inputs.higher_is_better, scales=(scale,))[0]
    return HeldOut(rate.judged, rate.false_alarms, rate.detected[scale])


def real_slowdown(j: Judged, rel: str, data: Path = DATA) -> tuple[float, str, compare.DriftBasis]:
    """A recorded run of a slowed server (``rel``, a results file) judged by the drift gate as a run on a new machine
    of the class, against the store's sessions: its change, verdict and basis."""
    rs = ResultSet.load(data / rel)
    run = next(r for r in rs.for_profile(j.server) if r.workload == WORKLOAD and r.metric == METRIC)
    inp = j.inputs
    cmp, basis = compare.drift(run.samples, inp.samples, higher_is_better=inp.higher_is_better,
                               requested=j.requested, alpha=j.alpha, sessions=inp.sessions, class_spread=inp.floor,
                               machine=NEW_MACHINE, machine_term=inp.machine_term, n_resamples=1000)
    return cmp.change, cmp.verdict.value, basis


def judged_line(j: Judged) -> str:
    """One class and server, in words."""
    pred = j.basis.prediction
    head = (f"{j.machine_class}/{j.server}: {j.sessions} session(s) on {j.leases} lease(s) "
            f"({', '.join(f'{k} x{v}' for k, v in j.per_lease.items())})")
    if pred is None:
        return f"{head}; a new machine judged at ±{j.basis.tolerance:.1%}: {j.basis.note}"
    spread = "unmeasured" if j.spread is None else f"{j.spread:.2%}"
    flags = j.flags
    return (f"{head}; lease-to-lease spread {spread}, within a lease {pred.components.sigma_within:.2%}; a new "
            f"machine judged at ±{pred.tolerance:.1%}, {pred.detects:.1%} flagged 19 times in 20; an {SLOWDOWN:.0%} "
            f"slowdown flagged {'in ' + format(flags, '.0%') + ' of new machines' if flags is not None else '?'}"
            f"{' (' + pred.term + ')' if pred.term else ''}")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fleet_8b.py", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the store is not what data/ gives")
    ap.add_argument("--list", action="store_true", help="every candidate file and its decision; nothing written")
    ap.add_argument("--store", type=Path, default=STORE, help=f"the store's folder (default {STORE})")
    a = ap.parse_args(argv)
    try:
        sessions, found = collect()
        if a.list:
            for d in found:
                print(f"{'in ' if d.include else 'out'}  {d.rel}: {d.why}")
            return 0
        if a.check:
            bad = differs(a.store, sessions)
            if bad:
                print(f"{a.store} is not what data/ gives ({', '.join(bad)}): run {COMMAND}", file=sys.stderr)
                return 1
            return 0
        files = write_store(sessions, a.store)
        print(f"fleet_8b.py: {len(sessions)} healthy session(s) of {len({d.rel for d in found if d.include})} "
              f"file(s) into {len(files)} file(s) under {a.store}")
        for j in judge(a.store):
            print(f"  {judged_line(j)}")
            lomo = held_out(j)
            if lomo is not None:
                print(f"    each lease held out against the others: {lomo.false_alarms} false alarm(s) in "
                      f"{lomo.judged} sessions; {SLOWDOWN:.0%} slower: {lomo.flagged} of {lomo.judged} flagged")
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
