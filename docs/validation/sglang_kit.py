"""Real SGLang for the lent H200: the package set one device call carries, built from the registries.

    python docs/validation/sglang_kit.py build [--version 0.5.16]    # here (needs PyPI): .kit/sglang-<v>.tar.xz
    python docs/validation/sglang_kit.py list                        # the distributions, pinned, and each trim
    python docs/validation/sglang_kit.py build --version 0.5.17 --overlay-on 0.5.16  # .kit/sglang-0.5.17-overlay.tar.xz
    python docs/validation/sglang_kit.py setup      # there (no network): kit into /tmp/sgl, models, JIT caches
    python docs/validation/sglang_kit.py overlay    # there, after setup: /tmp/sgl-0.5.17/site = 0.5.16's + the overlay
    python docs/validation/sglang_kit.py overlay --version 0.5.12   # the same for 0.5.12 ... 0.5.15.post1
    python docs/validation/sglang_kit.py versions /tmp/sgl-0.5.12/site  # there: import the server path, print versions
    python docs/validation/sglang_kit.py save-jit "$OUT/jit-cache.tar.xz" # there, after the servers ran

Why a kit: the device has Python 3.12, torch 2.11.0+cu130, triton 3.6.0 and transformers 5.17, no network, and
one call carries at most 64 MiB. SGLang 0.5.12 to 0.5.17 pin torch==2.11.0 (0.5.23 pins torch 2.14.1 and its
kernel wheel does not load under 2.11); each release but 0.5.16 is an overlay on 0.5.16's kit (``VERSION_PINS``).
Their full dependency set is about 3.4 GB unpacked; the server path of a Llama target with an EAGLE-3 draft (triton
attention, pytorch sampling, no grammar backend) imports a small part of it. ``KIT`` lists that part, pinned to
what pip resolves for ``sglang==<v>`` beside the device's packages; each entry says why it is there. ``TRIMS`` drops
files the server path never loads, each checked by size so that a changed wheel fails the build instead of shipping
something else (``TRIMS_BY_PIN``: how other versions' wheels differ). The folder ``.kit/`` is ignored by git and
named in the device call's ``carry``.

What the kit runs differently from an install of the same release: every release declares nvidia-cutlass-dsl (about
150 MB of wheels, not carried), and without it flashinfer runs RMSNorm with its CUDA JIT kernels, where an install
runs its CuTe DSL kernels (``PLACEHOLDER_ENV``). The same on every release of the kit, so a pair of releases is
compared like for like; a change in flashinfer's CuTe DSL norm kernels between releases is not seen.

Built against the device image's package list (/work/.library/device/KINDS.md): anything it has (numpy,
cuda-bindings, triton, aiohttp, httpx, huggingface-hub, safetensors, sentencepiece, tiktoken, prometheus-client,
uvloop, einops, psutil, requests, pyyaml, regex, pillow, protobuf, timm, ...) is not carried. A pure-Python import
check of every server module on the path (``check``, run here in a Python 3.12 venv with torch 2.11) keeps the
list honest: it lists each top-level package imported from the kit, and any import that fails.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KIT_DIR = ROOT / ".kit"
CARRY_LIMIT_MIB = 50.0  # a call carries 64 MiB with the tree (about 9 MiB) and the JIT caches

#: name==version, and why it is carried (the server path imports it; the device lacks it or has another version)
KIT: dict[str, str] = {
    "sglang-kernel==0.4.5": "sgl_kernel: the sm90 ops (trimmed, TRIMS)",
    "flashinfer-python==0.6.14": "imported by sglang's layers and samplers (sglang 0.5.16 pins it)",
    "apache-tvm-ffi==0.1.11": "flashinfer's FFI (tvm_ffi)",
    "torch-c-dlpack-ext==0.1.5": "tvm_ffi's DLPack bridge to torch",
    "transformers==5.12.1": "sglang 0.5.16 pins it (the device has 5.17)",
    "tokenizers==0.22.2": "transformers 5.12.1 rejects the device's 0.23.2",
    "xgrammar==0.2.7": "imported at start (0.2.7 replaces the pinned 0.2.1, 44 MB; --grammar-backend none)",
    "fastapi==0.128.0": "the HTTP server (0.165 needs opentelemetry's SDK)",
    "starlette==0.50.0": "fastapi 0.128 wants <0.51 (starlette 1.x removed Router(on_startup=))",
    "uvicorn==0.55.0": "serves the app",
    "python-multipart==0.0.34": "fastapi's form parsing, imported by sglang's server",
    "pydantic==2.14.4": "request/response models (the device has no pydantic)",
    "pydantic-core==2.50.5": "pydantic",
    "annotated-types==0.8.0": "pydantic",
    "typing-inspection==0.4.5": "pydantic",
    "pydantic-extra-types==2.11.1": "imported by mistral_common",
    "pycountry==26.2.16": "pydantic_extra_types (locale files trimmed)",
    "pyzmq==27.3.0": "the processes talk over ZMQ",
    "orjson==3.13.0": "JSON responses",
    "msgspec==0.23.0": "IPC message types",
    "pybase64==1.5.1": "imported by sglang's utils",
    "setproctitle==1.3.8": "process titles (sglang::scheduler ...): what specwatch's process checks read",
    "partial-json-parser==0.2.1.1.post7": "function-call parsers, imported at start",
    "openai==2.6.1": "the OpenAI protocol types",
    "jiter==0.19.0": "openai",
    "sniffio==1.3.1": "openai",
    "distro==1.9.0": "openai",
    "interegular==0.3.3": "imported by the constrained-decoding module",
    "compressed-tensors==0.20.1": "quantization configs, imported by the model loader",
    "torchao==0.17.0": "imported by the quantization layers",
    "gguf==0.19.0": "imported by the model loader",
    "mistral-common==1.13.1": "imported by sglang's tokenizer manager",
    "jsonschema==4.26.0": "mistral_common",
    "jsonschema-specifications==2025.9.1": "jsonschema",
    "referencing==0.37.0": "jsonschema",
    "rpds-py==2026.9.1": "jsonschema",
    "lxml==6.1.3": "imported at start (found by the import check)",
    "blobfile==3.0.0": "sglang pins it (tiktoken tokenizer files); pure Python",
    "soundfile==0.13.1": "imported by the multimodal utils",
    "cffi==2.1.1": "soundfile",
    "pycparser==3.12": "cffi",
    "torchcodec==0.11.1": "imported by the multimodal utils",
    "torch-memory-saver==0.0.10": "imported by the model runner",
    "kernels==0.14.1": "imported by the layers (hub kernels)",
    "kernels-data==0.16.2": "kernels",
    "loguru==0.7.3": "imported by kernels",
    "dill==0.4.1": "imported by sglang's utils",
    "watchfiles==1.3.0": "uvicorn's reloader, imported by the server",
    "zstandard==0.25.0": "imported by sglang's utils (its cffi build trimmed)",
    "ipython==9.18.1": "imported by sglang's utils",
    "traitlets==5.16.1": "IPython",
    "decorator==5.2.1": "IPython",
    "matplotlib-inline==0.2.2": "IPython",
    "prompt-toolkit==3.0.53": "IPython",
    "wcwidth==0.9.4": "prompt_toolkit",
    "stack-data==0.6.3": "IPython",
    "executing==2.3.0": "stack_data",
    "asttokens==3.0.2": "stack_data",
    "pure-eval==0.2.4": "stack_data",
    "pexpect==4.9.0": "IPython",
    "ptyprocess==0.7.0": "pexpect",
    "ipython-pygments-lexers==1.1.1": "IPython",
    "easydict==1.14": "imported by sglang's configs",
    "nest-asyncio==1.6.0": "imported by sglang's utils",
    "opentelemetry-api==1.45.2": "imported by sglang's tracing",
    "cuda-python==13.4.4": "the metapackage sglang pins (the device's cuda-bindings answers)",
}

#: what another version pins differently (name -> version), read from each version's METADATA (Requires-Dist) in its
#: cp312 manylinux_2_34 wheel; every one of them pins torch==2.11.0, the device's. 0.5.17 moved flashinfer (and helion
#: and sgl-deep-gemm, neither carried; its new ``xxhash`` the device has). The older releases' other pins that differ
#: from 0.5.16's are not carried, each for its reason:
#:
#: * apache-tvm-ffi==0.1.9 (0.5.12, 0.5.13, 0.5.14; 0.1.11 from 0.5.15.post1): the kit's xgrammar 0.2.7 requires
#:   apache-tvm-ffi>=0.1.10, and the pinned xgrammar (0.2.0 in 0.5.12, 0.2.1 after: 118 MB unpacked) is too big to
#:   carry; flashinfer 0.6.11.post1 and 0.6.12 accept >=0.1.6,<0.2 (not 0.1.8). Every release runs on 0.1.11.
#: * xgrammar 0.2.0 / 0.2.1: 0.2.7 for every release, as for 0.5.16 (``--grammar-backend none``; the names each
#:   release imports from xgrammar, StructuralTag and the structural_tag formats, are all in 0.2.7).
#: * flashinfer_cubin==0.6.11.post1 (0.5.12), ==0.6.12 (0.5.13 to 0.5.15.post1): prebuilt kernels, not pinned by
#:   0.5.16 and not in the base kit; with ``--attention-backend triton`` and ``--sampling-backend pytorch``
#:   flashinfer's cubins are not on the path.
#: * sgl-deep-gemm 0.1.0 / 0.1.2 / 0.1.3 / 0.1.4 (0.1.4.post1 in 0.5.16): the deep_gemm placeholder, as for 0.5.16
#:   (each release imports deep_gemm only under a CUDA guard or in DSA/NSA code a triton-attention Llama never loads).
#: * kernels (unpinned in 0.5.12), mistral_common>=1.11.0 (0.5.12-0.5.14): the kit's 0.14.1 and 1.13.1 satisfy them;
#:   transformers 5.6.0 and 5.8.1 accept the kit's tokenizers 0.22.2 (<=0.23.0,>=0.22.0).
VERSION_PINS: dict[str, dict[str, str]] = {
    # sglang-0.5.12-cp312-cp312-manylinux_2_34_x86_64.whl, Requires-Dist
    "0.5.12": {"sglang-kernel": "0.4.2.post2", "flashinfer-python": "0.6.11.post1", "transformers": "5.6.0"},
    # sglang-0.5.13-cp312-cp312-manylinux_2_34_x86_64.whl (flashinfer_python[cu13]==0.6.12)
    "0.5.13": {"sglang-kernel": "0.4.3", "flashinfer-python": "0.6.12", "transformers": "5.8.1"},
    # sglang-0.5.14-cp312-cp312-manylinux_2_34_x86_64.whl
    "0.5.14": {"sglang-kernel": "0.4.4", "flashinfer-python": "0.6.12", "transformers": "5.8.1"},
    # sglang-0.5.15.post1-cp312-cp312-manylinux_2_34_x86_64.whl (transformers==5.12.1, apache-tvm-ffi==0.1.11 as 0.5.16)
    "0.5.15.post1": {"sglang-kernel": "0.4.4", "flashinfer-python": "0.6.12"},
    "0.5.16": {},
    "0.5.17": {"flashinfer-python": "0.6.15.post1"},
}

#: packages an overlay carries as a placeholder (``docs/validation/kit_placeholders/<name>``): a declared dependency
#: too big to travel that the release imports on the server path for kernels the path never runs. 0.5.15.post1
#: imports nvidia-cutlass-dsl (``cutlass``, about 150 MB of wheels) when it captures the draft's graphs (its DSA
#: indexer; 0.5.16 made that import lazy); measured on the H200 on 2026-12-05: without it 0.5.15.post1 cannot boot
PLACEHOLDERS_BY_VERSION: dict[str, tuple[str, ...]] = {"0.5.15.post1": ("cutlass",)}
PLACEHOLDER_DIR = Path(__file__).resolve().parent / "kit_placeholders"

#: what a server on a site with a placeholder must set so that nothing on its path takes the placeholder for the real
#: package. flashinfer (every release's, 0.6.11.post1 to 0.6.15.post1) runs its RMSNorm kernels in the CuTe DSL when
#: ``from .kernels import rmsnorm_cute`` succeeds, and falls back to its CUDA JIT kernels when nvidia-cutlass-dsl is
#: missing or when FLASHINFER_USE_CUDA_NORM=1 (``flashinfer/norm/__init__.py``). Every other site of the kit lacks
#: the package, so its servers take the CUDA JIT fallback on their own; the switch gives 0.5.15.post1's the same
#: kernels. Measured on an H100 on 2026-12-06: without it, 0.5.15.post1's first RMSNorm reached the placeholder
#: (``cutlass.BFloat16.width``) and the server refused to start, as the placeholder is built to.
PLACEHOLDER_ENV: dict[str, dict[str, str]] = {"cutlass": {"FLASHINFER_USE_CUDA_NORM": "1"}}


def server_env(version: str) -> dict[str, str]:
    """The environment a server on ``version``'s site needs for its placeholders (:data:`PLACEHOLDER_ENV`)."""
    return {k: v for name in PLACEHOLDERS_BY_VERSION.get(version, ()) for k, v in PLACEHOLDER_ENV[name].items()}


#: the releases whose kit is 0.5.16's with an overlay, oldest first (``build --version V --overlay-on 0.5.16``)
OVERLAY_BASE = "0.5.16"


def pins(version: str) -> list[str]:
    """``sglang==version`` and every KIT pin, with the version's own pins in place of 0.5.16's."""
    own = VERSION_PINS[version]
    return [f"sglang=={version}", *(f"{n}=={own.get(n, v)}" for n, v in (pin.split("==") for pin in KIT))]


def overlay_pins(version: str, base: str) -> list[str]:
    """The pins of ``version`` that ``base``'s kit lacks: what an overlay on base's kit carries."""
    return sorted(set(pins(version)) - set(pins(base)))


#: (path under the unpacked site, least MiB it must have had) removed after unpacking; a path smaller than its
#: floor, or missing, fails the build: the wheel changed, so the trim must be looked at again
TRIMS: list[tuple[str, float]] = [
    ("sgl_kernel/flash_ops.abi3.so", 1000.0),  # 1.12 GB; FA3 kernels, loaded lazily, not on a triton-attention path
    ("sgl_kernel/sm100", 10.0),  # Blackwell builds
    ("sgl_kernel/infllm_ops.cpython-310-x86_64-linux-gnu.so", 20.0),
    ("sgl_kernel/flashmla_ops.abi3.so", 10.0),
    ("mistral_common/data", 30.0),  # tokenizer files of Mistral models
    ("sglang/srt/grpc/_core.cpython-312-x86_64-linux-gnu.so", 5.0),  # the gRPC server (--grpc-mode only)
    ("zstandard/_cffi.cpython-312-x86_64-linux-gnu.so", 1.0),
    ("pycountry/locales", 10.0),
    ("bin", 0.0),
]

#: mscclpp in sglang-kernel 0.4.2.post2 and 0.4.3 (top level of the wheel): its Python extension is built for
#: CPython 3.10 (``.cpython-310``: Python 3.12 cannot import it), and no sgl_kernel library links its shared objects
#: (``readelf -d``: sm90/common_ops.abi3.so needs torch, CUDA and libc only); sgl_kernel.allreduce reaches mscclpp
#: through torch.ops, for ``--enable-mscclpp`` only
MSCCLPP_TRIMS: list[tuple[str, float]] = [
    ("_mscclpp.cpython-310-x86_64-linux-gnu.so", 3.0),  # 3.5 MiB
    ("lib", 30.0),  # 33.3 MiB: mscclpp.so, mscclpp_nccl.so (each three times) and their static archives
    ("lib64", 0.0),  # cmake files
    ("include", 0.1),  # mscclpp headers (0.2 MiB)
]

#: how another version's wheel differs from TRIMS (read from its file list): path -> the least MiB it must have had
#: (a trim of its own), or None (not in that wheel, or kept there)
TRIMS_BY_PIN: dict[str, dict[str, float | None]] = {
    "sglang-kernel==0.4.2.post2": {"sgl_kernel/infllm_ops.cpython-310-x86_64-linux-gnu.so": None,
                                   **dict(MSCCLPP_TRIMS)},
    "sglang-kernel==0.4.3": {"sgl_kernel/infllm_ops.cpython-310-x86_64-linux-gnu.so": None, **dict(MSCCLPP_TRIMS)},
    "sglang-kernel==0.4.4": {"sgl_kernel/infllm_ops.cpython-310-x86_64-linux-gnu.so": None},
    # 0.5.12's gRPC extension is 0.7 MiB (7.2 in 0.5.16): kept
    "sglang==0.5.12": {"sglang/srt/grpc/_core.cpython-312-x86_64-linux-gnu.so": None},
}


def trims_for(wanted_pins: list[str]) -> list[tuple[str, float]]:
    """TRIMS as the wheels of ``wanted_pins`` have them (:data:`TRIMS_BY_PIN`), in TRIMS' order, then their own."""
    changed: dict[str, float | None] = {}
    for pin in wanted_pins:
        changed.update(TRIMS_BY_PIN.get(pin, {}))
    out = [(rel, changed.get(rel, floor)) for rel, floor in TRIMS]
    out += [(rel, floor) for rel, floor in changed.items() if rel not in dict(TRIMS)]
    return [(rel, floor) for rel, floor in out if floor is not None]

#: a placeholder for ``deep_gemm``: sglang 0.5.16's dsa_backend (imported by eagle_worker_v2 when it captures
#: CUDA graphs, for every model) runs ``import deep_gemm``; with SGLANG_ENABLE_JIT_DEEPGEMM=0 nothing else is used
DEEP_GEMM_PLACEHOLDER = '''"""Placeholder of specwatch's SGLang kit: sgl-deep-gemm is not on a Llama + EAGLE-3 path."""


def __getattr__(name):
    raise ImportError(f"deep_gemm placeholder (specwatch kit): {name} is not available")
'''

#: a placeholder for ``datasets``: ``sglang.bench_serving`` imports it through its MMMU loader at start, for datasets a
#: ``random-ids`` run never loads; the real package (and pyarrow under it) is far more than a call can carry
DATASETS_PLACEHOLDER = '''"""Placeholder of specwatch's SGLang kit: random-ids runs of bench_serving load no dataset."""


def load_dataset(*args, **kwargs):
    raise ImportError("datasets placeholder (specwatch kit): Hugging Face datasets are not in the kit")
'''

PLATFORMS = ["manylinux_2_34_x86_64", "manylinux_2_31_x86_64", "manylinux_2_28_x86_64", "manylinux_2_27_x86_64",
             "manylinux_2_26_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux_2_5_x86_64", "manylinux1_x86_64"]


def _mib(path: Path) -> float:
    if path.is_file():
        return path.stat().st_size / 2**20
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def download(wanted_pins: list[str], wheels: Path) -> list[Path]:
    """Every wheel of ``wanted_pins`` for CPython 3.12 on x86-64 Linux into ``wheels``."""
    wheels.mkdir(parents=True, exist_ok=True)
    pins = list(wanted_pins)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
           "3.12", "--implementation", "cp", "-d", str(wheels)]
    for plat in PLATFORMS:
        cmd += ["--platform", plat]
    env = {**os.environ, "PIP_CONSTRAINT": ""}
    subprocess.run([*cmd, *pins], check=True, env=env)
    wanted = {(_norm(pin.split("==")[0]), pin.split("==")[1]) for pin in pins}
    return [w for w in sorted(wheels.glob("*.whl")) if tuple(w.name.split("-")[:2]) in
            {(n, v) for n, v in wanted} or (_norm(w.name.split("-")[0]), w.name.split("-")[1]) in wanted]


def _norm(name: str) -> str:
    """A distribution name as wheel file names spell it (PEP 427: runs of -_. become _, lower case)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def unpack_wheels(wheels: list[Path], site: Path) -> None:
    if site.exists():
        shutil.rmtree(site)
    env = {**os.environ, "PIP_CONSTRAINT": ""}
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--target",
           str(site), "--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp"]
    for plat in PLATFORMS:
        cmd += ["--platform", plat]
    subprocess.run([*cmd, *map(str, wheels)], check=True, env=env)


def trim(site: Path, overlay: bool = False, trims: list[tuple[str, float]] | None = None) -> list[str]:
    """Apply ``trims`` (default TRIMS; each checked by size), add the deep_gemm and datasets placeholders.
    An overlay applies only the trims under the packages it carries, and keeps the base's placeholders."""
    lines = []
    for rel, floor in TRIMS if trims is None else trims:
        path = site / rel
        if overlay and not (site / rel.split("/")[0]).exists():
            continue
        if not path.exists():
            raise SystemExit(f"sglang_kit: trim {rel}: not in the unpacked wheels (the wheel changed; look again)")
        size = _mib(path)
        if size < floor:
            raise SystemExit(f"sglang_kit: trim {rel}: {size:.1f} MiB, expected at least {floor:g} (the wheel "
                             "changed; look again)")
        shutil.rmtree(path) if path.is_dir() else path.unlink()
        lines.append(f"trimmed {rel} ({size:.1f} MiB)")
    for pyc in site.rglob("__pycache__"):
        shutil.rmtree(pyc, ignore_errors=True)
    if overlay:
        return lines
    return lines + placeholders(site)


def placeholders(site: Path) -> list[str]:
    """The deep_gemm and datasets placeholders in ``site``, each written where the site has no such package (a kit
    packed before a placeholder existed gets it when it is unpacked)."""
    lines = []
    for name, text in (("deep_gemm", DEEP_GEMM_PLACEHOLDER), ("datasets", DATASETS_PLACEHOLDER)):
        if (site / name / "__init__.py").is_file():
            continue
        (site / name).mkdir(exist_ok=True)
        (site / name / "__init__.py").write_text(text)
        lines.append(f"added {name} placeholder")
    return lines


def version_placeholders(site: Path, version: str) -> list[str]:
    """Copy ``version``'s placeholder packages (:data:`PLACEHOLDERS_BY_VERSION`) into ``site``."""
    lines = []
    for name in PLACEHOLDERS_BY_VERSION.get(version, ()):
        if (site / name).exists():
            raise SystemExit(f"sglang_kit: {site / name}: the wheels carry {name}; its placeholder is not needed")
        shutil.copytree(PLACEHOLDER_DIR / name, site / name, ignore=shutil.ignore_patterns("__pycache__"))
        lines.append(f"added {name} placeholder ({version})")
    return lines


def pack(site: Path, out: Path) -> float:
    out.parent.mkdir(parents=True, exist_ok=True)
    if shutil.which("xz"):  # multi-threaded; Python's lzma reads its blocks
        with open(out, "wb") as fh:
            tar = subprocess.Popen(["tar", "-C", str(site.parent), "-cf", "-", site.name], stdout=subprocess.PIPE)
            subprocess.run(["xz", "-9", "-T2", "-c"], stdin=tar.stdout, stdout=fh, check=True)
            if tar.wait():
                raise SystemExit("sglang_kit: tar failed")
    else:
        with tarfile.open(out, "w:xz", preset=9) as tf:
            tf.add(site, arcname="site")
    return out.stat().st_size / 2**20


def unpack(archive: Path, dest: Path) -> Path:
    """There: the archive into ``dest`` (``dest/site`` goes on PYTHONPATH); returns the site folder."""
    t0 = time.monotonic()
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="tar")
    print(f"sglang_kit: unpacked {archive.name} into {dest} in {time.monotonic() - t0:.1f} s")
    return dest / "site"


#: where the server's JIT compilers keep their builds (Triton, flashinfer, tvm-ffi); saved after a call and restored
#: before the next, a cold prefill-graph capture drops from about 69 s to 5 s
JIT_CACHES = ("~/.triton/cache", "~/.cache/flashinfer", "~/.cache/tvm-ffi", "~/.cache/sglang")


def setup(archive: Path, dest: Path, jit: Path | None, if_missing: bool = False) -> None:
    """There: unpack the kit, make the models (docs/validation/sglang_models.py), restore the JIT caches.
    ``if_missing``: keep what an earlier call on this warm machine unpacked (a later call need not carry the kit)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import sglang_models

    if if_missing and (dest / "site" / "sglang").is_dir() and (dest / "models").is_dir():
        print(f"sglang_kit: {dest} is already set up (an earlier call on this machine); kept")
        return
    if not archive.is_file():
        raise SystemExit(f"sglang_kit: {archive}: no kit (build it here with `sglang_kit.py build`, then name "
                         ".kit in the device call's carry)")
    for line in placeholders(unpack(archive, dest)):
        print(f"sglang_kit: {line}")
    t0 = time.monotonic()
    made = sglang_models.make(dest / "models")
    print(f"sglang_kit: models in {dest / 'models'} ({time.monotonic() - t0:.1f} s): {made}")
    if jit is not None and jit.is_file():
        with tarfile.open(jit) as tar:
            tar.extractall("/", filter="tar")
        print(f"sglang_kit: JIT caches restored from {jit}")


def _dist_of(entry: str) -> str:
    """The normalised distribution name of a ``*.dist-info`` folder (``flashinfer_python-0.6.14.dist-info``)."""
    return _norm(entry.split("-")[0])


def overlay(archive: Path, base: Path, dest: Path, if_missing: bool = False) -> Path:
    """There: ``dest/site`` = ``base`` (hard links) with each top-level package and dist-info the overlay carries
    replaced by the overlay's. Returns the new site. Fails in one line when the base kit is not unpacked (a device
    call that lands on a fresh machine: run ``setup`` first). ``if_missing``: keep a site an earlier call on this
    warm machine made (a later call need not carry the overlay)."""
    if if_missing and (dest / "site" / "sglang").is_dir() and (base / "sglang").is_dir():
        print(f"sglang_kit: {dest / 'site'} is already made (an earlier call on this machine); kept")
        return dest / "site"
    if not (base / "sglang").is_dir():
        raise SystemExit(f"sglang_kit: {base}: no unpacked base kit (run `sglang_kit.py setup` first; a fresh machine "
                         "has none)")
    if not archive.is_file():
        raise SystemExit(f"sglang_kit: {archive}: no overlay (build it here with `sglang_kit.py build --version V "
                         "--overlay-on 0.5.16`, then name it in the device call's carry)")
    t0 = time.monotonic()
    tmp = dest / "overlay"
    for path in (dest / "site", tmp):
        if path.exists():
            shutil.rmtree(path)
    unpack(archive, tmp)
    top = {e.name for e in (tmp / "site").iterdir()}
    dists = {_dist_of(e) for e in top if e.endswith(".dist-info")}
    subprocess.run(["cp", "-al", str(base), str(dest / "site")], check=True)
    for e in list((dest / "site").iterdir()):
        if e.name in top or (e.name.endswith(".dist-info") and _dist_of(e.name) in dists):
            shutil.rmtree(e) if e.is_dir() else e.unlink()
    for e in (tmp / "site").iterdir():
        shutil.move(str(e), str(dest / "site" / e.name))
    shutil.rmtree(tmp)
    print(f"sglang_kit: {dest / 'site'} = {base} with {sorted(top)} from {archive.name} "
          f"({time.monotonic() - t0:.1f} s)")
    return dest / "site"


#: run in a site (``versions``): the modules a Llama + EAGLE-3 server imports at start, then each carried package's
#: version and folder, so that a run's record says what ran and an import that fails is one traceback before any boot
IMPORT_CHECK = """
import importlib, importlib.metadata as md
for mod in ("sglang.launch_server", "sglang.srt.entrypoints.http_server", "sglang.srt.managers.scheduler",
            "sglang.srt.speculative.eagle_worker_v2",  # the overlap scheduler's EAGLE worker (on by default)
            "sglang.srt.models.llama", "sglang.srt.models.llama_eagle3",
            "sglang.srt.layers.attention.triton_backend", "sgl_kernel"):
    importlib.import_module(mod)
for dist, mod in (("sglang", "sglang"), ("sglang-kernel", "sgl_kernel"), ("flashinfer-python", "flashinfer"),
                  ("transformers", "transformers"), ("apache-tvm-ffi", "tvm_ffi"), ("xgrammar", "xgrammar"),
                  ("torch", "torch")):
    print(f"sglang_kit: {dist} {md.version(dist)} from {importlib.import_module(mod).__path__[0]}")
"""


def versions(site: Path) -> int:
    """There: import the server path from ``site`` (with the profiles' SGLANG_ENABLE_JIT_DEEPGEMM=0) in a fresh
    Python; print each package's version and where it came from. The exit code is the import's."""
    env = {**os.environ, "PYTHONPATH": str(site), "SGLANG_ENABLE_JIT_DEEPGEMM": "0", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-c", IMPORT_CHECK], env=env, check=False).returncode


def save_jit(out: Path) -> None:
    """There: pack the JIT caches the servers filled (xz: 2 MiB, gzip 5), for the next call's ``setup --jit``."""
    with tarfile.open(out, "w:xz") as tar:
        for rel in JIT_CACHES:
            path = Path(rel).expanduser()
            if path.exists():
                tar.add(path, arcname=str(path).lstrip("/"))
    print(f"sglang_kit: JIT caches saved to {out} ({out.stat().st_size / 2**20:.1f} MiB)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="sglang_kit.py", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    b = sub.add_parser("build", help="download, unpack, trim and pack the kit into .kit/")
    b.add_argument("--version", default="0.5.16", choices=sorted(VERSION_PINS))
    b.add_argument("--overlay-on", default=None, choices=sorted(VERSION_PINS),
                   help="pack only what differs from this version's kit (.kit/sglang-<v>-overlay.tar.xz)")
    b.add_argument("--wheels", default=str(KIT_DIR / "wheels"), help="wheel cache (default .kit/wheels)")
    sub.add_parser("list", help="the pinned distributions and the trims")
    u = sub.add_parser("unpack", help="unpack a kit (on the device)")
    u.add_argument("archive")
    u.add_argument("dest")
    st = sub.add_parser("setup", help="on the device: unpack the kit, make the models, restore the JIT caches")
    st.add_argument("--kit", default=str(KIT_DIR / "sglang-0.5.16.tar.xz"))
    st.add_argument("--dest", default="/tmp/sgl")
    st.add_argument("--jit", default=str(KIT_DIR / "jit-cache.tar.xz"))
    st.add_argument("--if-missing", action="store_true", help="keep a kit an earlier call unpacked on this machine")
    ov = sub.add_parser("overlay", help="there, after setup: another version's site, the base plus an overlay")
    ov.add_argument("--version", default="0.5.17", choices=sorted(set(VERSION_PINS) - {OVERLAY_BASE}),
                    help="whose overlay: --kit and --dest default to .kit/sglang-<v>-overlay.tar.xz, /tmp/sgl-<v>")
    ov.add_argument("--kit", default=None)
    ov.add_argument("--base", default="/tmp/sgl/site")
    ov.add_argument("--dest", default=None)
    ov.add_argument("--if-missing", action="store_true", help="keep a site an earlier call made on this machine")
    vs = sub.add_parser("versions", help="there: import the server path from a site, print what was imported")
    vs.add_argument("site", help="a site folder (/tmp/sgl/site, /tmp/sgl-<v>/site)")
    sj = sub.add_parser("save-jit", help="on the device: pack the JIT caches into a .tgz")
    sj.add_argument("out")
    a = ap.parse_args(argv)
    if a.what == "setup":
        setup(Path(a.kit), Path(a.dest), Path(a.jit) if a.jit else None, a.if_missing)
        return 0
    if a.what == "overlay":
        kit = a.kit or str(KIT_DIR / f"sglang-{a.version}-overlay.tar.xz")
        overlay(Path(kit), Path(a.base), Path(a.dest or f"/tmp/sgl-{a.version}"), a.if_missing)
        return 0
    if a.what == "versions":
        return versions(Path(a.site))
    if a.what == "save-jit":
        save_jit(Path(a.out))
        return 0
    if a.what == "list":
        for pin, why in KIT.items():
            print(f"{pin:40} {why}")
        for rel, floor in TRIMS:
            print(f"trim {rel} (at least {floor:g} MiB)")
        for version in sorted(set(VERSION_PINS) - {OVERLAY_BASE}):
            print(f"overlay {version} on {OVERLAY_BASE}: {' '.join(overlay_pins(version, OVERLAY_BASE))}")
        return 0
    if a.what == "unpack":
        unpack(Path(a.archive), Path(a.dest))
        return 0
    wanted = overlay_pins(a.version, a.overlay_on) if a.overlay_on else pins(a.version)
    wheels = download(wanted, Path(a.wheels))
    name = f"sglang-{a.version}" + ("-overlay" if a.overlay_on else "")
    site = KIT_DIR / ("build-" + a.version + ("-overlay" if a.overlay_on else "")) / "site"
    unpack_wheels(wheels, site)
    for line in [*trim(site, overlay=bool(a.overlay_on), trims=trims_for(wanted)),
                 *version_placeholders(site, a.version)]:
        print(f"sglang_kit: {line}")
    out = KIT_DIR / f"{name}.tar.xz"
    size = pack(site, out)
    print(f"sglang_kit: {len(wheels)} wheels, {_mib(site):.0f} MiB unpacked -> {out.relative_to(ROOT)} "
          f"{size:.1f} MiB")
    if size > CARRY_LIMIT_MIB:
        print(f"sglang_kit: {size:.1f} MiB is over the {CARRY_LIMIT_MIB:g} MiB a call can spare", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
