"""A short git history on top of real SGLang's Python sources, one commit of which slows EAGLE-3's verify step.

    python docs/validation/sglang_history.py /tmp/sgl/site /tmp/sgl-history      # prints the commits, oldest first

``specwatch bisect`` over it (harness scenario ``sglang-8b-bisect-x1``) must name the slowing commit and skip the
one that cannot boot. The repository holds ``python/sglang`` (the package of the installed kit, as SGLang's own
repository lays it out) and ``profile-8b.toml``, the 8B-shape EAGLE-3 server of
``docs/validation/sglang/eagle3-8b-base.toml`` whose ``pythonpath`` puts the checkout's ``python/`` before the
kit's site, so each revision's sources are the ones that run. The commits, oldest first:

1. the sources as released (0.5.16 from the kit);
2. a comment in ``srt/server_args.py`` (harmless);
3. a comment in ``srt/managers/scheduler.py`` (harmless);
4. a syntax error in ``srt/server_args.py``: the server cannot boot (skipped, never blamed);
5. its fix;
6. **the slowing change**: ``DecodeCudaGraphRunner.can_run_graph`` sends target-verify batches of one request to
   the eager path ("padding costs more than it saves at bs 1"), the case study's cause: a verify step without
   CUDA graphs;
7. a comment (harmless).

``--history stopfix`` builds another history on the same sources: 0.5.16 as released, then one commit that gives
``Req.update_finish_state`` the ordering of SGLang's own fix (PR 33758, released in 0.5.18): a stop inside the
accepted run that also reaches ``max_new_tokens`` ends the request at the stop. Its head is what the stops check
(``tests/correctness/test_stops.py``) must pass on, where the release fails.

Each edit is made at an anchor line of the released sources and fails loudly when the anchor is missing (a
SGLang version whose code moved), so the history is never silently different from what this docstring says.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

PROFILE = """# The 8B-shape EAGLE-3 server of docs/validation/sglang/eagle3-8b-base.toml, running this checkout's
# python/sglang (pythonpath relative to this file, before the kit's site).
version = 1

[defaults]
engine = "sglang"
launcher = "python -m sglang.launch_server"
model = "/tmp/sgl/models8b/target"
cuda_graph_max_bs = 8
decode_log_interval = 10
extra_args = ["--attention-backend", "triton", "--sampling-backend", "pytorch", "--grammar-backend", "none",
              "--mem-fraction-static", "0.8", "--max-total-tokens", "32768"]

[[server]]
name = "sgl8b-eagle3"
env = "tuned"
speculative = { algorithm = "EAGLE3", draft_model = "/tmp/sgl/models8b/eagle3", num_steps = 2, eagle_topk = 1, \
num_draft_tokens = 3 }
pythonpath = ["python", "/tmp/sgl/site"]
extra_env = { SGLANG_ENABLE_JIT_DEEPGEMM = "0", HF_HUB_OFFLINE = "1", NCCL_NVLS_ENABLE = "0", \
TORCH_SYMM_MEM_DISABLE_MULTICAST = "1", NVSHMEM_DISABLE_NVLS = "1" }

[workload]
runs = 12
max_new_tokens = 256
warmup_s = 2.0
"""

SERVER_ARGS = "srt/server_args.py"
SCHEDULER = "srt/managers/scheduler.py"
GRAPH_RUNNER = "srt/model_executor/runner/decode_cuda_graph_runner.py"
#: the line every edit of the graph runner is anchored at (0.5.16's can_run_graph, first statement)
GRAPH_ANCHOR = "        # Disable for token embedding overrides (dynamic per-request)\n"
SLOWING = ("        # Small verify batches run eagerly: the graph's padding costs more than it saves at bs 1.\n"
           "        if forward_batch.forward_mode.is_target_verify() and forward_batch.batch_size == 1:\n"
           "            return False\n")


@dataclass(frozen=True)
class Edit:
    """One commit: a message, and a text inserted before an anchor line of a file (or the edit undone)."""

    message: str
    path: str = ""
    anchor: str = ""
    text: str = ""
    undo: int | None = None  # the index of an earlier edit this commit reverts
    slows: bool = False
    boots: bool = True


HISTORY = (
    Edit("sglang 0.5.16 as released (python/sglang of the kit)"),
    Edit("server_args: say where the flag docs live", SERVER_ARGS, "import argparse\n",
         "# Flag documentation: docs/advanced_features/server_arguments.md\n"),
    Edit("scheduler: note the overlap loop's owner", SCHEDULER, "import dataclasses\n",
         "# The overlap event loop is event_loop_overlap (see docs/advanced_features/overlap.md).\n"),
    Edit("server_args: group the speculative flags", SERVER_ARGS, "import argparse\n", "def broken(:\n",
         boots=False),
    Edit("server_args: fix the syntax error of the last commit", undo=3),
    Edit("cuda graph: run verify batches of one request eagerly", GRAPH_RUNNER, GRAPH_ANCHOR, SLOWING, slows=True),
    Edit("docs: changelog", SCHEDULER, "import logging\n", "# Changelog: see the release notes.\n",
         slows=True),
)

SCHEDULE_BATCH = "srt/managers/schedule_batch.py"
#: 0.5.12-0.5.17's ``Req.update_finish_state``: the length cap, tested before any stop check
CAP_ANCHOR = "        if len(self.output_ids) >= self.sampling_params.max_new_tokens:\n"
STOP_FIRST = (
    "        # The ordering of SGLang's fix (PR 33758, 0.5.18): a stop inside the accepted run that reaches the cap\n"
    "        # ends the request at the stop; the cap decides only when no stop comes at or before it.\n"
    "        if len(self.output_ids) >= self.sampling_params.max_new_tokens and self.grammar is None:\n"
    "            accepted = self.output_ids[-new_accepted_len:]\n"
    "            if (self._check_vocab_boundary_finish(accepted) or self._check_str_based_finish(new_accepted_len)\n"
    "                    or self._check_token_based_finish(accepted)):\n"
    "                if self.finished_len is not None and self.finished_len <= self.sampling_params.max_new_tokens:\n"
    "                    return\n"
    "                self.finished_reason, self.finished_len = None, None\n")

#: 0.5.16 as released, then the stop-before-cap ordering: the second commit's sources pass the stops check
STOP_FIX = (
    Edit("sglang 0.5.16 as released (python/sglang of the kit)"),
    Edit("schedule_batch: a stop inside the accepted run wins over the max_new_tokens cap", SCHEDULE_BATCH,
         CAP_ANCHOR, STOP_FIRST),
)
HISTORIES = {"bisect": HISTORY, "stopfix": STOP_FIX}


#: every commit's author and committer date: the same sources give the same shas on every machine and call, so a
#: bisect memo of an earlier call (keyed by sha) carries over to the next
DATE = "2026-12-04T00:00:00+00:00"


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_DATE": DATE, "GIT_COMMITTER_DATE": DATE}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def _insert(path: Path, anchor: str, text: str) -> None:
    """``text`` before the first line equal to ``anchor``; ValueError naming the file when there is none."""
    lines = path.read_text().splitlines(keepends=True)
    if anchor not in lines:
        raise ValueError(f"{path}: anchor line {anchor.strip()!r} not found: this SGLang version's code moved")
    lines.insert(lines.index(anchor), text)
    path.write_text("".join(lines))


@dataclass(frozen=True)
class Source:
    """A server's sources and where the history lays them: ``package`` under ``site``, copied to ``dest/root``;
    ``must`` is a folder the package has (a check that it is the package meant); the profile file beside them."""

    package: str
    root: str
    must: str
    profile_name: str
    profile: str


SGLANG = Source("sglang", "python", "srt", "profile-8b.toml", PROFILE)


def build(site: Path, dest: Path, history: tuple[Edit, ...] = HISTORY, source: Source = SGLANG
          ) -> list[tuple[str, Edit]]:
    """The repository at ``dest`` (replaced), from ``source.package`` in ``site``: [(sha, edit)] oldest first. Each
    edit's path is relative to the package."""
    package = site / source.package
    if not (package / source.must).is_dir():
        raise FileNotFoundError(f"{package}: no {source.package} package (for SGLang, unpack the kit first: "
                                f"sglang_kit.py setup)")
    shutil.rmtree(dest, ignore_errors=True)
    (dest / source.root).mkdir(parents=True)
    shutil.copytree(package, dest / source.root / source.package, ignore=shutil.ignore_patterns("__pycache__"))
    (dest / source.profile_name).write_text(source.profile)
    _git(dest, "init", "-q", "-b", "main")
    _git(dest, "config", "user.email", "validation@example.invalid")
    _git(dest, "config", "user.name", "specwatch validation")
    made: list[tuple[str, Edit]] = []
    before: dict[int, tuple[Path, str]] = {}
    for i, edit in enumerate(history):
        if edit.undo is not None:
            path, text = before[edit.undo]
            path.write_text(text)
        elif edit.path:
            path = dest / source.root / source.package / edit.path
            before[i] = (path, path.read_text())
            _insert(path, edit.anchor, edit.text)
        _git(dest, "add", "-A")
        _git(dest, "commit", "-q", "-m", edit.message)
        made.append((_git(dest, "rev-parse", "HEAD"), edit))
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="the site holding the sglang package (the kit's: /tmp/sgl/site)")
    parser.add_argument("dest", type=Path, help="where the repository is made (replaced)")
    parser.add_argument("--history", choices=sorted(HISTORIES), default="bisect",
                        help="bisect: the slowing history (default); stopfix: 0.5.16 and the stop-before-cap fix")
    args = parser.parse_args()
    for sha, edit in build(args.site, args.dest, HISTORIES[args.history]):
        flags = ("" if edit.boots else " [cannot boot]") + (" [slow]" if edit.slows else "")
        print(f"{sha} {edit.message}{flags}")


if __name__ == "__main__":
    main()
