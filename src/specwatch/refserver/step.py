"""What one engine step did: the record that crosses from a worker to the main process.

Kept free of torch so the main process (HTTP front end, detokenizer) unpickles it without
importing the model stack.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class StepOutput:
    """What one step did (docs/architecture.md, "Engine contract", describes each field)."""

    mode: str
    bs: int
    new_tokens: dict[str, list[int]]
    finished: dict[str, dict]
    accept_lens: dict[str, int]
    can_run_cuda_graph: bool
    new_seq: int = 0
    new_token: int = 0
    cached_token: int = 0
    num_used_tokens: int = 0
    token_usage: float = 0.0
    forward_s: float = 0.0
    # Only for requests that asked (RequestSpec.top_logprobs_num >= 0): per token of new_tokens[rid],
    # (logprob, token id, top-k as [(logprob, token id), ...] best first; [] when top_logprobs_num is 0).
    logprobs: dict[str, list[tuple[float, int, list[tuple[float, int]]]]] = field(default_factory=dict)
