"""Per-request bookkeeping in the main process: tokens, detokenized text, stop strings, spec stats.

The spec fields follow SGLang's meta_info (tokenizer_manager.py): spec_verify_ct counts verify
cycles, spec_accept_length = completion_tokens / spec_verify_ct, spec_num_proposed_drafts =
spec_verify_ct * (num_draft_tokens - 1), spec_accept_rate = correct / proposed, and the histogram
satisfies sum(h) == spec_verify_ct and sum(k * h[k]) == spec_num_correct_drafts.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RequestState:
    """One request from admission to its final chunk."""

    rid: str
    input_ids: list[int]
    max_new_tokens: int
    stop: tuple[str, ...] = ()
    log_metrics: bool = True
    stream: bool = False
    created: float = field(default_factory=time.perf_counter)
    output_ids: list[int] = field(default_factory=list)
    text: str = ""
    cached_tokens: int = 0
    verify_ct: int = 0
    num_correct: int = 0
    histogram: list[int] = field(default_factory=list)
    finish_reason: dict[str, Any] | None = None
    error: tuple[int, str] | None = None
    finished_at: float | None = None
    last_token_at: float | None = None  # when output tokens last arrived (None: none yet)
    return_logprob: bool = False
    top_logprobs_num: int = 0
    return_text_in_logprobs: bool = False
    return_prompt_token_ids: bool = False
    output_token_logprobs: list[list[Any]] = field(default_factory=list)  # [logprob, id, text or None]
    output_top_logprobs: list[list[list[Any]]] = field(default_factory=list)  # per token, k such entries
    event: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def done(self) -> bool:
        """Finished (any reason) or failed."""
        return self.finish_reason is not None or self.error is not None

    def add_tokens(self, ids: list[int], decode: Any, logprobs: list[Any] | None = None) -> bool:
        """Append committed tokens (and, with return_logprob, their ``StepOutput.logprobs`` entries, kept
        the same length as output_ids); returns True if a stop string matched (text trimmed there)."""
        if self.finish_reason is not None:
            return False
        if not self.return_logprob:
            logprobs = None
        for i, tok in enumerate(ids):
            self.output_ids.append(tok)
            if logprobs is not None and i < len(logprobs):
                self._add_logprob(logprobs[i], decode)
            if self.stop:
                text = decode(self.output_ids)
                for s in self.stop:
                    idx = text.find(s)
                    if idx >= 0:
                        self.text = text[:idx]
                        self.finish(reason={"type": "stop", "matched": s})
                        return True
        self.text = decode(self.output_ids)
        return False

    def _add_logprob(self, entry: Any, decode: Any) -> None:
        """One output token's (logprob, id, top-k) in SGLang's style: [logprob, id, text or None]."""
        logprob, tok, top = entry

        def text(t: int) -> str | None:
            return decode([t]) if self.return_text_in_logprobs else None

        self.output_token_logprobs.append([logprob, tok, text(tok)])
        if self.top_logprobs_num > 0:
            self.output_top_logprobs.append([[v, t, text(t)] for v, t in top])

    def token_timing(self, now: float) -> tuple[float, bool]:
        """Seconds since the previous output tokens (since admission for the first), and whether
        these are the first; marks ``now`` as the latest arrival."""
        first = self.last_token_at is None
        since = now - (self.created if first else self.last_token_at)  # type: ignore[operator]
        self.last_token_at = now
        return since, first

    def add_verify(self, accept_len: int) -> None:
        """One verify cycle in which this request committed ``accept_len`` tokens (bonus incl.)."""
        k = max(0, accept_len - 1)
        self.verify_ct += 1
        self.num_correct += k
        if len(self.histogram) <= k:
            self.histogram.extend([0] * (k + 1 - len(self.histogram)))
        self.histogram[k] += 1

    def finish(self, reason: dict[str, Any]) -> None:
        """Mark finished (first reason wins)."""
        if self.finish_reason is None:
            self.finish_reason = reason
            self.finished_at = time.perf_counter()

    def meta_info(self, *, speculative: bool, num_draft_tokens: int, final: bool) -> dict[str, Any]:
        """SGLang's meta_info; spec_* and e2e_latency only on the final chunk."""
        meta: dict[str, Any] = {
            "id": self.rid, "finish_reason": self.finish_reason if final else None,
            "prompt_tokens": len(self.input_ids), "weight_version": "default", "num_retractions": 0,
        }
        if self.return_logprob:  # no input logprobs: the reference scores output tokens only
            meta["input_token_logprobs"] = []
            meta["output_token_logprobs"] = list(self.output_token_logprobs)
            meta["output_token_logprobs_length"] = len(self.output_token_logprobs)
            if self.top_logprobs_num > 0:
                meta["input_top_logprobs"] = []
                meta["output_top_logprobs"] = list(self.output_top_logprobs)
        meta.update({"reasoning_tokens": 0, "completion_tokens": len(self.output_ids),
                     "cached_tokens": self.cached_tokens})
        if final:
            end = self.finished_at or time.perf_counter()
            meta["e2e_latency"] = end - self.created
            if speculative:
                proposed = self.verify_ct * (num_draft_tokens - 1)
                meta.update({
                    "spec_verify_ct": self.verify_ct,
                    "spec_accept_length": (len(self.output_ids) / self.verify_ct) if self.verify_ct else 0.0,
                    "spec_accept_rate": (self.num_correct / proposed) if proposed else 0.0,
                    "spec_num_correct_drafts": self.num_correct,
                    "spec_num_proposed_drafts": proposed,
                    "spec_correct_drafts_histogram": list(self.histogram),
                })
        return meta

    def response(self, *, speculative: bool, num_draft_tokens: int, final: bool) -> dict[str, Any]:
        """``{text, output_ids, meta_info}`` as /generate returns it (and ``prompt_token_ids`` when asked)."""
        out: dict[str, Any] = {
            "text": self.text, "output_ids": list(self.output_ids),
            "meta_info": self.meta_info(speculative=speculative, num_draft_tokens=num_draft_tokens, final=final)}
        if self.return_prompt_token_ids:
            out["prompt_token_ids"] = list(self.input_ids)
        return out
