"""GPU discovery and disjoint GPU sets per pytest-xdist worker."""

from __future__ import annotations

import pytest

from specwatch.errors import UsageError
from specwatch.server.gpu import gpu_set_for_worker, visible_gpus, worker_index


def test_cuda_visible_devices_wins_over_nvidia_smi() -> None:
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "4,5, 6"}) == [4, 5, 6]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []
    # as CUDA reads it: enumeration stops at the first entry that is not a GPU (was: skipped)
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "0,-1,2"}) == [0]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "3,3"}) == [3]


@pytest.mark.parametrize(("wid", "idx"), [(None, 0), ("master", 0), ("gw0", 0), ("gw3", 3)])
def test_worker_index(wid: str | None, idx: int) -> None:
    assert worker_index(wid) == idx


def test_each_xdist_worker_gets_a_disjoint_gpu_set() -> None:
    gpus = list(range(8))
    sets = [gpu_set_for_worker(gpus, f"gw{i}", 4, 2) for i in range(4)]
    assert sets == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert len({g for s in sets for g in s}) == 8


def test_too_few_gpus_for_the_workers_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="need 16 GPUs, but only 8"):
        gpu_set_for_worker(list(range(8)), "gw0", 2, 8)


def test_cpu_servers_need_no_gpus() -> None:
    assert gpu_set_for_worker([], "gw1", 2, 0) == ()
