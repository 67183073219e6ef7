"""docs/validation/sglang_kit.py and the release scenario of docs/validation/harness.py: the overlays of SGLang 0.5.12
to 0.5.15.post1 on 0.5.16's kit (issue 46). The wheels are not on CI machines: the trims run on sparse files of the
sizes the real wheels' files have (read from sglang-kernel 0.4.3's and 0.4.4's file lists), and the overlay on a
site laid out as the real kit's is (its top-level packages and dist-info folders)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specwatch.engines.sglang import SGLANG
from specwatch.profiles.loading import load_profiles

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "validation"))
import harness  # noqa: E402  (docs/validation is not a package)
import sglang_kit as kit  # noqa: E402

OLDER = ["0.5.12", "0.5.13", "0.5.14", "0.5.15.post1"]
INFLLM = "sgl_kernel/infllm_ops.cpython-310-x86_64-linux-gnu.so"


def test_every_version_pin_names_a_carried_distribution() -> None:
    """A pin of a name the kit does not carry would be dropped silently by ``pins``."""
    carried = {pin.split("==")[0] for pin in kit.KIT}
    for version, own in kit.VERSION_PINS.items():
        assert set(own) <= carried, (version, set(own) - carried)
        assert own.get("sglang-kernel", "0.4.5") != "0.4.5" or version in ("0.5.16", "0.5.17"), version


def test_each_older_overlay_carries_its_release_kernel_flashinfer_and_nothing_of_the_base() -> None:
    base = set(kit.pins(kit.OVERLAY_BASE))
    for version in OLDER:
        over = kit.overlay_pins(version, kit.OVERLAY_BASE)
        assert f"sglang=={version}" in over and not set(over) & base, version
        names = {pin.split("==")[0] for pin in over}
        assert {"sglang", "sglang-kernel", "flashinfer-python"} <= names, version  # each moved both from 0.5.16's
        assert names <= {"sglang", *kit.VERSION_PINS[version]}, version
    # 0.5.15.post1 pins transformers 5.12.1 as 0.5.16 does: not carried again
    assert "transformers" not in {p.split("==")[0] for p in kit.overlay_pins("0.5.15.post1", "0.5.16")}


def test_the_trims_follow_each_wheels_file_list() -> None:
    """0.5.16's build trims exactly TRIMS; kernel 0.4.4 has no infllm_ops; 0.4.2.post2 and 0.4.3 carry mscclpp;
    0.5.12's gRPC extension is kept; every per-pin difference belongs to a pin some release carries."""
    assert kit.trims_for(kit.pins("0.5.16")) == kit.TRIMS
    t14 = dict(kit.trims_for(kit.overlay_pins("0.5.14", "0.5.16")))
    assert INFLLM not in t14 and t14["sgl_kernel/flash_ops.abi3.so"] == 1000.0 and "lib" not in t14
    t13 = dict(kit.trims_for(kit.overlay_pins("0.5.13", "0.5.16")))
    assert INFLLM not in t13 and t13["lib"] == 30.0 and "_mscclpp.cpython-310-x86_64-linux-gnu.so" in t13
    assert "sglang/srt/grpc/_core.cpython-312-x86_64-linux-gnu.so" not in dict(kit.trims_for(kit.pins("0.5.12")))
    every = {pin for v in kit.VERSION_PINS for pin in kit.pins(v)}
    assert set(kit.TRIMS_BY_PIN) <= every, set(kit.TRIMS_BY_PIN) - every


def _sparse(path: Path, mib: float) -> None:
    """A file of ``mib`` MiB that takes no disk (the trims read st_size)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        fh.truncate(int(mib * 2**20))


def _kernel_043_site(site: Path) -> None:
    """sglang-kernel 0.4.3 and sglang 0.5.13 unpacked, at their files' sizes (MiB, from the wheels' listings)."""
    for rel, mib in (("sgl_kernel/flash_ops.abi3.so", 1022.0), ("sgl_kernel/sm100/common_ops.abi3.so", 20.9),
                     ("sgl_kernel/sm90/common_ops.abi3.so", 20.0), ("sgl_kernel/flashmla_ops.abi3.so", 14.0),
                     ("_mscclpp.cpython-310-x86_64-linux-gnu.so", 3.5), ("lib/mscclpp.so", 3.3),
                     ("lib/mscclpp_nccl.so", 4.7), ("lib/libmscclpp_static.a", 4.2), ("lib/mscclpp.so.0", 3.3),
                     ("lib/mscclpp.so.0.6.0", 3.3), ("lib/mscclpp_nccl.so.0", 4.7),
                     ("lib/mscclpp_nccl.so.0.6.0", 4.7), ("lib/libmscclpp_nccl_static.a", 5.7),
                     ("lib64/cmake/mscclpp/mscclpp-config.cmake", 0.01), ("include/mscclpp/core.hpp", 0.2),
                     ("sglang/srt/grpc/_core.cpython-312-x86_64-linux-gnu.so", 7.2), ("sglang/__init__.py", 0.001),
                     ("triton_kernels/__init__.py", 0.001)):
        _sparse(site / rel, mib)


def test_an_overlay_with_kernel_043_is_trimmed_to_what_the_server_path_loads(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _kernel_043_site(site)
    lines = kit.trim(site, overlay=True, trims=kit.trims_for(kit.overlay_pins("0.5.13", "0.5.16")))
    assert sorted(p.name for p in site.iterdir()) == ["sgl_kernel", "sglang", "triton_kernels"]
    assert (site / "sgl_kernel/sm90/common_ops.abi3.so").is_file() and not (site / "sgl_kernel/sm100").exists()
    assert not (site / "deep_gemm").exists()  # an overlay keeps the base's placeholders
    assert any(line.startswith("trimmed lib (33.") for line in lines), lines


def test_a_trim_the_wheel_lacks_fails_the_build(tmp_path: Path) -> None:
    """0.5.16's TRIMS on kernel 0.4.3's files: infllm_ops is not there, and the build stops instead of packing."""
    site = tmp_path / "site"
    _kernel_043_site(site)
    with pytest.raises(SystemExit, match=r"infllm_ops.*not in the unpacked wheels"):
        kit.trim(site, overlay=True)


def test_the_overlay_replaces_each_carried_package_and_its_dist_info(tmp_path: Path) -> None:
    """The base laid out as 0.5.16's kit; the overlay as 0.5.12's: sglang, sgl_kernel, triton_kernels and flashinfer
    replaced with their dist-info folders (by distribution name), the placeholders and the rest kept, the base
    untouched."""
    base = tmp_path / "sgl" / "site"
    for rel in ("sglang/__init__.py", "sglang-0.5.16.dist-info/METADATA", "sgl_kernel/__init__.py",
                "sglang_kernel-0.4.5.dist-info/METADATA", "triton_kernels/__init__.py", "flashinfer/__init__.py",
                "flashinfer_python-0.6.14.dist-info/METADATA", "xgrammar/__init__.py", "deep_gemm/__init__.py"):
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_text(f"base {rel}\n")
    over = tmp_path / "build" / "site"
    for rel in ("sglang/__init__.py", "sglang-0.5.12.dist-info/METADATA", "sgl_kernel/__init__.py",
                "sglang_kernel-0.4.2.post2.dist-info/METADATA", "triton_kernels/__init__.py",
                "flashinfer/__init__.py", "flashinfer_python-0.6.11.post1.dist-info/METADATA"):
        (over / rel).parent.mkdir(parents=True, exist_ok=True)
        (over / rel).write_text(f"overlay {rel}\n")
    archive = tmp_path / "sglang-0.5.12-overlay.tar.xz"
    kit.pack(over, archive)
    assert kit.main(["overlay", "--version", "0.5.12", "--kit", str(archive), "--base", str(base),
                     "--dest", str(tmp_path / "sgl-0.5.12")]) == 0
    site = tmp_path / "sgl-0.5.12" / "site"
    assert sorted(p.name for p in site.iterdir()) == sorted([
        "sglang", "sglang-0.5.12.dist-info", "sgl_kernel", "sglang_kernel-0.4.2.post2.dist-info", "triton_kernels",
        "flashinfer", "flashinfer_python-0.6.11.post1.dist-info", "xgrammar", "deep_gemm"])
    assert (site / "sglang/__init__.py").read_text() == "overlay sglang/__init__.py\n"
    assert (site / "xgrammar/__init__.py").read_text() == "base xgrammar/__init__.py\n"
    assert (base / "sglang-0.5.16.dist-info").is_dir() and (base / "sglang/__init__.py").read_text().startswith("base")
    assert os.stat(site / "xgrammar/__init__.py").st_ino == os.stat(base / "xgrammar/__init__.py").st_ino


@pytest.mark.parametrize("pair", list(zip(harness.SGL_RELEASES, list(harness.SGL_RELEASES)[1:], strict=False)))
@pytest.mark.parametrize("server", ["eagle3", "plain"])
def test_each_release_pair_measures_the_same_server_on_two_sites(pair: tuple[str, str], server: str,
                                                                  tmp_path: Path) -> None:
    """The scenario of a consecutive pair: each side's profile loads, names the same server, runs from the site
    ``sglang_kit.py overlay --version V`` makes (0.5.16 from the kit's), with the same flags but the graph limit's
    spelling: 0.5.12 and 0.5.13 know --cuda-graph-max-bs only."""
    base, head = pair
    settings = dict(harness.SETTINGS, sgl_release_base=base, sgl_release_head=head, sgl_release_server=server)
    plan = harness.plan_for("sglang-8b-releases-x1", settings, harness.DATA / "zz-test-releases")
    steps = [s for stage in plan.stages for lane in stage for s in lane]
    ab = steps[-1]
    assert [s.name for s in steps if s.name.startswith("sglang-overlay-")] == [
        f"sglang-overlay-{r}" for r in pair if r != "0.5.16"]
    argv = {}
    for side in ("base", "head"):
        rel = ab.argv[ab.argv.index(f"--{side}-profile") + 1]
        path = tmp_path / f"{side}.toml"
        path.write_text(plan.variants[rel] if rel in plan.variants else (ROOT / rel).read_text())
        (prof,) = load_profiles(path).servers.values()
        release = base if side == "base" else head
        assert prof.name == f"sgl8b-{server}"
        assert prof.pythonpath == ("/tmp/sgl/site" if release == "0.5.16" else f"/tmp/sgl-{release}/site",)
        # a site with the cutlass placeholder keeps flashinfer's RMSNorm on the kernels the other sites run
        assert {k: prof.extra_env.get(k) for k in ("FLASHINFER_USE_CUDA_NORM",)} == {
            "FLASHINFER_USE_CUDA_NORM": kit.server_env(release).get("FLASHINFER_USE_CUDA_NORM")}, release
        args = SGLANG.command(prof, "127.0.0.1", 30000)[3:]
        graph = "--cuda-graph-max-bs" if release in ("0.5.12", "0.5.13") else "--cuda-graph-max-bs-decode"
        assert args[args.index(graph) + 1] == "8", args
        assert ("--cuda-graph-max-bs-decode" in args) == (graph == "--cuda-graph-max-bs-decode"), args
        argv[side] = sorted(a for a in args if not a.startswith("--cuda-graph-max-bs"))
    assert argv["base"] == argv["head"]


def test_only_a_site_with_a_placeholder_needs_an_environment_of_its_own() -> None:
    assert kit.server_env("0.5.15.post1") == {"FLASHINFER_USE_CUDA_NORM": "1"}
    assert all(kit.server_env(v) == {} for v in kit.VERSION_PINS if v not in kit.PLACEHOLDERS_BY_VERSION)
    assert set(kit.PLACEHOLDER_ENV) == {n for names in kit.PLACEHOLDERS_BY_VERSION.values() for n in names}


def test_a_kit_packed_before_a_placeholder_gets_it_when_set_up(tmp_path: Path) -> None:
    """A site unpacked from an older kit (no datasets placeholder: bench_serving could not import) gets the missing
    placeholder; one it already has is left as it is."""
    site = tmp_path / "site"
    (site / "deep_gemm").mkdir(parents=True)
    (site / "deep_gemm" / "__init__.py").write_text("# the kit's own\n")
    assert kit.placeholders(site) == ["added datasets placeholder"]
    assert (site / "deep_gemm" / "__init__.py").read_text() == "# the kit's own\n"
    assert "load_dataset" in (site / "datasets" / "__init__.py").read_text()
    assert kit.placeholders(site) == []


PLACEHOLDER_USE = '''
import importlib.util, typing
import cutlass
import cutlass.cute as cute
from cutlass import Float16, Int32
from cutlass.cute.nvgpu import OperandMajorMode, tcgen05
from cutlass.cutlass_dsl import dsl_user_op

DTYPES = {"f16": cutlass.Float16, "f32": cutlass.Float32}  # a dict of dtypes, as sglang's DSA runner builds


@dsl_user_op
def pack(a: Float16, b: cute.Tensor | None = None, *, k: cutlass.Constexpr[int] = 1) -> Int32:
    return "the function itself"


class Kernel(cutlass.utils.SomeBase):
    def __init__(self, acc=cutlass.Float32, hint: typing.Optional[cute.Tensor] = None) -> None:
        self.acc = acc

    @cute.jit
    def __call__(self) -> str:
        return "jit leaves the method alone"

    @cute.kernel(preprocess=False)
    def kernel(self) -> str:
        return "a decorator factory too"


assert pack(1) == "the function itself" and Kernel()() == "jit leaves the method alone"
assert Kernel().kernel() == "a decorator factory too"
assert importlib.util.find_spec("cutlass.cute") is not None
for use in (lambda: cutlass.Int32(1), lambda: cute.make_layout((2, 2)), lambda: bool(cute.Tensor),
            lambda: cutlass.Float32 + 1, lambda: list(tcgen05)):
    try:
        use()
    except cutlass.PlaceholderUsed as e:
        assert "placeholder in specwatch's SGLang kit" in str(e), e
    else:
        raise AssertionError("a placeholder was used without raising")
print("ok")
'''


def test_the_cutlass_placeholder_imports_like_the_dsl_and_raises_on_any_use(tmp_path: Path) -> None:
    """The module-level forms 0.5.15.post1's DSA indexer and flashinfer's CuTe DSL kernels use (submodule imports,
    decorators, annotations, dtype tables, base classes) work; calling or computing with any name raises, naming the
    placeholder. In a fresh interpreter: the placeholder adds an import finder."""
    out = subprocess.run([sys.executable, "-c", PLACEHOLDER_USE], env={**os.environ, "PYTHONPATH":
                         str(kit.PLACEHOLDER_DIR)}, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_only_0_5_15_post1s_overlay_carries_the_cutlass_placeholder(tmp_path: Path) -> None:
    """0.5.15.post1 imports cutlass eagerly at draft capture; 0.5.16's kit (the base of every overlay) and the other
    releases import it lazily and get none. A site whose wheels already carry the package refuses the placeholder."""
    for version in kit.VERSION_PINS:
        site = tmp_path / version / "site"
        site.mkdir(parents=True)
        lines = kit.version_placeholders(site, version)
        assert ((site / "cutlass" / "__init__.py").is_file()) == (version == "0.5.15.post1"), version
        assert bool(lines) == (version == "0.5.15.post1"), lines
    assert not list((tmp_path / "0.5.15.post1" / "site" / "cutlass").rglob("__pycache__"))
    with pytest.raises(SystemExit, match="the wheels carry cutlass"):
        kit.version_placeholders(tmp_path / "0.5.15.post1" / "site", "0.5.15.post1")
