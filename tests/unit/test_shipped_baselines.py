"""Every shipped baseline of a speculative profile carries the keys the speculation-health gates compare
against (the list is the gates' own, ``specgates.gated_keys``), so the main job judges those gates instead of
skipping them with "has no ...; re-record it"."""

from __future__ import annotations

from pathlib import Path

import pytest

from specwatch.errors import UsageError
from specwatch.profiles.loading import load_profiles
from specwatch.run.specgates import gated_keys
from specwatch.store.baseline import NOT_BASELINES, load_baseline

ROOT = Path(__file__).resolve().parents[2]
#: the machine classes whose baselines need a GPU to record (the lead re-records them on the device)
GPU_CLASSES = ("h200x1", "h200x2-nvlink")


def _speculative() -> dict[str, bool]:
    """Each profile name of the shipped profile files (and the built-in set): whether it speculates."""
    out: dict[str, bool] = {}
    for path in [None, *sorted((ROOT / "fixtures" / "profiles").glob("*.toml"))]:
        try:
            profiles = load_profiles(path)
        except UsageError:  # a profile file this venv cannot load is not what this test is about
            continue
        for prof in profiles.servers.values():
            out.setdefault(prof.name, prof.speculative is not None)
    return out


def _shipped() -> list[Path]:
    return sorted(p for p in (ROOT / "baselines").glob("*/*.json") if p.name not in NOT_BASELINES)


def test_the_gated_keys_are_the_gates_own() -> None:
    keys = gated_keys(True)
    assert ("speculation-probe", "accept_length") in keys
    assert ("single-stream", "cycle_ms") in keys
    assert gated_keys(False) == ()


@pytest.mark.parametrize("path", _shipped(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_shipped_speculative_baseline_carries_every_gated_key(path: Path) -> None:
    base = load_baseline(path)
    speculative = _speculative()
    assert base.profile in speculative, f"{path}: profile {base.profile!r} is in no shipped profile file"
    missing = [f"{w}/{m}" for w, m in gated_keys(speculative[base.profile]) if base.get(w, m) is None]
    if missing and path.parent.name in GPU_CLASSES:
        pytest.xfail(f"{path.parent.name}/{path.name} lacks {', '.join(missing)}: recording it needs a GPU "
                     "(to be re-recorded on the device with --update-baselines)")
    assert not missing, f"{path} lacks {', '.join(missing)}: re-record it with --update-baselines"
