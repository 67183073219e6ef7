"""One revision's measurement, shared by ``specwatch ab``, ``bisect`` and ``bisect-patches``.

A measurement runs the setup command in a checkout, then ``python -m pytest PYTEST-ARGS
--specwatch-results FILE`` in its own process group (killed on timeout or Ctrl-C), and stores the
verdict, the results file and the log in a :class:`Memo`. Also the git helpers those commands
share: resolving revisions, temporary detached worktrees, the default memo folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from specwatch.errors import InfraError, SpecwatchError, UsageError
from specwatch.server.process import die_with_parent

GOOD, BAD, SKIP = "good", "bad", "skip"
MEMO_VERSION = 2  # 2: a step's verdict is an A/B against the good revision in alternating rounds


@dataclass(frozen=True)
class MeasureConfig:
    """How one revision is measured; identical for every step of one bisection."""

    pytest_args: tuple[str, ...]
    setup: str | None = None
    python: str = sys.executable
    workdir: str | None = None  # where pytest runs; None: the checkout being measured
    timeout_s: float | None = None  # per setup command and per pytest run

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


@dataclass
class RevisionRun:
    """The memoised outcome of measuring one revision (a commit or a patch prefix)."""

    ident: str  # commit sha, or "prefix-<k>-<hash>"
    label: str  # subject line or patch description
    verdict: str  # good | bad | skip
    reason: str
    pytest_rc: int | None
    results: str | None  # path of the results file in the memo directory
    seconds: float
    measured: str  # ISO date
    session: str  # id of the bisection run that measured it
    # a step's verdict entry: {"kind": "step", "rounds": n, "keys": [...], ...}; {} for one measurement
    detail: dict[str, Any] = field(default_factory=dict)
    cached: bool = field(default=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("cached")
        data["version"] = MEMO_VERSION
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RevisionRun:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data and k != "cached"}
        return cls(**known, cached=True)


def classify(pytest_rc: int | None, results_ok: bool, failures: int = 0, errors: int = 0) -> tuple[str, str]:
    """Map a pytest run to (verdict, reason); anything that is not a clean measurement is skip."""
    if pytest_rc is None:
        return SKIP, "pytest timed out"
    if not results_ok:
        return SKIP, f"no results file written (pytest exit {pytest_rc})"
    if pytest_rc == 0:
        return GOOD, "all gates passed"
    if pytest_rc == 1:
        if errors and not failures:
            return SKIP, f"{errors} error(s) and no failed gate: could not measure (server boot?)"
        return BAD, f"{failures} failed gate(s)" if failures else "pytest reported a failed gate"
    return SKIP, f"pytest exit {pytest_rc} (interrupted, internal or usage error, or nothing collected)"


def write_json_atomic(path: Path, data: Any) -> None:
    from specwatch.store.atomic import write_text_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


class Memo:
    """One fingerprint directory: ``<ident>.verdict.json``, ``<ident>.results.json``, ``<ident>.log``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def entry_path(self, ident: str) -> Path:
        return self.root / f"{ident}.verdict.json"

    def results_path(self, ident: str) -> Path:
        return self.root / f"{ident}.results.json"

    def log_path(self, ident: str) -> Path:
        return self.root / f"{ident}.log"

    def get(self, ident: str) -> RevisionRun | None:
        path = self.entry_path(ident)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("version") != MEMO_VERSION or "verdict" not in data:
            return None
        return RevisionRun.from_json(data)

    def put(self, measurement: RevisionRun) -> None:
        write_json_atomic(self.entry_path(measurement.ident), measurement.to_json())

    def entries(self) -> list[RevisionRun]:
        found = [self.get(p.name[: -len(".verdict.json")]) for p in self.root.glob("*.verdict.json")]
        return [m for m in found if m is not None]


@dataclass(frozen=True)
class Series:
    """One results entry reduced to its median (a results file without any holds no measurement)."""

    key: str
    median: float
    unit: str
    higher_is_better: bool
    n: int


def samples_of(path: str | Path | None) -> dict[str, tuple[list[float], str, bool]]:
    """key -> (samples, unit, higher_is_better) of a results file (read by the versioned loader,
    older versions migrated); empty when it is missing, unreadable or of another format."""
    from specwatch.store.result import ResultSet

    if path is None:
        return {}
    try:
        rs = ResultSet.load(path)
    except (SpecwatchError, OSError):
        return {}
    return {r.key: ([float(x) for x in r.samples], r.unit, r.higher_is_better) for r in rs.results if r.samples}


def read_series(path: str | Path | None) -> dict[str, Series]:
    """Key -> Series of a results file; empty when the file is missing or unreadable (one reader:
    :func:`samples_of`, the versioned results loader)."""
    return {key: Series(key=key, median=statistics.median(samples), unit=unit, higher_is_better=higher,
                        n=len(samples))
            for key, (samples, unit, higher) in samples_of(path).items()}


def git(repo: Path, *args: str, check: bool = True) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise InfraError(f"git {' '.join(args)} failed in {repo}: {proc.stderr.strip()}")
    return proc.stdout.strip()


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
        kill_group(proc)
        log.write(f"\n[specwatch] timed out after {timeout_s} s; process group killed\n")
        return None
    except BaseException:
        kill_group(proc)
        raise


def kill_group(proc: subprocess.Popen[Any]) -> None:
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _junit_counts(path: Path) -> tuple[int, int]:
    """(failures, errors) in a JUnit XML file; (0, 0) if it is missing."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return 0, 0
    return sum(1 for _ in root.iter("failure")), sum(1 for _ in root.iter("error"))


def _results_ok(path: Path) -> bool:
    return bool(read_series(path))


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
    # one measurement of many: the user's step summary gets the verdict, not a table per round
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    env.update({"SPECWATCH_COMMIT": commit, "SPECWATCH_BISECT_CHECKOUT": str(checkout)})
    with tempfile.TemporaryDirectory(prefix="specwatch-step-") as tmp, memo.log_path(ident).open("w") as log:
        tmp_results, junit = Path(tmp) / "results.json", Path(tmp) / "junit.xml"
        rc: int | None = None
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
            verdict, reason = classify(rc, ok, *_junit_counts(junit))
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
    )
    memo.put(entry)
    return entry


def default_memo(repo: Path) -> Path:
    common = Path(git(repo, "rev-parse", "--git-common-dir"))
    if not common.is_absolute():
        common = repo / common
    return common / "specwatch" / "bisect"


def toplevel(repo: str | Path) -> Path:
    path = Path(repo).resolve()
    if not path.is_dir():
        raise UsageError(f"--repo {repo}: no such directory")
    proc = subprocess.run(["git", "-C", str(path), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise UsageError(f"--repo {repo}: not a git work tree")
    return Path(proc.stdout.strip())


def resolve_rev(repo: Path, rev: str, flag: str) -> str:
    proc = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise UsageError(f"{flag} {rev}: not a commit in {repo}")
    return proc.stdout.strip()


def subject(repo: Path, sha: str) -> str:
    return git(repo, "log", "-1", "--format=%s", sha)


def dirty_files(repo: Path) -> str:
    return git(repo, "status", "--porcelain", "--untracked-files=no")


@contextlib.contextmanager
def worktree(top: Path, base: str) -> Iterator[Path]:
    """A temporary detached worktree of `base`, removed afterwards."""
    tmp = Path(tempfile.mkdtemp(prefix="specwatch-bisect-"))
    path = tmp / "tree"
    try:
        git(top, "worktree", "add", "--quiet", "--detach", str(path), base)
        yield path
    finally:
        subprocess.run(["git", "-C", str(top), "worktree", "remove", "--force", str(path)],
                       capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run(["git", "-C", str(top), "worktree", "prune"], capture_output=True)


