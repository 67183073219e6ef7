"""Find the change that made the server under test slower.

Two searches share one measurement step:

* ``specwatch bisect --repo PATH --good REV --bad REV -- PYTEST-ARGS`` drives ``git bisect run``
  over the commits of the server's source tree;
* ``specwatch bisect-patches --repo PATH --base REV P1 P2 ... -- PYTEST-ARGS`` binary-searches the
  length k of a prefix of an ordered patch list, applied cumulatively onto ``base`` in a temporary
  ``git worktree``.

One measurement = run the setup command in the checkout (for example ``pip install -e .``), then
``python -m pytest PYTEST-ARGS --specwatch-results FILE --specwatch-reference GOOD_RESULTS``. The
good revision (or the bare base) is measured first, in the same session, and its results file is
the reference of every later step, so every verdict compares two revisions measured on the same
machine in the same session. Verdicts, as ``git bisect run`` wants them:

* pytest exit 0 with a results file: good (0);
* pytest exit 1 with a results file (a failed gate): bad (1), unless the only problems were
  *errors* (a fixture that could not set up, such as a server that did not boot): skip;
* setup failure, timeout, pytest exit 2-5 or a missing/empty results file: skip (125), never bad.

Each measurement is memoised in the memo directory (by default ``<git-dir>/specwatch/bisect``,
which never dirties the work tree): results file, verdict and log per commit (or per patch
prefix), in a sub-directory named by a fingerprint of the settings (pytest arguments, setup
command, interpreter, reference revision), so rerunning the same bisection measures nothing again.

``git bisect run`` needs an executable; it runs ``python -m specwatch.bisect step --config FILE``,
which reads its settings from a JSON file in the memo directory.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from specwatch.errors import (
    EXIT_INFRA,
    EXIT_OK,
    EXIT_REGRESSION,
    EXIT_USAGE,
    InfraError,
    SpecwatchError,
    UsageError,
)

GOOD, BAD, SKIP = "good", "bad", "skip"
EXIT_CODES = {GOOD: 0, BAD: 1, SKIP: 125}  # what `git bisect run` understands
ABORT_CODE = 255  # any code above 127 makes `git bisect run` stop
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report it
MEMO_VERSION = 1
PREFIX = "[bisect]"


# --------------------------------------------------------------------------------------------
# settings, memo entries, verdicts


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
class Measurement:
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
    cached: bool = field(default=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("cached")
        data["version"] = MEMO_VERSION
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Measurement:
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


def _atomic_write_json(path: Path, data: Any) -> None:
    from specwatch.atomic import write_text_atomic

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

    def get(self, ident: str) -> Measurement | None:
        path = self.entry_path(ident)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("version") != MEMO_VERSION or "verdict" not in data:
            return None
        return Measurement.from_json(data)

    def put(self, measurement: Measurement) -> None:
        _atomic_write_json(self.entry_path(measurement.ident), measurement.to_json())

    def entries(self) -> list[Measurement]:
        found = [self.get(p.name[: -len(".verdict.json")]) for p in self.root.glob("*.verdict.json")]
        return [m for m in found if m is not None]


# --------------------------------------------------------------------------------------------
# results files (the documented format; read directly so bisect depends on nothing in flux)


@dataclass(frozen=True)
class Series:
    """One results entry reduced to what the progress lines need."""

    key: str
    median: float
    unit: str
    higher_is_better: bool
    n: int


def read_series(path: str | Path | None) -> dict[str, Series]:
    """Key -> Series of a results file; empty when the file is missing or unreadable."""
    if path is None:
        return {}
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    out: dict[str, Series] = {}
    if not isinstance(data, dict):
        return out
    for entry in data.get("results") or []:
        samples = [float(x) for x in entry.get("samples") or []]
        if not samples or "key" not in entry:
            continue
        out[entry["key"]] = Series(
            key=entry["key"],
            median=statistics.median(samples),
            unit=str(entry.get("unit", "")),
            higher_is_better=bool(entry.get("higher_is_better", True)),
            n=len(samples),
        )
    return out


def compare_series(new: Mapping[str, Series], ref: Mapping[str, Series]) -> list[tuple[Series, Series, float]]:
    """(new, ref, ratio new/ref) for shared keys, the most worsened first."""
    rows = []
    for key, s in new.items():
        r = ref.get(key)
        if r is None or r.median == 0:
            continue
        rows.append((s, r, s.median / r.median))

    def worse_first(row: tuple[Series, Series, float]) -> float:
        s, _, ratio = row
        return ratio if s.higher_is_better else -ratio

    return sorted(rows, key=worse_first)


def _fmt(x: float) -> str:
    ax = abs(x)
    if ax >= 100:
        return f"{x:.1f}"
    if ax >= 1:
        return f"{x:.2f}"
    return f"{x:.4g}"


def key_numbers(results: str | None, reference: str | None, limit: int = 2) -> str:
    """'key 82.0 vs 89.0 tok/s (-7.9%)' for the most worsened keys."""
    rows = compare_series(read_series(results), read_series(reference))
    parts = []
    for s, r, ratio in rows[:limit]:
        parts.append(f"{s.key} {_fmt(s.median)} vs {_fmt(r.median)} {s.unit} ({(ratio - 1) * 100:+.1f}%)")
    return "; ".join(parts)


# --------------------------------------------------------------------------------------------
# running commands


def _git(repo: Path, *args: str, check: bool = True) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise InfraError(f"git {' '.join(args)} failed in {repo}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def _run_logged(
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
        start_new_session=True,  # so a timeout or Ctrl-C can take down servers it started
    )
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        log.write(f"\n[specwatch] timed out after {timeout_s} s; process group killed\n")
        return None
    except BaseException:
        _kill_group(proc)
        raise


def _kill_group(proc: subprocess.Popen[Any]) -> None:
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
) -> Measurement:
    """Set up and measure one checkout; store and return the memo entry."""
    start = time.monotonic()
    results = memo.results_path(ident)
    results.unlink(missing_ok=True)
    env = dict(os.environ)
    env.update({"SPECWATCH_COMMIT": commit, "SPECWATCH_BISECT_CHECKOUT": str(checkout)})
    with tempfile.TemporaryDirectory(prefix="specwatch-step-") as tmp, memo.log_path(ident).open("w") as log:
        tmp_results, junit = Path(tmp) / "results.json", Path(tmp) / "junit.xml"
        rc: int | None = None
        setup_rc: int | None = 0
        verdict, reason = SKIP, "not measured"
        if cfg.setup:
            setup_rc = _run_logged(cfg.setup, cwd=checkout, env=env, log=log, timeout_s=cfg.timeout_s)
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
            rc = _run_logged(cmd, cwd=cwd, env=env, log=log, timeout_s=cfg.timeout_s)
            ok = _results_ok(tmp_results)
            verdict, reason = classify(rc, ok, *_junit_counts(junit))
            if ok:
                shutil.copyfile(tmp_results, results)
        log.write(f"\n[specwatch] verdict: {verdict} ({reason})\n")
    entry = Measurement(
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


def progress_line(m: Measurement, reference: str | None) -> str:
    """One line per step: rev, subject, verdict, key numbers, where the verdict came from."""
    ident = m.ident[:10] if re.fullmatch(r"[0-9a-f]{40}", m.ident) else m.ident
    label = m.label if len(m.label) <= 48 else m.label[:45] + "..."
    numbers = key_numbers(m.results, reference) if reference else ""
    detail = numbers if m.verdict != SKIP else m.reason
    source = "memo" if m.cached else f"{m.seconds:.1f} s"
    return f"{PREFIX} {ident} {label!r:<50} {m.verdict.upper():<4}  {detail}  ({source})"


# --------------------------------------------------------------------------------------------
# commit bisection


@dataclass
class Outcome:
    """What a bisection found; idents are commit shas or patch-prefix ids."""

    first_bad: str | None  # None when skipped revisions leave it ambiguous (see candidates)
    last_good: str | None
    candidates: list[str]  # ambiguous range, in order; [first_bad] when found
    visited: list[Measurement]  # in visiting order
    measured_now: int  # how many measurements this run made (the rest came from the memo)
    memo_dir: Path


def _default_memo(repo: Path) -> Path:
    common = Path(_git(repo, "rev-parse", "--git-common-dir"))
    if not common.is_absolute():
        common = repo / common
    return common / "specwatch" / "bisect"


def _toplevel(repo: str | Path) -> Path:
    path = Path(repo).resolve()
    if not path.is_dir():
        raise UsageError(f"--repo {repo}: no such directory")
    proc = subprocess.run(["git", "-C", str(path), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise UsageError(f"--repo {repo}: not a git work tree")
    return Path(proc.stdout.strip())


def _resolve(repo: Path, rev: str, flag: str) -> str:
    proc = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise UsageError(f"{flag} {rev}: not a commit in {repo}")
    return proc.stdout.strip()


def _subject(repo: Path, sha: str) -> str:
    return _git(repo, "log", "-1", "--format=%s", sha)


def _dirty(repo: Path) -> str:
    return _git(repo, "status", "--porcelain", "--untracked-files=no")


def _bisecting(repo: Path) -> bool:
    path = Path(_git(repo, "rev-parse", "--git-path", "BISECT_START"))
    return (path if path.is_absolute() else repo / path).exists()


def _python_path_env() -> dict[str, str]:
    """Environment in which ``python -m specwatch.bisect`` finds this very package."""
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
    return env


def _step_commit(config_path: Path, out: TextIO) -> int:
    """Measure HEAD of the bisected repo (memoised); print one line; return git's exit code."""
    conf = json.loads(config_path.read_text())
    repo, memo = Path(conf["repo"]), Memo(Path(conf["memo"]))
    cfg = MeasureConfig.from_json(conf["measure"])
    sha = _git(repo, "rev-parse", "HEAD")
    entry = memo.get(sha)
    if entry is None:
        entry = measure(
            repo,
            cfg,
            memo,
            sha,
            _subject(repo, sha),
            reference=Path(conf["reference"]),
            commit=sha,
            session=conf["session"],
        )
        if _dirty(repo):  # the setup rewrote tracked files; the tree was clean when we started
            _git(repo, "reset", "--quiet", "--hard")
    print(progress_line(entry, conf["reference"]), file=out, flush=True)
    return EXIT_CODES[entry.verdict]


def _ensure_reference(
    checkout: Path, cfg: MeasureConfig, memo: Memo, ident: str, label: str, commit: str, session: str, out: TextIO
) -> Measurement:
    entry = memo.get(ident)
    if entry is None or entry.results is None:
        entry = measure(checkout, cfg, memo, ident, label, reference=None, commit=commit, session=session)
    if entry.results is None:
        raise InfraError(
            f"cannot measure the reference {label!r}: {entry.reason}; see {memo.log_path(ident)}"
        )
    if entry.pytest_rc not in (0, None):
        print(f"{PREFIX} note: the reference run exited {entry.pytest_rc} (its own gates against stored "
              f"baselines?); its results are used as the reference anyway", file=out)
    short = ident[:10] if re.fullmatch(r"[0-9a-f]{40}", ident) else ident
    print(f"{PREFIX} reference {short} {label!r}: measured "
          f"{'(memo)' if entry.cached else f'in {entry.seconds:.1f} s'}", file=out, flush=True)
    return entry


def _parse_bisect_log(text: str) -> list[tuple[str, str]]:
    """[(verdict, sha)] of `git bisect log` lines, in order (start line excluded)."""
    found = []
    for line in text.splitlines():
        m = re.match(r"git bisect (good|bad|skip) ([0-9a-f]{40})", line)
        if m:
            found.append((m.group(1), m.group(2)))
    return found


def bisect_commits(
    *,
    repo: str | Path,
    good: str,
    bad: str,
    pytest_args: Sequence[str],
    setup: str | None = None,
    memo: str | Path | None = None,
    python: str | None = None,
    workdir: str | Path | None = None,
    timeout_s: float | None = None,
    out: TextIO | None = None,
) -> Outcome:
    """Find the first commit in good..bad whose measurement fails its gate against `good`.

    Raises UsageError (dirty tree, bad revisions, bisect in progress), InfraError (good or bad
    cannot be measured). Always restores the original checkout.
    """
    out = out or sys.stdout
    top = _toplevel(repo)
    good_sha, bad_sha = _resolve(top, good, "--good"), _resolve(top, bad, "--bad")
    if good_sha == bad_sha:
        raise UsageError("--good and --bad name the same commit")
    if subprocess.run(["git", "-C", str(top), "merge-base", "--is-ancestor", good_sha, bad_sha]).returncode:
        raise UsageError(f"--good {good} is not an ancestor of --bad {bad}")
    if _bisecting(top):
        raise UsageError(f"a git bisect is already in progress in {top}; finish it with `git bisect reset`")
    dirty = _dirty(top)
    if dirty:
        raise UsageError(
            f"the work tree {top} has uncommitted changes to tracked files; commit or stash them "
            f"before bisecting (bisect checks out other revisions):\n{dirty}"
        )
    cfg = MeasureConfig(
        pytest_args=tuple(pytest_args),
        setup=setup,
        python=python or sys.executable,
        workdir=str(Path(workdir).resolve()) if workdir else None,
        timeout_s=timeout_s,
    )
    memo_root = Path(memo).resolve() if memo else _default_memo(top)
    store = Memo(memo_root / cfg.fingerprint("commits", good_sha))
    session = uuid.uuid4().hex[:12]
    original = _git(top, "symbolic-ref", "--short", "-q", "HEAD", check=False) or _git(top, "rev-parse", "HEAD")
    print(f"{PREFIX} {top}: good {good_sha[:10]}, bad {bad_sha[:10]}, memo {store.root}", file=out, flush=True)
    visited: list[Measurement] = []
    first_bad: str | None = None
    candidates: list[str] = []
    try:
        _git(top, "checkout", "--quiet", "--detach", good_sha)
        ref = _ensure_reference(top, cfg, store, good_sha, _subject(top, good_sha), good_sha, session, out)
        conf_path = store.root / "step.json"
        _atomic_write_json(
            conf_path,
            {
                "version": MEMO_VERSION,
                "repo": str(top),
                "memo": str(store.root),
                "reference": ref.results,
                "measure": cfg.to_json(),
                "session": session,
            },
        )
        # the bad end first: if it does not reproduce, there is nothing to bisect
        _git(top, "checkout", "--quiet", "--detach", bad_sha)
        _step_commit(conf_path, out)
        bad_entry = store.get(bad_sha)
        assert bad_entry is not None
        visited.append(bad_entry)
        if bad_entry.verdict != BAD:
            return Outcome(None, None, [], visited, _count_session(store, session), store.root)
        started = _git(top, "bisect", "start", bad_sha, good_sha)
        done = re.search(r"^([0-9a-f]{40}) is the first bad commit", started, re.M)
        if done:  # bad is the only commit after good
            first_bad, candidates = done.group(1), [done.group(1)]
        else:
            first_bad, candidates = _bisect_run(top, conf_path, store.root / "bisect-run.log", out)
        steps = _parse_bisect_log(_git(top, "bisect", "log", check=False))
        for verdict, sha in steps:
            entry = store.get(sha)
            if entry is not None and sha != bad_sha and verdict in (GOOD, BAD, SKIP):
                visited.append(entry)
    finally:
        _restore(top, original, out)
    last_good = None
    if first_bad is not None:
        last_good = _last_good_ancestor(top, store, first_bad, good_sha)
    return Outcome(first_bad, last_good, candidates, visited, _count_session(store, session), store.root)


def _count_session(store: Memo, session: str) -> int:
    return sum(1 for m in store.entries() if m.session == session)


def _bisect_run(top: Path, conf_path: Path, log_path: Path, out: TextIO) -> tuple[str | None, list[str]]:
    """Run `git bisect run` with our step, echo progress lines, return (first bad, candidates)."""
    cmd = ["git", "-C", str(top), "bisect", "run", sys.executable, "-m", "specwatch.bisect", "step",
           "--config", str(conf_path)]
    text: list[str] = []
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=_python_path_env(), stdin=subprocess.DEVNULL)
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                text.append(line)
                if line.startswith((PREFIX, "Bisecting:")) or "Traceback" in line or "Error" in line:
                    out.write(line)
                    out.flush()
            proc.wait()
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)
    joined = "".join(text)
    found = re.search(r"^([0-9a-f]{40}) is the first bad commit", joined, re.M)
    if found:
        return found.group(1), [found.group(1)]
    if "could be any of" in joined:
        tail = joined.split("could be any of", 1)[1]
        return None, re.findall(r"^([0-9a-f]{40})\s*$", tail, re.M)
    raise InfraError(f"git bisect run did not finish (exit {proc.returncode}); see {log_path}")


def _last_good_ancestor(top: Path, store: Memo, first_bad: str, good_sha: str) -> str:
    """Nearest first-parent ancestor of `first_bad` measured good (the good revision at worst)."""
    for sha in _git(top, "rev-list", "--first-parent", f"{good_sha}..{first_bad}^").split():
        entry = store.get(sha)
        if entry is not None and entry.verdict == GOOD:
            return sha
    return good_sha


def _restore(top: Path, original: str, out: TextIO) -> None:
    """Leave the repo as we found it: no bisect in progress, the original branch or commit."""
    try:
        if _bisecting(top):
            _git(top, "bisect", "reset")
    except SpecwatchError as exc:
        print(f"{PREFIX} WARNING: `git bisect reset` failed: {exc}", file=out, flush=True)
    try:
        _git(top, "checkout", "--quiet", "-f", original)  # the tree was clean when we started
        print(f"{PREFIX} checkout restored to {original}", file=out, flush=True)
    except SpecwatchError as exc:
        print(f"{PREFIX} WARNING: could not restore {original}: {exc}", file=out, flush=True)


# --------------------------------------------------------------------------------------------
# patch bisection


@contextlib.contextmanager
def _worktree(top: Path, base: str) -> Iterator[Path]:
    """A temporary detached worktree of `base`, removed afterwards."""
    tmp = Path(tempfile.mkdtemp(prefix="specwatch-bisect-"))
    path = tmp / "tree"
    try:
        _git(top, "worktree", "add", "--quiet", "--detach", str(path), base)
        yield path
    finally:
        subprocess.run(["git", "-C", str(top), "worktree", "remove", "--force", str(path)],
                       capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run(["git", "-C", str(top), "worktree", "prune"], capture_output=True)


def _prefix_ident(base_sha: str, patch_texts: Sequence[bytes]) -> str:
    h = hashlib.sha256(base_sha.encode())
    for text in patch_texts:
        h.update(hashlib.sha256(text).digest())
    return f"prefix-{len(patch_texts)}-{h.hexdigest()[:12]}"


def _prefix_label(patches: Sequence[Path], k: int) -> str:
    return "base" if k == 0 else f"+{k}/{len(patches)} {patches[k - 1].name}"


def bisect_patches(
    *,
    repo: str | Path,
    base: str,
    patches: Sequence[str | Path],
    pytest_args: Sequence[str],
    setup: str | None = None,
    memo: str | Path | None = None,
    python: str | None = None,
    workdir: str | Path | None = None,
    timeout_s: float | None = None,
    out: TextIO | None = None,
) -> Outcome:
    """Find the first patch whose cumulative inclusion makes the gate fail against bare `base`.

    Idents are ``prefix-<k>-<hash>``; ``first_bad``/``candidates`` hold those of the patches'
    prefixes, and :func:`patch_index` turns one back into k (1-based patch number).
    The user's checkout is never touched: every prefix is built in a temporary worktree.
    """
    out = out or sys.stdout
    top = _toplevel(repo)
    base_sha = _resolve(top, base, "--base")
    if not patches:
        raise UsageError("give at least one patch file")
    paths = [Path(p).resolve() for p in patches]
    for p in paths:
        if not p.is_file():
            raise UsageError(f"patch {p}: no such file")
    texts = [p.read_bytes() for p in paths]
    cfg = MeasureConfig(
        pytest_args=tuple(pytest_args),
        setup=setup,
        python=python or sys.executable,
        workdir=str(Path(workdir).resolve()) if workdir else None,
        timeout_s=timeout_s,
    )
    memo_root = Path(memo).resolve() if memo else _default_memo(top)
    store = Memo(memo_root / cfg.fingerprint("patches", base_sha))
    session = uuid.uuid4().hex[:12]
    n = len(paths)
    idents = [_prefix_ident(base_sha, texts[:k]) for k in range(n + 1)]
    print(f"{PREFIX} {top}: base {base_sha[:10]}, {n} patches, memo {store.root}", file=out, flush=True)

    ref_entry = store.get(idents[0])
    if ref_entry is None or ref_entry.results is None:
        with _worktree(top, base_sha) as tree:
            ref_entry = _ensure_reference(tree, cfg, store, idents[0], "base", base_sha, session, out)
    else:
        ref_entry = _ensure_reference(top, cfg, store, idents[0], "base", base_sha, session, out)
    reference = Path(ref_entry.results or "")

    def verdict_of(k: int) -> Measurement:
        entry = store.get(idents[k])
        if entry is None:
            entry = _measure_prefix(top, base_sha, paths[:k], cfg, store, idents[k],
                                    _prefix_label(paths, k), reference, session)
        print(progress_line(entry, str(reference)), file=out, flush=True)
        return entry

    visited = [verdict_of(n)]
    if visited[0].verdict != BAD:
        return Outcome(None, None, [], visited, _count_session(store, session), store.root)
    lo, hi, skipped = 0, n, set()
    while hi - lo > 1:
        mid = (lo + hi) // 2
        choices = [k for k in range(lo + 1, hi) if k not in skipped]
        if not choices:
            break
        k = min(choices, key=lambda c: (abs(c - mid), c))
        entry = verdict_of(k)
        visited.append(entry)
        if entry.verdict == GOOD:
            lo = k
        elif entry.verdict == BAD:
            hi = k
        else:
            skipped.add(k)
    measured = _count_session(store, session)
    if hi - lo == 1:
        return Outcome(idents[hi], idents[lo], [idents[hi]], visited, measured, store.root)
    return Outcome(None, idents[lo], idents[lo + 1 : hi + 1], visited, measured, store.root)


def patch_index(ident: str) -> int:
    """k of a ``prefix-<k>-<hash>`` ident: the 1-based number of the last patch it includes."""
    return int(ident.split("-")[1])


def _measure_prefix(
    top: Path,
    base_sha: str,
    paths: Sequence[Path],
    cfg: MeasureConfig,
    store: Memo,
    ident: str,
    label: str,
    reference: Path,
    session: str,
) -> Measurement:
    with _worktree(top, base_sha) as tree:
        for p in paths:
            proc = subprocess.run(["git", "-C", str(tree), "apply", "--whitespace=nowarn", str(p)],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                store.log_path(ident).write_text(proc.stderr)
                entry = Measurement(
                    ident=ident, label=label, verdict=SKIP,
                    reason=f"{p.name} does not apply: {proc.stderr.strip().splitlines()[0] if proc.stderr else ''}",
                    pytest_rc=None, results=None, seconds=0.0,
                    measured=datetime.now(timezone.utc).isoformat(timespec="seconds"), session=session,
                )
                store.put(entry)
                return entry
        return measure(tree, cfg, store, ident, label, reference=reference, commit=base_sha, session=session)


# --------------------------------------------------------------------------------------------
# reports and commands


def _neighbour_table(last_good: Measurement | None, first_bad: Measurement | None) -> list[str]:
    if last_good is None or first_bad is None:
        return []
    rows = compare_series(read_series(first_bad.results), read_series(last_good.results))
    if not rows:
        return ["  (no shared result keys to compare)"]
    width = max(len(s.key) for s, _, _ in rows)
    lines = [f"  {'key':<{width}}  {'last good':>12}  {'first bad':>12}  {'ratio':>7}  unit"]
    for s, r, ratio in rows:
        lines.append(f"  {s.key:<{width}}  {_fmt(r.median):>12}  {_fmt(s.median):>12}  {ratio:>6.3f}x  {s.unit}"
                     f"  ({(ratio - 1) * 100:+.1f}%, n={r.n}/{s.n})")
    return lines


def report(outcome: Outcome, out: TextIO, describe: Mapping[str, str] | None = None) -> int:
    """Print the verdict of a bisection; return the specwatch exit code."""
    store = Memo(outcome.memo_dir)
    describe = describe or {}

    def name(ident: str) -> str:
        entry = store.get(ident)
        label = describe.get(ident) or (entry.label if entry else "")
        short = ident[:10] if re.fullmatch(r"[0-9a-f]{40}", ident) else ident
        return f"{short} {label!r}"

    skipped = [m for m in outcome.visited if m.verdict == SKIP]
    print(f"{PREFIX} {len(outcome.visited)} step(s) after the reference; {outcome.measured_now} "
          f"measurement(s) made now (reference included), the rest from the memo", file=out)
    for m in skipped:
        print(f"{PREFIX} skipped (not blamed): {name(m.ident)}: {m.reason}", file=out)
    if outcome.first_bad is None and not outcome.candidates:
        bad = outcome.visited[0] if outcome.visited else None
        why = bad.reason if bad else "nothing measured"
        if bad is not None and bad.verdict == SKIP:
            print(f"{PREFIX} the bad end could not be measured: {why}", file=out)
            return EXIT_INFRA
        print(f"{PREFIX} the bad end does not fail its gate against the good one ({why}): "
              f"no regression to bisect", file=out)
        return EXIT_OK
    if outcome.first_bad is None:
        print(f"{PREFIX} skipped revisions leave the first bad one ambiguous; it is one of:", file=out)
        for ident in outcome.candidates:
            print(f"  {name(ident)}", file=out)
        return EXIT_REGRESSION
    print(f"{PREFIX} first bad: {name(outcome.first_bad)}", file=out)
    if outcome.last_good:
        print(f"{PREFIX} last good: {name(outcome.last_good)}", file=out)
    for line in _neighbour_table(store.get(outcome.last_good or ""), store.get(outcome.first_bad)):
        print(line, file=out)
    out.flush()
    return EXIT_REGRESSION


def _common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repo", required=True, help="git work tree of the server under test")
    parser.add_argument("--setup", default=None,
                        help="shell command run in each checkout before measuring, e.g. 'pip install -e .'")
    parser.add_argument("--memo", default=None,
                        help="memo directory (default: <git-dir>/specwatch/bisect of --repo)")
    parser.add_argument("--python", default=None, help="interpreter that runs pytest (default: this one)")
    parser.add_argument("--workdir", default=None,
                        help="directory pytest runs in (default: the checkout being measured)")
    parser.add_argument("--step-timeout", dest="timeout_s", type=float, default=None,
                        help="seconds allowed for the setup and for pytest, per step (timeout: skip)")


def _split_pytest_args(rest: Sequence[str]) -> tuple[list[str], list[str]]:
    items = list(rest)
    if "--" in items:
        i = items.index("--")
        return items[:i], items[i + 1 :]
    return items, []


class Bisect:
    """``specwatch bisect``: git bisect run over commits, memoised, against the good revision."""

    name = "bisect"
    help = "find the commit that made the server under test slower (git bisect run)"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        _common_arguments(parser)
        parser.add_argument("--good", required=True, help="a revision without the regression")
        parser.add_argument("--bad", required=True, help="a revision with the regression")
        parser.add_argument("pytest_args", nargs=argparse.REMAINDER, metavar="-- PYTEST-ARGS",
                            help="arguments of the measuring pytest run, after --")

    @staticmethod
    def run(*, out: TextIO | None = None, **kwargs: Any) -> int:
        """Run the bisection and print its report; a specwatch exit code (0/1/2/3)."""
        out = out or sys.stdout
        try:
            outcome = bisect_commits(out=out, **kwargs)
        except SpecwatchError as exc:
            print(f"specwatch bisect: {exc}", file=sys.stderr)
            return exc.exit_code
        except KeyboardInterrupt:
            print("specwatch bisect: interrupted (checkout restored; the memo keeps what was measured)",
                  file=sys.stderr)
            return EXIT_INTERRUPTED
        return report(outcome, out)

    @classmethod
    def run_from_args(cls, args: argparse.Namespace) -> int:
        before, after = _split_pytest_args(args.pytest_args)
        if before:
            print(f"specwatch bisect: put pytest arguments after --: {' '.join(before)}", file=sys.stderr)
            return EXIT_USAGE
        return cls.run(repo=args.repo, good=args.good, bad=args.bad, pytest_args=after, setup=args.setup,
                       memo=args.memo, python=args.python, workdir=args.workdir, timeout_s=args.timeout_s)


class BisectPatches:
    """``specwatch bisect-patches``: binary search over cumulative prefixes of a patch list."""

    name = "bisect-patches"
    help = "find the first of an ordered list of patches that makes the server slower"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        _common_arguments(parser)
        parser.add_argument("--base", required=True, help="the revision the patches apply to")
        parser.add_argument("patches_and_args", nargs=argparse.REMAINDER,
                            metavar="PATCH ... -- PYTEST-ARGS",
                            help="patch files in order (after all options), then -- and pytest arguments")

    @staticmethod
    def run(*, out: TextIO | None = None, **kwargs: Any) -> int:
        """Run the patch bisection and print its report; a specwatch exit code (0/1/2/3)."""
        out = out or sys.stdout
        try:
            outcome = bisect_patches(out=out, **kwargs)
        except SpecwatchError as exc:
            print(f"specwatch bisect-patches: {exc}", file=sys.stderr)
            return exc.exit_code
        except KeyboardInterrupt:
            print("specwatch bisect-patches: interrupted (the memo keeps what was measured)",
                  file=sys.stderr)
            return EXIT_INTERRUPTED
        describe = {}
        if outcome.first_bad or outcome.candidates:
            patches = [Path(p) for p in kwargs["patches"]]
            for ident in [*outcome.candidates, outcome.first_bad or "", outcome.last_good or ""]:
                if ident.startswith("prefix-"):
                    describe[ident] = _prefix_label(patches, patch_index(ident))
        return report(outcome, out, describe)

    @classmethod
    def run_from_args(cls, args: argparse.Namespace) -> int:
        patches, pytest_args = _split_pytest_args(args.patches_and_args)
        options = [p for p in patches if p.startswith("-")]
        if options:
            print(f"specwatch bisect-patches: options go before the patch files: {' '.join(options)}",
                  file=sys.stderr)
            return EXIT_USAGE
        return cls.run(repo=args.repo, base=args.base, patches=patches, pytest_args=pytest_args,
                       setup=args.setup, memo=args.memo, python=args.python, workdir=args.workdir,
                       timeout_s=args.timeout_s)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``specwatch bisect`` (see :class:`Bisect`)."""
    Bisect.add_arguments(parser)


def run(**kwargs: Any) -> int:
    """``specwatch bisect`` with plain keywords (see :func:`bisect_commits`)."""
    return Bisect.run(**kwargs)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m specwatch.bisect step --config FILE``: one `git bisect run` step."""
    parser = argparse.ArgumentParser(prog="python -m specwatch.bisect")
    sub = parser.add_subparsers(dest="command", required=True)
    step = sub.add_parser("step", help="measure HEAD of the bisected repo (used by git bisect run)")
    step.add_argument("--config", required=True, type=Path)
    args = parser.parse_args(argv)
    try:
        return _step_commit(args.config, sys.stdout)
    except KeyboardInterrupt:
        return ABORT_CODE
    except Exception:  # a bug, not a verdict on the revision: stop the bisection, loudly
        traceback.print_exc()
        return ABORT_CODE


if __name__ == "__main__":
    sys.exit(main())
