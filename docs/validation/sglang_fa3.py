"""FA3, SGLang's default attention backend on Hopper, small enough to travel to the lent GPU.

``sgl_kernel/flash_ops.abi3.so`` (sglang-kernel 0.4.5) is 1.12 GB: 372 CUDA fat binaries, one per translation unit,
each with an sm_80, an sm_86 and an sm_90 cubin (about a third of them zstd-compressed). A Hopper GPU loads only the
sm_90 cubins, and only of the kernels it launches (CUDA's lazy module loading, torch's default). A Llama-shaped bf16
model with 128-wide heads (the 8B target and its EAGLE-3 draft) launches only the ``flash_fwd_hdim128_bf16_*_sm90``
instantiations, the combine and the scheduler-metadata kernels. This script zeroes every other cubin in place (the
file keeps its size and layout, so the loader and every offset are untouched) and packs the result: about 9 MB of xz.
A kernel whose cubin was zeroed fails at its first launch with a CUDA error, never silently.

    python docs/validation/sglang_fa3.py build      # here: .kit/sgl-fa3-hdim128.tar.xz from .kit/wheels
    python docs/validation/sglang_fa3.py install    # there, after sglang_kit.py setup: into /tmp/sgl/site/sgl_kernel

The kit (``sglang_kit.py``) trims the whole file; a device call that wants FA3 carries this archive after a call
that carried the kit, on the same warm machine (64 MiB a call: the kit and the tree fill one).
"""

from __future__ import annotations

import argparse
import io
import re
import struct
import subprocess
import sys
import tarfile
import zipfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KIT_DIR = ROOT / ".kit"
WHEEL = "sglang_kernel-0.4.5-cp310-abi3-manylinux2014_x86_64.whl"
MEMBER = "sgl_kernel/flash_ops.abi3.so"
ARCHIVE = KIT_DIR / "sgl-fa3-hdim128.tar.xz"

FATBIN_MAGIC = 0xBA55ED50
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
ELF_MAGIC = b"\x7fELF"
#: the translation unit a cubin was compiled from, as its internal-linkage symbols spell it
_UNIT = re.compile(rb"_INTERNAL_[0-9a-f]+_\d+_([A-Za-z0-9_]+?)_cu_")


@dataclass(frozen=True)
class Cubin:
    """One entry of a fat binary: the fat binary's offset, where its payload lies in the file, for which SM, and
    whether zstd packed it."""

    fatbin: int
    start: int
    size: int
    arch: int
    compressed: bool


def fatbin_section(elf: bytes | bytearray) -> tuple[int, int]:
    """(offset, size) of the ``.nv_fatbin`` section of a 64-bit little-endian ELF file."""
    if elf[:4] != ELF_MAGIC or elf[4] != 2:
        raise ValueError("not a 64-bit ELF file")
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    names_off, = struct.unpack_from("<Q", elf, shoff + shstrndx * shentsize + 0x18)
    for i in range(shnum):
        hdr = shoff + i * shentsize
        name_at, = struct.unpack_from("<I", elf, hdr)
        name = elf[names_off + name_at: elf.index(b"\0", names_off + name_at)]
        if name == b".nv_fatbin":
            off, size = struct.unpack_from("<QQ", elf, hdr + 0x18)
            return off, size
    raise ValueError("no .nv_fatbin section")


def cubins(blob: bytes | bytearray, start: int, end: int) -> list[Cubin]:
    """Every entry of the fat binaries laid one after another (8-byte aligned) between ``start`` and ``end``.
    A fat binary's header: magic, version, header size, payload size; each entry's: kind, flags, entry header size,
    payload size, ..., the SM at byte 28."""
    found: list[Cubin] = []
    at = start
    while at + 16 <= end:
        magic, _version, header, size = struct.unpack_from("<IHHQ", blob, at)
        if magic != FATBIN_MAGIC:
            at += 8
            continue
        entry, stop = at + header, at + header + size
        while entry < stop:
            _kind, _flags, entry_header, payload = struct.unpack_from("<HHIQ", blob, entry)
            arch, = struct.unpack_from("<I", blob, entry + 28)
            first = entry + entry_header
            found.append(Cubin(at, first, payload, arch, bytes(blob[first:first + 4]) == ZSTD_MAGIC))
            entry = first + payload
        at = stop
    return found


def unit_of(payload: bytes, compressed: bool) -> str:
    """The translation unit a cubin came from (``flash_fwd_hdim128_bf16_paged_sm90``), '' when it names none."""
    if compressed:
        # the padding after the frame makes zstd exit with an error, after it wrote the frame decoded
        payload = subprocess.run(["zstd", "-dc"], input=payload, capture_output=True).stdout
    found = _UNIT.search(payload)
    return found.group(1).decode() if found else ""


def wanted(unit: str, arch: int, sm: int = 90, head_dim: int = 128, dtype: str = "bf16") -> bool:
    """Whether a Hopper run of a ``dtype`` model with ``head_dim``-wide heads (no logit soft-cap) can load this
    cubin: the ``sm`` build of every kernel that is not a forward instantiation, and of the one forward family."""
    if arch != sm:
        return False
    if not unit.startswith("flash_fwd_hdim"):
        return bool(unit)
    family = f"flash_fwd_hdim{head_dim}_{dtype}"
    return (unit == f"{family}_sm{sm}" or unit.startswith(f"{family}_")) and unit.endswith(f"_sm{sm}") \
        and "softcap" not in unit


def slim(so: bytearray) -> tuple[Counter[str], int]:
    """Zero, in place, every fat binary of ``so`` whose sm_90 cubin ``wanted`` refuses; a kept unit keeps all its
    entries (the driver reads a fat binary's entries to pick one, and a zeroed zstd entry beside the kept cubin made
    the first launch fail on the H100, 2026-12-05). Returns the kept units (bytes each) and the bytes zeroed."""
    off, size = fatbin_section(so)
    kept: Counter[str] = Counter()
    zeroed = 0
    groups: dict[int, list[Cubin]] = {}
    for c in cubins(so, off, off + size):
        groups.setdefault(c.fatbin, []).append(c)
    for group in groups.values():
        sm90 = [c for c in group if c.arch == 90]
        unit = unit_of(bytes(so[sm90[0].start:sm90[0].start + sm90[0].size]), sm90[0].compressed) if sm90 else ""
        if unit and wanted(unit, 90):
            kept[unit] += sum(c.size for c in group)
            continue
        for c in group:
            so[c.start:c.start + c.size] = bytes(c.size)
            zeroed += c.size
    return kept, zeroed


def build(wheel: Path, out: Path) -> None:
    """Here: ``out`` = an xz tar of ``sgl_kernel/flash_ops.abi3.so`` with only the cubins ``wanted`` keeps."""
    if not wheel.is_file():
        raise SystemExit(f"sglang_fa3: {wheel}: no sglang-kernel wheel (`sglang_kit.py build` downloads it)")
    with zipfile.ZipFile(wheel) as zf:
        so = bytearray(zf.read(MEMBER))
    total = len(so)
    kept, zeroed = slim(so)
    if not kept:
        raise SystemExit(f"sglang_fa3: {wheel.name}: no cubin kept (the wheel's layout changed)")
    for unit, n in sorted(kept.items()):
        print(f"sglang_fa3: kept {unit} ({n / 2**20:.1f} MiB)")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w:xz", preset=9) as tf:
        info = tarfile.TarInfo(MEMBER)
        info.size, info.mode = total, 0o755
        tf.addfile(info, io.BytesIO(bytes(so)))
    print(f"sglang_fa3: {out} ({out.stat().st_size / 2**20:.1f} MiB): {total / 2**20:.0f} MiB file, "
          f"{zeroed / 2**20:.0f} MiB of cubins zeroed, {len(kept)} unit(s) kept")


def install(archive: Path, site: Path) -> None:
    """There: the slim ``flash_ops`` into an unpacked kit's site (after ``sglang_kit.py setup``)."""
    if not (site / "sgl_kernel").is_dir():
        raise SystemExit(f"sglang_fa3: {site}: no unpacked kit (run `sglang_kit.py setup` first; a fresh machine "
                         "has none)")
    if (site / MEMBER).is_file() and not archive.is_file():
        print(f"sglang_fa3: {site / MEMBER} is already there (an earlier call on this machine); kept")
        return
    if not archive.is_file():
        raise SystemExit(f"sglang_fa3: {archive}: no FA3 archive (build it here with `sglang_fa3.py build`, then "
                         "name it in the device call's carry)")
    with tarfile.open(archive) as tar:
        tar.extractall(site, filter="tar")
    print(f"sglang_fa3: {MEMBER} installed into {site}")


def probe() -> int:
    """There: FA3's two entry points at the 8B shape's sizes (32 query heads, 8 KV heads, 128 wide, bf16; a paged
    cache of page size 1, as SGLang calls them), each synchronised, so a kernel that cannot run is named here, not
    at a later cuBLAS call. Returns 0 when both ran."""
    import torch
    from sgl_kernel.flash_attn import flash_attn_varlen_func, flash_attn_with_kvcache

    dev, bf16 = "cuda", torch.bfloat16
    failed = 0
    for batch, new, ctx in ((1, 1, 64), (1, 3, 64), (4, 3, 200), (1, 48, 48)):
        try:
            q = torch.randn(batch * new, 32, 128, device=dev, dtype=bf16)
            pages = batch * ctx
            k = torch.randn(pages, 1, 8, 128, device=dev, dtype=bf16)
            v = torch.randn_like(k)
            table = torch.arange(pages, device=dev, dtype=torch.int32).view(batch, ctx)
            seqlens = torch.full((batch,), ctx, device=dev, dtype=torch.int32)
            cu_q = torch.arange(0, batch * new + 1, new, device=dev, dtype=torch.int32)
            flash_attn_with_kvcache(q=q, k_cache=k, v_cache=v, page_table=table, cache_seqlens=seqlens,
                                    cu_seqlens_q=cu_q, max_seqlen_q=new, causal=True)
            torch.cuda.synchronize()
            kv = torch.randn(batch * new, 8, 128, device=dev, dtype=bf16)
            flash_attn_varlen_func(q, kv, kv, cu_seqlens_q=cu_q, cu_seqlens_k=cu_q, max_seqlen_q=new,
                                   max_seqlen_k=new, causal=True)
            torch.cuda.synchronize()
            print(f"sglang_fa3: probe batch {batch}, {new} new token(s), context {ctx}: ran")
        except Exception as exc:
            failed += 1
            print(f"sglang_fa3: probe batch {batch}, {new} new token(s), context {ctx}: {type(exc).__name__}: "
                  f"{str(exc).splitlines()[0]}")
            break  # a CUDA error is sticky: later launches would only repeat it
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="sglang_fa3.py", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    b = sub.add_parser("build", help="here: the slim flash_ops into .kit/")
    b.add_argument("--wheel", default=str(KIT_DIR / "wheels" / WHEEL))
    b.add_argument("--out", default=str(ARCHIVE))
    i = sub.add_parser("install", help="there, after sglang_kit.py setup: into the kit's site")
    i.add_argument("--archive", default=str(ARCHIVE))
    i.add_argument("--site", default="/tmp/sgl/site")
    sub.add_parser("probe", help="there, on the GPU with the kit's site on PYTHONPATH: FA3's kernels at the 8B sizes")
    a = ap.parse_args(argv)
    if a.what == "probe":
        return probe()
    if a.what == "build":
        build(Path(a.wheel), Path(a.out))
    else:
        install(Path(a.archive), Path(a.site))
    return 0


if __name__ == "__main__":
    sys.exit(main())
