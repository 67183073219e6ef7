"""Machine fingerprint: what a throughput number depends on, and a stable machine-class slug.

Built from given facts: what nvidia-smi says of the GPUs comes in as a :class:`GpuReport` (asked by
:func:`specwatch.server.gpu.gpu_report`). Everything degrades gracefully: no GPU report means a CPU
machine, no torch means no torch or NCCL versions. torch is imported only when asked for and installed (it
takes seconds to import).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import platform
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from specwatch.engines.registry import ENGINES
from specwatch.signals.installed import Runner, package_info, run_command
from specwatch.signals.nvidiasmi import GpuReport

# Keys compared by diff_fingerprints in this order first; anything else follows sorted.
_ORDER = (
    "machine_class", "gpu_model", "gpu_count", "interconnect", "driver", "cuda", "torch", "nccl",
    "engine", "engine_version", "engine_commit", "cpu_model", "cpu_count", "python", "os",
)  # fmt: skip
#: The Python distribution that is each engine (the reference server is part of specwatch).
ENGINE_PACKAGES = {name: e.identity.package for name, e in ENGINES.items() if e.identity is not None}


def _machine_id() -> str:
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            text = Path(path).read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            continue
        if text:
            return text
    return platform.node()


def gpu_identity(uuids: list[str], where: list[tuple[str | None, str | None]], *, gpus: int) -> dict[str, Any]:
    """Which physical GPUs (UUID, serial, PCI bus) on which host (its name and ``host_id``) a session ran
    on, so sessions can be grouped by machine. A field nvidia-smi did not give, and every GPU field on a
    machine without GPUs, is an explicit None."""
    return {
        "hostname": platform.node() or None,
        "gpu_uuids": list(uuids) if gpus and uuids else None,
        "gpu_serials": [w[0] for w in where] if gpus and where and any(w[0] for w in where) else None,
        "gpu_pci_bus_ids": [w[1] for w in where] if gpus and where and any(w[1] for w in where) else None,
    }


def host_id(gpu_uuids: list[str]) -> str:
    """Short stable id of this physical machine: a hash of the visible GPUs' UUIDs (the same GPUs
    are the same machine, whatever VM or container they are lent to), else of the OS machine id."""
    key = ",".join(sorted(gpu_uuids)) if gpu_uuids else f"machine-id:{_machine_id()}"
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def session_machine(session: Mapping[str, Any]) -> str:
    """The machine a recorded session ran on (the one rule that groups sessions for the drift gate's machine
    term, and names a run's own machine: :func:`run_machine`): its ``host`` (:func:`host_id`: a hash of the
    visible GPUs' UUIDs, recorded since session 3; on a CPU machine, of its OS machine id), else that hash
    of the UUIDs in its ``gpu_identity``, so a machine's sessions from before and after the GPU identity was
    recorded share one label; else the commit it measured: sessions older than both came from the lent
    H200s, where each lease measured one commit (``baselines/h200x1/large-eagle3-tuned.json``: 1f61c74,
    ab34110, 40a7dc0 are its three leases); else the day it was recorded."""
    if session.get("host"):
        return f"host:{session['host']}"
    ident = session.get("gpu_identity")
    uuids = ident.get("gpu_uuids") if isinstance(ident, Mapping) else None
    if isinstance(uuids, list) and uuids and all(isinstance(u, str) and u for u in uuids):
        return f"host:{host_id(uuids)}"
    if session.get("commit"):
        return f"commit:{session['commit']}"
    return f"day:{str(session.get('recorded') or '')[:10]}"


def run_machine(fingerprint: Mapping[str, Any], commit: str | None = None, recorded: str | None = None) -> str:
    """The machine a run with this fingerprint (and commit, and time) ran on: :func:`session_machine` of
    the session it records (the fields ``BaselineMetric.from_result`` keeps: host, GPU identity, commit)."""
    host = fingerprint.get("host_id")
    return session_machine({"host": host if isinstance(host, str) else None, "commit": commit, "recorded": recorded,
                            "gpu_identity": fingerprint.get("gpu_identity")})


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


_TORCH_VERSION_RE = re.compile(r"""^(__version__|cuda)\b[^=]*=\s*['"]([^'"]+)['"]""", re.M)


def _torch_info(with_gpus: bool = True) -> dict[str, str | None]:
    """torch, its CUDA and NCCL versions; all None when torch is not installed.

    Without a GPU NCCL cannot be asked, so torch is not imported (2-4 s in every perf run): its
    version and CUDA build are read from the ``torch/version.py`` that ``import torch`` would read.
    """
    info: dict[str, str | None] = {"torch": None, "torch_cuda": None, "nccl": None}
    spec = importlib.util.find_spec("torch")
    if spec is None:
        return info
    if not with_gpus and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            try:
                text = (Path(folder) / "version.py").read_text(encoding="utf-8")
            except OSError:
                continue
            found = dict(_TORCH_VERSION_RE.findall(text))
            if "__version__" in found:
                info["torch"], info["torch_cuda"] = found["__version__"], found.get("cuda")
                return info
    try:
        import torch  # lazy: heavy
    except Exception:  # a broken install must not break fingerprinting
        return info
    info["torch"] = str(torch.__version__)
    info["torch_cuda"] = getattr(torch.version, "cuda", None)
    try:
        if torch.cuda.is_available():
            v = torch.cuda.nccl.version()
            info["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:
        pass
    return info


def fingerprint(
    engine: str | None = None,
    engine_version: str | None = None,
    *,
    engine_commit: str | None = None,
    gpus: GpuReport | None = None,
    with_torch: bool = True,
) -> dict[str, Any]:
    """Fingerprint of this machine (plus the engine fields the caller fills: :func:`engine_identity`),
    with machine_class.

    ``gpus``: what nvidia-smi says of the GPUs this process may use (:func:`specwatch.server.gpu.gpu_report`
    asks it; None: no GPU, a CPU machine). Only those count: one GPU of a two-GPU host is an "h200x1"
    machine, as the servers booted here see it.
    """
    report = gpus if gpus is not None else GpuReport()
    gpu_rows, uuids, where = list(report.gpus), list(report.uuids), list(report.where)
    fp: dict[str, Any] = {
        "gpu_model": None,
        "gpu_count": len(gpu_rows),
        "gpu_names": [g[0] for g in gpu_rows],
        "driver": gpu_rows[0][1] if gpu_rows else None,
        "cuda": None,
        "interconnect": "none",
        "topology": {},
        "cpu_model": _cpu_model(),
        "cpu_count": _cpu_count(),
        "python": platform.python_version(),
        "os": f"{platform.system()} {platform.release()}",
        "engine": engine,
        "engine_version": engine_version,
        "engine_commit": engine_commit,
        "host_id": host_id(uuids),
        "gpu_identity": gpu_identity(uuids, where, gpus=len(gpu_rows)),
    }
    if gpu_rows:
        names = Counter(g[0] for g in gpu_rows)
        fp["gpu_model"] = " + ".join(sorted(names))
        fp["cuda"] = report.cuda
        if len(gpu_rows) > 1:
            fp["interconnect"] = report.interconnect
            fp["topology"] = dict(report.links)
    tinfo = _torch_info(bool(gpu_rows)) if with_torch else {"torch": None, "torch_cuda": None, "nccl": None}
    fp["torch"] = tinfo["torch"]
    fp["nccl"] = tinfo["nccl"]
    if fp["cuda"] is None:
        fp["cuda"] = tinfo["torch_cuda"]
    fp["machine_class"] = machine_class(fp)
    return fp


def checkout_commit(folder: str, runner: Runner = run_command) -> str | None:
    """HEAD of the git checkout whose tracked files include ``folder`` (a source install); None for an
    installed wheel, even one inside some other repository's virtual environment (not tracked there)."""
    if not (runner(["git", "-C", folder, "ls-files", "--", "__init__.py"]) or "").strip():
        return None
    sha = (runner(["git", "-C", folder, "rev-parse", "HEAD"]) or "").strip()
    return sha if re.fullmatch(r"[0-9a-f]{40}", sha) else None


#: Engines whose ``/server_info`` "version" is their own (the reference server's imitates SGLang's).
SERVED_VERSION_ENGINES = frozenset(name for name, e in ENGINES.items() if e.identity and e.identity.served_version)


@functools.lru_cache(maxsize=32)
def _installed(python: str, package: str, runner: Runner) -> tuple[str | None, str | None]:
    """(version, commit) of ``package`` in ``python``: the commit of its source checkout, else pip's record."""
    info = package_info(python, package, runner)
    commit = (checkout_commit(str(info["folder"]), runner) if info.get("folder") else None) or info.get("vcs_commit")
    return (str(info["version"]) if info.get("version") else None, str(commit) if commit else None)


def engine_identity(
    interpreters: Iterable[tuple[str, str]],
    served: Iterable[tuple[str, Mapping[str, Any] | None]] = (),
    runner: Runner = run_command,
) -> dict[str, str | None]:
    """``engine_version`` and ``engine_commit`` of the engines under test.

    ``interpreters``: (engine, the server's Python) pairs; each is asked for the installed package
    (never imported here) and the HEAD of its source checkout (else the commit pip recorded for a VCS
    install); asked once per process. ``served``: (engine, ``/server_info``) of measured servers:
    the ``version`` an SGLang server reports wins over its package's. Several engines or installs
    are joined with ``+``, in engine order.
    """
    versions: dict[str, list[str]] = {}
    commits: dict[str, list[str]] = {}
    for engine, python in sorted(set(interpreters)):
        if engine in ENGINE_PACKAGES:
            version, commit = _installed(python, ENGINE_PACKAGES[engine], runner)
            versions.setdefault(engine, []).extend([version] if version else [])
            commits.setdefault(engine, []).extend([commit] if commit else [])
    reported: dict[str, set[str]] = {}
    for engine, info in served:
        if engine in SERVED_VERSION_ENGINES and info and info.get("version"):
            reported.setdefault(engine, set()).add(str(info["version"]))
    versions.update({engine: sorted(vals) for engine, vals in reported.items()})

    def joined(per: dict[str, list[str]]) -> str | None:
        vals = [v for engine in sorted(per) for v in dict.fromkeys(per[engine])]
        return "+".join(vals) if vals else None

    return {"engine_version": joined(versions), "engine_commit": joined(commits)}


_NOISE_WORDS = {
    "nvidia", "geforce", "tesla", "quadro", "blackwell", "hopper", "ada", "ampere", "server",
    "workstation", "edition", "generation", "max", "q", "sxm", "sxm2", "sxm4", "sxm5",
    "hbm2", "hbm2e", "hbm3", "hbm3e", "mig",
}  # fmt: skip


def gpu_slug(name: str) -> str:
    """Short GPU model slug: 'NVIDIA H200' → 'h200', 'NVIDIA A100-SXM4-80GB' → 'a100'."""
    words = re.split(r"[\s\-_/]+", name.lower())
    keep = [w for w in words if w and w not in _NOISE_WORDS and not re.fullmatch(r"\d+gb", w)]
    slug = re.sub(r"[^a-z0-9]", "", "".join(keep))
    return slug or "gpu"


def machine_class(fp: Mapping[str, Any]) -> str:
    """Stable slug of the machine: 'h200x2-nvlink', 'h200x1', 'rtxpro6000x8-pcie', 'cpu-2core'."""
    names = fp.get("gpu_names") or []
    count = int(fp.get("gpu_count") or len(names))
    if not count:
        return f"cpu-{int(fp.get('cpu_count') or 1)}core"
    models = sorted({gpu_slug(n) for n in names}) or [gpu_slug(str(fp.get("gpu_model") or "gpu"))]
    slug = f"{'+'.join(models)}x{count}"
    if count > 1:
        link = fp.get("interconnect") or "none"
        slug += f"-{link}" if link != "none" else ""
    return slug


def engine_text(fp: Mapping[str, Any]) -> str:
    """``"sglang 0.5.16"``: the engines under test with their recorded versions ('' when none is recorded)."""
    return " ".join(str(v) for v in (fp.get("engine"), fp.get("engine_version")) if v)


def diff_fingerprints(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Human-readable differences 'key: A → B', important keys first."""
    keys = [k for k in _ORDER if k in a or k in b]
    keys += sorted((set(a) | set(b)) - set(_ORDER))
    return [f"{k}: {a.get(k)!r} → {b.get(k)!r}" for k in keys if a.get(k) != b.get(k)]


__all__ = [
    "ENGINE_PACKAGES",
    "SERVED_VERSION_ENGINES",
    "checkout_commit",
    "diff_fingerprints",
    "engine_identity",
    "engine_text",
    "fingerprint",
    "gpu_identity",
    "gpu_slug",
    "host_id",
    "machine_class",
    "run_machine",
    "session_machine",
]
