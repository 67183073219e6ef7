"""SGLang 0.5.16 to 0.5.23, from outside: its command line and flags by version, its log format, its
``sglang:*`` metric names, its process titles and its version identity.

The differences between the versions that matter to specwatch are in :data:`RELEASES`
(docs/reference/sglang-versions.md, from each version's wheel); the flags specwatch writes exist under
the same names in all of them. The log lines are read by :mod:`specwatch.signals.logscan`, one parser
for every version here (``log_format``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from specwatch.engines.protocol import Capabilities, Identity, MetricNames, Pieces, ProcessSignature

if TYPE_CHECKING:
    from specwatch.engines.protocol import ServerProfile

__all__ = [
    "ALGORITHMS",
    "EAGLE_FAMILY",
    "RELEASES",
    "SGLANG",
    "SPEC_DECODE_LOG_INTERVAL",
    "Release",
    "SGLang",
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


@dataclass(frozen=True)
class Release:
    """What one SGLang version does differently, in what specwatch reads or writes."""

    version: str
    capture_bs_line: str  # the target verify capture line that carries bs=[...]: "begin" or "end"
    server_info_capture_bs: bool  # /server_info internal_states[k].decode_cuda_graph_bs exists
    graph_limit_flags: tuple[str, ...]  # spellings of the decode capture limit it accepts, the canonical first
    meta_info_aliases: bool  # meta_info also has spec_accepted_drafts / spec_proposed_drafts
    graph_memory_metric: bool  # sglang:graph_memory_usage_gb exists

    @property
    def graph_limit_flag(self) -> str:
        """The flag specwatch writes for a profile's ``cuda_graph_max_bs``."""
        return self.graph_limit_flags[0]


#: The versions specwatch has read, oldest first (docs/reference/sglang-versions.md, "Summary").
RELEASES: tuple[Release, ...] = (
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


class SGLang:
    """SGLang, 0.5.16 to 0.5.23 (:data:`RELEASES`)."""

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


SGLANG = SGLang()
