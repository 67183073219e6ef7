"""What SGLang's releases change on the path that batch-1 EAGLE-3 decode with the triton backend runs.

    python3 docs/validation/sglang_releases.py --wheels /work/main/.kit/wheels --json sources.json > sources.md
    python3 docs/validation/sglang_releases.py --wheels DIR --versions 0.5.16 0.5.17     # any consecutive list

Reads each release's wheel (``sglang-<v>-*.whl`` in ``--wheels``; a missing one is named with the
``pip download`` line that fetches it, nothing is downloaded here) and writes, on stdout, a markdown report:

1. **facts per release**, each read by an anchored detector that stops with one line naming the file and
   the anchor when the code it reads is not there (never a guess):

   - ``pins``: the METADATA ``Requires-Dist`` pins of torch, sglang-kernel (or sgl-kernel), flashinfer_python
     and transformers;
   - ``finish_order``: the order of the tests in ``Req.update_finish_state`` (``Req.check_finished`` before it
     was renamed; ``srt/managers/schedule_batch.py``): ``length_before_stop`` is true where ``max_new_tokens``
     is tested before the stop token / stop string, so a stop inside an accepted run that also reaches
     ``max_new_tokens`` ends as ``length`` (SGLang's issue 31599, fixed in 0.5.18 by PR 33758);
   - ``hopper_default_attn``: what ``ServerArgs._get_default_attn_backend`` (``srt/server_args.py``) returns
     for an MHA model on Hopper when ``is_no_spec_infer_or_topk_one`` (``srt/utils/common.py``) holds, which
     it does for EAGLE with topk 1 and page size 1;
   - ``draft_extend_graph``: the attention backend classes whose draft-extend step is captured in a CUDA
     graph: the ``isinstance`` list behind ``supports_cuda_draft_extend_graph`` in the worker's
     ``_capture_cuda_graphs`` (``init_cuda_graphs`` in 0.5.12; ``srt/speculative/eagle_worker_v2.py``),
     matched against the classes ``DraftBackendFactory._create_triton_prefill_backend`` and
     ``_create_fa3_prefill_backend`` (``srt/speculative/draft_utils.py``) build, and the guard's off-switch;
   - ``triton_verify_kernel``: which kernel ``TritonAttnBackend.forward_extend``
     (``srt/layers/attention/triton_backend.py``) runs for a target-verify batch: ``extend_attention_fwd``
     (the serial-prefix extend kernel) unless ``self.use_verify_splitkv``, whose condition in ``__init__``
     is shown (``is_gfx95_supported()``: AMD MI350 only);
   - ``eagle_worker``: the class ``SpeculativeAlgorithm.create_worker`` (``srt/speculative/spec_info.py``)
     returns for EAGLE-3, whether that depends on the overlap schedule, the ``disable_overlap_schedule``
     default of ``ServerArgs`` and the ``SGLANG_ENABLE_SPEC_V2`` default (``srt/environ.py``);
   - ``cuda_graph_bs``: the batch sizes captured for speculative decode at ``--cuda-graph-max-bs 8`` (the
     generator ``ServerArgs._generate_cuda_graph_batch_sizes`` / ``_generate_decode_cuda_graph_batch_sizes``,
     run on its own), and what ``--cuda-graph-max-bs`` is (its own argument, or an alias of
     ``--cuda-graph-max-bs-decode``).

2. **per consecutive pair, the files of ``PATH_MODULES`` that changed**: lines added/removed (difflib on the
   text) and the top-level functions, classes and methods whose code changed (``ast``: a comment-only edit
   changes lines but no definition). A file that moved between releases is matched through ``PATH_MODULES``'s
   candidate paths, and shown as ``old -> new``.

``--json FILE`` writes the same, versioned (``{"version": 1, ...}``), sorted and free of timestamps, so a
rerun on the same wheels gives the same bytes. Standard library only.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import hashlib
import itertools
import json
import re
import sys
import zipfile
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

JSON_VERSION = 1
VERSIONS = ("0.5.12", "0.5.13", "0.5.14", "0.5.15.post1", "0.5.16", "0.5.17")
PINNED = ("torch", "sglang-kernel", "sgl-kernel", "flashinfer-python", "transformers")
MAX_BS = 8  # the measured servers' --cuda-graph-max-bs

#: The modules batch-1 EAGLE-3 decode with the triton attention backend runs, each as its candidate paths
#: under ``sglang/`` (the first that a release holds is its file; two present at once is an error).
#: Chosen from the imports of ``srt/speculative/eagle_worker_v2.py`` (the worker every release here runs for
#: EAGLE-3, ``eagle_worker`` fact), followed through ``eagle_info``/``eagle_utils``/``spec_utils`` to the
#: speculative triton kernels and through ``triton_backend`` to its kernels; the target's graph runner and
#: model runner; the scheduler that drives the worker and reads its results, the tokenizer and detokenizer
#: managers (processes of their own, so roots, not imports), the two model files (loaded by name from the
#: model registry) and the argument handling. Left out on purpose: NPU/HIP/MUSA files the worker imports
#: but CUDA never runs (``hardware_backend/*``, ``aiter_backend``), other attention backends, the split-KV
#: verify kernel (AMD only, ``triton_verify_kernel`` fact) and the v1 ``eagle_worker.py`` (0.5.12 only, not
#: the default there). Every entry's import chain from the worker is printed in the report (``via``), so the
#: choice is checked on each release rather than assumed.
PATH_MODULES: tuple[tuple[str, ...], ...] = (
    # the speculative worker and what it runs each cycle
    ("srt/speculative/eagle_worker_v2.py",),
    ("srt/speculative/eagle_worker_common.py",),
    ("srt/speculative/base_spec_worker.py",),
    ("srt/speculative/draft_utils.py",),
    ("srt/speculative/eagle_draft_cuda_graph_runner.py",),
    ("srt/speculative/eagle_draft_extend_cuda_graph_runner.py",),
    ("srt/speculative/eagle_info.py",),
    ("srt/speculative/eagle_info_v2.py",),
    ("srt/speculative/eagle_utils.py",),
    ("srt/speculative/spec_info.py",),
    ("srt/speculative/spec_utils.py",),
    ("kernels/ops/speculative/eagle.py", "srt/speculative/triton_ops/eagle.py"),
    ("kernels/ops/speculative/cache_locs.py", "srt/speculative/triton_ops/cache_locs.py"),
    ("kernels/ops/speculative/topk1.py",),
    # the target's CUDA graph runner (split into runner/ in 0.5.14) and model runner
    ("srt/model_executor/runner/decode_cuda_graph_runner.py", "srt/model_executor/cuda_graph_runner.py"),
    ("srt/model_executor/runner/base_cuda_graph_runner.py",),
    ("srt/model_executor/runner_backend/full_cuda_graph_backend.py",),
    ("srt/model_executor/cuda_graph_config.py",),
    ("srt/model_executor/input_buffers.py",),
    ("srt/model_executor/forward_batch_info.py",),
    ("srt/model_executor/forward_context.py",),
    ("srt/model_executor/model_runner.py",),
    # the triton attention backend and its kernels (moved to sglang/kernels in 0.5.16)
    ("srt/layers/attention/triton_backend.py",),
    ("kernels/ops/attention/extend_attention.py", "srt/layers/attention/triton_ops/extend_attention.py"),
    ("kernels/ops/attention/decode_attention.py", "srt/layers/attention/triton_ops/decode_attention.py"),
    ("kernels/ops/attention/metadata.py", "srt/layers/attention/triton_ops/metadata.py"),
    ("kernels/ops/kvcache/kv_indices.py", "srt/layers/attention/triton_ops/kv_indices.py"),
    # 0.5.12's holds create_flashinfer_kv_indices_triton (the triton backend's; kv_indices.py from 0.5.13)
    ("kernels/ops/attention/utils.py", "srt/layers/attention/utils.py"),
    ("srt/layers/attention/base_attn_backend.py",),
    ("srt/layers/radix_attention.py",),
    ("srt/mem_cache/memory_pool.py",),
    # the KV slots each cycle allocates (alloc_for_spec_decode: common.py, allocation.py from 0.5.16)
    ("srt/mem_cache/common.py",),
    ("srt/mem_cache/allocation.py",),
    # the models and the layers llama.py builds (no rope scaling at the measured shape: base rotary)
    ("srt/models/llama.py",),
    ("srt/models/llama_eagle3.py",),
    ("srt/layers/layernorm.py",),
    ("srt/layers/rotary_embedding/base.py",),
    ("srt/layers/linear.py",),
    ("srt/layers/quantization/unquant.py",),
    ("srt/layers/activation.py",),
    ("srt/layers/vocab_parallel_embedding.py",),
    # logits and sampling
    ("srt/layers/logits_processor.py",),
    ("srt/layers/sampler.py",),
    ("srt/sampling/sampling_batch_info.py",),
    # the scheduler, its batch and output processing, the front processes
    ("srt/managers/scheduler.py",),
    ("srt/managers/schedule_batch.py",),
    ("srt/managers/tp_worker.py",),
    ("srt/managers/overlap_utils.py",),
    ("srt/managers/scheduler_components/batch_result_processor.py",
     "srt/managers/scheduler_output_processor_mixin.py"),
    ("srt/managers/scheduler_components/output_streamer.py",),
    ("srt/managers/tokenizer_manager.py",),
    ("srt/managers/detokenizer_manager.py",),
    # the arguments
    ("srt/server_args.py",),
    ("srt/arg_groups/speculative_hook.py",),
)
#: processes or registry-loaded modules: not imported by the worker, reached at run time
ROOTS = ("srt/speculative/eagle_worker_v2.py", "srt/managers/tokenizer_manager.py",
         "srt/managers/detokenizer_manager.py", "srt/models/llama.py", "srt/models/llama_eagle3.py")


class AnchorMissing(Exception):
    """The code a detector reads is not where it looks: one line, naming the file and the anchor."""

    def __init__(self, version: str, path: str, anchor: str) -> None:
        super().__init__(f"sglang {version}: {path}: anchor {anchor!r} not found")


class Release:
    """One sglang wheel: its files under ``sglang/``, its METADATA, parsed modules on demand."""

    def __init__(self, version: str, wheel: Path) -> None:
        self.version, self.wheel = version, wheel
        self._zip = zipfile.ZipFile(wheel)
        self.names = set(self._zip.namelist())
        self._trees: dict[str, ast.Module] = {}

    def has(self, rel: str) -> bool:
        return f"sglang/{rel}" in self.names

    def text(self, rel: str) -> str:
        return self._zip.read(f"sglang/{rel}").decode("utf-8")

    def tree(self, rel: str) -> ast.Module:
        if rel not in self._trees:
            if not self.has(rel):
                raise AnchorMissing(self.version, rel, "file")
            self._trees[rel] = ast.parse(self.text(rel), filename=rel)
        return self._trees[rel]

    def metadata(self) -> str:
        found = sorted(n for n in self.names if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
        if len(found) != 1:
            raise AnchorMissing(self.version, "*.dist-info/METADATA", "one METADATA")
        return self._zip.read(found[0]).decode("utf-8")


# ---------------------------------------------------------------------------------------------- ast helpers
def _cls(r: Release, rel: str, name: str) -> ast.ClassDef:
    for node in r.tree(rel).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise AnchorMissing(r.version, rel, f"class {name}")


def _method(r: Release, rel: str, cls: ast.ClassDef, names: Iterable[str]) -> ast.FunctionDef:
    wanted = tuple(names)
    for name in wanted:
        for node in cls.body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return node
    raise AnchorMissing(r.version, rel, " or ".join(f"{cls.name}.{n}" for n in wanted))


def _func(r: Release, rel: str, name: str) -> ast.FunctionDef:
    for node in r.tree(rel).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise AnchorMissing(r.version, rel, f"def {name}")


def _calls(node: ast.AST) -> set[str]:
    """Names of the functions called anywhere under ``node`` (``f(...)`` and ``x.f(...)`` both give ``f``)."""
    out = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            f = sub.func
            out.add(f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else "")
    return out


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}


def _if_chain(node: ast.If) -> Iterator[ast.If]:
    """``node`` and its ``elif`` branches."""
    while True:
        yield node
        if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
            node = node.orelse[0]
        else:
            return


# ------------------------------------------------------------------------------------------------- detectors
def pins(r: Release) -> dict[str, str]:
    """``Requires-Dist`` pins (no ``extra ==`` marker) of ``PINNED``, keyed by normalized name."""
    out = {}
    for line in r.metadata().splitlines():
        if not line.startswith("Requires-Dist:") or "extra ==" in line:
            continue
        m = re.match(r"Requires-Dist:\s*([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*([^;]*)", line)
        if m:
            name = re.sub(r"[-_.]+", "-", m.group(1)).lower()
            if name in PINNED:
                out[name] = m.group(3).strip()
    for need in ("torch", "flashinfer-python", "transformers"):
        if need not in out:
            raise AnchorMissing(r.version, "METADATA", f"Requires-Dist: {need}")
    if "sglang-kernel" not in out and "sgl-kernel" not in out:
        raise AnchorMissing(r.version, "METADATA", "Requires-Dist: sglang-kernel or sgl-kernel")
    return out


_FINISH_TESTS = (("length", "max_new_tokens"), ("stop_str", "_check_str_based_finish"),
                 ("stop_token", "_check_token_based_finish"), ("vocab", "_check_vocab_boundary_finish"),
                 ("grammar", "grammar"), ("to_finish", "to_finish"))


def finish_order(r: Release) -> dict[str, Any]:
    """The order of ``Req.update_finish_state``'s (``check_finished``'s) top-level ``if`` tests."""
    rel = "srt/managers/schedule_batch.py"
    fn = _method(r, rel, _cls(r, rel, "Req"), ("update_finish_state", "check_finished"))
    order = []
    for stmt in fn.body:
        if isinstance(stmt, ast.If):
            names = _names(stmt.test)
            order += [label for label, name in _FINISH_TESTS if name in names and label not in order][:1]
    for need in ("length", "stop_token"):
        if need not in order:
            anchor = dict(_FINISH_TESTS)[need]
            raise AnchorMissing(r.version, rel, f"Req.{fn.name}: if ... {anchor}")
    stops = [order.index(s) for s in ("stop_str", "stop_token") if s in order]
    return {"where": f"{rel}:Req.{fn.name}", "order": order, "length_before_stop": order.index("length") < min(stops)}


def hopper_default_attn(r: Release) -> dict[str, Any]:
    """The backend ``_get_default_attn_backend`` returns for MHA on Hopper with no spec or topk 1."""
    rel = "srt/server_args.py"
    fn = _method(r, rel, _cls(r, rel, "ServerArgs"), ("_get_default_attn_backend",))
    mha = next((n for n in ast.walk(fn) if isinstance(n, ast.If) and ast.unparse(n.test) == "not use_mla_backend"),
               None)
    if mha is None:
        raise AnchorMissing(r.version, rel, "_get_default_attn_backend: if not use_mla_backend")
    for stmt in mha.body:
        if not isinstance(stmt, ast.If):
            continue
        for branch in _if_chain(stmt):
            if {"is_hopper_with_cuda_12_3", "is_no_spec_infer_or_topk_one"} <= _calls(branch.test):
                ret = next((s for s in branch.body if isinstance(s, ast.Return)), None)
                if ret is not None and isinstance(ret.value, ast.Constant):
                    topk_one = _func(r, "srt/utils/common.py", "is_no_spec_infer_or_topk_one")
                    if "speculative_eagle_topk == 1" not in ast.unparse(topk_one):
                        raise AnchorMissing(r.version, "srt/utils/common.py",
                                            "is_no_spec_infer_or_topk_one: speculative_eagle_topk == 1")
                    return {"where": f"{rel}:ServerArgs._get_default_attn_backend", "backend": ret.value.value,
                            "condition": ast.unparse(branch.test)}
    raise AnchorMissing(r.version, rel, "if is_hopper_with_cuda_12_3() and is_no_spec_infer_or_topk_one(...)")


def _returned_class(r: Release, rel: str, cls: ast.ClassDef, name: str, depth: int = 0) -> str:
    """The class a factory method returns an instance of, following ``return self._other(...)``."""
    fn = _method(r, rel, cls, (name,))
    rets = [n for n in ast.walk(fn) if isinstance(n, ast.Return) and isinstance(n.value, ast.Call)]
    if rets and depth < 3:
        f = rets[-1].value.func  # type: ignore[union-attr]
        if isinstance(f, ast.Name):
            return f.id
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
            return _returned_class(r, rel, cls, f.attr, depth + 1)
    raise AnchorMissing(r.version, rel, f"{cls.name}.{name}: return Backend(...)")


def draft_extend_graph(r: Release) -> dict[str, Any]:
    """The backend classes whose draft extend the EAGLE v2 worker captures in a CUDA graph."""
    rel = "srt/speculative/eagle_worker_v2.py"
    fn = next((n for n in ast.walk(r.tree(rel)) if isinstance(n, ast.FunctionDef) and any(
        isinstance(a, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "supports_cuda_draft_extend_graph"
                                          for t in a.targets) for a in ast.walk(n))), None)
    if fn is None:
        raise AnchorMissing(r.version, rel, "supports_cuda_draft_extend_graph = ...")
    assigned: dict[str, list[ast.AST]] = {}
    for a in ast.walk(fn):
        if isinstance(a, ast.Assign):
            for t in a.targets:
                if isinstance(t, ast.Name):
                    assigned.setdefault(t.id, []).append(a.value)
        if (isinstance(a, ast.Call) and isinstance(a.func, ast.Attribute) and a.func.attr == "append"
                and isinstance(a.func.value, ast.Name)):
            assigned.setdefault(a.func.value.id, []).extend(a.args)
    classes: set[str] = set()
    todo, seen = ["supports_cuda_draft_extend_graph"], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for value in assigned.get(name, []):
            for n in ast.walk(value):
                if isinstance(n, ast.Name) and n.id.endswith("Backend"):
                    classes.add(n.id)
                elif isinstance(n, ast.Name) and n.id in assigned:
                    todo.append(n.id)
    guard = next((n for n in ast.walk(fn) if isinstance(n, ast.If)
                  and "supports_cuda_draft_extend_graph" in _names(n.test)), None)
    if not classes or guard is None:
        raise AnchorMissing(r.version, rel, "if ... supports_cuda_draft_extend_graph: (isinstance backend list)")
    factory_rel = "srt/speculative/draft_utils.py"
    factory = _cls(r, factory_rel, "DraftBackendFactory")
    made = {b: _returned_class(r, factory_rel, factory, f"_create_{b}_prefill_backend") for b in ("triton", "fa3")}
    off = sorted(n for n in _names(guard.test) if n.startswith("SGLANG_"))
    return {"where": f"{rel}:{fn.name}", "classes": sorted(classes), "backend_class": made,
            "triton": made["triton"] in classes, "fa3": made["fa3"] in classes, "env_off_switch": off}


def triton_verify_kernel(r: Release) -> dict[str, Any]:
    """The kernel ``TritonAttnBackend.forward_extend`` runs for target verify, and the split-KV condition."""
    rel = "srt/layers/attention/triton_backend.py"
    cls = _cls(r, rel, "TritonAttnBackend")
    fwd = _method(r, rel, cls, ("forward_extend",))
    if "extend_attention_fwd" not in _calls(fwd):
        raise AnchorMissing(r.version, rel, "TritonAttnBackend.forward_extend: self.extend_attention_fwd(...)")
    out: dict[str, Any] = {"where": f"{rel}:TritonAttnBackend.forward_extend", "kernel": "extend_attention_fwd",
                           "splitkv_condition": None}
    if "verify_splitkv_fwd" in _calls(fwd):
        init = _method(r, rel, cls, ("__init__",))
        cond = next((a.value for a in ast.walk(init) if isinstance(a, ast.Assign) and any(
            isinstance(t, ast.Attribute) and t.attr == "use_verify_splitkv" for t in a.targets)), None)
        if cond is None:
            raise AnchorMissing(r.version, rel, "TritonAttnBackend.__init__: self.use_verify_splitkv = ...")
        out["splitkv_condition"] = " ".join(ast.unparse(cond).split())
    out["nvidia"] = ("extend_attention_fwd" if out["splitkv_condition"] is None
                     or "is_gfx95_supported" in out["splitkv_condition"] else "see splitkv_condition")
    return out


def eagle_worker(r: Release) -> dict[str, Any]:
    """The worker class ``create_worker`` gives EAGLE-3, and the overlap defaults that pick it."""
    rel = "srt/speculative/spec_info.py"
    fn = _method(r, rel, _cls(r, rel, "SpeculativeAlgorithm"), ("create_worker",))
    branch = next((b for n in ast.walk(fn) if isinstance(n, ast.If) for b in _if_chain(n)
                   if ast.unparse(b.test) == "self.is_eagle()"), None)
    if branch is None:
        raise AnchorMissing(r.version, rel, "create_worker: elif self.is_eagle():")
    plain = [s.value.id for s in branch.body if isinstance(s, ast.Return) and isinstance(s.value, ast.Name)]
    guarded = [s for s in branch.body if isinstance(s, ast.If) and "enable_overlap" in _names(s.test)]
    if not plain:
        raise AnchorMissing(r.version, rel, "create_worker: self.is_eagle() branch: return WorkerClass")
    overlap_worker = next((s.value.id for g in guarded for s in g.body
                           if isinstance(s, ast.Return) and isinstance(s.value, ast.Name)), None)
    sa = _cls(r, "srt/server_args.py", "ServerArgs")
    default = next((n.value for n in sa.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
                    and n.target.id == "disable_overlap_schedule"), None)
    if not isinstance(default, ast.Constant):
        raise AnchorMissing(r.version, "srt/server_args.py", "ServerArgs.disable_overlap_schedule: bool = ...")
    env = re.search(r"^\s*SGLANG_ENABLE_SPEC_V2 = EnvBool\((\w+)\)", r.text("srt/environ.py"), re.M)
    worker = overlap_worker or plain[-1]
    return {"where": f"{rel}:SpeculativeAlgorithm.create_worker", "worker": worker,
            "needs_overlap": overlap_worker is not None, "otherwise": plain[-1] if overlap_worker else None,
            "disable_overlap_schedule_default": default.value,
            "SGLANG_ENABLE_SPEC_V2_default": env.group(1) if env else None}


def cuda_graph_bs(r: Release) -> dict[str, Any]:
    """Decode capture sizes for speculative decoding at ``--cuda-graph-max-bs 8``, and what the flag is."""
    rel = "srt/server_args.py"
    sa = _cls(r, rel, "ServerArgs")
    fn = _method(r, rel, sa, ("_generate_decode_cuda_graph_batch_sizes", "_generate_cuda_graph_batch_sizes"))
    fake = type("Args", (), {"disable_cuda_graph_padding": False, "speculative_algorithm": "EAGLE3",
                             "cuda_graph_max_bs": MAX_BS})()
    space: dict[str, Any] = {"__builtins__": {"list": list, "range": range, "sorted": sorted, "set": set}}
    exec(compile(ast.Module([fn], []), rel, "exec"), space)  # the generator alone: lists and ranges only
    args = (fake, MAX_BS) if len(fn.args.args) == 2 else (fake,)
    flag = next((c for c in ast.walk(sa) if isinstance(c, ast.Call) and _calls(c) >= {"add_argument"}
                 and any(isinstance(a, ast.Constant) and a.value == "--cuda-graph-max-bs" for a in c.args)), None)
    if flag is None:
        raise AnchorMissing(r.version, rel, 'add_argument("--cuda-graph-max-bs", ...)')
    kw = {k.arg: ast.literal_eval(k.value) for k in flag.keywords if k.arg in ("dest", "new_flag")}
    return {"where": f"{rel}:ServerArgs.{fn.name}", "spec_capture_bs": space[fn.name](*args),
            "max_bs_flag": (f"alias of {kw['new_flag']}" if "new_flag" in kw else "own argument"),
            "max_bs_dest": kw.get("dest", "cuda_graph_max_bs"),
            "has_cuda_graph_max_bs_decode": "--cuda-graph-max-bs-decode" in r.text(rel)}


DETECTORS = {"pins": pins, "finish_order": finish_order, "hopper_default_attn": hopper_default_attn,
             "draft_extend_graph": draft_extend_graph, "triton_verify_kernel": triton_verify_kernel,
             "eagle_worker": eagle_worker, "cuda_graph_bs": cuda_graph_bs}


# ------------------------------------------------------------------------------------------ the path's files
def resolve(r: Release, candidates: tuple[str, ...]) -> str | None:
    """The one candidate path this release holds (None: none); two at once is an error of ``PATH_MODULES``."""
    held = [c for c in candidates if r.has(c)]
    if len(held) > 1:
        raise AnchorMissing(r.version, " and ".join(held), "only one of a PATH_MODULES entry's candidates")
    return held[0] if held else None


def _module_file(r: Release, module: str) -> str | None:
    if not module.startswith("sglang."):
        return None
    base = module[len("sglang."):].replace(".", "/")
    for rel in (f"{base}.py", f"{base}/__init__.py"):
        if r.has(rel):
            return rel
    return None


def _imports(r: Release, rel: str) -> list[str]:
    """The sglang files ``rel`` imports anywhere in its body (lazy imports too), in source order."""
    out = []
    pkg = rel.rsplit("/", 1)[0].split("/") if "/" in rel else []
    for node in ast.walk(r.tree(rel)):
        mods: list[str] = []
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                up = pkg[: len(pkg) - (node.level - 1)] if node.level > 1 else pkg
                base = ".".join(["sglang", *up, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            mods = [base] + [f"{base}.{a.name}" for a in node.names]
        for m in mods:
            f = _module_file(r, m)
            if f and f != rel:
                out.append(f)
    return out


def import_chains(r: Release, targets: Iterable[str]) -> dict[str, list[str]]:
    """For each target file, the shortest import chain to it from ``ROOTS`` (breadth-first, roots first)."""
    want = {t for t in targets if t}
    prev: dict[str, str | None] = {}
    queue: deque[str] = deque()
    for root in ROOTS:
        if r.has(root):
            prev[root] = None
            queue.append(root)
    while queue and not want <= prev.keys():
        cur = queue.popleft()
        try:
            nxt = _imports(r, cur)
        except SyntaxError:
            continue
        for f in nxt:
            if f not in prev:
                prev[f] = cur
                queue.append(f)
    chains: dict[str, list[str]] = {}
    for t in sorted(want & prev.keys()):
        chain: list[str] = []
        at: str | None = t
        while at is not None:
            chain.append(at)
            at = prev[at]
        chains[t] = chain[::-1]
    return chains


def definitions(source: str) -> dict[str, str]:
    """Top-level functions and classes, and the methods of top-level classes, each as its ``ast.dump``;
    ``Class`` holds the class body without its methods, ``<module>`` the rest of the module."""
    tree = ast.parse(source)
    out, rest = {}, []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name] = ast.dump(node)
        elif isinstance(node, ast.ClassDef):
            own = []
            for sub in node.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    out[f"{node.name}.{sub.name}"] = ast.dump(sub)
                else:
                    own.append(ast.dump(sub))
            out[node.name] = ast.dump(ast.ClassDef(node.name, node.bases, node.keywords, [], node.decorator_list)) \
                + "".join(own)
        else:
            rest.append(ast.dump(node))
    out["<module>"] = "".join(rest)
    return out


@dataclass
class FileDiff:
    """One ``PATH_MODULES`` entry across a pair of releases."""

    module: str
    old: str | None
    new: str | None
    added_lines: int = 0
    removed_lines: int = 0
    changed: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        if self.old is None and self.new is None:
            return "absent"
        if self.old is None:
            return "added"
        if self.new is None:
            return "removed"
        moved = "moved, " if self.old != self.new else ""
        return moved + ("changed" if self.added_lines or self.removed_lines else "unchanged")

    def to_json(self) -> dict[str, Any]:
        return {"module": self.module, "old": self.old, "new": self.new, "status": self.status,
                "added_lines": self.added_lines, "removed_lines": self.removed_lines,
                "changed_defs": self.changed, "added_defs": self.added, "removed_defs": self.removed}


def diff_file(module: str, old: str | None, new: str | None, old_text: str, new_text: str) -> FileDiff:
    """Lines added/removed (difflib) and definitions changed, added or removed (``definitions``)."""
    d = FileDiff(module, old, new)
    for line in difflib.unified_diff(old_text.splitlines(), new_text.splitlines(), lineterm="", n=0):
        if line.startswith(("+++", "---")):
            continue
        d.added_lines += line.startswith("+")
        d.removed_lines += line.startswith("-")
    a, b = definitions(old_text) if old_text else {}, definitions(new_text) if new_text else {}
    d.changed = sorted(k for k in a.keys() & b.keys() if a[k] != b[k])
    d.added = sorted(b.keys() - a.keys() - {"<module>"})
    d.removed = sorted(a.keys() - b.keys() - {"<module>"})
    return d


def diff_pair(old: Release, new: Release) -> list[FileDiff]:
    out = []
    for candidates in PATH_MODULES:
        po, pn = resolve(old, candidates), resolve(new, candidates)
        out.append(diff_file(candidates[0], po, pn, old.text(po) if po else "", new.text(pn) if pn else ""))
    return out


# --------------------------------------------------------------------------------------------- the report
def version_key(v: str) -> tuple[int, ...]:
    """``0.5.15.post1`` -> (0, 5, 15, 1): releases in order, a post release after its base."""
    m = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?", v)
    if not m:
        raise ValueError(f"not a release version: {v!r}")
    return tuple(int(g or 0) for g in m.groups())


def find_wheels(wheels: Path, versions: Iterable[str]) -> tuple[dict[str, Path], list[str]]:
    """Each version's wheel in ``wheels``, and a ``pip download`` line for each one missing."""
    found, missing = {}, []
    for v in versions:
        hits = sorted(wheels.glob(f"sglang-{v}-*.whl"))
        if len(hits) == 1:
            found[v] = hits[0]
        elif not hits:
            missing.append(f"pip download sglang=={v} --no-deps -d {wheels}")
        else:
            raise SystemExit(f"{wheels}: {len(hits)} wheels for sglang {v}: {', '.join(h.name for h in hits)}")
    return found, missing


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def collect(wheels: dict[str, Path]) -> dict[str, Any]:
    """Facts, path files and their import chains per release, and the diff of every consecutive pair."""
    versions = sorted(wheels, key=version_key)
    rels = {v: Release(v, wheels[v]) for v in versions}
    releases = {}
    for v, r in rels.items():
        paths = {c[0]: resolve(r, c) for c in PATH_MODULES}
        chains = import_chains(r, [p for p in paths.values() if p])
        via = {m: chains.get(p, "not reached") if p else "not held" for m, p in paths.items()}
        releases[v] = {"wheel": wheels[v].name, "sha256": sha256(wheels[v]),
                       "facts": {name: det(r) for name, det in DETECTORS.items()},
                       "paths": paths, "via": via}
    pairs = [{"old": a, "new": b, "files": [d.to_json() for d in diff_pair(rels[a], rels[b])]}
             for a, b in itertools.pairwise(versions)]
    return {"version": JSON_VERSION, "versions": versions, "max_bs": MAX_BS,
            "path_modules": [list(c) for c in PATH_MODULES], "releases": releases, "pairs": pairs}


def fact_rows(facts: dict[str, Any], max_bs: int) -> dict[str, str]:
    """One short cell per fact row."""
    p, f, h = facts["pins"], facts["finish_order"], facts["hopper_default_attn"]
    d, t, w, g = (facts["draft_extend_graph"], facts["triton_verify_kernel"], facts["eagle_worker"],
                  facts["cuda_graph_bs"])
    kernel = "sglang-kernel" if "sglang-kernel" in p else "sgl-kernel"
    worker = w["worker"] + (f" if overlap, else {w['otherwise']}" if w["needs_overlap"] else " always")
    env = w["SGLANG_ENABLE_SPEC_V2_default"]
    return {
        "torch": p["torch"], kernel: p[kernel], "flashinfer_python": p["flashinfer-python"],
        "transformers": p["transformers"],
        "finish tests, in order": " > ".join(f["order"]),
        "max_new_tokens tested before stop": "yes (issue 31599)" if f["length_before_stop"] else "no",
        "Hopper MHA default, EAGLE topk 1": h["backend"],
        "draft extend graphed: triton": "yes" if d["triton"] else "no",
        "draft extend graphed: fa3": "yes" if d["fa3"] else "no",
        "draft extend graph off-switch": ", ".join(d["env_off_switch"]) or "none",
        "triton target verify on NVIDIA": t["nvidia"] + (" (split-KV: AMD gfx95 only)"
                                                         if t["splitkv_condition"] else " (no split-KV path)"),
        "EAGLE-3 worker": worker,
        "overlap schedule default": "off" if w["disable_overlap_schedule_default"] else "on",
        "SGLANG_ENABLE_SPEC_V2 default": env if env is not None else "removed",
        f"spec decode capture bs at max_bs {max_bs}": ",".join(map(str, g["spec_capture_bs"])),
        "--cuda-graph-max-bs": g["max_bs_flag"],
    }


def _defs(d: dict[str, Any], limit: int = 8) -> str:
    parts = [f"~{n}" for n in d["changed_defs"]] + [f"+{n}" for n in d["added_defs"]] + \
            [f"-{n}" for n in d["removed_defs"]]
    shown = ", ".join(parts[:limit]) + (f", … {len(parts) - limit} more" if len(parts) > limit else "")
    return shown or ("(comments/blank lines only)" if d["status"].endswith("changed") else "")


def markdown(data: dict[str, Any]) -> str:
    vs = data["versions"]
    rows: dict[str, list[str]] = {}
    for v in vs:
        for k, cell in fact_rows(data["releases"][v]["facts"], data["max_bs"]).items():
            rows.setdefault(k, []).append(cell)
    out = ["# SGLang releases: facts and the files changed on the batch-1 EAGLE-3 triton decode path", "",
           "## Facts per release", "", "| fact | " + " | ".join(vs) + " |", "|---" * (len(vs) + 1) + "|"]
    out += [f"| {k} | " + " | ".join(c.replace("|", "\\|") for c in cells) + " |" for k, cells in rows.items()]
    out += ["", "Where each fact was read: " + "; ".join(
        sorted({f"`{f['where']}`" for f in data["releases"][vs[-1]]["facts"].values() if "where" in f})) + ".", ""]
    for pair in data["pairs"]:
        a, b = pair["old"], pair["new"]
        moved = [d for d in pair["files"] if d["status"] != "unchanged" and d["status"] != "absent"]
        same = [d["module"] for d in pair["files"] if d["status"] == "unchanged"]
        out += [f"## {a} -> {b}", "", f"{len(moved)} of the path's files differ; unchanged: "
                + (", ".join(f"`{m.rsplit('/', 1)[-1]}`" for m in same) or "none") + ".", "",
                "| file | status | + | - | definitions (~changed, +added, -removed) |", "|---|---|---|---|---|"]
        for d in moved:
            name = d["new"] or d["old"]
            if d["old"] and d["new"] and d["old"] != d["new"]:
                name = f"{d['old']} -> {d['new']}"
            out.append(f"| `{name}` | {d['status']} | {d['added_lines']} | {d['removed_lines']} | {_defs(d)} |")
        out.append("")
    out += ["## Import chains from the worker (the newest release)", "",
            "Each path file's shortest import chain from `" + "`, `".join(ROOTS) + "`:", ""]
    for m, chain in sorted(data["releases"][vs[-1]]["via"].items()):
        out.append(f"- `{m}`: " + (" <- ".join(f"`{c.rsplit('/', 1)[-1]}`" for c in reversed(chain))
                                    if isinstance(chain, list) else chain))
    lost = sorted(f"{v}: `{m}`" for v in vs for m, c in data["releases"][v]["via"].items() if c == "not reached")
    out += ["", "Held but not reached by any import chain: " + (", ".join(lost) or "none") + "."]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheels", type=Path, required=True, help="folder holding sglang-<version>-*.whl")
    ap.add_argument("--versions", nargs="+", default=list(VERSIONS), help="releases, any order (default: %(default)s)")
    ap.add_argument("--json", type=Path, help="also write the versioned JSON here")
    a = ap.parse_args(argv)
    wheels, missing = find_wheels(a.wheels, a.versions)
    if missing:
        print("missing wheels; fetch them with:\n" + "\n".join(missing), file=sys.stderr)
        return 2
    try:
        data = collect(wheels)
    except AnchorMissing as e:
        print(e, file=sys.stderr)
        return 1
    if a.json:
        a.json.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    sys.stdout.write(markdown(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
