"""docs/validation/sglang_history.py: the history ``specwatch bisect`` runs over on the H200 (issue 37), built here on a
package with the same anchor lines as SGLang 0.5.16's sources (the real ones are in the kit, not on CI machines)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "validation"))
import sglang_history as history  # noqa: E402  (docs/validation is not a package)


def _site(tmp_path: Path) -> Path:
    """A package laid out like sglang 0.5.16 where the history edits it: each file with its anchor line."""
    pkg = tmp_path / "site" / "sglang"
    files = {history.SERVER_ARGS: "from __future__ import annotations\n\nimport argparse\nX = 1\n",
             history.SCHEDULER: "import dataclasses\nimport faulthandler\nimport logging\n",
             history.GRAPH_RUNNER: ("class DecodeCudaGraphRunner:\n    def can_run_graph(self, forward_batch):\n"
                                    f"{history.GRAPH_ANCHOR}        return True\n")}
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    (pkg / "srt" / "__pycache__").mkdir()
    (pkg / "srt" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    return tmp_path / "site"


def _show(repo: Path, sha: str, rel: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "show", f"{sha}:python/sglang/{rel}"], check=True,
                          capture_output=True, text=True).stdout


def test_the_history_has_one_slowing_commit_and_one_that_cannot_boot(tmp_path: Path) -> None:
    made = history.build(_site(tmp_path), tmp_path / "repo")
    assert len(made) == len(history.HISTORY) == 7
    repo = tmp_path / "repo"
    first_slow = next(i for i, (_, e) in enumerate(made) if e.slows)
    assert made[first_slow][1].message == "cuda graph: run verify batches of one request eagerly"
    assert all(e.slows for _, e in made[first_slow:])  # every later revision is slow too: what bisect needs
    for i, (sha, edit) in enumerate(made):
        runner = _show(repo, sha, history.GRAPH_RUNNER)
        assert ("is_target_verify() and forward_batch.batch_size == 1" in runner) == (i >= first_slow)
        server_args = _show(repo, sha, history.SERVER_ARGS)
        if edit.boots:
            ast.parse(server_args)
        else:
            with pytest.raises(SyntaxError):
                ast.parse(server_args)
    assert (repo / "profile-8b.toml").is_file() and not list(repo.rglob("__pycache__"))
    again = history.build(_site(tmp_path / "again"), tmp_path / "repo2")
    assert [sha for sha, _ in again] == [sha for sha, _ in made]  # fixed dates: a memo keyed by sha carries over


def test_a_moved_anchor_fails_loudly(tmp_path: Path) -> None:
    site = _site(tmp_path)
    (site / "sglang" / history.GRAPH_RUNNER).write_text("class DecodeCudaGraphRunner:\n    pass\n")
    with pytest.raises(ValueError, match=r"anchor line .* not found: this SGLang version's code moved"):
        history.build(site, tmp_path / "repo")
    with pytest.raises(FileNotFoundError, match="no sglang package"):
        history.build(tmp_path / "nowhere", tmp_path / "repo3")
