"""A server's process tree: workers per engine and ``/proc/<pid>/environ`` with blank detection.

``setproctitle`` (used by SGLang's scheduler and detokenizer, and by the reference server's
workers) moves the environment elsewhere in memory and overwrites the original block. It clobbers
the argv strings and then every environment string that still lies right after them; a string the
process replaced before retitling (``os.environ[k] = v`` on an inherited variable) ends that run.
So ``/proc/<pid>/environ`` reads either all NUL (``retitled``), or a front of NULs and title text
followed by the entries that survived (``partial``): those are true, but a variable absent from
them may have been lost under the title, so it is unknown, never "missing". Remember also that
``/proc`` shows the environment a process STARTED with: a variable set inside it later is not there.

The core functions work on plain data (:class:`ProcInfo`) so tests can run them on a recorded tree
(``proctree.json``, loaded with :func:`load_proctree`); :func:`walk` builds the same data live with
psutil.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from specwatch.engines.registry import signatures

__all__ = [
    "PARTIAL",
    "STATUSES",
    "WORKER_ROLES",
    "EnvRead",
    "ProcInfo",
    "ProcRole",
    "classify",
    "find_listener",
    "load_proctree",
    "parse_environ_block",
    "read_environ",
    "reconcile_size",
    "walk",
    "workers",
]

OK, RETITLED, DENIED, GONE, EMPTY, UNREAD = "ok", "retitled", "denied", "gone", "empty", "unread"
PARTIAL = "partial"
#: every status an :class:`EnvRead` may carry (captures store them by these names)
STATUSES = (OK, EMPTY, PARTIAL, RETITLED, DENIED, GONE, UNREAD)
_STATUS_TEXT = {
    UNREAD: "not read",
    OK: "readable",
    PARTIAL: "partly overwritten (retitled): only its surviving entries can answer",
    RETITLED: "unreadable (retitled)",
    DENIED: "unreadable (permission denied)",
    GONE: "unreadable (process exited)",
    EMPTY: "empty",
}
# Roles whose environment must carry an environment profile's variables (spawned engine
# processes plus the main server process).
WORKER_ROLES = frozenset(
    {"scheduler", "detokenizer", "detokenizer_router", "dp_controller", "tokenizer_worker", "worker"}
)
#: The engines' process signatures (:mod:`specwatch.engines`): how their main processes start, how
#: their workers retitle themselves.
_SIGNATURES = [s for s in signatures() if s.tree_name]
_SERVER_MODULES = {m: s.tree_name for s in _SIGNATURES for m in s.modules}
_SERVER_COMMANDS = {c: s.tree_name for s in _SIGNATURES for c in s.commands}
_SERVER_SCRIPTS = {c: s.tree_name for s in _SIGNATURES for c in s.scripts}
_PYTHON_RE = re.compile(r"^python[\d.]*$")


@dataclass(frozen=True)
class EnvRead:
    """The result of reading one environ block.

    ``status``: ``ok`` | ``partial`` (the block's front was overwritten by setproctitle; ``env`` holds
    the entries that survived) | ``retitled`` (all-NUL block after setproctitle) | ``denied`` |
    ``gone`` | ``empty`` | ``unread`` (this view was not taken for the process). ``complete`` is
    False when only some variables were recorded (e.g. a stored tree that kept only ``NCCL_*``): a
    variable absent from a partial read is unknown, not missing.
    """

    status: str
    env: Mapping[str, str] = field(default_factory=dict)
    nbytes: int = 0
    complete: bool = True
    scope: str = ""  # for partial reads: which variables were kept, e.g. "NCCL_*"

    @property
    def readable(self) -> bool:
        return self.status in (OK, EMPTY)

    def describe(self) -> str:
        return _STATUS_TEXT.get(self.status, self.status)

    def covers(self, var: str) -> bool:
        """Whether this read can answer "is ``var`` set?" (a partial block only for what survived)."""
        if self.status == PARTIAL:
            return var in self.env
        if not self.readable:
            return False
        if self.complete:
            return True
        return bool(self.scope) and _matches_scope(var, self.scope)

    def lookup(self, var: str) -> tuple[bool, str | None]:
        """(can_answer, value or None when absent)."""
        if not self.covers(var):
            return False, None
        return True, self.env.get(var)


def _matches_scope(var: str, scope: str) -> bool:
    for pat in scope.split(","):
        pat = pat.strip()
        if pat.endswith("*") and var.startswith(pat[:-1]):
            return True
        if pat == var:
            return True
    return False


def _is_entry(entry: bytes) -> bool:
    """``NAME=VALUE`` with a name of no blanks (title text such as ``sglang::scheduler`` is not)."""
    name, sep, _ = entry.partition(b"=")
    return bool(sep) and bool(name) and not any(c in name for c in b" \t\n")


def _decode(entries: Iterable[bytes]) -> dict[str, str]:
    env: dict[str, str] = {}
    for entry in entries:
        key, _, val = entry.partition(b"=")
        env[key.decode("utf-8", "replace")] = val.decode("utf-8", "replace")
    return env


def parse_environ_block(data: bytes) -> EnvRead:
    """Parse the bytes of ``/proc/<pid>/environ``: whole, partly overwritten, or blank.

    A whole block is ``NAME=VALUE`` entries, each ended by one NUL, nothing else. Anything else
    (a run of NULs, title text, a missing final NUL) shows setproctitle wrote over its front: only
    the well-formed entries after the last damaged one are kept (``partial``); with none left the
    block is ``retitled``. ``nbytes`` is the block's size either way.
    """
    if not data:
        return EnvRead(EMPTY, {}, 0)
    if data.count(0) == len(data):
        return EnvRead(RETITLED, {}, len(data))
    entries = data.split(b"\0")
    terminated = entries[-1] == b""
    body = entries[:-1] if terminated else entries
    if terminated and all(_is_entry(e) for e in body):
        return EnvRead(OK, _decode(body), len(data))
    if not terminated:
        body = body[:-1]  # cut off mid-entry: the last one is not whole
    first = len(body)
    while first > 0 and _is_entry(body[first - 1]):
        first -= 1
    survivors = _decode(body[first:])
    if not survivors:
        return EnvRead(RETITLED, {}, len(data))
    return EnvRead(PARTIAL, survivors, len(data), complete=False)


def reconcile_size(read: EnvRead, opaque: str | None = None) -> EnvRead:
    """A recorded ``ok`` read whose entries fill fewer bytes than its block held is ``partial``.

    For records that kept the decoded entries and the size but not the bytes (captures and trees
    written before partial blocks were told apart). Values equal to ``opaque`` (a redaction
    marker) hide their length, so such a record cannot be sized and is returned as it is.
    """
    if read.status != OK or read.nbytes <= 0 or not read.complete:
        return read
    if opaque is not None and any(v == opaque for v in read.env.values()):
        return read
    used = sum(len(k.encode("utf-8", "replace")) + len(v.encode("utf-8", "replace")) + 2 for k, v in read.env.items())
    if used >= read.nbytes:
        return read
    if not read.env:
        return EnvRead(RETITLED, {}, read.nbytes)
    return EnvRead(PARTIAL, dict(read.env), read.nbytes, complete=False)


def read_environ(pid: int, proc_root: str = "/proc") -> EnvRead:
    """Read ``/proc/<pid>/environ`` (start environment) with blank/permission/exit handling."""
    try:
        with open(f"{proc_root}/{pid}/environ", "rb") as fh:
            data = fh.read()
    except PermissionError:
        return EnvRead(DENIED)
    except (FileNotFoundError, ProcessLookupError):
        return EnvRead(GONE)
    except OSError:
        return EnvRead(DENIED)
    return parse_environ_block(data)


@dataclass(frozen=True)
class ProcRole:
    engine: str  # an engine's ProcessSignature.tree_name | "python" | "other"
    role: str  # scheduler, detokenizer, dp_controller, ..., main, launcher, resource_tracker, other
    ranks: Mapping[str, int] = field(default_factory=dict)  # from the title suffix, e.g. {"TP": 1}

    @property
    def is_worker(self) -> bool:
        return self.role in WORKER_ROLES


@dataclass
class ProcInfo:
    """One process of the tree (plain data)."""

    pid: int
    ppid: int
    name: str
    cmdline: list[str]
    environ: EnvRead = field(default_factory=lambda: EnvRead(GONE))
    role: ProcRole | None = None

    @property
    def title(self) -> str:
        """The process title: the command line, or what setproctitle wrote (trailing blanks dropped)."""
        parts = list(self.cmdline)
        while parts and parts[-1] == "":
            parts.pop()
        return " ".join(parts) if parts else self.name

    @property
    def retitled_cmdline(self) -> bool:
        """argv area rewritten by setproctitle: one title followed by empty strings."""
        return len(self.cmdline) > 1 and bool(self.cmdline[0]) and all(p == "" for p in self.cmdline[1:])

    def to_json(self) -> dict:
        d = {"pid": self.pid, "ppid": self.ppid, "name": self.name, "cmdline": self.title.split(" ")}
        d["environ"] = {**asdict(self.environ), "env": dict(self.environ.env)}
        d["role"] = asdict(self.role) if self.role else None
        return d


#: (title pattern, engine) of each engine's retitled workers, e.g. ``sglang::scheduler_TP1``
_TITLE_RES = [(re.compile(rf"^{re.escape(s.title_prefix)}(?P<what>{'|'.join(map(re.escape, s.roles))})(?P<suffix>.*)$"),
               s.tree_name) for s in _SIGNATURES if s.title_prefix and s.roles]


def _title_match(text: str) -> tuple[re.Match[str], str] | None:
    for pattern, engine in _TITLE_RES:
        if m := pattern.match(text):
            return m, engine
    return None

_RANK_TOKEN_RE = re.compile(r"([A-Z][A-Z_]*?)(\d+)$")


def _ranks_from_suffix(suffix: str) -> dict[str, int]:
    """``"_DP0_TP1"`` -> ``{"DP": 0, "TP": 1}`` (also ``ATTN_CP``, ``MOE_DP``)."""
    ranks: dict[str, int] = {}
    # Suffix is " DP0 TP1" with spaces replaced by '_'; multi-word keys contain '_' too.
    for tok in re.findall(r"(?:ATTN_CP|MOE_DP|[A-Z]+)\d+", suffix):
        m = _RANK_TOKEN_RE.match(tok)
        if m:
            ranks[m.group(1)] = int(m.group(2))
    return ranks


def classify(proc: ProcInfo) -> ProcRole:
    """Engine and role of one process from its title/command line."""
    title = proc.title
    first = title.split(" ")[0] if title else proc.name
    found = _title_match(first) or _title_match(proc.name)
    if found:
        m, engine = found
        what = m.group("what")
        role = {"data_parallel_controller": "dp_controller"}.get(what, what)
        return ProcRole(engine, role, _ranks_from_suffix(m.group("suffix")))
    if "multiprocessing.resource_tracker" in title:
        return ProcRole("python", "resource_tracker")
    if "multiprocessing.spawn" in title or "multiprocessing.forkserver" in title:
        return ProcRole("python", "worker")
    main = _server_main_engine(proc.cmdline)
    if main:
        return ProcRole(main, "main")
    return ProcRole("other", "other")


def _server_main_engine(argv: list[str]) -> str | None:
    """Engine when ``argv`` itself starts a server (not a wrapper such as ``timeout ... python -m``)."""
    if not argv:
        return None
    exe = os.path.basename(argv[0])
    if len(argv) > 1 and (exe, argv[1]) in _SERVER_COMMANDS:
        return _SERVER_COMMANDS[(exe, argv[1])]
    if not _PYTHON_RE.match(exe):
        return None
    for i, arg in enumerate(argv[1:], start=1):
        if arg == "-m" and i + 1 < len(argv):
            return _SERVER_MODULES.get(argv[i + 1])
        if arg.startswith("-m") and len(arg) > 2:
            return _SERVER_MODULES.get(arg[2:])
        if not arg.startswith("-"):
            base = os.path.basename(arg)
            script = next((name for name in _SERVER_SCRIPTS if arg.endswith(name)), None)
            if script is not None:
                return _SERVER_SCRIPTS[script]
            if i + 1 < len(argv) and (base, argv[i + 1]) in _SERVER_COMMANDS:
                return _SERVER_COMMANDS[(base, argv[i + 1])]
            return None
    return None


def _finish_roles(procs: list[ProcInfo]) -> list[ProcInfo]:
    """Classify every process; non-server ancestors of the server's main process are launchers."""
    for p in procs:
        p.role = classify(p)
    by_pid = {p.pid: p for p in procs}
    for p in procs:
        if p.role and p.role.role == "main":
            parent = by_pid.get(p.ppid)
            while parent is not None and parent.role and parent.role.role == "other":
                parent.role = ProcRole("other", "launcher")
                parent = by_pid.get(parent.ppid)
    return procs


def workers(
    procs: Iterable[ProcInfo], engine: str | None = None, roles: Iterable[str] = WORKER_ROLES
) -> list[ProcInfo]:
    """Processes with a worker role (optionally of one engine), sorted by pid."""
    want = set(roles)
    out = [p for p in procs if p.role and p.role.role in want and (engine is None or p.role.engine == engine)]
    return sorted(out, key=lambda p: p.pid)


def load_proctree(source: str | os.PathLike[str] | list[dict], opaque: str | None = None) -> list[ProcInfo]:
    """Load a recorded tree (``proctree.json``: pid, ppid, name, cmdline, nccl dict) as ProcInfo.

    Such a file kept only ``NCCL_*`` variables, so each environ is a partial read with scope
    ``NCCL_*``. A process whose dict is empty and whose command line shows setproctitle's
    pattern was blank when recorded: it is loaded as ``retitled`` (unreadable), not as "no
    variables". Files written by :meth:`ProcInfo.to_json` (with an ``environ`` key) load as they
    were read, except that an ``ok`` block whose entries fill fewer bytes than it held loads as
    ``partial`` (:func:`reconcile_size`; ``opaque``: the redaction marker whose values hide their size).
    """
    data = source if isinstance(source, list) else json.loads(Path(source).read_text(encoding="utf-8"))
    procs: list[ProcInfo] = []
    for d in data:
        p = ProcInfo(int(d["pid"]), int(d.get("ppid", 0)), str(d.get("name", "")), list(d.get("cmdline") or []))
        if isinstance(d.get("environ"), dict):
            e = d["environ"]
            status = e.get("status", OK)
            p.environ = reconcile_size(EnvRead(
                status, dict(e.get("env") or {}), int(e.get("nbytes", 0)),
                bool(e.get("complete", status != PARTIAL)), str(e.get("scope", "")),
            ), opaque)
        elif "nccl" in d:
            nccl = dict(d.get("nccl") or {})
            if not nccl and (p.retitled_cmdline or "::" in p.name):
                p.environ = EnvRead(RETITLED, {}, 0, complete=False, scope="NCCL_*")
            else:
                p.environ = EnvRead(OK, nccl, 0, complete=False, scope="NCCL_*")
        procs.append(p)
    return _finish_roles(procs)


def walk(root_pid: int, include_root: bool = True) -> list[ProcInfo]:
    """The live tree under ``root_pid`` (psutil), each with its role and ``/proc`` environ read.

    Processes that vanish during the walk are skipped; unreadable ones keep what could be read.
    """
    import psutil

    try:
        root = psutil.Process(root_pid)
        members = ([root] if include_root else []) + root.children(recursive=True)
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return []
    out: list[ProcInfo] = []
    for proc in members:
        try:
            with proc.oneshot():
                pid, ppid, name = proc.pid, proc.ppid(), proc.name()
                try:
                    cmdline = proc.cmdline()
                except psutil.AccessDenied:
                    cmdline = []
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        except psutil.AccessDenied:
            out.append(ProcInfo(proc.pid, 0, "?", [], EnvRead(DENIED)))
            continue
        out.append(ProcInfo(pid, ppid, name, cmdline, read_environ(pid)))
    return _finish_roles(out)


def find_listener(port: int, host: str | None = None) -> int | None:
    """Pid of the process listening on TCP ``port`` (for ``--server-url`` servers), or None.

    Tries the system-wide table first; where that needs privileges, scans processes one by one.
    """
    import psutil

    def _match(conn) -> bool:
        if conn.status != psutil.CONN_LISTEN or not conn.laddr:
            return False
        if conn.laddr.port != port:
            return False
        return host is None or conn.laddr.ip in (host, "0.0.0.0", "::", "")

    try:
        for conn in psutil.net_connections(kind="tcp"):
            if _match(conn) and conn.pid:
                return int(conn.pid)
    except (psutil.AccessDenied, PermissionError, OSError):
        pass
    for proc in psutil.process_iter(["pid"]):
        try:
            conns = proc.net_connections(kind="tcp") if hasattr(proc, "net_connections") else proc.connections("tcp")
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess, OSError):
            continue
        if any(_match(c) for c in conns):
            return int(proc.pid)
    return None
