"""The engine: continuous batching, plain and speculative decoding, CUDA graphs, faults.

Implements the "Engine contract" of docs/architecture.md. One ``step()`` runs either a prefill batch
of newly admitted requests (which also yields each one's first token) or one decode batch of every
running request. With ``spec_algorithm`` set, a decode batch is one draft+verify cycle: the
early-exit draft (the target's first ``preset.draft_layers`` layers + final norm + shared LM head)
proposes ``num_steps`` tokens one by one (chain, topk 1), the full target scores all
``num_steps + 1`` positions in one forward, the longest matching prefix plus the bonus token is
committed, and the cache length of each request is set back past the rejected positions. The draft
layers are the target's own layers, so the draft's KV is the first layers of the target cache and is
rolled back with it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from specwatch.refserver.graph import GraphRunner
from specwatch.refserver.model import RefModel
from specwatch.refserver.preset import get_preset
from specwatch.refserver.step import StepOutput
from specwatch.refserver.tokenizer import BOS_ID, EOS_ID
from specwatch.refserver.validate import MAX_TEMPERATURE, MIN_TEMPERATURE

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
CPU_SINGLE_THREAD_MAX_WIDTH = 256  # on CPU, models this narrow run their ops on one thread
MAX_PREFILL_TOKENS = 16384  # padded tokens per prefill batch (at least one request is always admitted)
DRAFT_BIAS_SEED = 4242  # fault_perturb_draft's bias vector
STALE_DRAFT_SDS = 1.0  # fault_stale_draft_after: the bias (standard deviations) of a draft gone stale
CONTEXT_DRAFT_SDS = 3.0  # fault_draft_context: the bias on draft positions at or past the limit


@dataclass(frozen=True)
class EngineConfig:
    """Everything the engine needs, resolved from the server flags by the worker."""

    preset: str
    device: str
    dtype: str
    tp_rank: int = 0
    tp_size: int = 1
    spec_algorithm: str | None = None
    num_steps: int = 0
    max_running_requests: int = 8
    context_len: int = 0
    cuda_graph_bs: tuple[int, ...] = ()
    fault_eager_verify: bool = False
    fault_slowdown_pct: float = 0.0
    fault_diverge: bool = False
    fault_perturb_draft: float = 0.0
    fault_stale_draft_after: int = -1  # -1 off; else prompt tokens since the last flush (0: the KV pool's size)
    fault_draft_context: int = 0  # 0 off; else the first position whose draft token is biased
    fault_batch_draft: bool = False  # a batch of several requests verifies each against its neighbour's drafts
    seed: int = 0


@dataclass
class RequestSpec:
    """One generate request, already tokenized."""

    rid: str
    input_ids: list[int]
    max_new_tokens: int
    temperature: float = 0.0
    ignore_eos: bool = False
    stop_token_ids: tuple[int, ...] = ()
    top_logprobs_num: int = -1  # -1: no logprobs; 0: each output token's own; k > 0: also the top k


#: Per output token: (logprob of the token, its id, the top-k as (logprob, id), best first).
TokenLogprob = tuple[float, int, list[tuple[float, int]]]


@dataclass
class CaptureInfo:
    """One captured graph family, for the "Capture ... CUDA graph" log lines."""

    role: str
    kind: str
    bs: list[int]
    num_tokens_per_req: int
    elapsed_s: float
    mem_gb: float




@dataclass
class _Req:
    spec: RequestSpec
    max_new: int  # max_new_tokens, capped so the request fits the context
    stop_ids: frozenset[int]
    tokens: list[int] = field(default_factory=list)  # prompt + output
    output: list[int] = field(default_factory=list)
    slot: int = -1
    kv_len: int = 0  # valid cache positions; the last token is always pending (not yet cached)
    verify_ct: int = 0


class Engine:
    """Reference engine: one per tensor-parallel rank, driven by identical calls on every rank."""

    def __init__(self, cfg: EngineConfig, tp_group=None) -> None:
        if cfg.dtype not in _DTYPES:
            raise ValueError(f"unsupported dtype {cfg.dtype!r}; use one of {sorted(_DTYPES)}")
        self.cfg = cfg
        self._last_step_end = 0.0  # for fault_slowdown_pct: the serving time between steps
        self.fault_slowdown_pct = cfg.fault_slowdown_pct  # settable while serving (POST /ref/fault)
        self.preset = get_preset(cfg.preset)
        self.spec = cfg.spec_algorithm is not None
        if self.spec and cfg.num_steps < 1:
            raise ValueError("speculative decoding needs num_steps >= 1")
        if cfg.max_running_requests < 1:
            raise ValueError("max_running_requests must be >= 1")
        self.num_steps = cfg.num_steps if self.spec else 0
        self.context_len = cfg.context_len or self.preset.context_len
        self.device = torch.device(cfg.device)
        self.is_cuda = self.device.type == "cuda"
        self.num_slots = cfg.max_running_requests
        if not self.is_cuda and self.preset.d_model <= CPU_SINGLE_THREAD_MAX_WIDTH:
            torch.set_num_threads(1)  # tiny matmuls: extra intra-op threads only add spin/wake-up cost
        with torch.no_grad():
            self.model = RefModel(self.preset, device=self.device, dtype=_DTYPES[cfg.dtype],
                                  num_slots=self.num_slots, max_ctx=self.context_len, tp_rank=cfg.tp_rank,
                                  tp_size=cfg.tp_size, tp_group=tp_group)
        self.tp_group = tp_group
        self.generator = torch.Generator(device=self.device).manual_seed(cfg.seed)
        self.waiting: list[_Req] = []
        self.running: list[_Req] = []
        self.free_slots = list(range(self.num_slots))
        self.runners: dict[tuple[str, str], GraphRunner] = {}
        self.draft_bias = self._draft_bias(cfg.fault_perturb_draft)
        # fault_stale_draft_after / fault_draft_context: the same fixed vector, one standard deviation long
        faulty = cfg.fault_stale_draft_after >= 0 or cfg.fault_draft_context > 0
        self.fault_bias = self._draft_bias(1.0) if faulty else None
        self.prefilled = 0  # prompt tokens prefilled since boot or the last flush

    # ---- contract properties --------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        """Size of the (padded) vocabulary."""
        return self.preset.vocab_size

    @property
    def max_total_tokens(self) -> int:
        """KV cache capacity in tokens (slots x context length)."""
        return self.num_slots * self.context_len

    def _draft_bias(self, scale: float) -> torch.Tensor | None:
        """fault_perturb_draft: one fixed random vector over the vocabulary (the same on every rank and
        boot), added to the draft's logits in units of their standard deviation; None without the fault."""
        if scale <= 0:
            return None
        gen = torch.Generator().manual_seed(DRAFT_BIAS_SEED)
        return (scale * torch.randn(self.preset.vocab_size, generator=gen)).to(self.device)

    @property
    def draft_stale(self) -> bool:
        """fault_stale_draft_after: more prompt tokens prefilled since boot or the last flush than its limit (0:
        the KV pool's size, the traffic that turns a prefix cache of that pool over)."""
        after = self.cfg.fault_stale_draft_after
        return after >= 0 and self.prefilled > (after or self.max_total_tokens)

    def _fault_sds(self, positions: torch.Tensor) -> torch.Tensor:
        """Per request, the standard deviations of bias on the draft token predicted at ``positions`` [B]."""
        sds = torch.zeros(positions.shape, dtype=torch.float32, device=positions.device)
        if self.draft_stale:
            sds += STALE_DRAFT_SDS
        if self.cfg.fault_draft_context > 0:
            sds += CONTEXT_DRAFT_SDS * (positions >= self.cfg.fault_draft_context).float()
        return sds

    # ---- graphs -------------------------------------------------------------------------------
    def graph_bs(self) -> list[int]:
        """Batch sizes to capture: cfg.cuda_graph_bs capped at max_running_requests (which is then added)."""
        req = sorted(set(self.cfg.cuda_graph_bs))
        kept = [b for b in req if 0 < b <= self.num_slots]
        if len(kept) < len([b for b in req if b > 0]) and self.num_slots not in kept:
            kept.append(self.num_slots)
        return kept

    def _step_fn(self, n_layers: int):
        model = self.model

        def fn(tokens: torch.Tensor, pos: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
            return model.forward(tokens, pos, slots, n_layers=n_layers)

        return fn

    def capture(self) -> list[CaptureInfo]:
        """Warm up and capture the decode/verify/draft graphs; [] on CPU or without cuda_graph_bs."""
        bs = self.graph_bs()
        if not self.is_cuda or not bs:
            return []
        if self.cfg.tp_size > 1:  # create the NCCL communicator eagerly on the default stream first
            torch.distributed.all_reduce(torch.ones(1, device=self.device), group=self.tp_group)
            torch.cuda.synchronize(self.device)
        pool = torch.cuda.graph_pool_handle()
        families = []
        if self.spec:
            families.append(("target", "verify", self.preset.n_layers, self.num_steps + 1))
            families.append(("draft", "decode", self.preset.draft_layers, 1))
        else:
            families.append(("target", "decode", self.preset.n_layers, 1))
        infos = []
        with torch.no_grad():
            for role, kind, n_layers, width in families:
                runner = GraphRunner(self._step_fn(n_layers), role=role, kind=kind, num_tokens_per_req=width,
                                     bs_list=bs, device=self.device, scratch_slot=self.model.kv.scratch_slot,
                                     pool=pool)
                elapsed, mem = runner.capture()
                self.runners[(role, kind)] = runner
                infos.append(CaptureInfo(role, kind, list(runner.bs_list), width, elapsed, mem))
        return infos

    def _run(self, role: str, kind: str, tokens: torch.Tensor, pos: torch.Tensor, slots: torch.Tensor,
             max_pos: int) -> tuple[torch.Tensor, bool]:
        """Logits of one decode/verify/draft batch, from a graph when one can run it, else eager."""
        runner = self.runners.get((role, kind))
        eager_verify = role == "target" and kind == "verify" and self.cfg.fault_eager_verify
        if runner is not None and runner.can_run(tokens.shape[0]) and not eager_verify:
            return runner.replay(tokens, pos, slots), True
        n_layers = self.preset.draft_layers if role == "draft" else self.preset.n_layers
        if eager_verify and not self.is_cuda:
            # CPU has no graph to lose, so the fault takes a slow fallback path instead, as an eager verify
            # does on a GPU: one forward per position, each over the whole cache (the static shape a graph
            # is captured for) rather than the used prefix. The same tokens, several times the cost.
            parts = [self.model.forward(tokens[:, k:k + 1], pos + k, slots, n_layers=n_layers)
                     for k in range(tokens.shape[1])]
            return torch.cat(parts, dim=1), False
        ctx = None if self.is_cuda else max_pos + 1  # CPU: attend only over the used prefix
        return self.model.forward(tokens, pos, slots, n_layers=n_layers, ctx_len=ctx), False

    # ---- requests -----------------------------------------------------------------------------
    def add_request(self, req: RequestSpec) -> None:
        """Queue a request; ValueError if it can never run (empty/too long prompt, bad limits, dup rid)."""
        n = len(req.input_ids)
        if n == 0:
            raise ValueError(f"request {req.rid}: empty input_ids")
        if req.max_new_tokens <= 0:
            raise ValueError(f"request {req.rid}: max_new_tokens must be > 0, got {req.max_new_tokens}")
        room = self.context_len - self.num_steps - n
        if room < 1:
            raise ValueError(f"request {req.rid}: prompt of {n} tokens does not fit the context length "
                             f"{self.context_len} (at most {self.context_len - self.num_steps - 1} tokens)")
        if any(not 0 <= t < self.vocab_size for t in req.input_ids):
            raise ValueError(f"request {req.rid}: token id out of range [0, {self.vocab_size})")
        t = req.temperature
        if not (math.isfinite(t) and (t == 0 or MIN_TEMPERATURE <= t <= MAX_TEMPERATURE)):
            raise ValueError(f"request {req.rid}: temperature must be 0 or in [{MIN_TEMPERATURE:g}, "
                             f"{MAX_TEMPERATURE:g}], got {t!r}")
        if not all(isinstance(i, int) and i >= 0 for i in req.stop_token_ids):
            raise ValueError(f"request {req.rid}: stop_token_ids must be non-negative integers")
        if req.top_logprobs_num > self.vocab_size:
            raise ValueError(f"request {req.rid}: top_logprobs_num must be at most the vocabulary size "
                             f"{self.vocab_size}, got {req.top_logprobs_num}")
        if req.top_logprobs_num < -1:
            raise ValueError(f"request {req.rid}: top_logprobs_num must be >= 0 (-1: no logprobs)")
        if any(r.spec.rid == req.rid for r in (*self.waiting, *self.running)):
            raise ValueError(f"request {req.rid}: rid already in use")
        stop = set(req.stop_token_ids)
        if not req.ignore_eos:
            stop.add(EOS_ID)
        self.waiting.append(_Req(spec=req, max_new=min(req.max_new_tokens, room), stop_ids=frozenset(stop),
                                 tokens=list(req.input_ids)))

    def abort(self, rid: str) -> None:
        """Drop a waiting or running request (unknown rids are ignored)."""
        self.waiting = [r for r in self.waiting if r.spec.rid != rid]
        for r in [r for r in self.running if r.spec.rid == rid]:
            self._release(r)

    def flush(self) -> bool:
        """Drop cached state when idle; False (nothing done) while requests are queued or running."""
        if self.has_work():
            return False
        self.model.kv.zero_()
        self.free_slots = list(range(self.num_slots))
        self.prefilled = 0
        return True

    def has_work(self) -> bool:
        """True while any request waits or runs."""
        return bool(self.waiting or self.running)

    def request_state(self, rid: str) -> dict | None:
        """Debug view of a running request: slot, kv_len, tokens, output (None if not running)."""
        for r in self.running:
            if r.spec.rid == rid:
                return {"slot": r.slot, "kv_len": r.kv_len, "tokens": list(r.tokens), "output": list(r.output)}
        return None

    def _release(self, r: _Req) -> None:
        self.running.remove(r)
        self.free_slots.append(r.slot)
        self.free_slots.sort()
        r.slot = -1

    # ---- stepping -----------------------------------------------------------------------------
    def step(self) -> StepOutput | None:
        """Run one prefill batch (if requests wait and slots are free) or one decode batch."""
        if not self.has_work():
            return None
        t0 = time.perf_counter()
        with torch.no_grad():
            out = self._prefill() if self.waiting and self.free_slots else self._decode()
        if self.is_cuda:
            torch.cuda.synchronize(self.device)
        elapsed = time.perf_counter() - t0
        if self.fault_slowdown_pct > 0:
            # Scale with the whole step period (this step plus the serving work since the last one),
            # so PCT% slows the server's token rate by about PCT%, not just the forward pass.
            since_last = t0 - self._last_step_end if self._last_step_end else 0.0
            period = elapsed + (since_last if since_last < 0.05 else 0.0)
            _spin(period * self.fault_slowdown_pct / 100.0)
        out.forward_s = time.perf_counter() - t0
        self._last_step_end = time.perf_counter()
        used = sum(r.kv_len for r in self.running)
        out.num_used_tokens, out.token_usage = used, used / self.max_total_tokens
        return out

    def _prefill(self) -> StepOutput:
        batch: list[_Req] = []
        longest = 0
        while self.waiting and self.free_slots:
            r = self.waiting[0]
            n = len(r.tokens)
            if batch and (len(batch) + 1) * max(longest, n) > MAX_PREFILL_TOKENS:
                break
            self.waiting.pop(0)
            r.slot = self.free_slots.pop(0)
            batch.append(r)
            longest = max(longest, n)
        lens = [len(r.tokens) for r in batch]
        self.prefilled += sum(lens)
        tok = torch.zeros((len(batch), longest), dtype=torch.long)
        for i, r in enumerate(batch):
            tok[i, : lens[i]] = torch.tensor(r.tokens)
        dev = self.device
        logits = self.model.forward(tok.to(dev), torch.zeros(len(batch), dtype=torch.long, device=dev),
                                    torch.tensor([r.slot for r in batch], device=dev),
                                    ctx_len=longest, logit_idx=torch.tensor([n - 1 for n in lens], device=dev))
        picked = self._pick(logits, batch)
        scored = _first_candidate(self._logprobs(logits, batch, picked[:, :, None]))
        first = picked.tolist()
        new_tokens, finished, logprobs = {}, {}, {}
        for i, r in enumerate(batch):
            r.kv_len = lens[i]
            self.running.append(r)
            kept, reason = self._commit(r, first[i][:1])
            new_tokens[r.spec.rid] = kept
            scored_i = scored[i] if scored is not None else None
            if scored_i is not None:
                logprobs[r.spec.rid] = scored_i[: len(kept)]  # aligned with the kept tokens
            if reason is not None:
                finished[r.spec.rid] = reason
                self._release(r)
        return StepOutput(mode="prefill", bs=len(batch), new_tokens=new_tokens, finished=finished,
                          accept_lens={}, can_run_cuda_graph=False, new_seq=len(batch), new_token=sum(lens),
                          cached_token=0, logprobs=logprobs)

    def _decode(self) -> StepOutput:
        batch = list(self.running)
        dev = self.device
        last = torch.tensor([r.tokens[-1] for r in batch], dtype=torch.long, device=dev)
        pos = torch.tensor([r.kv_len for r in batch], dtype=torch.long, device=dev)
        slots = torch.tensor([r.slot for r in batch], dtype=torch.long, device=dev)
        max_pos = max(r.kv_len for r in batch)
        new_tokens, finished, accept_lens, logprobs = {}, {}, {}, {}
        if not self.spec:
            logits, graphed = self._run("target", "decode", last[:, None], pos, slots, max_pos)
            picked = self._pick(logits, batch)
            scored = _first_candidate(self._logprobs(logits, batch, picked[:, :, None]))
            commits = picked.tolist()
        else:
            commits, graphed, scored = self._spec_cycle(batch, last, pos, slots, max_pos)
        for i, (r, toks) in enumerate(zip(batch, commits, strict=True)):
            r.kv_len = len(r.tokens) - 1 + len(toks)  # rollback: rejected positions fall out of the cache
            if self.spec:
                accept_lens[r.spec.rid] = len(toks)
                r.verify_ct += 1
            kept, reason = self._commit(r, toks)
            new_tokens[r.spec.rid] = kept
            scored_i = scored[i] if scored is not None else None
            if scored_i is not None:
                logprobs[r.spec.rid] = scored_i[: len(kept)]  # aligned with the kept tokens
            if reason is not None:
                finished[r.spec.rid] = reason
                self._release(r)
        return StepOutput(mode="decode", bs=len(batch), new_tokens=new_tokens, finished=finished,
                          accept_lens=accept_lens, can_run_cuda_graph=graphed, logprobs=logprobs)

    def _spec_cycle(self, batch: list[_Req], last: torch.Tensor, pos: torch.Tensor, slots: torch.Tensor,
                    max_pos: int) -> tuple[list[list[int]], bool, list[list[TokenLogprob] | None] | None]:
        """Draft num_steps tokens, verify them in one target forward; the committed tokens per request,
        whether the verify ran from a graph, and (see ``_logprobs``) the committed tokens' logprobs.

        The k-th committed token of a cycle is scored at verify position k, where it is either the
        target's own pick or (the fault_diverge path, at position 0) the unverified draft token."""
        n = self.num_steps
        drafts = []
        cur = last
        for i in range(n):
            logits, _ = self._run("draft", "decode", cur[:, None], pos + i, slots, max_pos + i)
            scores = logits[:, 0]
            if self.draft_bias is not None:  # the fault: a perturbed draft (the target still verifies)
                scores = scores + self.draft_bias * scores[:, :BOS_ID].std(dim=-1, keepdim=True)  # the bytes' spread
            if self.fault_bias is not None:  # the faults of a draft gone stale or past its context
                sds = self._fault_sds(pos + i)
                scores = scores + sds[:, None] * self.fault_bias * scores[:, :BOS_ID].std(dim=-1, keepdim=True)
            cur = scores.argmax(dim=-1)
            drafts.append(cur)
        draft = torch.stack(drafts, dim=1)  # [B, n]
        if self.cfg.fault_batch_draft and draft.shape[0] > 1:  # the fault: draft rows gathered one request off
            draft = draft.roll(1, dims=0)
        verify_in = torch.cat([last[:, None], draft], dim=1)  # [B, n+1]
        logits, graphed = self._run("target", "verify", verify_in, pos, slots, max_pos + n)
        target = self._pick(logits, batch)  # [B, n+1]: the target's token after each prefix
        scored = None
        if any(r.spec.top_logprobs_num >= 0 for r in batch):
            # Candidates at each verify position: the target's pick, then the draft token (the
            # target's pick again at the bonus position, which has no draft).
            cands = torch.stack([target, torch.cat([draft, target[:, n:]], dim=1)], dim=2)  # [B, n+1, 2]
            scored = self._logprobs(logits, batch, cands)
        both = torch.cat([draft, target], dim=1).tolist()
        commits: list[list[int]] = []
        lps: list[list[TokenLogprob] | None] = []
        for i, row in enumerate(both):
            d, g = row[:n], row[n:]
            j = 0
            while j < n and d[j] == g[j]:
                j += 1
            if self.cfg.fault_diverge and j == 0:
                commits.append([d[0], g[1]])  # the bug: first draft token taken without verification
                picks = [1, 0]
            else:
                commits.append(g[: j + 1])
                picks = [0] * (j + 1)
            scored_i = scored[i] if scored is not None else None
            if scored_i is not None:
                lps.append([scored_i[k][c] for k, c in enumerate(picks)])
            else:
                lps.append(None)
        return commits, graphed, (lps if scored is not None else None)

    def _pick(self, logits: torch.Tensor, batch: list[_Req]) -> torch.Tensor:
        """Token ids [B, T]: argmax for temperature 0, else a seeded sample at each position."""
        out = logits.argmax(dim=-1)
        temps = [r.spec.temperature for r in batch]
        if any(t > 0 for t in temps):
            b, t, v = logits.shape
            tt = torch.tensor([x if x > 0 else 1.0 for x in temps], device=logits.device)
            probs = torch.softmax(logits / tt[:, None, None], dim=-1).reshape(b * t, v)
            sampled = torch.multinomial(probs, 1, generator=self.generator).reshape(b, t)
            hot = torch.tensor([x > 0 for x in temps], device=logits.device)[:, None]
            out = torch.where(hot, sampled, out)
        return out

    def _logprobs(self, logits: torch.Tensor, batch: list[_Req], cands: torch.Tensor
                  ) -> list[list[list[TokenLogprob]] | None] | None:
        """Logprobs of candidate tokens ``cands`` [B, T, C] under ``logits`` [B, T, V]: per request
        (None for one that asked for none), per position, per candidate ``(logprob, id, top_k)``.

        The natural-log softmax of the raw float32 logits (temperature does not apply, as in SGLang's
        greedy path); -inf (never-generated ids) is clamped to the float32 minimum as SGLang does, so
        that the JSON stays valid. None, with no device work at all, when no request asked."""
        want = [i for i, r in enumerate(batch) if r.spec.top_logprobs_num >= 0]
        if not want:
            return None
        idx = torch.tensor(want, device=logits.device)
        lp = torch.log_softmax(logits[idx].float(), dim=-1)  # [W, T, V]
        lp.clamp_(min=torch.finfo(lp.dtype).min)
        cand = cands[idx]
        chosen = lp.gather(-1, cand).tolist()  # [W, T, C]
        cand_ids = cand.tolist()
        k = max(batch[i].spec.top_logprobs_num for i in want)
        top_v: list[Any] = []  # read only when some request asks for top logprobs (k > 0)
        top_i: list[Any] = []
        if k > 0:
            top = lp.topk(k, dim=-1)  # sorted, best first
            top_v, top_i = top.values.tolist(), top.indices.tolist()
        out: list[list[list[TokenLogprob]] | None] = [None] * len(batch)
        for w, i in enumerate(want):
            ki = batch[i].spec.top_logprobs_num
            rows = []
            for t in range(len(chosen[w])):
                top_k = list(zip(top_v[w][t][:ki], top_i[w][t][:ki], strict=True)) if ki > 0 else []
                rows.append([(chosen[w][t][c], cand_ids[w][t][c], top_k) for c in range(len(chosen[w][t]))])
            out[i] = rows
        return out

    def _commit(self, r: _Req, toks: list[int]) -> tuple[list[int], dict | None]:
        """Append tokens up to the first stop/length condition; the kept tokens and a finish reason."""
        kept: list[int] = []
        for t in toks:
            r.tokens.append(t)
            r.output.append(t)
            kept.append(t)
            if len(r.output) >= r.max_new:
                return kept, {"type": "length", "length": r.max_new}
            if t in r.stop_ids:
                return kept, {"type": "stop", "matched": t}
        return kept, None


def _first_candidate(scored: list[list[list[TokenLogprob]] | None] | None
                     ) -> list[list[TokenLogprob] | None] | None:
    """``Engine._logprobs`` output with one candidate per position reduced to that candidate."""
    if scored is None:
        return None
    return [None if rows is None else [cands[0] for cands in rows] for rows in scored]


def _spin(seconds: float) -> None:
    """Busy-wait: real CPU work for ``seconds``."""
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1
