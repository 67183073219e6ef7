"""SGLang 0.5.12 to 0.5.23, from outside: its command line and flags by version, its log format, its
``sglang:*`` metric names, its process titles and its version identity.

The differences between the versions that matter to specwatch are in :data:`RELEASES`
(docs/reference/sglang-versions.md, from each version's wheel); the flags specwatch writes exist under
the same names in all of them from 0.5.14 on (0.5.12 and 0.5.13 know the capture limit only as
``--cuda-graph-max-bs``: :attr:`Release.graph_limit_flags`). The log lines are read by
:mod:`specwatch.signals.logscan`, one parser for every version here (``log_format``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from specwatch.engines.protocol import Capabilities, Identity, MetricNames, PhaseGraphs, Pieces, ProcessSignature

if TYPE_CHECKING:
    from specwatch.engines.protocol import ServerProfile

__all__ = [
    "ALGORITHMS",
    "BENCH_SERVING",
    "BENCH_SERVING_REQUIRED",
    "CAPTURE_LIMIT_KEYS",
    "EAGLE_FAMILY",
    "PHASE_GRAPHS",
    "RELEASES",
    "SGLANG",
    "SPEC_DECODE_LOG_INTERVAL",
    "Release",
    "SGLang",
    "bench_serving_command",
    "release",
    "shared_pieces",
]

#: SGLang 0.5.23's built-in --speculative-algorithm values (srt/arg_groups/fields/spec.py:31)
ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO")
#: the algorithms 0.5.23 resolves in ``_handle_eagle_family`` (speculative_hook.py), NEXTN being EAGLE
EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")
#: Decode-line interval specwatch asks of a speculative server whose profile sets none (0.5.23's default is 40)
SPEC_DECODE_LOG_INTERVAL = 10
#: The worker titles of ``setproctitle`` after ``sglang::`` (longest first where one is a prefix of another)
TITLE_ROLES = ("scheduler", "detokenizer_router", "detokenizer", "data_parallel_controller", "tokenizer_worker",
               "worker")


#: The speculative phases 0.5.16 captures as CUDA graphs, read from its source (srt/ paths below):
#: * target verify: ``capture_decode_graph`` (model_runner_components/cuda_graph_setup.py), for every
#:   speculative algorithm, unless the decode graph backend is disabled;
#: * draft decode and draft extend: ``EAGLEWorkerV2._capture_cuda_graphs`` (speculative/eagle_worker_v2.py), the
#:   EAGLE family's worker (STANDALONE's ``StandaloneWorkerV2`` subclasses it). It returns at once when the decode
#:   backend is disabled; draft decode only ``if self.speculative_num_steps > 1``; draft extend only when the env
#:   switch is off and the draft extend attention backend is an instance of ``graph_supported_backend_types``:
#:   TritonAttnBackend, TRTLLMMLABackend, TRTLLMHAAttnBackend, TokenspeedMLABackend, FlashInferAttnBackend, and on
#:   CUDA DeepseekSparseAttnBackend, DeepseekV4AttnBackend, FlashMLABackend. The names below are the
#:   ``--attention-backend`` values whose ``DraftBackendFactory.create_draft_extend_backend`` (speculative/
#:   draft_utils.py) builds one of those: flashinfer (FlashInferAttnBackend; an MLA model's
#:   FlashInferMLAAttnBackend is not in the list), triton, trtllm_mha, trtllm_mla, cutedsl_mla (its draft extend is
#:   trtllm_mla's), tokenspeed_mla, flashmla, dsa, nsa (dsa's alias), dsv4. fa3 and fa4 (FlashAttentionBackend),
#:   aiter (graphed only on ROCm, through AiterMultiStepDraftBackend), intel_amx and hybrid_linear_attn (fa3 off
#:   Blackwell) are not captured;
#: * the backend: ``DraftBackendFactory._create_backend``: ``--speculative-draft-attention-backend``, else
#:   ``--prefill-attention-backend`` (``--decode-attention-backend`` with ``--speculative-attention-mode decode``),
#:   else ``--attention-backend``;
#: * the switch: ``SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH = EnvBool(False)`` (environ.py); ``EnvBool.parse`` reads
#:   "true", "1", "yes", "y" (any case) as True, "false", "0", "no", "n" as False, anything else as the default
#:   False with a warning;
#: * graphs off: ``--disable-cuda-graph``, ``--disable-decode-cuda-graph``, ``--cuda-graph-backend-decode
#:   disabled`` (server_args.py, the cuda_graph_config resolution);
#: * the default backend: ``ServerArgs._get_default_attn_backend`` (server_args.py) returns "fa3" for an MHA model
#:   when ``is_hopper_with_cuda_12_3()`` (compute capability 9: H100, H200, H800, H20, GH200) and
#:   ``is_no_spec_infer_or_topk_one`` (utils/common.py: topk unset, or topk 1 with page size 1 or unset), and logs
#:   "Attention backend not specified. Use fa3 backend by default." (arg_groups/overrides.py
#:   ``_attention_backend_default``). Elsewhere it picks trtllm_mha (Blackwell), flashinfer or triton: all
#:   captured.
PHASE_GRAPHS = PhaseGraphs(
    verify="target verify", draft_decode="draft decode", draft_decode_min_steps=2, draft_extend="draft extend",
    drafted=EAGLE_FAMILY,
    graphs_off=(("--disable-cuda-graph", None), ("--disable-decode-cuda-graph", None),
                ("--cuda-graph-backend-decode", "disabled")),
    extend_backends=("flashinfer", "triton", "trtllm_mha", "trtllm_mla", "cutedsl_mla", "tokenspeed_mla", "flashmla",
                     "dsa", "nsa", "dsv4"),
    extend_switch="SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH", switch_on=("true", "1", "yes", "y"),
    backend_flags=("--speculative-draft-attention-backend", "--prefill-attention-backend", "--attention-backend"),
    decode_mode=("--speculative-attention-mode", "decode", "--decode-attention-backend"),
    page_size_flag="--page-size",
    default_backend="fa3", default_gpus=("H100", "H200", "H800", "H20", "GH200"), default_max_topk=1,
    default_max_page_size=1, default_words="FA3, SGLang's default on Hopper for topk 1")


#: The phases 0.5.14 and 0.5.15.post1 capture (read from their eagle_worker_v2.py ``_capture_cuda_graphs``): as
#: 0.5.16, but no SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH (environ.py has none before 0.5.16) and fewer graphed draft
#: extend backends: TritonAttnBackend, TRTLLMMLABackend, TRTLLMHAAttnBackend, TokenspeedMLABackend,
#: FlashInferAttnBackend, and from 0.5.15.post1 DeepseekSparseAttnBackend ("dsa", alias "nsa") on CUDA
PHASE_GRAPHS_0_5_14 = replace(PHASE_GRAPHS, extend_switch=None, switch_on=(), extend_backends=(
    "flashinfer", "triton", "trtllm_mha", "trtllm_mla", "cutedsl_mla", "tokenspeed_mla"))
PHASE_GRAPHS_0_5_15 = replace(PHASE_GRAPHS_0_5_14,
                              extend_backends=(*PHASE_GRAPHS_0_5_14.extend_backends, "dsa", "nsa"))
#: 0.5.13: no FlashInferAttnBackend in the list; one switch for every graph, ``--disable-cuda-graph`` (no
#: ``--disable-decode-cuda-graph`` or ``--cuda-graph-backend-decode`` before 0.5.14). Its capture lines name no phase
#: (model_runner.py ``init_device_graphs``, eagle_worker_v2.py ``init_cuda_graphs``): logscan reads the target's
#: as the verify, the draft's as draft decode
PHASE_GRAPHS_0_5_13 = replace(PHASE_GRAPHS_0_5_14, graphs_off=(("--disable-cuda-graph", None),), extend_backends=(
    "triton", "trtllm_mha", "trtllm_mla", "cutedsl_mla", "tokenspeed_mla"))
#: 0.5.12: the draft extend is graphed for TritonAttnBackend and TRTLLMMLABackend only
PHASE_GRAPHS_0_5_12 = replace(PHASE_GRAPHS_0_5_13, extend_backends=("triton", "trtllm_mla"))

#: The ``/server_info`` keys that hold the decode capture limit, each with the flag that sets it (srt/server_args.py):
#: ``cuda_graph_max_bs_decode`` from 0.5.14 on (None unless given); ``cuda_graph_max_bs`` in 0.5.12 and 0.5.13
#: (``_handle_gpu_memory_settings`` resolves it from GPU memory when not given; 0.5.14 has no such field)
CAPTURE_LIMIT_KEYS = (("cuda_graph_max_bs_decode", "--cuda-graph-max-bs-decode"),
                      ("cuda_graph_max_bs", "--cuda-graph-max-bs"))


@dataclass(frozen=True)
class Release:
    """What one SGLang version does differently, in what specwatch reads or writes."""

    version: str
    #: the target verify capture line that carries bs=[...]: "begin", "end", or "bs" (0.5.12/0.5.13: a line of its
    #: own, ``Capture cuda graph bs [...]``, after a ``Capture cuda graph begin.`` that names no phase)
    capture_bs_line: str
    server_info_capture_bs: bool  # /server_info internal_states[k].decode_cuda_graph_bs exists
    graph_limit_flags: tuple[str, ...]  # spellings of the decode capture limit it accepts, the canonical first
    meta_info_aliases: bool  # meta_info also has spec_accepted_drafts / spec_proposed_drafts
    graph_memory_metric: bool  # sglang:graph_memory_usage_gb exists
    #: the speculative phases it captures: 0.5.12-0.5.16 read from each one's source; 0.5.17 and 0.5.23 print the
    #: same draft capture lines from the same function (docs/reference/sglang-versions.md), their backend lists are
    #: assumed 0.5.16's
    phase_graphs: PhaseGraphs = PHASE_GRAPHS
    verify_calls_metric: bool = True  # sglang:spec_verify_calls_total exists (from 0.5.13 on)

    @property
    def graph_limit_flag(self) -> str:
        """The flag for a profile's ``cuda_graph_max_bs`` in this version (the command line of a boot is built
        for the version the server's interpreter has, :func:`specwatch.server.launch.engine_version`; the
        newest one's when it cannot tell)."""
        return self.graph_limit_flags[0]


#: The versions specwatch has read, oldest first (docs/reference/sglang-versions.md, "Summary").
RELEASES: tuple[Release, ...] = (
    Release("0.5.12", "bs", False, ("--cuda-graph-max-bs",), True, False, PHASE_GRAPHS_0_5_12,
            verify_calls_metric=False),
    Release("0.5.13", "bs", False, ("--cuda-graph-max-bs",), True, False, PHASE_GRAPHS_0_5_13),
    Release("0.5.14", "begin", False, ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs"), True, False,
            PHASE_GRAPHS_0_5_14),
    Release("0.5.15.post1", "begin", False, ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs"), True, False,
            PHASE_GRAPHS_0_5_15),
    Release("0.5.16", "begin", False, ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs"), True, False),
    Release("0.5.17", "begin", False, ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs"), True, True),
    Release("0.5.23", "end", True, ("--cuda-graph-max-bs-decode",), False, True),
)


def _key(version: str) -> tuple[int, ...]:
    digits = []
    for part in version.split("+")[0].split(".")[:3]:
        num = "".join(c for c in part if c.isdigit())
        digits.append(int(num) if num else 0)
    return tuple(digits)


def release(version: str | None = None) -> Release:
    """The :class:`Release` that describes ``version``: the newest known one at or below it (the oldest
    for an older version); the newest when ``version`` is None."""
    if version is None:
        return RELEASES[-1]
    at_or_below = [r for r in RELEASES if _key(r.version) <= _key(version)]
    return at_or_below[-1] if at_or_below else RELEASES[0]


def shared_pieces(profile: ServerProfile, host: str, port: int, rel: Release, *, fill_topk: bool) -> Pieces:
    """Flags SGLang and the reference server share, in order, each with why specwatch adds it.
    ``fill_topk``: set ``--speculative-eagle-topk 1`` when num_steps is set and topk is not (SGLang needs it)."""
    pieces: Pieces = [
        (["--model-path", profile.model], ""),
        (["--host", host, "--port", str(port)], "where specwatch reaches the server (the pool picks the port)"),
    ]
    if profile.tp != 1:
        pieces.append((["--tp-size", str(profile.tp)], ""))
    pieces.append((["--enable-metrics"], "the checks and gates read /metrics counters (cuda_graph_passes_total, "
                                        "spec_verify_calls_total, generation_tokens_total); 0.5.23 serves "
                                        "/metrics only with this flag"))
    if profile.decode_log_interval is not None:
        pieces.append((["--decode-log-interval", str(profile.decode_log_interval)], ""))
    elif profile.speculative:
        pieces.append((["--decode-log-interval", str(SPEC_DECODE_LOG_INTERVAL)],
                       "the accept-length and verify-graph checks read the Decode lines (accept len, "
                       "#running-req, cuda graph); 0.5.23 writes one per 40 decode batches, too few for a "
                       "short workload"))
    if profile.max_running_requests is not None:
        pieces.append((["--max-running-requests", str(profile.max_running_requests)], ""))
    if profile.cuda_graph_max_bs is not None:
        pieces.append(([rel.graph_limit_flag, str(profile.cuda_graph_max_bs)], ""))
    spec = profile.speculative
    if spec:
        pieces.append((["--speculative-algorithm", spec.algorithm], ""))
        if spec.draft_model:
            pieces.append((["--speculative-draft-model-path", spec.draft_model], ""))
        if spec.num_steps is not None:
            pieces.append((["--speculative-num-steps", str(spec.num_steps)], ""))
        if spec.eagle_topk is not None:
            pieces.append((["--speculative-eagle-topk", str(spec.eagle_topk)], ""))
        elif spec.num_steps is not None and fill_topk and spec.algorithm.upper() in EAGLE_FAMILY:
            pieces.append((["--speculative-eagle-topk", "1"],
                           "num_steps is set: 0.5.23 then needs eagle_topk too (speculative_hook.py compares "
                           "it with 1 and fails on None); 1 drafts a chain"))
        if spec.num_draft_tokens is not None:
            pieces.append((["--speculative-num-draft-tokens", str(spec.num_draft_tokens)], ""))
    return pieces


#: SGLang's own serving benchmark, run as ``python -m`` this module (0.5.16: ``sglang/bench_serving.py`` re-exports
#: ``sglang.benchmark.serving``)
BENCH_SERVING = "sglang.bench_serving"
#: The keys of the line bench_serving 0.5.16 appends to its ``--output-file`` for each run (serving.py ``benchmark``:
#: the ``result`` dict, ``json.dumps`` of it, one line a run, ``"request_rate": Infinity`` when unset) that specwatch
#: needs to read a line: the run's shape and the metrics every release of it has written. Its others (``p90_*``,
#: ``accept_length``: from ``/server_info`` ``internal_states[0].avg_spec_accept_length``, null on a server that does
#: not speculate) are read when there.
BENCH_SERVING_REQUIRED = ("backend", "dataset_name", "request_rate", "max_concurrency", "completed",
                          "output_throughput", "request_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms",
                          "p99_tpot_ms", "median_itl_ms", "p99_itl_ms", "median_e2e_latency_ms")


def bench_serving_command(python: str, url: str, prompts: str, *, requests: int, output_len: int, concurrency: int,
                          output_file: str) -> list[str]:
    """One bench_serving run of ``requests`` prompts of the file ``prompts``, at most ``concurrency`` in flight,
    each ``output_len`` tokens, its result line appended to ``output_file``. 0.5.16, serving.py and
    benchmark/datasets/custom.py:

    * ``--backend sglang``: streamed ``/generate``, the prompt sent as text (``async_request_sglang_generate``),
      ``ignore_eos`` on unless ``--disable-ignore-eos``, temperature 0;
    * ``--dataset-name custom``: a JSONL file, each line's ``conversations[0]`` ``content`` or ``value`` the prompt,
      sent as it is (no chat template without ``--apply-chat-template``), lines shuffled (``--seed``) and the first
      ``--num-prompts`` taken; ``--sharegpt-output-len`` every request's length (at least 4). It needs no
      ``datasets`` package: ``sample_custom_requests`` reads the file with ``json``;
    * ``--flush-cache``: ``/flush_cache`` after its one warm-up request, so its prompts meet no cached prefix from
      the warm-up and the server's accept-length totals (``avg_spec_accept_length``, reset by the flush) cover its
      run only, as specwatch flushes after its warm-up."""
    return [python, "-m", BENCH_SERVING, "--backend", "sglang", "--base-url", url, "--dataset-name", "custom",
            "--dataset-path", prompts, "--num-prompts", str(requests), "--sharegpt-output-len", str(output_len),
            "--max-concurrency", str(concurrency), "--flush-cache", "--disable-tqdm", "--output-file", output_file]


class SGLang:
    """SGLang, 0.5.12 to 0.5.23 (:data:`RELEASES`)."""

    name: str = "sglang"
    title: str = "SGLang"
    capabilities: Capabilities = Capabilities(boots=True, native_api=True, metrics=True, decode_lines=True,
                                              meta_info=True, graph_counters=True, process_tree=True)
    metrics: MetricNames | None = MetricNames.with_prefix("sglang:")
    process: ProcessSignature | None = ProcessSignature(
        "SGLang server", tree_name="sglang", modules=("sglang.launch_server",), commands=(("sglang", "serve"),),
        scripts=("launch_server.py",), title_prefix="sglang::", roles=TITLE_ROLES)
    identity: Identity | None = Identity(package="sglang", served_version=True)
    log_format: str | None = "sglang-0.5"
    versions: tuple[str, ...] = tuple(r.version for r in RELEASES)
    launchers: tuple[str, ...] = ("sglang serve", "python -m sglang.launch_server")
    load_apis: tuple[str, ...] = ("generate", "completions", "chat")
    algorithms: tuple[str, ...] | None = None
    default_model: str | None = None
    builtin_draft: bool = False
    device_from_run: bool = False
    mem_fraction_flag: str | None = "--mem-fraction-static"

    def arg_pieces(self, profile: ServerProfile, host: str, port: int, version: str | None = None) -> Pieces:
        """The shared flags with ``--speculative-eagle-topk 1`` filled in where SGLang needs it."""
        return shared_pieces(profile, host, port, release(version), fill_topk=True)

    def command(self, profile: ServerProfile, host: str, port: int, version: str | None = None) -> list[str]:
        """``sglang serve`` (or the profile's launcher) with the profile's flags, ``--device`` unless auto."""
        launcher = profile.launcher.split()
        if launcher[0] == "python":
            launcher[0] = profile.python
        args = [a for flags, _ in self.arg_pieces(profile, host, port, version) for a in flags]
        if profile.device != "auto":
            args += ["--device", profile.device]
        return [*launcher, *args, *profile.extra_args]

    def phase_graphs(self, version: str | None = None) -> PhaseGraphs | None:
        """The speculative phases ``version`` captures (:attr:`Release.phase_graphs`)."""
        return release(version).phase_graphs


SGLANG = SGLang()
