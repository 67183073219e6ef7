"""The state of one pytest run: configuration, profiles, the server pool, measurements, findings.

Kept in ``config.stash`` by the plugin; everything the fixtures and hooks do goes through it.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specwatch.checks.lossless import GreedyMemo
from specwatch.errors import EXIT_INFRA, InfraError, ServerUnavailable, UsageError
from specwatch.load.workload import Workload
from specwatch.load.workload import resolve as resolve_workload
from specwatch.profiles.loading import load_profiles, single_server_profiles, with_device
from specwatch.profiles.profile import ProfileSet, ServerProfile
from specwatch.run.evidence import Reference
from specwatch.run.machine_probe import fingerprint_fields, yardstick_before_boot
from specwatch.run.options import Config
from specwatch.run.record import PAYLOAD_KEY, RunRecord
from specwatch.run.reference import reference_samples
from specwatch.server.pool import RunningServer, ServerPool

if TYPE_CHECKING:
    from specwatch.judge.verdict import ReportRow
    from specwatch.load.measure import Measurement

Progress = Callable[[str], None]

@dataclass
class CheckNote:
    """What a check concluded about one server, kept so perf failures can explain themselves."""

    check: str
    profile: str
    ok: bool
    summary: str


@dataclass
class Session:
    """One run of the suite."""

    config: Config
    progress: Progress = print
    worker_id: str | None = None
    worker_count: int = 1
    findings: list[CheckNote] = field(default_factory=list)
    measurements: dict[tuple[str, str], Measurement] = field(default_factory=dict)
    measurements_alternating: dict[tuple[str, ...], tuple[Measurement, Measurement]] = field(default_factory=dict)
    verdict_rows: list[ReportRow] = field(default_factory=list)
    #: greedy outputs (ids and logprobs) per (profile, prompts, max_new_tokens) for the lossless check
    greedy_outputs: GreedyMemo = field(default_factory=GreedyMemo)
    started: float = field(default_factory=time.time)
    infra_failures: int = 0
    verdict_failures: int = 0
    #: on the xdist controller: the workers' records, merged (``worker_down``)
    gathered: RunRecord = field(default_factory=RunRecord)
    _fingerprint: dict[str, Any] | None = None
    _yardstick: dict[str, Any] | None = None  # this machine's, measured before the first boot (machine_probe)
    #: why pytest's rootdir was not the project folder, when it was not (shown in the header)
    project_note: str = ""
    #: drift tests that found no stored baseline (shown loudly in the summary)
    missing_baselines: list[str] = field(default_factory=list)
    #: perf tests that ran to a verdict (history records perf runs only)
    perf_tests_run: int = 0
    #: pytest's verbosity (-v: 1): a failing drift test explains its tolerance above 0
    verbosity: int = 0
    #: the files this run wrote (named in the summary)
    written: list[Path] = field(default_factory=list)
    _warned: set[str] = field(default_factory=set)
    _profiles: ProfileSet | None = None
    _pool: ServerPool | None = None
    _external: dict[str, RunningServer] = field(default_factory=dict)

    @property
    def profiles(self) -> ProfileSet:
        """The run's profile set: a file, a single server from flags, or the built-in set."""
        if self._profiles is None:
            cfg = self.config
            if cfg.engine:
                ps = single_server_profiles(cfg.engine, cfg.model or "", cfg.draft, cfg.tp, cfg.device)
            else:
                ps = load_profiles(cfg.path(cfg.profiles) if cfg.profiles else None)
            self._profiles = with_device(ps, cfg.device)
        return self._profiles

    @property
    def run_dir(self) -> Path:
        stamp = dt.datetime.fromtimestamp(self.started).strftime("%Y%m%d-%H%M%S")
        base = self.config.path(self.config.report_dir) or Path("reports")
        return base / "servers" / f"{stamp}-{os.getpid()}"

    @property
    def pool(self) -> ServerPool:
        if self._pool is None:
            from specwatch.server.gpu import gpu_set_for_worker, visible_gpus

            profiles = list(self.profiles.servers.values())
            per_worker = max((p.gpus_needed for p in profiles), default=0)
            gpus = visible_gpus() if per_worker else []
            gpu_set: tuple[int, ...] = ()
            if gpus:
                gpu_set = gpu_set_for_worker(gpus, self.worker_id, self.worker_count, per_worker)
            self._yardstick = yardstick_before_boot(self.config, self.profiles, gpu_set, self.progress)
            self._pool = ServerPool(profiles, self.run_dir, gpus=gpu_set, boot_timeout=self.config.boot_timeout,
                                    progress=self.progress, shared_host=self.worker_count > 1)
        return self._pool

    def profile_for(self, role_or_name: str) -> ServerProfile:
        """A profile by fixture role (baseline, spec, tuned, untuned) or by name."""
        prof = self.profiles.for_role(role_or_name)
        if prof is not None:
            return prof
        if role_or_name in self.profiles.servers:
            return self.profiles.servers[role_or_name]
        raise UsageError(f"{self.profiles.source}: no server for fixture {role_or_name!r}; "
                         f"name one under [fixtures] (known servers: {', '.join(sorted(self.profiles.servers))})")

    def server(self, role_or_name: str) -> RunningServer:
        """A running server for a role or profile name, booting it if needed."""
        prof = self.profile_for(role_or_name)
        if self.config.server_url:
            stands_for = self.profiles.for_role("spec") or next(iter(self.profiles.servers.values()))
            if prof.name != stands_for.name:
                raise ServerUnavailable(
                    f"--server-url: the running server stands for {stands_for.name}; {prof.name} is not running "
                    "(boot it from a profile instead, or point --server-url at it in a separate run)")
            if prof.name not in self._external:
                log = self.config.path(self.config.server_log)
                if log is not None and not log.is_file():
                    raise UsageError(f"--specwatch-server-log {log}: no such file")
                self._external[prof.name] = RunningServer(profile=prof, url=self.config.server_url,
                                                          shared_host=self.worker_count > 1, external_log=log)
            return self._external[prof.name]
        return self.pool.get(prof)

    def server_for_profile(self, profile: ServerProfile) -> RunningServer:
        """A running server for a profile that need not be in the profile set (e.g. a fault
        configuration built with ``dataclasses.replace``), booted through the same pool.

        With ``--server-url`` only the profile set's own servers are reachable.
        """
        if self.config.server_url:
            if profile.name in self.profiles.servers:
                return self.server(profile.name)
            raise UsageError(f"--server-url {self.config.server_url}: cannot boot the extra server profile "
                             f"{profile.name!r}; only a running server is used")
        return self.pool.get(profile)

    def workload(self, name: str) -> Workload:
        """A workload by name (built in, or a sweep level such as ``concurrency-16``) with the profile
        set's [workload] table applied, under the command line's run counts."""
        return resolve_workload(name, self.profiles.workload).with_overrides(self.config.runs, self.config.warmup)

    def measure(self, role_or_name: str, workload: str = "single-stream", *, pooled: bool = False) -> Measurement:
        """Measure a workload on a server once per session (memoised).

        ``pooled`` (the perf gates): when a relative gate boots this server in alternation anyway,
        run that gate's measurement now and use its pooled runs, instead of one more boot. Either
        way a pooled measurement that already exists is reused.
        """
        from specwatch.load.measure import measure

        prof = self.profile_for(role_or_name)
        key = (prof.name, workload)
        if key not in self.measurements:
            pair = self._alternating_pair(prof.name) if pooled else None
            if pair:  # its relative gate boots it in alternation anyway: reuse those pooled runs
                self.measure_pair(*pair, workload)
            else:
                self.measurements[key] = measure(self.server(prof.name), self.workload(workload), self.progress)
        return self.measurements[key]

    def _gate_pairs(self) -> list[tuple[str, str]]:
        """The relative gates' server pairs, in order: (baseline, spec), then (untuned, tuned)."""
        pairs = []
        for first, second in (("baseline", "spec"), ("untuned", "tuned")):
            a, b = self.profiles.for_role(first), self.profiles.for_role(second)
            if a and b and a.name != b.name:
                pairs.append((a.name, b.name))
        return pairs

    def _alternating_pair(self, name: str) -> tuple[str, str] | None:
        """The first relative-gate pair (baseline/spec, then untuned/tuned) that boots ``name`` in
        alternation or interleaves it, when the gates do; else None."""
        gates = self.profiles.gates
        if (gates.alternate_rounds <= 1 and not gates.interleave_runs) or self.config.server_url:
            return None
        return next((pair for pair in self._gate_pairs() if name in pair), None)

    def _shared_rounds(self, a: str, b: str) -> tuple[list[str], list[tuple[str, str]]] | None:
        """When the other gate pair shares one server with (a, b) (the default set's eagle3-tuned is
        both the spec and the tuned server): the boot order of one round, that server between its
        two partners, and both pairs. None otherwise."""
        pairs = self._gate_pairs()
        if (a, b) not in pairs or len(pairs) != 2:
            return None
        other = pairs[1] if pairs[0] == (a, b) else pairs[0]
        shared = set(other) & {a, b}
        if len(shared) != 1:
            return None
        (mid,) = shared
        first = pairs[0][1 - pairs[0].index(mid)]
        last = pairs[1][1 - pairs[1].index(mid)]
        return [first, mid, last], pairs

    def measure_pair(self, first: str, second: str,
                     workload: str = "single-stream") -> tuple[Measurement, Measurement]:
        """Measurements of two servers for a relative gate (memoised per pair).

        With ``gates.alternate_rounds`` = 1 these are the ordinary memoised measurements. With more
        rounds the two servers are booted in alternation, each round a fresh boot with its share of
        the runs, and the rounds' runs are pooled, so machine drift and boot-to-boot differences
        fall on both sides instead of between them. When both gates share a server, each round
        boots the three once (``baseline, spec=tuned, untuned``) and both gates use the shared
        server's runs: three boots a round instead of four.
        """
        gates = self.profiles.gates
        rounds = gates.alternate_rounds
        a, b = self.profile_for(first).name, self.profile_for(second).name
        if (rounds <= 1 and not gates.interleave_runs) or self.config.server_url:
            return self.measure(a, workload), self.measure(b, workload)
        key = ("alternating", a, b, workload)
        if key not in self.measurements_alternating:
            shared = None if gates.interleave_runs else self._shared_rounds(a, b)
            order, pairs = shared if shared else ([a, b], [(a, b)])
            merged = self._rounds(order, workload)
            for x, y in pairs:
                self.measurements_alternating[("alternating", x, y, workload)] = (merged[x], merged[y])
            for name in order:  # floors, drift and the results file use the pooled runs too
                self.measurements.setdefault((name, workload), merged[name])
        return self.measurements_alternating[key]

    def _rounds(self, order: list[str], workload: str) -> dict[str, Measurement]:
        """Boot the servers of ``order`` afresh every round (or, with ``interleave_runs``, both up at
        once, runs interleaved), each with its share of the workload's runs; the pooled measurements."""
        from dataclasses import replace

        from specwatch.load.measure import measure, measure_interleaved, merge

        gates = self.profiles.gates
        rounds = gates.alternate_rounds
        wl = self.workload(workload)
        share = replace(wl, runs=max(1, -(-wl.runs // rounds)))
        merged: dict[str, Measurement] = {}
        for r in range(rounds):
            if gates.interleave_runs:
                a, b = order
                self.progress(f"interleaving {a} / {b} run by run: round {r + 1}/{rounds}")
                for name in (a, b):
                    self.pool.stop(name)  # a fresh boot of both every round
                both = [self.pool.get(self.profiles.get(a)), self.pool.get(self.profiles.get(b), keep=(a,))]
                for name, m in zip((a, b), measure_interleaved(both, share, self.progress), strict=True):
                    merged[name] = merge(merged[name], m) if name in merged else m
                continue
            for name in order:
                self.progress(f"alternating {' / '.join(order)}: round {r + 1}/{rounds}, {name}")
                self.pool.stop(name)  # a fresh boot every round
                m = measure(self.server(name), share, self.progress)
                merged[name] = merge(merged[name], m) if name in merged else m
        return merged

    # -- what measurements are compared against --------------------------------------------

    def fingerprint(self) -> dict[str, Any]:
        """This machine's fingerprint with the engines under test, their version and commit (engine_identity)."""
        from specwatch.server.gpu import gpu_report
        from specwatch.store.machine import engine_identity, fingerprint

        servers = self.profiles.servers
        if self._fingerprint is None:
            self._fingerprint = fingerprint(engine="+".join(sorted({p.engine for p in servers.values()})),
                                            gpus=gpu_report())
            self._fingerprint.update({"machine_class": self.config.machine_class} if self.config.machine_class else {})
        local = [] if self.config.server_url else [(p.engine, p.interpreter()) for p in servers.values()]
        served = [(servers[m.profile].engine, m.server_info_after) for m in self.measurements.values()
                  if m.profile in servers]
        self._fingerprint.update(engine_identity(local, served), **fingerprint_fields(self._yardstick))
        return self._fingerprint

    def machine_class(self) -> str:
        return str(self.fingerprint()["machine_class"])

    def commit(self) -> str | None:
        """The commit of the server under test: --specwatch-commit, else git HEAD of the working directory."""
        if self.config.commit:
            return self.config.commit
        import subprocess

        try:
            out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                                 cwd=self.config.rootdir)
        except (OSError, subprocess.TimeoutExpired):
            return None
        sha = out.stdout.strip()
        return sha if out.returncode == 0 and len(sha) == 40 else None

    def reference_samples(self, profile: str, workload: str, metric: str) -> Reference | str:
        """Samples to compare against, with this run's machine and its class's spread; or a message saying how
        to record them (:func:`specwatch.run.reference.reference_samples`)."""
        return reference_samples(self, profile, workload, metric)

    def engine_of(self, server: str) -> str:
        """The engine ``server`` runs ('' for a name the profiles do not hold, e.g. a --specwatch-reference key)."""
        return self.profiles.servers[server].engine if server in self.profiles.servers else ""

    def warn_once(self, text: str) -> None:
        """Say a warning once per run (a baseline's fingerprint warning, met by every drift test)."""
        if text not in self._warned:
            self._warned.add(text)
            self.progress(text)

    def note(self, check: str, profile: str, ok: bool, summary: str) -> None:
        """Record a check's conclusion, once, for later diagnosis of perf failures."""
        if CheckNote(check, profile, ok, summary) not in self.findings:
            self.findings.append(CheckNote(check, profile, ok, summary))

    def findings_for(self, profile: str) -> list[CheckNote]:
        return [f for f in self.findings if f.profile == profile]

    def live_profiles(self) -> list[str]:
        """The profiles whose servers run now (the lossless check asks them first)."""
        return list(self._pool.live) if self._pool is not None else []

    # -- hooks' helpers (the plugin's hooks are one line each) --------------------------------

    def servers_of(self, item: Any) -> list[str]:
        """Profile names a test item needs (:func:`specwatch.run.ordering.servers_of`)."""
        from specwatch.run.ordering import servers_of

        return servers_of(item, self.profiles, self.profile_for)

    def order_items(self, items: list[Any]) -> list[Any]:
        """Tests grouped by the server they need (:func:`specwatch.run.ordering.order_items`)."""
        from specwatch.run.ordering import order_items

        return order_items(items, self.profiles, self.profile_for)

    def failed(self, item: Any, excinfo: Any, report: Any) -> None:
        """A test failed: attach its servers' log tails and count it as infrastructure or verdict.

        A test that needed a server the run cannot provide is turned into a skip with the reason.
        """
        if excinfo is not None and excinfo.errisinstance(ServerUnavailable):
            path, line, _ = item.location
            report.outcome = "skipped"
            report.longrepr = (str(path), (line or 0) + 1, f"Skipped: {excinfo.value}")
            return
        report.sections.extend(self.log_sections(item))
        if excinfo is not None and excinfo.errisinstance(InfraError):
            self.infra_failures += 1
        else:
            self.verdict_failures += 1

    def log_sections(self, item: Any) -> list[tuple[str, str]]:
        """The log tails of the servers a failing test used (or of every live server)."""
        names = self.servers_of(item)
        live = self._pool.live if self._pool else {}
        chosen = [live[n] for n in names if n in live] or list(live.values())
        return [(f"specwatch server log: {s.profile.name} ({s.log_path})", s.log_tail(40)) for s in chosen]

    def header_lines(self, perf_run: bool) -> list[str]:
        """pytest's header: where this run reads and writes (on a perf run), and any project note."""
        cfg = self.config
        lines = [f"specwatch: {self.project_note}"] if self.project_note else []
        if perf_run:
            lines.append(f"specwatch: project {cfg.rootdir}; baselines {cfg.path(cfg.baseline_dir)}; reports "
                         f"{cfg.path(cfg.report_dir)}; history {self._history_label()}"
                         + ("; a missing baseline fails" if cfg.require_baseline else ""))
        return lines

    def _history_label(self) -> str:
        """Where history goes, for people: a path, or a database URL without its password."""
        from specwatch.store.history import is_url
        from specwatch.store.history_postgres import redact

        history = self.config.history
        if not history:
            return "off"
        return redact(history) if is_url(history) else str(self.config.path(history))

    def missing_baseline(self, test: str, message: str) -> None:
        """A drift test found nothing to compare against: remembered for the summary."""
        self.missing_baselines.append(f"{test}: {message}")

    def record(self) -> RunRecord:
        """This run's record: results, verdict rows, notes and failure counts (see :class:`RunRecord`)."""
        from specwatch.run.summary import note_lines, results_of

        return RunRecord(results=results_of(self.measurements, self.fingerprint(), self.commit()),
                         rows=list(self.verdict_rows),
                         notes=note_lines(self.findings, self.measurements, self.missing_baselines),
                         infra_failures=self.infra_failures, verdict_failures=self.verdict_failures,
                         perf_tests=self.perf_tests_run)

    def summary_lines(self) -> list[str]:
        """Lines for the end-of-run summary table (under xdist: the workers' records, gathered)."""
        from specwatch.run.summary import summary_lines, table_rows
        from specwatch.store.machine import engine_text

        if self.gathered.workers or self.gathered.notes:
            if not self.gathered.measured:
                return list(self.gathered.notes)
            return (summary_lines(table_rows(self.gathered), self.gathered.notes,
                                  engine_text(self.gathered.results.machine)) + self._written_lines())
        if not self.measurements and not self.verdict_rows:
            return self._written_lines()
        rec = self.record()
        return summary_lines(table_rows(rec), rec.notes, engine_text(rec.results.machine)) + self._written_lines()

    def _written_lines(self) -> list[str]:
        notes = [f"specwatch: {self.project_note}"] if self.project_note else []
        return notes + [f"specwatch wrote {p}" for p in self.written]

    def worker_down(self, worker: str, output: dict[str, Any] | None, error: Any) -> None:
        """The controller's side of an xdist worker finishing: merge the record it sent."""
        text = (output or {}).get(PAYLOAD_KEY)
        if text:
            self.gathered.merge(RunRecord.from_json(text))
        elif error is not None:
            self.gathered.lost(worker, error)

    def finish(self, exitstatus: int = 0, workeroutput: dict[str, Any] | None = None) -> int:
        """Persist the run's record (results, history, baselines), stop the servers, and return the
        exit status: pytest's, except EXIT_INFRA when every failure was the harness's (a server
        that failed to boot is not a regression).

        An xdist worker (``workeroutput`` given) persists nothing: it hands its record to the
        controller, which persists all workers' records once.
        """
        from specwatch.run.summary import persist

        try:
            if workeroutput is not None:
                workeroutput[PAYLOAD_KEY] = self.record().to_json(self.worker_id)
            else:
                # a run of checks alone (cache life, prefix reuse) has rows and no throughput: still written
                rec = self.gathered if self.gathered.measured else self.record()
                if rec.measured:
                    cfg = self.config

                    def tolerance_for(profile: str) -> float:
                        prof = self.profiles.servers.get(profile)
                        return (prof.tolerance if prof else None) or cfg.tolerance

                    self.written = persist(rec, cfg, perf_run=self.perf_tests_run > 0 or rec.perf_tests > 0,
                                           machine_class=self.machine_class, tolerance_for=tolerance_for,
                                           progress=self.progress, partial=self._partial(exitstatus))
        finally:
            self.close()
        infra = self.infra_failures + self.gathered.infra_failures
        verdict = self.verdict_failures + self.gathered.verdict_failures
        if exitstatus == 1 and infra and not verdict:
            return EXIT_INFRA
        return exitstatus

    def _partial(self, exitstatus: int) -> str:
        """Why this run's measurements are incomplete ("" when they are not)."""
        import pytest

        if exitstatus == pytest.ExitCode.INTERRUPTED:
            return "interrupted"
        infra = self.infra_failures + self.gathered.infra_failures
        return f"{infra} test(s) could not measure (infrastructure)" if infra else ""

    def close(self) -> None:
        """Stop every server this session started."""
        if self._pool is not None:
            self._pool.stop_all()
