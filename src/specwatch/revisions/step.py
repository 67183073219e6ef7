"""One revision's measurement, shared by ``specwatch ab``, ``bisect`` and ``bisect-patches``.

A measurement runs the setup command in a checkout, then ``python -m pytest PYTEST-ARGS
--specwatch-results FILE`` in its own process group (killed on timeout or Ctrl-C by
:func:`specwatch.server.process.kill_process_group`), and stores the verdict, the results file and
the log in a :class:`~specwatch.revisions.memo.Memo`. Results files are read by the versioned
loader of :mod:`specwatch.store.result`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from specwatch.errors import SpecwatchError, UsageError
from specwatch.revisions.memo import BAD, GOOD, SKIP, Memo, RevisionRun
from specwatch.server.process import die_with_parent, kill_process_group
from specwatch.store.result import Result, ResultSet


@dataclass(frozen=True)
class MeasureConfig:
    """How one revision is measured; identical for every step of one bisection."""

    pytest_args: tuple[str, ...]
    setup: str | None = None
    python: str = sys.executable
    workdir: str | None = None  # where pytest runs; None: the checkout being measured
    timeout_s: float | None = None  # per setup command and per pytest run

    @classmethod
    def make(cls, pytest_args: Sequence[str], setup: str | None = None, python: str | None = None,
             workdir: str | Path | None = None, timeout_s: float | None = None) -> MeasureConfig:
        """From command-line values: this interpreter by default, the work folder made absolute.
        UsageError (one line, before anything is checked out) for an interpreter that does not run,
        a work folder that is not one, or a timeout that is not a positive number of seconds."""
        if python and shutil.which(python) is None:
            raise UsageError(f"--python {python}: no such executable")
        if workdir and not Path(workdir).is_dir():
            raise UsageError(f"--workdir {workdir}: no such folder")
        if timeout_s is not None and not (math.isfinite(timeout_s) and timeout_s > 0):
            raise UsageError(f"--step-timeout must be a positive number of seconds, got {timeout_s:g}")
        return cls(pytest_args=tuple(pytest_args), setup=setup, python=python or sys.executable,
                   workdir=str(Path(workdir).resolve()) if workdir else None, timeout_s=timeout_s)

    def fingerprint(self, *anchor: str) -> str:
        """A short hash of everything that changes what a memoised verdict means."""
        blob = json.dumps([list(self.pytest_args), self.setup, self.python, self.workdir, *anchor])
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["pytest_args"] = list(self.pytest_args)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MeasureConfig:
        return cls(**{**data, "pytest_args": tuple(data["pytest_args"])})


def classify(pytest_rc: int | None, results_ok: bool, failures: int = 0, errors: int = 0, skipped: int = 0,
             tests: int | None = None) -> tuple[str, str]:
    """Map a pytest run to (verdict, reason); anything that is not a clean measurement is skip.
    ``tests``/``skipped`` (from the JUnit file) make the reason say what ran: a clean run whose
    every gate was skipped is a measurement, not "all gates passed"."""
    if pytest_rc is None:
        return SKIP, "pytest timed out"
    if not results_ok:
        return SKIP, f"no results file written (pytest exit {pytest_rc})"
    if pytest_rc == 0:
        passed = None if tests is None else tests - skipped - failures - errors
        if passed == 0 and skipped:
            return GOOD, f"measured; every gate was skipped ({skipped} skipped, none ran)"
        if skipped:
            return GOOD, f"measured; {passed} gate(s) passed, {skipped} skipped" if passed is not None else (
                f"measured; {skipped} gate(s) skipped, the rest passed")
        return GOOD, "all gates passed" if passed is None else f"all {passed} gate(s) passed"
    if pytest_rc == 1:
        if errors and not failures:
            return SKIP, f"{errors} error(s) and no failed gate: could not measure (server boot?)"
        return BAD, f"{failures} failed gate(s)" if failures else "pytest reported a failed gate"
    return SKIP, f"pytest exit {pytest_rc} (interrupted, internal or usage error, or nothing collected)"


def _results(path: str | Path | None) -> list[Result]:
    """The results of a results file (read by the versioned loader, older versions migrated); empty when it is
    missing, unreadable or of another format."""
    if path is None:
        return []
    try:
        return ResultSet.load(path).results
    except (SpecwatchError, OSError):
        return []


def samples_of(path: str | Path | None) -> dict[str, tuple[list[float], str, bool]]:
    """key -> (samples, unit, higher_is_better) of a results file (empty when it cannot be read)."""
    return {r.key: ([float(x) for x in r.samples], r.unit, r.higher_is_better) for r in _results(path) if r.samples}


def served_of(path: str | Path | None) -> dict[str, str]:
    """key -> what its servers served (the results' ``extra.served``: the string form of
    :class:`specwatch.served.Served`, parsed where a prior is matched) of a results file; empty when it cannot be
    read, or records none."""
    return {r.key: str(r.extra["served"]) for r in _results(path) if r.extra.get("served")}


def run_logged(
    cmd: Sequence[str] | str, *, cwd: Path, env: Mapping[str, str], log: TextIO, timeout_s: float | None
) -> int | None:
    """Run a command in its own process group, output to `log`; None on timeout (group killed)."""
    log.write(f"$ {cmd if isinstance(cmd, str) else ' '.join(cmd)}   (in {cwd})\n")
    log.flush()
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=dict(env),
        shell=isinstance(cmd, str),
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        # its own process group, so a timeout or Ctrl-C can take down servers it started, and
        # SIGTERM when this process is killed (kill -9 of ab or bisect leaves no run behind)
        preexec_fn=die_with_parent,
    )
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_process_group(proc)
        log.write(f"\n[specwatch] timed out after {timeout_s} s; process group killed\n")
        return None
    except BaseException:
        kill_process_group(proc)
        raise


#: how long one outcome's text may be: the first line of a failure's message, cut here
OUTCOME_CHARS = 240


def junit_outcomes(path: Path) -> dict[str, str]:
    """Every test of a JUnit XML file and its outcome, ``"<module>::<test>"`` -> ``"passed"``, ``"failed: ..."``,
    ``"skipped: ..."`` or ``"error: ..."`` (the first line of pytest's message, cut at :data:`OUTCOME_CHARS`);
    empty when the file is missing or unreadable. A test that errored in teardown after it passed reads error."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return {}
    out: dict[str, str] = {}
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name', '?')}"
        outcome = "passed"
        for kind in ("skipped", "failure", "error"):  # the last found wins: an error outranks a failure
            node = case.find(kind)
            if node is not None:
                text = (node.get("message") or node.text or "").strip().splitlines()
                first = text[0][:OUTCOME_CHARS] if text else ""
                word = "failed" if kind == "failure" else kind
                outcome = f"{word}: {first}" if first else word
        out[name] = outcome
    return out


def _counts(outcomes: Mapping[str, str]) -> tuple[int, int, int, int | None]:
    """(failures, errors, skipped, tests) of :func:`junit_outcomes`; (0, 0, 0, None) when it read nothing."""
    if not outcomes:
        return 0, 0, 0, None
    kinds = [o.split(":", 1)[0] for o in outcomes.values()]
    return kinds.count("failed"), kinds.count("error"), kinds.count("skipped"), len(kinds)


def _results_ok(path: Path) -> bool:
    return bool(samples_of(path))


def step_environment(commit: str, checkout: Path, base: Mapping[str, str]) -> dict[str, str]:
    """The environment of one round's pytest run, from ``base`` (the caller's).

    - ``GITHUB_STEP_SUMMARY`` is dropped: the user's step summary gets the verdict, not a table per round.
    - ``SPECWATCH_YARDSTICK`` defaults to ``off``: both sides of a round run on one machine, so the
      machine yardstick (which tells machines apart) adds about 7 s a side on a GPU host and nothing to
      the verdict. A value the user set, or ``--specwatch-yardstick`` in PYTEST-ARGS, still wins.
    """
    env = {k: v for k, v in base.items() if k != "GITHUB_STEP_SUMMARY"}
    env.setdefault("SPECWATCH_YARDSTICK", "off")
    env.update({"SPECWATCH_COMMIT": commit, "SPECWATCH_BISECT_CHECKOUT": str(checkout)})
    return env


def measure(
    checkout: Path,
    cfg: MeasureConfig,
    memo: Memo,
    ident: str,
    label: str,
    *,
    reference: Path | None,
    commit: str,
    session: str,
) -> RevisionRun:
    """Set up and measure one checkout; store and return the memo entry."""
    start = time.monotonic()
    results = memo.results_path(ident)
    results.unlink(missing_ok=True)
    env = step_environment(commit, checkout, os.environ)
    with tempfile.TemporaryDirectory(prefix="specwatch-step-") as tmp, memo.log_path(ident).open("w") as log:
        tmp_results, junit = Path(tmp) / "results.json", Path(tmp) / "junit.xml"
        rc: int | None = None
        outcomes: dict[str, str] = {}
        setup_rc: int | None = 0
        verdict, reason = SKIP, "not measured"
        if cfg.setup:
            setup_rc = run_logged(cfg.setup, cwd=checkout, env=env, log=log, timeout_s=cfg.timeout_s)
            if setup_rc != 0:
                why = "timed out" if setup_rc is None else f"exit {setup_rc}"
                verdict, reason = SKIP, f"setup failed ({why})"
        if setup_rc == 0:
            # `--opt=value` in one word: pytest's early parse would otherwise take an unknown
            # option's value for a test path and load conftest.py files along it
            cmd = [cfg.python, "-m", "pytest", *cfg.pytest_args, f"--specwatch-results={tmp_results}"]
            if reference is not None:
                cmd.append(f"--specwatch-reference={reference}")
            cmd.append(f"--junitxml={junit}")
            cwd = Path(cfg.workdir) if cfg.workdir else checkout
            rc = run_logged(cmd, cwd=cwd, env=env, log=log, timeout_s=cfg.timeout_s)
            ok = _results_ok(tmp_results)
            outcomes = junit_outcomes(junit)
            verdict, reason = classify(rc, ok, *_counts(outcomes))
            if ok:
                shutil.copyfile(tmp_results, results)
        log.write(f"\n[specwatch] verdict: {verdict} ({reason})\n")
    entry = RevisionRun(
        ident=ident,
        label=label,
        verdict=verdict,
        reason=reason,
        pytest_rc=rc,
        results=str(results) if results.exists() else None,
        seconds=round(time.monotonic() - start, 3),
        measured=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        session=session,
        outcomes=outcomes,
    )
    memo.put(entry)
    return entry
