"""A saved capture of a live server, judged later anywhere: the format, its redaction, writing and reading.

``specwatch capture`` writes one folder per server; ``specwatch inspect`` reads it back
(:func:`read_capture`) and judges it without booting anything (:mod:`specwatch.checks.inspect`)::

    capture.json       the manifest: format "specwatch-capture", version, when, where, the process tree
    server.log         a copy of the server's log (optional)
    metrics.txt        its /metrics text (optional)
    server_info.json   its /server_info (optional)
    probe/             the sitecustomize probe's records of the tree's pids (optional)

Each process of the tree keeps pid, ppid, name, command line, title, start time (seconds since the
epoch) and its ``/proc/<pid>/environ`` as read: ``status`` is ``ok``, ``empty``, ``partial``
(setproctitle overwrote its front; ``env`` holds the entries that survived), ``retitled``
(setproctitle blanked it), ``denied`` or ``gone`` (see :mod:`specwatch.signals.procenv`). A capture
written before ``partial`` existed stored such a block as ``ok``: read back, an ``ok`` block whose
entries fill fewer bytes than its ``nbytes`` is judged ``partial``. Secrets are
redacted before anything is written: environment variables whose names match the patterns, and the
values of server arguments whose names end like a secret (``--api-key``, ``ssl_keyfile_password``)
in command lines, ``/server_info`` and the log's ``server_args=`` line. Every problem reading a
capture is one :class:`CaptureError` line naming the file and what is wrong.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specwatch.engines.registry import NATIVE
from specwatch.errors import UsageError
from specwatch.signals import probe, procenv, promtext
from specwatch.signals.procenv import EnvRead, ProcInfo
from specwatch.store.atomic import write_text_atomic
from specwatch.store.result import is_finite_number, parse_json, show_value

__all__ = [
    "ARG_SECRETS",
    "DEFAULT_REDACT",
    "FORMAT",
    "MANIFEST",
    "REDACTED",
    "VERSION",
    "Capture",
    "CaptureError",
    "CapturedProcess",
    "Redactor",
    "read_capture",
    "write_capture",
]

FORMAT = "specwatch-capture"
VERSION = 1
MANIFEST = "capture.json"
LOG, METRICS, SERVER_INFO, PROBE = "server.log", "metrics.txt", "server_info.json", "probe"
#: environment variable names redacted by default (fnmatch, case-insensitive)
DEFAULT_REDACT = ("*TOKEN*", "*KEY*", "*SECRET*", "*PASSWORD*")
#: server argument names (``--api-key`` read as ``API_KEY``) whose values are redacted
ARG_SECRETS = ("*KEY", "*TOKEN", "*SECRET", "*PASSWORD")
REDACTED = "<redacted>"
_STATUSES = procenv.STATUSES
_SERVER_ARG_RE = re.compile(r"'(?P<key>\w+)': '(?P<val>(?:[^'\\]|\\.)*)'")


class CaptureError(UsageError):
    """A capture folder that cannot be judged: one line naming the file and what is wrong."""


# --------------------------------------------------------------------------------------------
# Redaction


def _matches(name: str, patterns: Iterable[str]) -> bool:
    up = name.upper()
    return any(fnmatch.fnmatchcase(up, p.upper()) for p in patterns)


@dataclass
class Redactor:
    """Replaces secret values by ``<redacted>`` and remembers what it redacted (names only)."""

    env_patterns: tuple[str, ...] = DEFAULT_REDACT
    arg_patterns: tuple[str, ...] = ARG_SECRETS
    redacted: dict[str, list[str]] = field(default_factory=dict)

    def _note(self, where: str, name: str) -> None:
        names = self.redacted.setdefault(where, [])
        if name not in names:
            names.append(name)

    def _secret_arg(self, name: str) -> bool:
        key = name.lstrip("-").replace("-", "_")
        return bool(key) and _matches(key, self.arg_patterns)

    @classmethod
    def with_patterns(cls, extra: Iterable[str] = (), defaults: bool = True) -> Redactor:
        """Default patterns (unless ``defaults`` is False) plus ``extra``, which also name server arguments."""
        extra = tuple(extra)
        return cls((*DEFAULT_REDACT, *extra) if defaults else extra, (*ARG_SECRETS, *extra) if defaults else extra)

    def environ(self, env: Mapping[str, str]) -> dict[str, str]:
        out = {}
        for k, v in env.items():
            if _matches(k, self.env_patterns):
                self._note("environ", k)
                v = REDACTED
            out[k] = v
        return out

    def cmdline(self, argv: Sequence[str]) -> list[str]:
        out: list[str] = []
        hide_next = False
        for arg in argv:
            if hide_next:
                out.append(REDACTED)
                hide_next = False
                continue
            name, eq, _ = arg.partition("=")
            if arg.startswith("--") and self._secret_arg(name):
                self._note("cmdline", name)
                if eq:
                    out.append(f"{name}={REDACTED}")
                    continue
                hide_next = True
            out.append(arg)
        return out

    def server_info(self, info: Any) -> Any:
        if isinstance(info, dict):
            out = {}
            for k, v in info.items():
                if isinstance(v, str) and v and v != REDACTED and self._secret_arg(str(k)):
                    self._note("server_info", str(k))
                    out[k] = REDACTED
                else:
                    out[k] = self.server_info(v)
            return out
        if isinstance(info, list):
            return [self.server_info(v) for v in info]
        return info

    def log_line(self, line: str) -> str:
        if "server_args=" not in line:
            return line

        def hide(m: re.Match[str]) -> str:
            if not self._secret_arg(m.group("key")):
                return m.group(0)
            self._note("log", m.group("key"))
            return f"'{m.group('key')}': '{REDACTED}'"

        return _SERVER_ARG_RE.sub(hide, line)

    def summary(self) -> dict[str, Any]:
        return {"env_patterns": list(self.env_patterns), "arg_patterns": list(self.arg_patterns),
                "redacted": {k: sorted(v) for k, v in sorted(self.redacted.items())}}


# --------------------------------------------------------------------------------------------
# The data


@dataclass
class CapturedProcess:
    """One process of a captured tree, as read."""

    pid: int
    ppid: int
    name: str
    cmdline: list[str]
    environ: EnvRead
    start_time: float | None = None

    @property
    def title(self) -> str:
        return ProcInfo(self.pid, self.ppid, self.name, self.cmdline).title

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "ppid": self.ppid, "name": self.name, "cmdline": list(self.cmdline),
                "title": self.title, "start_time": self.start_time,
                "environ": {"status": self.environ.status, "nbytes": self.environ.nbytes,
                            "env": dict(self.environ.env)}}


@dataclass
class Capture:
    """A capture folder, read and checked: the manifest's fields and the paths of its files."""

    folder: Path
    created: str
    host: str
    url: str
    main_pid: int | None
    processes: list[CapturedProcess]
    log: Path | None = None
    metrics_text: str | None = None
    server_info: dict[str, Any] | None = None
    probe_dir: Path | None = None
    missing: dict[str, str] = field(default_factory=dict)
    redaction: dict[str, Any] = field(default_factory=dict)
    specwatch: str = ""

    def proc_infos(self) -> list[ProcInfo]:
        """The tree as :class:`ProcInfo` with roles (launchers, main, workers) assigned.

        The captured main process is the server's main process even when its command line is not
        one :func:`procenv.classify` knows (another engine): its environment is checked too.
        """
        procs = procenv.load_proctree([{"pid": p.pid, "ppid": p.ppid, "name": p.name, "cmdline": p.cmdline,
                                        "environ": {"status": p.environ.status, "env": dict(p.environ.env),
                                                    "nbytes": p.environ.nbytes}} for p in self.processes],
                                       opaque=REDACTED)
        for p in procs:
            if p.pid == self.main_pid and p.role is not None and p.role.role == "other":
                p.role = procenv.ProcRole(p.role.engine, "main")
        return procs

    def starts(self) -> dict[int, float]:
        return {p.pid: p.start_time for p in self.processes if p.start_time is not None}

    def log_lines(self) -> list[str]:
        if self.log is None:
            return []
        return self.log.read_text(encoding="utf-8", errors="replace").splitlines()

    def metrics(self) -> promtext.Exposition | None:
        return promtext.parse_text(self.metrics_text) if self.metrics_text is not None else None

    def probe_records(self) -> dict[int, probe.ProcessRecords]:
        return probe.read_records(self.probe_dir) if self.probe_dir is not None else {}

    def describe(self) -> str:
        """One line: what was captured, where and when."""
        info = self.server_info or {}
        engine = f"{NATIVE.name} {info['version']}" if info.get("version") else "server"
        spec = info.get("speculative_algorithm")
        parts = [f"{engine}{' ' + spec if spec else ''} at {self.url or '?'}",
                 f"captured {self.created or '?'} on {self.host or '?'}", f"{len(self.processes)} processes"]
        parts.append("log" if self.log else "no log")
        parts.append("/metrics" if self.metrics_text is not None else "no /metrics")
        parts.append("/server_info" if self.server_info is not None else "no /server_info")
        if self.probe_dir is not None:
            parts.append("probe records")
        return ", ".join(parts)


# --------------------------------------------------------------------------------------------
# Writing


def write_capture(
    folder: str | Path,
    *,
    created: str,
    host: str,
    url: str,
    main_pid: int | None,
    processes: Sequence[CapturedProcess],
    redactor: Redactor,
    log_source: str | Path | None = None,
    metrics_text: str | None = None,
    server_info: Mapping[str, Any] | None = None,
    probe_records: Sequence[Path] = (),
    missing: Mapping[str, str] | None = None,
    version: str = "",
) -> Path:
    """Write a capture folder (redacting on the way); return the manifest's path. The manifest is written last."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, str] = {}
    procs = [CapturedProcess(p.pid, p.ppid, p.name, redactor.cmdline(p.cmdline),
                             EnvRead(p.environ.status, redactor.environ(p.environ.env), p.environ.nbytes),
                             p.start_time) for p in processes]
    if log_source is not None:
        with open(log_source, encoding="utf-8", errors="replace", newline="") as src, \
                open(out / LOG, "w", encoding="utf-8", newline="") as dst:
            for line in src:
                dst.write(redactor.log_line(line))
        files["log"] = LOG
    if metrics_text is not None:
        write_text_atomic(out / METRICS, metrics_text)
        files["metrics"] = METRICS
    if server_info is not None:
        write_text_atomic(out / SERVER_INFO, json.dumps(redactor.server_info(dict(server_info)), indent=1) + "\n")
        files["server_info"] = SERVER_INFO
    if probe_records:
        (out / PROBE).mkdir(exist_ok=True)
        for rec in probe_records:
            shutil.copyfile(rec, out / PROBE / rec.name)
        files["probe"] = PROBE
    manifest = {
        "format": FORMAT, "version": VERSION, "specwatch": version, "created": created, "host": host, "url": url,
        "main_pid": main_pid, "files": files, "missing": dict(missing or {}), "redaction": redactor.summary(),
        "processes": [p.to_json() for p in procs],
    }
    return write_text_atomic(out / MANIFEST, json.dumps(manifest, indent=1) + "\n")


# --------------------------------------------------------------------------------------------
# Reading


def _fail(path: Path, what: str) -> CaptureError:
    return CaptureError(f"{path}: {what}")


def _shown(value: Any) -> str:
    """A manifest's value as JSON writes it, short (a long integer by its digits)."""
    return show_value(value, json.dumps)


def _int(path: Path, where: str, value: Any, allow_none: bool = False) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _fail(path, f"{where}: expected a whole number >= 0, got {json.dumps(value)}")
    return value


def _process(path: Path, i: int, raw: Any) -> CapturedProcess:
    at = f"processes[{i}]"
    if not isinstance(raw, dict):
        raise _fail(path, f"{at}: expected an object, got {json.dumps(raw)[:40]}")
    pid = _int(path, f"{at}.pid", raw.get("pid"))
    ppid = _int(path, f"{at}.ppid", raw.get("ppid", 0))
    cmd = raw.get("cmdline", [])
    if not isinstance(cmd, list) or not all(isinstance(a, str) for a in cmd):
        raise _fail(path, f"{at}.cmdline: expected a list of strings")
    start = raw.get("start_time")
    if start is not None and not is_finite_number(start):
        raise _fail(path, f"{at}.start_time: expected seconds since the epoch or null, got {_shown(start)}")
    name = raw.get("name", "")
    if not isinstance(name, str):
        raise _fail(path, f"{at}.name: expected a string, got {_shown(name)}")
    env = raw.get("environ")
    if not isinstance(env, dict):
        raise _fail(path, f"{at}.environ: expected an object with status and env")
    status = env.get("status")
    if status not in _STATUSES:
        raise _fail(path, f"{at}.environ.status: expected one of {', '.join(_STATUSES)}, got {json.dumps(status)}")
    values = env.get("env", {})
    if not isinstance(values, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in values.items()):
        raise _fail(path, f"{at}.environ.env: expected an object of strings")
    if status not in (procenv.OK, procenv.PARTIAL) and values:
        raise _fail(path, f"{at}.environ: status {status} but {len(values)} variable(s) recorded")
    nbytes = _int(path, f"{at}.environ.nbytes", env.get("nbytes", 0))
    assert pid is not None and ppid is not None and nbytes is not None
    return CapturedProcess(pid, ppid, name, list(cmd), EnvRead(status, dict(values), nbytes),
                           float(start) if start is not None else None)


def _text(path: Path, data: Mapping[str, Any], key: str) -> str:
    """The manifest's text field ``key`` ("" when absent or null)."""
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise _fail(path, f"{key}: expected a string, got {_shown(value)}")
    return value or ""


def _object(path: Path, data: Mapping[str, Any], key: str, what: str, values: type | None = None) -> dict[str, Any]:
    """The manifest's object field ``key`` ({} when absent or null), its values of type ``values`` when given."""
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict) or (values is not None and not all(isinstance(v, values) for v in value.values())):
        raise _fail(path, f"{key}: expected an object {what}, got {_shown(value)}")
    return dict(value)


def _part(folder: Path, files: Mapping[str, Any], key: str, manifest: Path) -> Path | None:
    name = files.get(key)
    if name is None:
        return None
    if not isinstance(name, str) or not name or Path(name).is_absolute() or ".." in Path(name).parts:
        raise _fail(manifest, f"files.{key}: expected a file name inside the capture folder, got {json.dumps(name)}")
    path = folder / name
    if not path.exists():
        raise _fail(path, f"missing (capture.json files.{key} names it)")
    if key != "probe" and not path.is_file():
        raise _fail(path, f"not a file (capture.json files.{key} names it)")
    return path


def read_capture(folder: str | Path) -> Capture:
    """Read and check a capture folder; :class:`CaptureError` (one line) on anything that cannot be judged."""
    root = Path(folder)
    if not root.is_dir():
        raise CaptureError(f"{root}: {'not a folder' if root.exists() else 'no such capture folder'}")
    manifest = root / MANIFEST
    try:
        data = parse_json(manifest.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _fail(manifest, "missing: not a specwatch capture folder (write one with `specwatch capture`)") from None
    except IsADirectoryError:
        raise _fail(manifest, "a folder, not the capture's manifest file") from None
    except OSError as exc:
        raise _fail(manifest, f"cannot be read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise _fail(manifest, "not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise _fail(manifest, f"not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})") from None
    except ValueError as exc:  # nested too deep, an integer too long
        raise _fail(manifest, f"not readable JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise _fail(manifest, f"not a specwatch capture manifest (format should be {FORMAT!r})")
    version = data.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise _fail(manifest, f"version: expected a whole number >= 1, got {json.dumps(version)}")
    if version > VERSION:
        raise _fail(manifest, f"format version {version} is newer than this specwatch reads ({VERSION}): upgrade it")
    raw_procs = data.get("processes")
    if not isinstance(raw_procs, list):
        raise _fail(manifest, "processes: expected a list (it may be empty)")
    procs = [_process(manifest, i, p) for i, p in enumerate(raw_procs)]
    seen: set[int] = set()
    for p in procs:
        if p.pid in seen:
            raise _fail(manifest, f"processes: pid {p.pid} appears twice")
        seen.add(p.pid)
    files = data.get("files", {})
    if not isinstance(files, dict):
        raise _fail(manifest, "files: expected an object of file names")
    cap = Capture(root, _text(manifest, data, "created"), _text(manifest, data, "host"), _text(manifest, data, "url"),
                  _int(manifest, "main_pid", data.get("main_pid"), allow_none=True), procs,
                  missing=_object(manifest, data, "missing", "of reasons (strings)", str),
                  redaction=_object(manifest, data, "redaction", "(the redaction summary)"),
                  specwatch=_text(manifest, data, "specwatch"))
    cap.log = _part(root, files, "log", manifest)
    metrics = _part(root, files, "metrics", manifest)
    if metrics is not None:
        try:
            cap.metrics_text = metrics.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise _fail(metrics, f"cannot be read: {exc.strerror or exc}") from None
        try:
            promtext.parse_text(cap.metrics_text)
        except promtext.ParseError as exc:
            raise _fail(metrics, f"not Prometheus text ({exc})") from None
    info = _part(root, files, "server_info", manifest)
    if info is not None:
        try:
            cap.server_info = parse_json(info.read_text(encoding="utf-8"))
        except OSError as exc:
            raise _fail(info, f"cannot be read: {exc.strerror or exc}") from None
        except ValueError as exc:  # not UTF-8, not JSON, nested too deep
            raise _fail(info, f"not valid JSON ({exc})") from None
        if not isinstance(cap.server_info, dict):
            raise _fail(info, "expected a JSON object (the answer of /server_info)")
    cap.probe_dir = _part(root, files, "probe", manifest)
    if cap.probe_dir is not None and not cap.probe_dir.is_dir():
        raise _fail(cap.probe_dir, "not a folder (capture.json files.probe names the probe records' folder)")
    return cap
