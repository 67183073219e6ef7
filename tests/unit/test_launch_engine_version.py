"""A server's command line is written for the engine's version its own interpreter has, asked before the boot.

SGLang 0.5.12 and 0.5.13 know the decode capture limit only as ``--cuda-graph-max-bs`` (argparse rejects
``--cuda-graph-max-bs-decode``, docs/reference/sglang-versions.md): a profile's ``cuda_graph_max_bs`` must be
written with the spelling of the version the server will run. The version is asked of the real interpreter
(``sys.executable``) through the real probe, with the server's composed environment, so a ``pythonpath`` that
points at an SGLang site (as the ladder profiles' do) is seen; the sites here hold only the distribution's
metadata, which is all the probe reads.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from specwatch.engines import sglang
from specwatch.profiles.profile import ServerProfile
from specwatch.server import launch
from specwatch.signals.installed import package_info, run_command

PACKAGE = sglang.SGLANG.identity.package if sglang.SGLANG.identity else ""


def _site(root: Path, version: str) -> Path:
    """A folder that holds the engine's distribution metadata at ``version``, as an installed wheel leaves it."""
    info = root / f"{PACKAGE}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: {version}\n")
    return root


def _profile(*pythonpath: Path, python: str = sys.executable) -> ServerProfile:
    return ServerProfile("s", engine="sglang", model="m", launcher="python -m sglang.launch_server", python=python,
                         cuda_graph_max_bs=8, pythonpath=tuple(str(p) for p in pythonpath))


def _argv(profile: ServerProfile, run_dir: Path) -> list[str]:
    return list(launch.build_launch(profile, port=30000, run_dir=run_dir, managed=set(), base_env={}).argv)


def _limit(argv: list[str]) -> list[tuple[str, str]]:
    return [(a, argv[i + 1]) for i, a in enumerate(argv) if a.startswith("--cuda-graph-max-bs")]


@pytest.mark.parametrize(("version", "flag"), [("0.5.12", "--cuda-graph-max-bs"), ("0.5.13", "--cuda-graph-max-bs"),
                                               ("0.5.16", "--cuda-graph-max-bs-decode")])
def test_the_capture_limit_is_written_as_the_installed_release_spells_it(tmp_path: Path, version: str,
                                                                          flag: str) -> None:
    site = _site(tmp_path / "site", version)
    assert _limit(_argv(_profile(site), tmp_path / "run")) == [(flag, "8")]
    assert sglang.release(version).graph_limit_flag == flag  # the release table says the same


def test_with_no_engine_visible_the_newest_releases_flags_are_written(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    prof = _profile(empty)
    assert launch.engine_version(prof, {"PYTHONPATH": str(empty)}) is None
    assert _limit(_argv(prof, tmp_path / "run")) == [(sglang.release().graph_limit_flag, "8")]
    assert _argv(prof, tmp_path / "run2") == prof.command("127.0.0.1", 30000)  # today's command line


def test_the_answer_is_asked_once_for_every_boot_of_a_site(tmp_path: Path) -> None:
    """The boot's own folders (the probe, the env setter) differ from boot to boot and are not part of the
    question: a second boot of the same profile reuses the answer, even after the site changed."""
    site = _site(tmp_path / "site", "0.5.12")
    prof = _profile(site)
    first = _argv(prof, tmp_path / "run-1")
    (site / f"{PACKAGE}-0.5.12.dist-info").rename(tmp_path / "old")
    _site(site, "0.5.16")
    assert _argv(prof, tmp_path / "run-2") == first
    assert _limit(first) == [("--cuda-graph-max-bs", "8")]
    other = _profile(site, tmp_path)  # another PYTHONPATH is another question
    assert _limit(_argv(other, tmp_path / "run-3")) == [("--cuda-graph-max-bs-decode", "8")]


def test_the_probe_sees_the_composed_pythonpath_not_specwatchs(tmp_path: Path) -> None:
    site = _site(tmp_path / "site", "0.5.13")
    env, _ = launch.server_environment(_profile(site), managed=set(), run_dir=tmp_path / "run", base_env={})
    assert env["PYTHONPATH"].split(os.pathsep)[-1] == str(site)  # after the probe's folder, under the run's
    assert launch.engine_version(_profile(site), env, scratch=tmp_path / "run") == "0.5.13"
    assert package_info(sys.executable, PACKAGE, env={"PYTHONPATH": str(site)}) == {"version": "0.5.13"}


def test_a_probe_that_hangs_means_no_version_within_its_timeout(tmp_path: Path) -> None:
    """A "python" that never answers (here a shell that starts a child which sleeps, holding the output pipe):
    the probe gives up at its timeout, kills the whole group, and the boot falls back to the newest flags."""
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nsleep 300\necho never\n")
    fake.chmod(0o755)
    prof = _profile(_site(tmp_path / "site", "0.5.12"), python=str(fake))
    started = time.monotonic()
    assert launch.engine_version(prof, {"PATH": os.environ.get("PATH", "")}, timeout=0.5) is None
    assert time.monotonic() - started < 120  # far below the child's 300 s: it did not wait for it
    assert run_command([str(fake)], timeout=0.5) is None


def test_engines_without_a_package_of_their_own_are_not_asked(tmp_path: Path) -> None:
    # the reference server ships with specwatch: its interpreter (missing here) is never asked
    ref = ServerProfile("r", python=str(tmp_path / "no-such-python"), cuda_graph_max_bs=8)
    assert launch.engine_version(ref, {}) is None
    assert _limit(_argv(ref, tmp_path / "run")) == [(sglang.release().graph_limit_flag, "8")]


def test_a_missing_interpreter_means_no_version(tmp_path: Path) -> None:
    prof = _profile(_site(tmp_path / "site", "0.5.12"), python=str(tmp_path / "no-such-python"))
    assert launch.engine_version(prof, {}) is None
    assert _limit(_argv(prof, tmp_path / "run")) == [(sglang.release().graph_limit_flag, "8")]
