"""docs/validation/sglang_releases.py: its detectors and diffs on small wheels built here, shaped like SGLang's
(each synthetic file keeps the lines its detector anchors on, as 0.5.16 has them), and the committed data file
of the run on the real 0.5.12 .. 0.5.17 wheels (docs/validation/data/2026-12-05-sglang-release-sources)."""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "validation"))
import sglang_releases as sr  # noqa: E402 (docs/validation is not a package)

DATA = ROOT / "docs/validation/data/2026-12-05-sglang-release-sources/sources.json"

METADATA = """Metadata-Version: 2.4
Name: sglang
Version: {v}
Requires-Dist: flashinfer_python[cu13]==0.6.14
Requires-Dist: sglang-kernel==0.4.5
Requires-Dist: torch_memory_saver>=0.0.9.post1
Requires-Dist: torch==2.11.0
Requires-Dist: torchvision
Requires-Dist: transformers==5.12.1
Requires-Dist: sentence_transformers; extra == "test"
"""

SCHEDULE_BATCH = '''
class Req:
    def update_finish_state(self, new_accepted_len: int = 1):
        if self.finished():
            return
        if self.to_finish:
            return
        if len(self.output_ids) >= self.sampling_params.max_new_tokens:
            return
        if self.grammar is not None:
            return
        new_accepted_tokens = self.output_ids[-new_accepted_len:]
        if self._check_vocab_boundary_finish(new_accepted_tokens):
            return
        if self._check_str_based_finish(new_accepted_len):
            return
        if self._check_token_based_finish(new_accepted_tokens):
            return
'''

SERVER_ARGS = '''
class ServerArgs:
    disable_overlap_schedule: bool = False

    def _get_default_attn_backend(self, use_mla_backend: bool, model_config):
        if not use_mla_backend:
            if is_hopper_with_cuda_12_3() and is_no_spec_infer_or_topk_one(resolved_view(self)):
                return "fa3"
            elif is_sm100_supported():
                return "trtllm_mha"
            else:
                return "triton"
        return "triton"

    def _generate_decode_cuda_graph_batch_sizes(self, max_bs: int):
        if self.disable_cuda_graph_padding:
            capture_bs = list(range(1, max_bs + 1))
        elif self.speculative_algorithm is None:
            capture_bs = [1, 2, 4, 8, 12] + list(range(16, 257, 8))
        else:
            capture_bs = list(range(1, 9, 1)) + list(range(10, 33, 2))
        capture_bs = [bs for bs in capture_bs if bs <= max_bs]
        if max_bs not in capture_bs:
            capture_bs.append(max_bs)
        return capture_bs

    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--cuda-graph-max-bs-decode", type=int)
        parser.add_argument("--cuda-graph-max-bs", type=int, action=DeprecatedAliasStoreAction,
                            new_flag="--cuda-graph-max-bs-decode", dest="cuda_graph_max_bs_decode")
'''

COMMON = '''
def is_no_spec_infer_or_topk_one(server_args):
    return server_args.speculative_eagle_topk is None or (
        server_args.speculative_eagle_topk == 1 and (server_args.page_size == 1 or server_args.page_size is None))
'''

WORKER = '''
from sglang.srt.speculative.eagle_info import EagleVerifyInput
from sglang.srt.layers.attention.triton_backend import TritonAttnBackend


class EAGLEWorkerV2:
    def _capture_cuda_graphs(self):
        graph_supported_backend_types = [TritonAttnBackend, TRTLLMMLABackend]
        if _is_cuda:
            graph_supported_backend_types.append(FlashMLABackend)
        graph_supported_backend = isinstance(self.draft_extend_attn_backend, tuple(graph_supported_backend_types))
        supports_cuda_draft_extend_graph = (_is_cuda or _is_musa) and graph_supported_backend
        if (
            self.draft_extend_attn_backend
            and not envs.SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH.get()
            and (_is_npu or supports_cuda_draft_extend_graph)
        ):
            self.cuda_graph_runner_for_draft_extend = EAGLEDraftExtendCudaGraphRunner(self)
'''

DRAFT_UTILS = '''
class DraftBackendFactory:
    def _create_triton_prefill_backend(self):
        from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

        return TritonAttnBackend(self.draft_model_runner, skip_prefill=False)

    def _create_fa_prefill_backend(self, fa_impl_ver: int = 3):
        return FlashAttentionBackend(self.draft_model_runner, skip_prefill=False, fa_impl_ver=fa_impl_ver)

    def _create_fa3_prefill_backend(self):
        return self._create_fa_prefill_backend(fa_impl_ver=3)
'''

TRITON = '''
from sglang.kernels.ops.attention.extend_attention import extend_attention_fwd


class TritonAttnBackend:
    def __init__(self, model_runner):
        self.use_verify_splitkv = (
            is_gfx95_supported() and envs.SGLANG_ENABLE_SPLITKV_VERIFY.get() and self.topk == 1
        )

    def forward_extend(self, q, k, v, layer, forward_batch):
        if (
            self.use_verify_splitkv
            and forward_batch.forward_mode.is_target_verify()
            and self.verify_splitkv_fwd(q, k, v)
        ):
            return o
        self.extend_attention_fwd(q, k, v)
        return o
'''

SPEC_INFO = '''
class SpeculativeAlgorithm:
    def create_worker(self, server_args):
        if self.is_eagle() and server_args.enable_multi_layer_eagle:
            return MultiLayerEagleWorkerV2
        elif self.is_eagle():
            from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

            return EAGLEWorkerV2
        raise ValueError("Unreachable code path in create_worker.")
'''

ENVIRON = "class Envs:\n    SGLANG_ENABLE_SPEC_V2 = EnvBool(True)\n"

GRAPH_RUNNER = '''
class CudaGraphRunner:
    def can_run(self, forward_batch):
        return True

    def replay(self, forward_batch):
        return self.graphs[forward_batch.batch_size]
'''


def release_files(override: dict[str, str | None] | None = None) -> dict[str, str]:
    """The synthetic release's files under sglang/ (a None override drops the file)."""
    files = {
        "srt/managers/schedule_batch.py": SCHEDULE_BATCH, "srt/server_args.py": SERVER_ARGS,
        "srt/utils/common.py": COMMON, "srt/speculative/eagle_worker_v2.py": WORKER,
        "srt/speculative/draft_utils.py": DRAFT_UTILS, "srt/layers/attention/triton_backend.py": TRITON,
        "srt/speculative/spec_info.py": SPEC_INFO, "srt/environ.py": ENVIRON,
        "srt/speculative/eagle_info.py": "class EagleVerifyInput:\n    pass\n",
        "kernels/ops/attention/extend_attention.py": "def extend_attention_fwd(q, k, v):\n    return q\n",
        "srt/model_executor/runner/decode_cuda_graph_runner.py": GRAPH_RUNNER,
    }
    for rel, text in (override or {}).items():
        if text is None:
            files.pop(rel, None)
        else:
            files[rel] = text
    return files


def make_wheel(folder: Path, version: str, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"sglang-{version}-cp312-cp312-manylinux_2_34_x86_64.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"sglang-{version}.dist-info/METADATA", METADATA.format(v=version))
        for rel, text in sorted(files.items()):
            z.writestr(f"sglang/{rel}", text)
    return path


def release(tmp_path: Path, version: str = "0.5.16", override: dict[str, str | None] | None = None) -> sr.Release:
    return sr.Release(version, make_wheel(tmp_path, version, release_files(override)))


def test_facts_read_from_a_release_shaped_like_0_5_16(tmp_path: Path) -> None:
    r = release(tmp_path)
    assert sr.pins(r) == {"torch": "==2.11.0", "sglang-kernel": "==0.4.5", "flashinfer-python": "==0.6.14",
                          "transformers": "==5.12.1"}
    fin = sr.finish_order(r)
    assert fin["order"] == ["to_finish", "length", "grammar", "vocab", "stop_str", "stop_token"]
    assert fin["length_before_stop"] is True
    assert fin["where"] == "srt/managers/schedule_batch.py:Req.update_finish_state"
    assert sr.hopper_default_attn(r)["backend"] == "fa3"
    ext = sr.draft_extend_graph(r)
    assert ext["classes"] == ["FlashMLABackend", "TRTLLMMLABackend", "TritonAttnBackend"]
    assert ext["backend_class"] == {"triton": "TritonAttnBackend", "fa3": "FlashAttentionBackend"}
    assert (ext["triton"], ext["fa3"]) == (True, False)
    assert ext["env_off_switch"] == ["SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH"]
    ver = sr.triton_verify_kernel(r)
    assert ver["nvidia"] == "extend_attention_fwd" and "is_gfx95_supported()" in ver["splitkv_condition"]
    w = sr.eagle_worker(r)
    assert (w["worker"], w["needs_overlap"], w["disable_overlap_schedule_default"]) == ("EAGLEWorkerV2", False, False)
    assert w["SGLANG_ENABLE_SPEC_V2_default"] == "True"
    bs = sr.cuda_graph_bs(r)
    assert bs["spec_capture_bs"] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert bs["max_bs_flag"] == "alias of --cuda-graph-max-bs-decode"


def test_the_fixed_ordering_is_told_apart(tmp_path: Path) -> None:
    fixed = SCHEDULE_BATCH.replace(
        "        if len(self.output_ids) >= self.sampling_params.max_new_tokens:\n            return\n", "") + (
        "        if len(self.output_ids) >= self.sampling_params.max_new_tokens:\n            return\n")
    fin = sr.finish_order(release(tmp_path, override={"srt/managers/schedule_batch.py": fixed}))
    assert fin["order"][-1] == "length" and fin["length_before_stop"] is False


def test_the_older_name_check_finished_and_a_v1_fallback_are_read(tmp_path: Path) -> None:
    spec = SPEC_INFO.replace(
        "            from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2\n\n"
        "            return EAGLEWorkerV2",
        "            if enable_overlap:\n                return EAGLEWorkerV2\n            return EAGLEWorker")
    r = release(tmp_path, override={
        "srt/managers/schedule_batch.py": SCHEDULE_BATCH.replace("update_finish_state", "check_finished"),
        "srt/speculative/spec_info.py": spec})
    assert sr.finish_order(r)["where"].endswith("Req.check_finished")
    w = sr.eagle_worker(r)
    assert (w["worker"], w["needs_overlap"], w["otherwise"]) == ("EAGLEWorkerV2", True, "EAGLEWorker")


@pytest.mark.parametrize(("rel", "text", "anchor"), [
    ("srt/managers/schedule_batch.py", SCHEDULE_BATCH.replace("update_finish_state", "finish_state"),
     "Req.update_finish_state or Req.check_finished"),
    ("srt/speculative/eagle_worker_v2.py", WORKER.replace("supports_cuda_draft_extend_graph", "ok"),
     "supports_cuda_draft_extend_graph = ..."),
    ("srt/layers/attention/triton_backend.py", TRITON.replace("self.extend_attention_fwd(q, k, v)", "pass"),
     "TritonAttnBackend.forward_extend: self.extend_attention_fwd(...)"),
    ("srt/server_args.py", SERVER_ARGS.replace('"--cuda-graph-max-bs",', '"--max-bs",'),
     'add_argument("--cuda-graph-max-bs", ...)'),
])
def test_a_missing_anchor_fails_with_one_line_naming_file_and_anchor(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], rel: str, text: str, anchor: str) -> None:
    make_wheel(tmp_path, "0.5.16", release_files({rel: text}))
    assert sr.main(["--wheels", str(tmp_path), "--versions", "0.5.16"]) == 1
    err = capsys.readouterr()
    assert err.out == ""
    assert err.err == f"sglang 0.5.16: {rel}: anchor {anchor!r} not found\n"


def test_a_missing_wheel_is_named_with_the_pip_download_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_wheel(tmp_path, "0.5.16", release_files())
    assert sr.main(["--wheels", str(tmp_path), "--versions", "0.5.16", "0.5.17"]) == 2
    assert f"pip download sglang==0.5.17 --no-deps -d {tmp_path}\n" in capsys.readouterr().err


def test_a_moved_file_is_matched_and_its_changed_definitions_named(tmp_path: Path) -> None:
    new_runner = GRAPH_RUNNER.replace("return True", "return forward_batch.batch_size > 1")
    moved = "srt/model_executor/runner/decode_cuda_graph_runner.py"
    old = release(tmp_path / "a", "0.5.13", {moved: None, "srt/model_executor/cuda_graph_runner.py": GRAPH_RUNNER})
    new = release(tmp_path / "b", "0.5.14", {moved: new_runner})
    d = {x.module: x for x in sr.diff_pair(old, new)}[moved]
    assert (d.old, d.new) == ("srt/model_executor/cuda_graph_runner.py", moved)
    assert d.status == "moved, changed"
    assert (d.added_lines, d.removed_lines, d.changed, d.added, d.removed) == (1, 1, ["CudaGraphRunner.can_run"], [],
                                                                               [])


def test_identical_files_report_no_change_and_a_comment_changes_no_definition(tmp_path: Path) -> None:
    same = sr.diff_file("m.py", "m.py", "m.py", GRAPH_RUNNER, GRAPH_RUNNER)
    assert (same.status, same.added_lines, same.removed_lines, same.changed, same.added, same.removed) == (
        "unchanged", 0, 0, [], [], [])
    commented = sr.diff_file("m.py", "m.py", "m.py", GRAPH_RUNNER, GRAPH_RUNNER.replace(
        "        return True", "        # graphs for every size\n        return True"))
    assert (commented.status, commented.added_lines, commented.changed) == ("changed", 1, [])
    assert sr._defs(commented.to_json()) == "(comments/blank lines only)"
    added = sr.diff_file("m.py", None, "m.py", "", GRAPH_RUNNER)
    assert added.status == "added" and added.added == ["CudaGraphRunner", "CudaGraphRunner.can_run",
                                                       "CudaGraphRunner.replay"]


def test_import_chains_lead_from_the_worker(tmp_path: Path) -> None:
    chains = sr.import_chains(release(tmp_path), ["kernels/ops/attention/extend_attention.py",
                                                   "srt/speculative/eagle_info.py", "srt/environ.py"])
    assert chains == {
        "kernels/ops/attention/extend_attention.py": ["srt/speculative/eagle_worker_v2.py",
                                                      "srt/layers/attention/triton_backend.py",
                                                      "kernels/ops/attention/extend_attention.py"],
        "srt/speculative/eagle_info.py": ["srt/speculative/eagle_worker_v2.py", "srt/speculative/eagle_info.py"]}


def test_the_json_is_versioned_and_the_same_bytes_on_a_rerun(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_wheel(tmp_path, "0.5.16", release_files())
    make_wheel(tmp_path, "0.5.17", release_files(
        {"srt/speculative/eagle_info.py": "class EagleVerifyInput:\n    draft_token_num = 3\n"}))
    outs = []
    for name in ("one.json", "two.json"):
        assert sr.main(["--wheels", str(tmp_path), "--versions", "0.5.17", "0.5.16", "--json",
                        str(tmp_path / name)]) == 0
        outs.append(((tmp_path / name).read_bytes(), capsys.readouterr().out))
    assert outs[0] == outs[1]
    data = json.loads(outs[0][0])
    assert data["version"] == 1 and data["versions"] == ["0.5.16", "0.5.17"]
    (pair,) = data["pairs"]
    info = next(f for f in pair["files"] if f["module"] == "srt/speculative/eagle_info.py")
    assert (info["status"], info["changed_defs"]) == ("changed", ["EagleVerifyInput"])
    assert "| `srt/speculative/eagle_info.py` | changed | 1 | 1 | ~EagleVerifyInput |" in outs[0][1]


def test_versions_sort_with_post_releases_after_their_base() -> None:
    assert sorted(sr.VERSIONS[::-1], key=sr.version_key) == list(sr.VERSIONS)
    assert sr.version_key("0.5.15.post1") > sr.version_key("0.5.15") and sr.version_key("0.5.16") > sr.version_key(
        "0.5.15.post1")


@pytest.mark.skipif(not DATA.exists(), reason=f"{DATA} not committed")
def test_the_committed_run_on_the_real_wheels_has_six_releases_and_five_pairs() -> None:
    data = json.loads(DATA.read_text())
    assert data["version"] == 1
    assert data["versions"] == list(sr.VERSIONS)
    assert [(p["old"], p["new"]) for p in data["pairs"]] == list(zip(sr.VERSIONS, sr.VERSIONS[1:], strict=False))
    for v in sr.VERSIONS:
        facts = data["releases"][v]["facts"]
        assert set(facts) == set(sr.DETECTORS)
        # every release here tests max_new_tokens before the stop (the fix is 0.5.18's); draft extend is graphed
        # for triton and not for fa3; the measured max_bs 8 captures 1..8
        assert facts["finish_order"]["length_before_stop"] is True
        assert (facts["draft_extend_graph"]["triton"], facts["draft_extend_graph"]["fa3"]) == (True, False)
        assert facts["cuda_graph_bs"]["spec_capture_bs"] == list(range(1, 9))
        assert all(isinstance(c, list) or c == "not held" for c in data["releases"][v]["via"].values())
    for pair in data["pairs"]:
        assert {f["module"] for f in pair["files"]} == {c[0] for c in sr.PATH_MODULES}
