"""The slim FA3 kernels (docs/validation/sglang_fa3.py): which cubins a Hopper bf16 hdim-128 run keeps, and that
slimming zeroes exactly the others in place. The fat-binary layout is the one read in sglang-kernel 0.4.5's
``flash_ops.abi3.so`` (372 fat binaries of an sm_90, an sm_80 and an sm_86 cubin each; some zstd-packed); the
unit names are real ones from that file."""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "validation"))
import sglang_fa3  # noqa: E402 (docs/validation is not a package)


def _cubin(unit: str, filler: bytes = b"\x11") -> bytes:
    """An ELF-looking cubin whose internal-linkage symbol names ``unit`` as nvcc spells it."""
    name = f"_ZN72_INTERNAL_9a7a7ba6_36_{unit}_cu_cab2ad54_16684cuda3std3__419piecewise_constructE".encode()
    return sglang_fa3.ELF_MAGIC + filler * 60 + name + filler * 13


def _fatbin(entries: list[tuple[int, bytes]]) -> bytes:
    """One fat binary: the 16-byte header, then each (sm, payload) behind a 64-byte entry header."""
    body = b""
    for arch, payload in entries:
        header = bytearray(64)
        struct.pack_into("<HHIQ", header, 0, 2, 0x101, 64, len(payload))
        struct.pack_into("<I", header, 28, arch)
        body += bytes(header) + payload
    return struct.pack("<IHHQ", sglang_fa3.FATBIN_MAGIC, 1, 16, len(body)) + body


def _elf_with(section: bytes) -> bytearray:
    """A minimal 64-bit ELF file: a null section, .nv_fatbin holding ``section``, and the names."""
    names = b"\0.nv_fatbin\0.shstrtab\0"
    data_at = 64
    names_at = data_at + len(section)
    shoff = names_at + len(names)
    shoff += -shoff % 8
    head = bytearray(64)
    head[:5] = b"\x7fELF\x02"
    struct.pack_into("<Q", head, 0x28, shoff)
    struct.pack_into("<HHH", head, 0x3A, 64, 3, 2)
    sections = bytearray(64)  # the null section
    for name_at, off, size in ((1, data_at, len(section)), (12, names_at, len(names))):
        sh = bytearray(64)
        struct.pack_into("<I", sh, 0, name_at)
        struct.pack_into("<QQ", sh, 0x18, off, size)
        sections += sh
    pad = bytes(shoff - names_at - len(names))
    return bytearray(bytes(head) + section + names + pad + bytes(sections))


def test_a_hopper_bf16_hdim128_run_keeps_its_forward_family_and_the_shared_kernels() -> None:
    keep = ["flash_fwd_hdim128_bf16_sm90", "flash_fwd_hdim128_bf16_paged_split_sm90",
            "flash_fwd_hdim128_bf16_packgqa_sm90", "flash_fwd_combine", "flash_prepare_scheduler"]
    drop = ["flash_fwd_hdim256_bf16_sm90", "flash_fwd_hdim128_fp16_sm90", "flash_fwd_hdim128_e4m3_paged_sm90",
            "flash_fwd_hdim128_bf16_softcap_sm90", "flash_fwd_hdim128_bf16_paged_sm80", "flash_fwd_hdim64_bf16_sm90"]
    assert [u for u in keep if sglang_fa3.wanted(u, 90)] == keep
    assert [u for u in drop if sglang_fa3.wanted(u, 90)] == []
    assert not sglang_fa3.wanted("flash_fwd_combine", 80)  # an Ampere build of a kept unit
    assert not sglang_fa3.wanted("", 90)  # a cubin that names no unit is not known to be needed


def test_slimming_zeroes_every_other_fat_binary_in_place_and_keeps_the_file_layout() -> None:
    kept = _cubin("flash_fwd_hdim128_bf16_paged_sm90")
    dropped = [_cubin("flash_fwd_hdim128_bf16_paged_sm90", b"\x22"),
               _cubin("flash_fwd_hdim128_bf16_paged_sm90", b"\x33"), _cubin("flash_fwd_hdim256_e4m3_sm90", b"\x44")]
    section = (_fatbin([(90, kept), (80, dropped[0]), (86, dropped[1])])
               + bytes(8)  # alignment between fat binaries, which the walk steps over
               + _fatbin([(90, dropped[2])]))
    so = _elf_with(section)
    before = bytes(so)
    units, zeroed = sglang_fa3.slim(so)
    # the kept unit's fat binary whole (its Ampere builds too), the other zeroed
    assert dict(units) == {"flash_fwd_hdim128_bf16_paged_sm90": len(kept) + len(dropped[0]) + len(dropped[1])}
    assert len(so) == len(before)
    assert kept in so and dropped[0] in so and dropped[1] in so and b"\x44" * 60 not in so
    assert zeroed == len(dropped[2])
    changed = [i for i in range(len(so)) if so[i] != before[i]]
    assert all(so[i] == 0 for i in changed)  # only payload bytes, only to zero: every header kept


@pytest.mark.skipif(shutil.which("zstd") is None, reason="zstd is not installed (sglang-kernel packs some cubins so)")
def test_a_zstd_packed_cubin_is_read_for_its_unit() -> None:
    packed = subprocess.run(["zstd", "-c"], input=_cubin("flash_fwd_hdim128_bf16_split_sm90"),
                            capture_output=True, check=True).stdout + bytes(5)  # padding after the frame, as there
    assert packed[:4] == sglang_fa3.ZSTD_MAGIC
    assert sglang_fa3.unit_of(packed, compressed=True) == "flash_fwd_hdim128_bf16_split_sm90"


def test_a_file_without_fat_binaries_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="not a 64-bit ELF file"):
        sglang_fa3.fatbin_section(b"#!/bin/sh\n" + bytes(80))
