"""What else runs on this host while a server is measured: other inference servers and GPU processes.

A measurement's ``shared_host`` says the host was shared: other pytest-xdist workers (the pool knows
them), or another inference server (SGLang, the reference server, vLLM, TensorRT-LLM, TGI, Triton,
llama.cpp, Ollama, ``transformers serve``) or GPU compute process that is not this run's. Found from
the process table (psutil) and ``nvidia-smi --query-compute-apps``; this process, its ancestors and
its descendants (the servers it booted) and the trees of ``own`` pids (a ``--server-url`` server)
are the run's own.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from specwatch.engines.registry import signatures
from specwatch.server.gpu import nvidia_smi

__all__ = ["neighbours", "server_kind"]

#: (argv[0]'s name, argv[1]) of servers started as a command, programs, module names run with
#: ``python -m``, and the title prefixes of retitled workers (:func:`specwatch.engines.registry.signatures`)
_COMMANDS = {c: s.label for s in signatures() for c in s.commands}
_PROGRAMS = {p: s.label for s in signatures() for p in s.programs}
_MODULES = {m: s.label for s in signatures() for m in s.modules}
_TITLES = {s.title_prefix: s.label for s in signatures() if s.title_prefix}


def server_kind(cmdline: Sequence[str]) -> str | None:
    """Which inference server a command line (or a retitled worker's title) is, or None."""
    if not cmdline:
        return None
    first = cmdline[0]
    for prefix, kind in _TITLES.items():
        if first.startswith(prefix):
            return kind
    name = os.path.basename(first)
    if name in _PROGRAMS:
        return _PROGRAMS[name]
    if len(cmdline) > 1 and (name, cmdline[1]) in _COMMANDS:
        return _COMMANDS[(name, cmdline[1])]
    if name.startswith("python") and "-m" in cmdline[1:]:
        i = cmdline.index("-m", 1)
        return _MODULES.get(cmdline[i + 1]) if i + 1 < len(cmdline) else None
    return None


def _run_tree(own: Iterable[int]) -> set[int]:
    """This process, its ancestors and descendants, and the trees of ``own``."""
    import psutil

    mine: set[int] = set()
    for pid in {os.getpid(), *own}:
        try:
            proc = psutil.Process(pid)
            mine.add(pid)
            mine.update(p.pid for p in proc.children(recursive=True))
            if pid == os.getpid():
                mine.update(p.pid for p in proc.parents())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return mine


def neighbours(own: Iterable[int] = ()) -> list[str]:
    """Other inference servers (each once, at its main process) and GPU compute processes on this host,
    one phrase each, e.g. ``"SGLang server (pid 4061)"``; [] when the host is the run's alone."""
    import psutil

    mine = _run_tree(own)
    found: dict[int, str] = {}
    parents: dict[int, int] = {}
    for proc in psutil.process_iter(["pid", "ppid", "cmdline"]):
        info = proc.info
        if info["pid"] in mine or not info.get("cmdline"):
            continue
        kind = server_kind(info["cmdline"])
        if kind:
            found[info["pid"]] = f"{kind} (pid {info['pid']})"
            parents[info["pid"]] = info["ppid"]
    servers = [text for pid, text in sorted(found.items()) if parents[pid] not in found]  # a worker's main speaks
    gpu = []
    for line in nvidia_smi(["--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"]):
        pid_text, _, rest = line.partition(",")
        if pid_text.strip().isdigit() and int(pid_text) not in mine and int(pid_text) not in found:
            name, _, memory = rest.partition(",")
            gpu.append(f"GPU process {os.path.basename(name.strip())} (pid {int(pid_text)}, {memory.strip()})")
    return servers + gpu
