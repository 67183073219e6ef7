"""Machine fingerprint parsing against recorded nvidia-smi outputs (no GPU needed): nvidia-smi asked by
server.gpu.gpu_report, its output parsed by signals.nvidiasmi, the fingerprint built by store.machine."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from specwatch.server.gpu import gpu_report
from specwatch.signals import devices, installed, nvidiasmi
from specwatch.signals.installed import run_command
from specwatch.store import machine

# Recorded on a 2×H200 host (driver 580.159.04, CUDA 13.0), verbatim including the ANSI
# underline nvidia-smi puts around the topo header.
H200_QUERY = "NVIDIA H200, 580.159.04\nNVIDIA H200, 580.159.04\n"
H200_VERSION = (
    "NVIDIA-SMI version  : 580.159.04\nNVML version        : 580.159\n"
    "DRIVER version      : 580.159.04\nCUDA Version        : 13.0\n"
)
H200_TOPO = (
    "\t\x1b[4mGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tNV18\t0-31\t0\t\tN/A\n"
    "GPU1\tNV18\t X \t0-31\t0\t\tN/A\n"
    "\n"
    "Legend:\n\n"
    "  X    = Self\n"
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)\n"
    "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node\n"
    "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n"
    "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)\n"
    "  PIX  = Connection traversing at most a single PCIe bridge\n"
    "  NV#  = Connection traversing a bonded set of # NVLinks\n"
)
H200_SMI_HEADER = (
    "+-----------------------------------------------------------------------------------------+\n"
    "| NVIDIA-SMI 580.159.04             Driver Version: 580.159.04     CUDA Version: 13.0     |\n"
)
# The case study's machine: 8 PCIe GPUs across two NUMA nodes, with a NIC column (format of
# `nvidia-smi topo -m` on such hosts; values typed for the test).
PCIE8_QUERY = "".join("NVIDIA RTX PRO 6000 Blackwell Server Edition, 575.57.08\n" for _ in range(8))
_ROWS = []
for i in range(8):
    cells = ["X" if i == j else ("NODE" if (i < 4) == (j < 4) else "SYS") for j in range(8)]
    _ROWS.append(f"GPU{i}\t" + "\t".join(f" {c} " if c == "X" else c for c in cells) + "\tPHB\t0-47\t0\t\tN/A")
PCIE8_TOPO = (
    "\t\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    + "\n".join(_ROWS)
    + "\nNIC0\tPHB\tPHB\tPHB\tPHB\tSYS\tSYS\tSYS\tSYS\t X \t\t\t\t\n\nLegend:\n\n  X    = Self\n"
)


def fake_runner(outputs: dict[str, str | None]):
    calls: list[list[str]] = []

    def run(argv: list[str]) -> str | None:
        calls.append(argv)
        return outputs.get(" ".join(argv[1:]))

    run.calls = calls  # type: ignore[attr-defined]
    return run


def test_parse_recorded_query_and_versions():
    assert nvidiasmi.parse_gpu_query(H200_QUERY) == [("NVIDIA H200", "580.159.04")] * 2
    assert nvidiasmi.parse_gpu_query("") == []
    assert nvidiasmi.parse_cuda_version(H200_VERSION) == "13.0"
    assert nvidiasmi.parse_cuda_version(H200_SMI_HEADER) == "13.0"
    assert nvidiasmi.parse_cuda_version("garbage") is None


def test_parse_recorded_nvlink_topology():
    topo = nvidiasmi.parse_topology(H200_TOPO)
    assert topo["links"] == {"NV18": 1}
    assert topo["interconnect"] == "nvlink"


def test_parse_pcie_topology_with_nic():
    topo = nvidiasmi.parse_topology(PCIE8_TOPO)
    assert sum(topo["links"].values()) == 28  # 8 choose 2 GPU pairs, NIC ignored
    assert topo["links"] == {"NODE": 12, "SYS": 16}
    assert topo["interconnect"] == "pcie"
    assert topo["worst"] == "SYS"


def test_mixed_and_missing_topology():
    mixed = (
        "\tGPU0\tGPU1\tGPU2\tCPU Affinity\n"
        "GPU0\t X \tNV4\tPIX\t0-15\nGPU1\tNV4\t X \tPIX\t0-15\nGPU2\tPIX\tPIX\t X \t0-15\n"
    )
    assert nvidiasmi.parse_topology(mixed)["links"] == {"NV4": 1, "PIX": 2}
    assert nvidiasmi.parse_topology(mixed)["interconnect"] == "mixed"
    assert nvidiasmi.parse_topology(None)["interconnect"] == "none"


def test_fingerprint_two_h200_nvlink():
    run = fake_runner({
        "--query-gpu=name,driver_version --format=csv,noheader": H200_QUERY,
        "--version": H200_VERSION,
        "topo -m": H200_TOPO,
    })  # fmt: skip
    fp = machine.fingerprint("sglang", "0.5.23", gpus=gpu_report(run), with_torch=False)
    assert fp["gpu_model"] == "NVIDIA H200"
    assert fp["gpu_count"] == 2
    assert fp["driver"] == "580.159.04"
    assert fp["cuda"] == "13.0"
    assert fp["interconnect"] == "nvlink"
    assert fp["engine"] == "sglang"
    assert fp["engine_version"] == "0.5.23"
    assert fp["machine_class"] == "h200x2-nvlink"
    assert fp["cpu_count"] >= 1
    assert fp["python"]


def test_fingerprint_single_gpu_skips_topology_and_falls_back_to_smi_header():
    run = fake_runner({
        "--query-gpu=name,driver_version --format=csv,noheader": H200_QUERY.splitlines()[0] + "\n",
        "": H200_SMI_HEADER,
    })  # fmt: skip
    fp = machine.fingerprint(gpus=gpu_report(run), with_torch=False)
    assert fp["machine_class"] == "h200x1"
    assert fp["cuda"] == "13.0"
    assert ["nvidia-smi", "topo", "-m"] not in run.calls  # type: ignore[attr-defined]


def test_fingerprint_without_nvidia_smi_is_cpu():
    fp = machine.fingerprint(gpus=gpu_report(lambda argv: None), with_torch=False)
    assert fp["gpu_count"] == 0
    assert fp["gpu_model"] is None
    assert fp["driver"] is None
    assert fp["machine_class"] == f"cpu-{fp['cpu_count']}core"


def test_run_command_missing_binary_is_none():
    assert run_command(["definitely-not-a-command-specwatch"]) is None
    assert run_command([sys.executable, "-c", "import sys; print('out'); sys.exit(3)"]) is None  # failed
    assert run_command([sys.executable, "-c", "import os; print(os.environ['X'])"], env={"X": "given"}) == "given\n"


def test_fingerprint_pcie_machine_class():
    run = fake_runner({
        "--query-gpu=name,driver_version --format=csv,noheader": PCIE8_QUERY,
        "--version": None,
        "": None,
        "topo -m": PCIE8_TOPO,
    })  # fmt: skip
    fp = machine.fingerprint(gpus=gpu_report(run), with_torch=False)
    assert fp["machine_class"] == "rtxpro6000x8-pcie"
    assert fp["cuda"] is None


@pytest.mark.parametrize(
    ("name", "slug"),
    [
        ("NVIDIA H200", "h200"),
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H100 PCIe", "h100pcie"),
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("Tesla V100-SXM2-16GB", "v100"),
        ("NVIDIA GeForce RTX 4090", "rtx4090"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtxpro6000"),
        ("NVIDIA L40S", "l40s"),
    ],
)
def test_gpu_slug(name, slug):
    assert machine.gpu_slug(name) == slug


def test_machine_class_is_stable_and_cpu():
    assert machine.machine_class({"gpu_count": 0, "cpu_count": 2}) == "cpu-2core"
    fp = {"gpu_names": ["NVIDIA H200"] * 4, "gpu_count": 4, "interconnect": "nvlink"}
    assert machine.machine_class(fp) == machine.machine_class(dict(fp)) == "h200x4-nvlink"


def test_diff_fingerprints_lists_what_changed():
    a = {"gpu_model": "NVIDIA H200", "driver": "580.159.04", "torch": "2.9.0", "zz_extra": 1}
    b = {"gpu_model": "NVIDIA H200", "driver": "575.57.08", "torch": "2.9.0", "nccl": "2.27.3"}
    diffs = machine.diff_fingerprints(a, b)
    assert diffs == [
        "driver: '580.159.04' → '575.57.08'",
        "nccl: None → '2.27.3'",
        "zz_extra: 1 → None",
    ]
    assert machine.diff_fingerprints(a, dict(a)) == []


H200_UUIDS = "GPU-5f3c2a10-aaaa-bbbb-cccc-000000000000\nGPU-9e01d7b2-aaaa-bbbb-cccc-111111111111\n"


def _h200_runner():
    return fake_runner({
        "--query-gpu=name,driver_version --format=csv,noheader": H200_QUERY,
        "--query-gpu=uuid --format=csv,noheader": H200_UUIDS,
        "--version": H200_VERSION,
        "topo -m": H200_TOPO,
    })  # fmt: skip


@pytest.mark.parametrize(("cvd", "cls"), [
    (None, "h200x2-nvlink"),  # unset: every GPU
    ("0", "h200x1"),
    ("1", "h200x1"),
    ("1,0", "h200x2-nvlink"),
    ("GPU-9e01", "h200x1"),  # a unique UUID prefix, as CUDA accepts
    ("0,-1,1", "h200x1"),  # CUDA stops at the first invalid entry
    ("", "cpu"),  # nothing visible: the servers get no GPU
    ("-1", "cpu"),
    ("7", "h200x2-nvlink"),  # no such GPU: cannot tell, so every GPU counts
    ("MIG-abc", "h200x2-nvlink"),
])  # fmt: skip
def test_fingerprint_counts_only_the_visible_gpus(cvd: str | None, cls: str) -> None:
    env = {} if cvd is None else {"CUDA_VISIBLE_DEVICES": cvd}
    fp = machine.fingerprint(gpus=gpu_report(_h200_runner(), env=env), with_torch=False)
    assert fp["machine_class"].startswith(cls)
    if cls == "h200x1":
        assert fp["gpu_count"] == 1 and fp["interconnect"] == "none" and fp["topology"] == {}


def test_visible_topology_counts_only_pairs_among_visible_gpus() -> None:
    topo = nvidiasmi.parse_topology(PCIE8_TOPO, only={0, 1, 2, 3})
    assert topo["links"] == {"NODE": 6} and topo["worst"] == "NODE"
    across = nvidiasmi.parse_topology(PCIE8_TOPO, only={3, 4})
    assert across["links"] == {"SYS": 1}
    assert devices.select_visible(["GPU-a1", "GPU-a2"], ["GPU-a"]) is None  # ambiguous prefix
    assert devices.select_visible(["GPU-a1", "GPU-b2"], ["1", "GPU-b", "0"]) == [1, 0]
    assert devices.visible_devices({"CUDA_VISIBLE_DEVICES": " 2, 3 "}) == ["2", "3"]
    assert devices.visible_devices({}) is None


# -- the engine's identity: version and commit -------------------------------------------------------


def _fake_install(root, name: str = "boom", version: str = "9.9", commit: str = "c0ffee" * 6 + "c0ff"):
    """A package that raises when imported, with pip's metadata and a VCS direct_url.json."""
    import json

    (root / name).mkdir()
    (root / name / "__init__.py").write_text("raise RuntimeError('imported!')\n")
    info = root / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "direct_url.json").write_text(json.dumps({"url": "https://github.com/x/y",
                                                      "vcs_info": {"vcs": "git", "commit_id": commit}}))
    return commit


def _runner_with_path(path) -> installed.Runner:
    import os
    import subprocess

    def run(argv: list[str]) -> str | None:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False,
                              env={**os.environ, "PYTHONPATH": str(path)})
        return proc.stdout if proc.returncode == 0 else None

    return run


def test_package_info_asks_the_interpreter_without_importing_the_package(tmp_path) -> None:
    import sys

    commit = _fake_install(tmp_path)
    info = installed.package_info(sys.executable, "boom", _runner_with_path(tmp_path))
    assert info == {"version": "9.9", "folder": str(tmp_path / "boom"), "vcs_commit": commit}
    assert installed.package_info(sys.executable, "no-such-package-here", _runner_with_path(tmp_path)) == {}
    assert installed.package_info(sys.executable, "boom", env={"PYTHONPATH": str(tmp_path)}) == info  # its own child
    assert installed.package_info("/no/such/python", "boom") == {}


def test_checkout_commit_only_for_a_folder_its_checkout_tracks(tmp_path) -> None:
    import subprocess
    from pathlib import Path

    import specwatch

    src = Path(specwatch.__file__).parent
    head = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    if len(head) != 40:
        pytest.skip("specwatch is not a git checkout here")
    assert machine.checkout_commit(str(src)) == head  # a source checkout: its HEAD
    assert machine.checkout_commit(str(tmp_path)) is None  # not in a repository
    repo = tmp_path / "repo"
    (repo / "venv" / "pkg").mkdir(parents=True)
    (repo / "venv" / "pkg" / "__init__.py").write_text("")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    assert machine.checkout_commit(str(repo / "venv" / "pkg")) is None  # inside a repo, but not its file


def test_engine_identity_prefers_the_servers_own_version(tmp_path) -> None:
    import sys

    commit = _fake_install(tmp_path, "sglang", "0.5.23")
    run = _runner_with_path(tmp_path)
    ident = machine.engine_identity([("sglang", sys.executable)], runner=run)
    assert ident == {"engine_version": "0.5.23", "engine_commit": commit}  # pip's record: no checkout
    served = machine.engine_identity([("sglang", sys.executable)], [("sglang", {"version": "0.5.23.post1"})], run)
    assert served == {"engine_version": "0.5.23.post1", "engine_commit": commit}
    # the reference server's /server_info imitates SGLang's version: its own package decides
    ref = machine.engine_identity([], [("reference", {"version": "0.5.23"})], run)
    assert ref == {"engine_version": None, "engine_commit": None}
    both = machine.engine_identity([], [("sglang", {"version": "0.5.22"}), ("sglang", {"version": "0.5.23"})], run)
    assert both["engine_version"] == "0.5.22+0.5.23"  # two installs under test: both said
    fp = machine.fingerprint("sglang", "0.5.23", engine_commit="abc", gpus=gpu_report(fake_runner({})),
                             with_torch=False)
    assert (fp["engine_version"], fp["engine_commit"]) == ("0.5.23", "abc")


SERIAL_BUS = "1652922001234, 00000000:18:00.0\n[N/A], 00000000:2A:00.0\n"


def test_fingerprint_records_each_visible_gpus_identity_and_none_on_cpu() -> None:
    runner = fake_runner({
        "--query-gpu=name,driver_version --format=csv,noheader": H200_QUERY,
        "--query-gpu=uuid --format=csv,noheader": H200_UUIDS,
        "--query-gpu=serial,pci.bus_id --format=csv,noheader": SERIAL_BUS,
        "--version": H200_VERSION,
        "topo -m": H200_TOPO,
    })  # fmt: skip
    visible = gpu_report(runner, env={"CUDA_VISIBLE_DEVICES": "1"})
    ident = machine.fingerprint(gpus=visible, with_torch=False)["gpu_identity"]
    assert ident["gpu_uuids"] == ["GPU-9e01d7b2-aaaa-bbbb-cccc-111111111111"]
    assert ident["gpu_serials"] is None  # "[N/A]" is no serial
    assert ident["gpu_pci_bus_ids"] == ["00000000:2A:00.0"]
    assert ident["hostname"]
    cpu = machine.fingerprint(gpus=gpu_report(lambda argv: None, env={}), with_torch=False)["gpu_identity"]
    assert set(cpu) == {"hostname", "gpu_uuids", "gpu_serials", "gpu_pci_bus_ids"}
    assert cpu["gpu_uuids"] is None and cpu["gpu_serials"] is None and cpu["gpu_pci_bus_ids"] is None


def test_without_a_gpu_the_fingerprint_reads_torch_without_importing_it() -> None:
    """torch's version and CUDA build come from its version.py (what ``import torch`` reads); the import,
    2-4 s in every perf run, is only paid where a GPU can be asked for its NCCL."""
    pytest.importorskip("torch")
    code = ("import sys, json; from specwatch.store import machine as m; "
            "fp = m.fingerprint(); "
            "print(json.dumps([fp['torch'], 'torch' in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    version, imported = json.loads(out.stdout)
    import torch

    assert version == str(torch.__version__) and not imported
