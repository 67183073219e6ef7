"""What an interpreter has installed: a package's version, folder and pip-recorded commit, asked of that
interpreter in a child process without importing the package, and the command runner that asks it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Runner", "package_info", "run_command"]

#: runs a command: its stdout, or None when it is missing, fails or hangs
Runner = Callable[[list[str]], "str | None"]

# Run by the asked interpreter: the package's version, folder and pip-recorded commit, WITHOUT importing it
# (find_spec of a top-level name only locates it; importing sglang takes many seconds).
_PACKAGE_PROBE = """
import importlib.metadata as m, importlib.util as u, json, os, sys
name, out = sys.argv[1], {}
try:
    out["version"] = m.version(name)
except Exception:
    pass
try:
    spec = u.find_spec(name)
    locs = list(spec.submodule_search_locations or []) if spec else []
    out["folder"] = locs[0] if locs else (os.path.dirname(spec.origin) if spec and spec.origin else None)
except Exception:
    pass
try:
    direct = json.loads(m.distribution(name).read_text("direct_url.json") or "{}")
    out["vcs_commit"] = (direct.get("vcs_info") or {}).get("commit_id")
except Exception:
    pass
print(json.dumps({k: v for k, v in out.items() if v}))
"""


def run_command(argv: list[str], timeout: float = 20.0, env: Mapping[str, str] | None = None) -> str | None:
    """stdout of a command run with ``env`` (None: this process's), or None when it is missing, fails or
    runs past ``timeout`` seconds. It runs in a session of its own, killed whole at the timeout, so a child
    it started cannot hold its output open past the timeout."""
    try:
        with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                              text=True, env=None if env is None else dict(env), start_new_session=True) as proc:
            try:
                out, _ = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                return None
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return out if proc.returncode == 0 else None


def package_info(python: str, package: str, runner: Runner | None = None, *, env: Mapping[str, str] | None = None,
                 timeout: float = 20.0) -> dict[str, Any]:
    """``version``, ``folder`` and ``vcs_commit`` (pip's direct_url.json) of ``package`` as ``python`` sees it
    with ``env`` (None: this process's environment), asked of that interpreter without importing the package,
    for at most ``timeout`` seconds; {} when it cannot answer. ``runner`` replaces the child process (it is
    then given the command alone)."""
    argv = [python, "-c", _PACKAGE_PROBE, package]
    out = runner(argv) if runner is not None else run_command(argv, timeout, env)
    try:
        info = json.loads(out or "")
    except ValueError:
        return {}
    return info if isinstance(info, dict) else {}
