"""docs/validation/travel.py: a device call's tree made light by untracking the recorded data, and restored; never a
commit that would delete the data. Run in a throwaway git repository."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "validation"))
import travel  # noqa: E402 (docs/validation is not a package)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "ci@example.invalid")
    _git(tmp_path, "config", "user.name", "ci")
    data = tmp_path / travel.DATA
    data.mkdir(parents=True)
    (data / "run.txt").write_text("x" * 10000)
    (tmp_path / "README.md").write_text("hello\n")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "data")
    monkeypatch.setattr(travel, "ROOT", tmp_path)
    monkeypatch.setattr(travel, "EXCLUDE", tmp_path / ".git" / "info" / "exclude")
    return tmp_path


def test_light_leaves_the_data_out_of_the_tree_and_restore_brings_it_back(repo: Path) -> None:
    before = travel.tree_mib()
    travel.light()
    assert _git(repo, "ls-files", travel.DATA) == ""  # out of the index: the device's copy leaves it behind
    assert "??" not in _git(repo, "status", "--porcelain")  # and ignored, not untracked-and-copied
    assert (repo / travel.DATA / "run.txt").is_file()  # still on disk
    assert travel.tree_mib() < before
    travel.restore()
    assert _git(repo, "status", "--porcelain") == ""
    assert travel.tree_mib() == before
    assert "/docs/validation/data/" not in (repo / ".git" / "info" / "exclude").read_text()


def test_light_refuses_an_index_with_staged_changes(repo: Path) -> None:
    (repo / "README.md").write_text("changed\n")
    _git(repo, "add", "README.md")
    with pytest.raises(SystemExit, match="staged changes"):
        travel.light()
    assert _git(repo, "ls-files", travel.DATA).strip() == f"{travel.DATA}/run.txt"
