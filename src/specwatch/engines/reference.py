"""The reference server (``python -m specwatch.refserver``) from outside, as the tester sees it.

It takes SGLang's flags, serves SGLang's API and ``sglang:*`` metrics and prints 0.5.23's log lines
(docs/reference/reference-server.md); its workers retitle themselves ``refserver::scheduler`` (TP=1)
or ``refserver::scheduler_TP{r}``. Never imports :mod:`specwatch.refserver`: it is a black box.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specwatch.engines.protocol import Capabilities, Identity, MetricNames, PhaseGraphs, Pieces, ProcessSignature
from specwatch.engines.sglang import EAGLE_FAMILY, PHASE_GRAPHS, SGLANG, TITLE_ROLES, release, shared_pieces

if TYPE_CHECKING:
    from specwatch.engines.protocol import ServerProfile

__all__ = ["ALGORITHMS", "MODULE", "PHASES", "REFERENCE", "Reference"]

#: how it is started: ``python -m MODULE``
MODULE = "specwatch.refserver"
#: what it implements (chain drafting with a draft model, greedy verification)
ALGORITHMS = EAGLE_FAMILY
#: The phases it captures: target verify and draft decode (from one draft step on: it graphs every draft step).
#: It has no draft extend phase: its draft is the target's first layers, sharing the target's KV cache, so the
#: verify's forward already writes the draft's cache for the accepted tokens and nothing runs the draft over them.
#: It reads SGLang's graph-off flags and no attention backend.
PHASES = PhaseGraphs(verify=PHASE_GRAPHS.verify, draft_decode=PHASE_GRAPHS.draft_decode, draft_decode_min_steps=1,
                     draft_extend=None, drafted=ALGORITHMS, graphs_off=PHASE_GRAPHS.graphs_off)


class Reference:
    """The reference server: SGLang's outside (flags, API, metrics, log lines) over its own engine."""

    name: str = "reference"
    title: str = "the reference server"
    capabilities: Capabilities = SGLANG.capabilities
    metrics: MetricNames | None = SGLANG.metrics
    process: ProcessSignature | None = ProcessSignature(
        "reference server", tree_name="refserver", modules=(MODULE,), title_prefix="refserver::", roles=TITLE_ROLES)
    # /server_info "version" imitates SGLang's; the version is specwatch's own
    identity: Identity | None = Identity(package="specwatch", served_version=False, bundled=True)
    log_format: str | None = SGLANG.log_format
    versions: tuple[str, ...] = (release().version,)  # it imitates the newest SGLang specwatch knows
    launchers: tuple[str, ...] = ()  # always ``python -m specwatch.refserver``
    load_apis: tuple[str, ...] = ("generate",)  # its /v1/completions does not stream
    algorithms: tuple[str, ...] | None = ALGORITHMS
    default_model: str | None = "ref-tiny"
    builtin_draft: bool = True
    device_from_run: bool = True
    mem_fraction_flag: str | None = None

    def arg_pieces(self, profile: ServerProfile, host: str, port: int, version: str | None = None) -> Pieces:
        """SGLang's shared flags (it resolves an unset eagle_topk itself)."""
        return shared_pieces(profile, host, port, release(version), fill_topk=False)

    def command(self, profile: ServerProfile, host: str, port: int, version: str | None = None) -> list[str]:
        """``python -m specwatch.refserver`` with the shared flags and ``--device`` (auto included)."""
        args = [a for flags, _ in self.arg_pieces(profile, host, port, version) for a in flags]
        return [profile.python, "-m", MODULE, *args, "--device", profile.device, *profile.extra_args]

    def phase_graphs(self, version: str | None = None) -> PhaseGraphs | None:
        """:data:`PHASES`, whatever the version."""
        return PHASES


REFERENCE = Reference()
