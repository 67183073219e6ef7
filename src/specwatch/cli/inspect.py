"""``specwatch capture`` and ``specwatch inspect``: save a live server's state here, judge it anywhere.

* ``capture OUT_DIR [--url URL] [--pid PID] [--log PATH] [--redact PATTERN]...``: the server's log,
  ``/metrics``, ``/server_info`` and its process tree (from the main pid, or found through the URL's
  port or the processes' titles), each process with its start environment, into one folder
  (:mod:`specwatch.store.capture`). What cannot be had is recorded with the reason, not fatal.
* ``inspect CAPTURE_DIR [--profile FILE] [--server NAME]``: the checks of a live run on the capture
  (:mod:`specwatch.checks.inspect`), one verdict line each; exit 1 when one fails, 2 on a bad capture.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from specwatch.errors import EXIT_OK, EXIT_REGRESSION, UsageError

#: how long one HTTP request to the server may take
HTTP_TIMEOUT_S = 30.0


# --------------------------------------------------------------------------------------------
# capture


def _get(url: str, timeout: float) -> tuple[str | None, str]:
    """(body, "") or (None, why)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.read().decode("utf-8", errors="replace"), ""
    except urllib.error.HTTPError as exc:
        return None, f"GET {url}: HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        return None, f"GET {url}: {getattr(exc, 'reason', exc)}"


def _server_info(url: str, timeout: float) -> tuple[dict[str, Any] | None, str]:
    first = ""
    for path in ("/server_info", "/get_server_info"):  # the second: SGLang before /server_info
        body, why = _get(url + path, timeout)
        if body is None:
            if not first:
                first = why
            if not why.endswith("HTTP 404"):
                break
            continue
        try:
            info = json.loads(body)
        except json.JSONDecodeError:
            return None, f"GET {url}{path}: not JSON"
        return (info, "") if isinstance(info, dict) else (None, f"GET {url}{path}: not a JSON object")
    return None, first


def _port_of(url: str) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"capture: --url {url!r} is not an http:// URL")
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


def _flag(argv: list[str], name: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _find_main(port: int, host: str) -> int | None:
    """The server's main process: the listener of ``port`` (or its server ancestor), else by title and --port."""
    import psutil

    from specwatch.signals import procenv

    def role(proc: psutil.Process) -> str:
        try:
            info = procenv.ProcInfo(proc.pid, proc.ppid(), proc.name(), proc.cmdline())
        except (psutil.Error, OSError):
            return ""
        return procenv.classify(info).role

    pid = procenv.find_listener(port, None if host == "localhost" else host)
    if pid is not None:
        try:
            proc: psutil.Process | None = psutil.Process(pid)
            while proc is not None and role(proc) != "main":
                proc = proc.parent()
            return proc.pid if proc is not None else pid
        except psutil.Error:
            return pid
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            argv = proc.cmdline()
        except (psutil.Error, OSError):
            continue
        if role(proc) == "main" and (_flag(argv, "--port") or "30000") == str(port):
            found.append(proc.pid)
    return found[0] if len(found) == 1 else None


def _log_of(pid: int) -> str | None:
    """The file the server's stderr (or stdout) goes to, when it is a regular file."""
    for fd in (2, 1):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/") and Path(target).is_file():
            return target
    return None


def _processes(main_pid: int) -> list[Any]:
    import psutil

    from specwatch.signals import procenv
    from specwatch.store.capture import CapturedProcess

    out = []
    for p in procenv.walk(main_pid):
        try:
            start: float | None = psutil.Process(p.pid).create_time()
        except psutil.Error:
            start = None
        out.append(CapturedProcess(p.pid, p.ppid, p.name, list(p.cmdline), p.environ, start))
    return out


def _probe_files(procs: list[Any], main_pid: int) -> list[Path]:
    """The probe's records of the tree's pids, when the server ran with the probe (SPECWATCH_PROBE_DIR)."""
    from specwatch.signals.probe import ENV_DIR

    main = next((p for p in procs if p.pid == main_pid), None)
    folder = main.environ.env.get(ENV_DIR) if main is not None else None
    if not folder or not Path(folder).is_dir():
        return []
    pids = {str(p.pid) for p in procs}
    return sorted(f for f in Path(folder).glob("*.json") if f.name.split("-", 1)[0] in pids)


def _cmd_capture(args: argparse.Namespace) -> int:
    from specwatch import __version__
    from specwatch.cli.args import folder
    from specwatch.store.capture import MANIFEST, Redactor, write_capture

    out = folder(args.out_dir, "capture folder", must_exist=False)
    if (out / MANIFEST).exists() and not args.force:
        raise UsageError(f"capture: {out / MANIFEST} exists (pass --force to overwrite)")
    if args.log is not None and not Path(args.log).is_file():
        raise UsageError(f"capture: --log {args.log}: no such file")
    if args.url is None and args.pid is None:
        raise UsageError("capture: say which server: --url URL, --pid PID, or both")
    url = args.url.rstrip("/") if args.url else None
    host, port = _port_of(url) if url else ("", 0)
    main_pid = args.pid
    if main_pid is None:
        main_pid = _find_main(port, host)
        if main_pid is None:
            raise UsageError(f"capture: no local process listens on port {port} and no server process names "
                             f"--port {port} (pass --pid)")
    procs = _processes(main_pid)
    if not procs:
        raise UsageError(f"capture: process {main_pid} does not exist or cannot be read")
    main = procs[0]
    if url is None:
        url = f"http://{_flag(main.cmdline, '--host') or '127.0.0.1'}:{_flag(main.cmdline, '--port') or '30000'}"
    missing: dict[str, str] = {}
    metrics, why = _get(url + "/metrics", args.timeout)
    if metrics is None:
        missing["metrics"] = why
    info, why = _server_info(url, args.timeout)
    if info is None:
        missing["server_info"] = why
    log = args.log or _log_of(main_pid)
    if log is None:
        missing["log"] = f"no --log given and the stderr of pid {main_pid} is not a file"
    redactor = Redactor.with_patterns(args.redact or (), defaults=not args.no_default_redact)
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    path = write_capture(out, created=created, host=socket.gethostname(), url=url, main_pid=main_pid,
                         processes=procs, redactor=redactor, log_source=log, metrics_text=metrics, server_info=info,
                         probe_records=_probe_files(procs, main_pid), missing=missing, version=__version__)
    blank = sum(1 for p in procs if p.environ.status == "retitled")
    partial = sum(1 for p in procs if p.environ.status == "partial")
    hidden = sum(len(v) for v in redactor.redacted.values())
    print(f"wrote {path}: {len(procs)} processes ({blank} with a blank /proc environ, {partial} partly "
          "overwritten by a process title), "
          f"{'log' if log else 'no log'}, {'/metrics' if metrics is not None else 'no /metrics'}, "
          f"{'/server_info' if info is not None else 'no /server_info'}; {hidden} secret(s) redacted")
    for part, reason in sorted(missing.items()):
        print(f"  not captured: {part}: {reason}")
    return EXIT_OK


# --------------------------------------------------------------------------------------------
# inspect


def _profile(args: argparse.Namespace) -> Any:
    if args.profile is None and args.server is None:
        return None
    from specwatch.profiles.loading import load_profiles

    ps = load_profiles(args.profile)
    if args.server is not None:
        return ps.get(args.server)
    if len(ps.servers) != 1:
        raise UsageError(f"inspect: {ps.source} has {len(ps.servers)} servers: name one with --server "
                         f"({', '.join(sorted(ps.servers))})")
    return next(iter(ps.servers.values()))


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _cmd_inspect(args: argparse.Namespace) -> int:
    from specwatch.checks.inspect import AS_LAUNCHED, inspect_capture, profile_notes
    from specwatch.store.capture import read_capture

    cap = read_capture(args.capture_dir)
    profile = _profile(args)
    verdicts = inspect_capture(cap, profile)
    against = f"profile {profile.name}" if profile is not None else f"the environment {AS_LAUNCHED}"
    print(f"inspect {cap.folder}: {cap.describe()}; judged against {against}")
    for note in profile_notes(cap, profile):
        print(f"note: {note}")
    width = max(len(v.name) for v in verdicts)
    for v in verdicts:
        print(f"{v.name + ':':<{width + 1}} {v.status.value:<4}  {_one_line(v.reason)}")
        if args.verbose:
            print("\n".join("    " + line for line in v.message.splitlines()))
    sys.stdout.flush()
    return EXIT_REGRESSION if any(v.failed for v in verdicts) else EXIT_OK


def register(sub: Any) -> None:
    """Add this module's subcommands to the ``specwatch`` parser."""
    from specwatch.cli.args import positive_float

    p = sub.add_parser("capture", help="save a live server's log, /metrics, /server_info and process tree "
                                       "for `specwatch inspect`")
    p.add_argument("out_dir", metavar="OUT_DIR", help="the folder to write (capture.json and the files)")
    p.add_argument("--url", help="the server's URL; its main process is found through the port (or its title and "
                                 "--port) unless --pid is given")
    p.add_argument("--pid", type=int, help="the server's main process; without --url the URL comes from its "
                                           "--host/--port")
    p.add_argument("--log", default=None, help="the server's log file (default: the file its stderr goes to)")
    p.add_argument("--redact", action="append", metavar="VAR_PATTERN",
                   help="also redact variables (and server arguments) whose names match (fnmatch, case-insensitive;"
                        " repeatable); by default *TOKEN*, *KEY*, *SECRET*, *PASSWORD* are redacted")
    p.add_argument("--no-default-redact", action="store_true",
                   help="redact only what --redact names, not the default patterns")
    p.add_argument("--timeout", type=positive_float, default=HTTP_TIMEOUT_S, help="seconds per HTTP request")
    p.add_argument("--force", action="store_true", help="overwrite an existing capture in OUT_DIR")
    p.set_defaults(func=_cmd_capture)

    p = sub.add_parser("inspect", help="judge a saved capture with the checks of a live run, booting nothing")
    p.add_argument("capture_dir", metavar="CAPTURE_DIR", help="a folder written by `specwatch capture`")
    p.add_argument("--profile", default=None, metavar="FILE",
                   help="profile TOML saying what the server should be (default: the built-in set with --server, "
                        "else the capture's own launch environment)")
    p.add_argument("--server", default=None, metavar="NAME", help="the server profile of FILE to judge against")
    p.add_argument("-v", "--verbose", action="store_true", help="print each check's full evidence")
    p.set_defaults(func=_cmd_inspect)
