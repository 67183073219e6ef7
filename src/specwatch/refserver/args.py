"""Command line of the reference server: SGLang 0.5.23 flag names and SGLang's resolution rules.

FAULT SWITCHES (reference-only, for proving specwatch's checks on real causes):
  --ref-fault-eager-verify     capture the decode graph but run the target verify eagerly (on CPU, where
                               no graphs exist: a slow fallback, one forward per position over the
                               whole cache)
  --ref-fault-slowdown PCT     add real extra work to every engine step (PCT percent of a step)
  --ref-fault-diverge          accept one unverified draft token per cycle (greedy output changes)
  --ref-fault-perturb-draft S  add a fixed random bias of S standard deviations to the draft's logits:
                               the draft proposes other tokens, the target still verifies every one, so
                               greedy output is unchanged and acceptance drops
  --ref-fault-stale-draft [TOKENS]
                               the draft goes stale (a fixed bias of 1 standard deviation on its logits) once more
                               than TOKENS prompt tokens were prefilled since boot or the last /flush_cache (no
                               value: the KV pool's size, the traffic that turns a prefix cache over); a successful
                               /flush_cache restores it. Greedy output stays lossless
  --ref-fault-draft-context POS
                               the draft is nearly dead (a bias of 3 standard deviations) at cache positions at or
                               past POS, as a draft trained on shorter contexts; greedy output stays lossless
  --ref-fault-batch-draft      in a batch of more than one request, each request is verified against the
                               draft tokens of the request before it (a gather off by one row, the class of
                               TensorRT-LLM PR 4168): acceptance drops only when requests share a batch,
                               greedy output is unchanged (the target verifies every draft token)
  --ref-fault-drop-env PREFIX  remove every variable starting with PREFIX from the workers'
                               environment before they are spawned (reproduces "the NCCL variables
                               never reached the workers"); may be repeated
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

SPEC_ALGORITHMS = ("EAGLE", "EAGLE3")
SPEC_ALIASES = {"NEXTN": "EAGLE"}
SPEC_DEFAULT_MAX_RUNNING = 48
NONSPEC_DEFAULT_MAX_RUNNING = 64
DEFAULT_SPEC_STEPS = (3, 1, 4)  # (num_steps, topk, num_draft_tokens), SGLang's non-Llama default
DTYPES = ("auto", "float32", "float", "bfloat16", "float16", "half")
MAX_RUNNING_RESET_WARNING = (
    "Max running requests is reset to 48 for speculative decoding. You can override this by "
    "explicitly setting --max-running-requests."
)
DRAFT_TOKENS_WARNING = (
    "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
    "speculative_eagle_topk == 1 (was {old}, now {new})"
)


class ArgError(ValueError):
    """A flag value the server refuses; the message names the flag."""


@dataclass
class ServerArgs:
    """Resolved server arguments (flat, like SGLang's ``resolved_dict``)."""

    model_path: str = "ref-tiny"
    tp_size: int = 1
    host: str = "127.0.0.1"
    port: int = 30000
    device: str = "auto"
    dtype: str = "auto"
    max_running_requests: int | None = None
    max_queued_requests: int | None = None
    context_length: int | None = None
    random_seed: int | None = None
    speculative_algorithm: str | None = None
    speculative_draft_model_path: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    cuda_graph_max_bs_decode: int | None = None
    cuda_graph_bs_decode: list[int] | None = None
    cuda_graph_backend_decode: str | None = None
    disable_cuda_graph: bool = False
    disable_decode_cuda_graph: bool = False
    decode_log_interval: int = 40
    enable_metrics: bool = False
    log_level: str = "info"
    served_model_name: str | None = None
    ref_fault_eager_verify: bool = False
    ref_fault_slowdown: float = 0.0
    ref_fault_diverge: bool = False
    ref_fault_perturb_draft: float = 0.0
    ref_fault_stale_draft: int | None = None
    ref_fault_draft_context: int = 0
    ref_fault_batch_draft: bool = False
    ref_fault_drop_env: list[str] = field(default_factory=list)
    # Resolved, not flags.
    cuda_graph_bs: list[int] = field(default_factory=list)
    cuda_graph_config: dict[str, Any] = field(default_factory=dict)

    @property
    def is_speculative(self) -> bool:
        """Whether a speculative algorithm is on."""
        return self.speculative_algorithm is not None

    def resolved_dict(self) -> dict[str, Any]:
        """The flat dict that /server_info and the ``server_args=`` log line show."""
        return dataclasses.asdict(self)


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser (prefix matching on, so ``--tp`` means ``--tp-size`` as in SGLang)."""
    p = argparse.ArgumentParser(
        prog="python -m specwatch.refserver",
        description="specwatch reference server: SGLang-compatible flags, HTTP API and logs.",
        epilog=__doc__.split("\n", 2)[2] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    a = p.add_argument
    a("--model-path", "--model", dest="model_path", default="ref-tiny", help="preset name (ref-tiny, ...)")
    a("--served-model-name", default=None)
    a("--tp-size", dest="tp_size", type=int, default=1, help="tensor-parallel size (one worker per rank)")
    a("--host", default="127.0.0.1")
    a("--port", type=int, default=30000)
    a("--device", default="auto", choices=["auto", "cpu", "cuda"])
    a("--dtype", default="auto", choices=list(DTYPES))
    a("--max-running-requests", type=int, default=None)
    a("--max-queued-requests", type=int, default=None,
      help="bound of the waiting queue (default 4 x max-running-requests)")
    a("--context-length", type=int, default=None)
    a("--random-seed", type=int, default=None)
    a("--speculative-algorithm", default=None, help="EAGLE or EAGLE3 (NEXTN means EAGLE)")
    a("--speculative-draft-model-path", "--speculative-draft-model", dest="speculative_draft_model_path",
      default=None, help="accepted and recorded; the draft is built from the preset")
    a("--speculative-num-steps", type=int, default=None)
    a("--speculative-eagle-topk", type=int, default=None, help="only 1 (chain drafting)")
    a("--speculative-num-draft-tokens", type=int, default=None)
    a("--cuda-graph-max-bs-decode", type=int, default=None, help="largest batch size captured for decode/verify")
    a("--cuda-graph-bs-decode", type=int, nargs="+", default=None,
      help="explicit batch sizes to capture for decode/verify (their largest is the capture limit)")
    a("--cuda-graph-backend-decode", default=None, choices=["full", "disabled"])
    a("--disable-cuda-graph", action="store_true", help="deprecated: disables decode and verify graphs")
    a("--disable-decode-cuda-graph", action="store_true")
    a("--decode-log-interval", type=int, default=40)
    a("--enable-metrics", action="store_true")
    a("--log-level", default="info", choices=["debug", "info", "warning", "error", "critical"])
    g = p.add_argument_group("FAULT SWITCHES (reference server only)")
    g.add_argument("--ref-fault-eager-verify", action="store_true",
                   help="run the target verify without a CUDA graph (decode stays graphed); on CPU, where no "
                        "graphs exist, through a slow fallback: one forward per position over the whole cache")
    g.add_argument("--ref-fault-slowdown", type=float, default=0.0, metavar="PCT",
                   help="add PCT percent of real extra work to every engine step "
                        "(also settable while serving: POST /ref/fault {\"slowdown_pct\": PCT})")
    g.add_argument("--ref-fault-diverge", action="store_true",
                   help="accept one unverified draft token per cycle (breaks lossless greedy)")
    g.add_argument("--ref-fault-perturb-draft", type=float, default=0.0, metavar="SCALE",
                   help="add a fixed random bias of SCALE standard deviations to the draft's logits: acceptance "
                        "drops, greedy output stays lossless (the target verifies every draft token)")
    g.add_argument("--ref-fault-stale-draft", type=int, nargs="?", const=0, default=None, metavar="TOKENS",
                   help="the draft goes stale (acceptance drops, output lossless) once more than TOKENS prompt tokens "
                        "were prefilled since boot or the last /flush_cache (no value: the KV pool's size); a "
                        "successful /flush_cache restores it")
    g.add_argument("--ref-fault-draft-context", type=int, default=0, metavar="POS",
                   help="the draft's quality falls at cache positions at or past POS (acceptance near none there, "
                        "output lossless): a draft trained on shorter contexts")
    g.add_argument("--ref-fault-batch-draft", action="store_true",
                   help="verify each request of a batch of more than one against the draft tokens of the request "
                        "before it (a gather off by one row): acceptance drops only in shared batches, greedy output "
                        "stays lossless")
    g.add_argument("--ref-fault-drop-env", action="append", default=[], metavar="PREFIX",
                   help="remove variables with this prefix from the workers' environment (repeatable)")
    return p


def spec_capture_list(max_bs: int) -> list[int]:
    """SGLang's speculative capture list up to ``max_bs`` (before filtering)."""
    bs = list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 65, 4)) + list(range(72, 257, 8))
    bs += list(range(272, max(max_bs, 272) + 1, 16))
    return bs


def nonspec_capture_list(max_bs: int) -> list[int]:
    """SGLang's non-speculative capture list up to ``max_bs`` (before filtering)."""
    bs = [1, 2, 4, 8, 12, *list(range(16, 257, 8))]
    bs += list(range(272, 512, 16)) + list(range(512, max_bs + 1, 32))
    return bs


def capture_bs(speculative: bool, max_bs: int, max_running: int, explicit: Sequence[int] | None = None) -> list[int]:
    """Graph batch sizes, as SGLang 0.5.23 resolves them.

    The list (``explicit``, from ``--cuda-graph-bs-decode``, else generated up to ``max_bs`` with
    ``max_bs`` appended: cuda_graph_hook.py ``generate_decode_cuda_graph_batch_sizes``) is cut to
    the request pool, ``max_running``, which is added when the list went past it
    (base_cuda_graph_runner.py ``get_batch_sizes_to_capture``).
    """
    if explicit:
        full = [b for b in explicit if b >= 1]
    else:
        full = spec_capture_list(max_bs) if speculative else nonspec_capture_list(max_bs)
        full = [b for b in full if b <= max_bs] + [max_bs]
    if full and max(full) > max_running:
        full.append(max_running)
    return sorted({b for b in full if 1 <= b <= max_running})


def default_max_bs_decode(total_mem_gb: float, tp_size: int) -> int:
    """SGLang's decode max_bs default by GPU memory (memory_hook.py)."""
    if total_mem_gb < 20:
        return 8
    if total_mem_gb < 35:
        return 160 if tp_size >= 4 else 48
    if total_mem_gb < 60:
        return 160 if tp_size >= 4 else 32
    if total_mem_gb < 160:
        return 512 if tp_size >= 4 else 256
    return 512


def _cuda_mem_gb() -> float:
    """Total memory of GPU 0 in GB (0 when unknown). Safe before spawning workers."""
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_properties(0).total_memory / (1 << 30)
    except Exception:  # pragma: no cover - depends on the machine
        pass
    return 0.0


def _cuda_available() -> bool:
    if not (os.path.exists("/proc/driver/nvidia") or os.path.exists("/dev/nvidiactl")):
        return False  # no NVIDIA driver: skip importing torch in the main process (faster boot)
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # pragma: no cover
        return False


def resolve(ns: argparse.Namespace, *, cuda_available: bool | None = None,
            gpu_mem_gb: float | None = None) -> ServerArgs:
    """Apply SGLang's resolution rules; raises ArgError naming the flag on a bad value."""
    raw = {f.name: getattr(ns, f.name) for f in dataclasses.fields(ServerArgs) if hasattr(ns, f.name)}
    args = ServerArgs(**raw)
    if args.tp_size < 1:
        raise ArgError(f"--tp-size must be >= 1, got {args.tp_size}")
    if args.decode_log_interval < 1:
        raise ArgError(f"--decode-log-interval must be >= 1, got {args.decode_log_interval}")
    if not 0 <= args.ref_fault_slowdown <= 10000:
        raise ArgError(f"--ref-fault-slowdown must be a percentage in [0, 10000], got {args.ref_fault_slowdown}")
    if not 0 <= args.ref_fault_perturb_draft <= 100:
        raise ArgError(f"--ref-fault-perturb-draft must be in [0, 100] standard deviations, "
                       f"got {args.ref_fault_perturb_draft}")
    if args.ref_fault_stale_draft is not None and args.ref_fault_stale_draft < 0:
        raise ArgError(f"--ref-fault-stale-draft must be a number of tokens >= 0, got {args.ref_fault_stale_draft}")
    if args.ref_fault_draft_context < 0:
        raise ArgError(f"--ref-fault-draft-context must be a position >= 0, got {args.ref_fault_draft_context}")
    if args.device == "auto":
        has_cuda = _cuda_available() if cuda_available is None else cuda_available
        args.device = "cuda" if has_cuda else "cpu"
    if args.dtype in ("auto",):
        args.dtype = "bfloat16" if args.device == "cuda" else "float32"
    args.dtype = {"float": "float32", "half": "float16"}.get(args.dtype, args.dtype)
    if args.served_model_name is None:
        args.served_model_name = args.model_path
    if args.random_seed is None:
        args.random_seed = 0
    if args.max_running_requests is not None and args.max_running_requests < 1:
        raise ArgError(f"--max-running-requests must be >= 1, got {args.max_running_requests}")
    if args.context_length is not None and args.context_length < 2:
        raise ArgError(f"--context-length must be >= 2, got {args.context_length}")

    # Decode graph max bs: memory-based default, capped by an explicit --max-running-requests
    # (this runs before the speculative hook in SGLang, so the spec default of 48 does not cap it).
    if args.cuda_graph_max_bs_decode is None:
        mem = _cuda_mem_gb() if gpu_mem_gb is None and args.device == "cuda" else (gpu_mem_gb or 0.0)
        max_bs = default_max_bs_decode(mem, args.tp_size) if args.device == "cuda" else 8
        if args.max_running_requests is not None:
            max_bs = min(max_bs, args.max_running_requests)
        args.cuda_graph_max_bs_decode = max_bs
    elif args.cuda_graph_max_bs_decode < 1:
        raise ArgError(f"--cuda-graph-max-bs-decode must be >= 1, got {args.cuda_graph_max_bs_decode}")
    if args.cuda_graph_bs_decode is not None:
        if min(args.cuda_graph_bs_decode) < 1:
            raise ArgError(f"--cuda-graph-bs-decode sizes must be >= 1, got {args.cuda_graph_bs_decode}")
        args.cuda_graph_max_bs_decode = max(args.cuda_graph_bs_decode)  # memory_hook.py: an explicit list wins

    if args.speculative_algorithm is not None:
        _resolve_spec(args)
    else:
        for flag in ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens"):
            if getattr(args, flag) is not None:
                logger.warning("--%s is ignored without --speculative-algorithm", flag.replace("_", "-"))
                setattr(args, flag, None)
        if args.max_running_requests is None:
            args.max_running_requests = NONSPEC_DEFAULT_MAX_RUNNING
    assert args.max_running_requests is not None  # both branches above set it
    if args.max_queued_requests is None:
        args.max_queued_requests = 4 * args.max_running_requests
    elif args.max_queued_requests < 0:
        raise ArgError(f"--max-queued-requests must be >= 0, got {args.max_queued_requests}")

    if args.disable_cuda_graph:
        logger.warning("--disable-cuda-graph is deprecated; use --cuda-graph-backend-decode=disabled "
                       "(it disables both the decode and the prefill CUDA graphs)")
    backend = args.cuda_graph_backend_decode or "full"
    if args.disable_cuda_graph or args.disable_decode_cuda_graph:
        backend = "disabled"
    backend_eff = "disabled" if args.device == "cpu" else backend
    args.cuda_graph_backend_decode = backend
    bs_list = capture_bs(args.is_speculative, args.cuda_graph_max_bs_decode, args.max_running_requests,
                         args.cuda_graph_bs_decode)
    args.cuda_graph_bs = bs_list if backend_eff != "disabled" else []
    args.cuda_graph_config = {
        "decode": {"backend": backend, "max_bs": args.cuda_graph_max_bs_decode, "bs": bs_list},
        "prefill": {"backend": "disabled"},
    }
    return args


def _resolve_spec(args: ServerArgs) -> None:
    """SGLang's EAGLE-family rules (speculative_hook.py _handle_eagle_family), topk 1 only."""
    algo = str(args.speculative_algorithm).upper()
    algo = SPEC_ALIASES.get(algo, algo)
    if algo not in SPEC_ALGORITHMS:
        raise ArgError(f"--speculative-algorithm {args.speculative_algorithm!r} is not supported by the "
                       f"reference server; use one of {', '.join(SPEC_ALGORITHMS)} (or NEXTN)")
    args.speculative_algorithm = algo
    if args.max_running_requests is None:
        args.max_running_requests = SPEC_DEFAULT_MAX_RUNNING
        logger.warning(MAX_RUNNING_RESET_WARNING)
    if args.speculative_num_steps is None:
        if args.speculative_eagle_topk is not None or args.speculative_num_draft_tokens is not None:
            raise ArgError("--speculative-eagle-topk and --speculative-num-draft-tokens need "
                           "--speculative-num-steps (set all three or none)")
        steps, topk, ndt = DEFAULT_SPEC_STEPS
        args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens = (
            steps, topk, ndt)
    if args.speculative_num_steps < 1:
        raise ArgError(f"--speculative-num-steps must be >= 1, got {args.speculative_num_steps}")
    if args.speculative_eagle_topk is None:
        args.speculative_eagle_topk = 1
    if args.speculative_eagle_topk != 1:
        raise ArgError(f"--speculative-eagle-topk {args.speculative_eagle_topk} is not supported: the "
                       "reference server drafts a chain (tree drafting is not implemented); use 1")
    want = args.speculative_num_steps + 1
    if args.speculative_num_draft_tokens is None:
        args.speculative_num_draft_tokens = want
    elif args.speculative_num_draft_tokens != want:
        logger.warning(DRAFT_TOKENS_WARNING.format(old=args.speculative_num_draft_tokens, new=want))
        args.speculative_num_draft_tokens = want


def parse_args(argv: Sequence[str] | None = None) -> ServerArgs:
    """Parse and resolve; a bad value exits 2 with a message naming the flag (like argparse)."""
    parser = build_parser()
    ns = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        return resolve(ns)
    except ArgError as exc:
        parser.error(str(exc))
        raise  # unreachable


def worker_env(args: ServerArgs, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment the workers are spawned with: the parent's, minus --ref-fault-drop-env prefixes."""
    env = dict(os.environ if base is None else base)
    for prefix in args.ref_fault_drop_env:
        for key in [k for k in env if k.startswith(prefix)]:
            del env[key]
    return env
