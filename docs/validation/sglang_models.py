"""A Llama target and an EAGLE-3 draft that it accepts, tiny (seconds anywhere) or at Llama-3.1-8B's sizes (on a GPU).

    python docs/validation/sglang_models.py /tmp/models      # tiny: writes /tmp/models/target and /tmp/models/eagle3
    python docs/validation/sglang_models.py --shape 8b /tmp/sgl/models8b --if-missing   # 6.98 B parameters, 13 GiB
    python docs/validation/sglang_models.py --shape 8b /tmp/sgl/models8b-vary --draft-profile varying \
        --draft-quality 0.5 --target-from /tmp/sgl/models8b --if-missing   # only a draft: accept length varies

Real SGLang on the lent H200 needs a model and a draft without a network. A random draft is accepted almost
never (accept length 1.00 on the H200), which hides everything the accept-length checks exist for. So both
models are built to a plan whose accept length is known before the server starts:

* **target**: Llama layers whose output projections (``o_proj``, ``down_proj``) are zero, so the residual stream
  at every layer is the current token's embedding and the next token is a fixed map of the current one:
  ``lm_head[v] = E[f^-1(v)]`` with ``E`` random and ``f`` one cycle over the ordinary tokens. Greedy output is
  ``x, f(x), f(f(x)), ...`` with a margin of about ``hidden - 4 sqrt(hidden)`` logits (200 tiny, 3800 at 8B): no
  near-ties, so greedy runs repeat exactly. The layers still run their attention and MLP matmuls (their input
  projections are random), so a decode step costs what a model of that shape costs.
* **eagle3** (SGLang's ``LlamaForCausalLMEagle3`` layout: ``midlayer.*``, ``fc``, ``norm``, ``lm_head``, ``d2t``,
  ``t2d``; the midlayer's q/k/v read ``2 * hidden``, ``fc`` is ``3 * hidden -> hidden``): ``fc`` averages the
  three aux states (each ``E[x_t]``), the midlayer adds nothing (its output projections are zero too), and
  ``lm_head[v] = E[f^-2(v)]``. Its first draft token, ``f(f(x_t))``, is always right; its second repeats the
  first guess and is right only where ``f^3 = f^2``, never on one cycle. So with ``--speculative-num-steps 2``
  every verify commits one drafted token and the bonus: accept length 2.00, accept rate 0.50.

Shapes (``--shape``; the vocabulary is 512 in both):

* ``tiny`` (the default, what ``sglang_kit.py setup`` makes): 8 layers (EAGLE-3's default aux layers [2, 4, 5] are
  distinct), hidden 256, 4 heads x 64 (4 KV heads), MLP 512. One ``model.safetensors`` each. Its decode step is
  launch-bound: real SGLang 0.5.16 boots of it spread 25.9% on one H200 (2026-12-04).
* ``8b``: Llama-3.1-8B's sizes: 32 layers (aux layers [2, 16, 29]), hidden 4096, 32 heads x 128, 8 KV heads,
  MLP 14336: 6.98 B parameters, 13 GiB in bf16, written as safetensors shards of 4 layers with their index; the
  draft's midlayer at the same sizes. Built on the GPU when torch sees one (``--device auto``): the random
  tensors are drawn there and only bf16 bytes reach the host, about 15 s on an H200 (most of it the write).
  GPU-bound, its boots spread 0.7% (2026-12-04): plain about 220 tok/s, EAGLE-3 about 342 tok/s.

``--if-missing`` keeps what an earlier call wrote into the folder (same shape, seed, draft profile and quality,
target source, every file present). ``--draft-quality`` lowers the accept length on purpose: the given fraction
of ``lm_head`` rows of the draft are shuffled, so that fraction of first guesses fail (accept length about
``1 + quality``). The tokenizer is a byte-level BPE of 512 tokens (merges trained on a fixed text, then named
fillers), so the same ids come out everywhere. The draws depend on the device (a CUDA generator is not the CPU
one), never the plan.

Acceptance that varies (``--draft-profile varying``): whether the first guess is right depends only on the token
before the last committed one (``a``; the draft reads ``E[a]``), and a request's tokens walk the cycle from its
prompt's last token, two places per verify where the guess is right, one where not. So the draft is made right
on a set of tokens whose density swings along the cycle, ``m + A cos(2 pi i / 509)`` at cycle place ``i`` (``A =
min(q, 1 - q)``; each token drawn against it with Python's seeded ``random``, never the device's generator), and
wrong elsewhere (``E[a]`` moved to the ``lm_head`` row of the wrong token before it: the wrong guess wins by the
full embedding norm, no near tie). A request whose prompt ends in the dense arc accepts near 2.00, one in the
sparse arc near 1.00, one that crosses from one arc to the other changes on the way: per prompt and per position.
The offset ``m`` is fitted so that
the engine-wide accept length (SGLang's pooled ``Σ committed / Σ verify``) of one request from every prompt end,
256 tokens each, is ``1 + quality`` (``--draft-quality 0.92``: the seeds' 1.92); the mean over requests is
higher (a request that accepts more takes fewer verify cycles, so it weighs less in the pooled value).
``made.json`` then holds the right tokens and each prompt end's expected ``spec_verify_ct`` and
``spec_num_correct_drafts`` at 48 and 256 new tokens (:func:`walk`), with their means both ways.
Acceptance that falls past a context length (``--draft-profile context --draft-context N``, the fault of SGLang
issue 6783: a draft that stops paying on long inputs), built into the midlayer's attention and nothing else. Each
KV head reads one ``head_dim`` slice of the normalized target state; its query and key are that state through a
projection fitted so that every ordinary token's key has the same norm, so a key scores ``S`` against its own
query (no rotation at distance 0) and about N(0, (S / sqrt(head_dim))^2) against any other: the weight a query
gives itself is ``w(n) = e^S / (e^S + n e^(sigma^2 / 2))`` over ``n`` keys, the same for every token. The head
writes ``-G`` times the slice it attended to back into the residual, and the draft's ``lm_head`` row of the right
guess is ``-E_lo[a]`` (the slices' part of the embedding), the wrong guess's ``+E_lo[a]``: the first guess is right
while ``G w(n) > 1``, i.e. for contexts shorter than ``N`` (``G = 1 + N e^(sigma^2/2) / e^S``), and wrong past it.
:func:`context_rights` runs that midlayer on a token sequence (float32 over the bf16 weights, as written) and says
where the first guess is right; ``made.json`` holds its predicted accept length for the context check's prompts.
``--target-from DIR`` writes only the draft, for the target that an earlier call made in DIR (same shape and
seed, read from its files, not rewritten): two drafts beside one 13 GiB target.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Shape:
    """A Llama plan's sizes; both models share the vocabulary and the hidden size."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    inter: int
    layers_per_shard: int  # the target's layers in one safetensors file (all of them: one model.safetensors)

    def aux_layers(self) -> tuple[int, int, int]:
        """EAGLE-3's default aux layers in SGLang's Llama (2, n // 2, n - 3): the target states the draft reads."""
        return 2, self.layers // 2, self.layers - 3


VOCAB = 512
SHAPES = {
    "tiny": Shape("tiny", layers=8, hidden=256, heads=4, kv_heads=4, head_dim=64, inter=512, layers_per_shard=8),
    "8b": Shape("8b", layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128, inter=14336, layers_per_shard=4),
}
TINY = SHAPES["tiny"]
HIDDEN, LAYERS, HEADS, HEAD_DIM, INTER = TINY.hidden, TINY.layers, TINY.heads, TINY.head_dim, TINY.inter
SPECIALS = ["<s>", "</s>", "<unk>"]  # ids 0, 1, 2: bos, eos, unk
FIRST_ORDINARY = len(SPECIALS)
TRAINING_TEXT = (
    "Speculative decoding drafts a few tokens with a small model and verifies them with the target in one "
    "forward pass. The accept length counts the committed tokens per verify cycle, the bonus token included. "
    "A verify step that runs without CUDA graphs costs several times a graphed one, and the gain is lost. "
    "Tensor parallelism splits each layer across GPUs, and NCCL all-reduces the partial results. "
) * 4


def cycle_order(seed: int) -> list[int]:
    """The ordinary tokens in the order ``f`` visits them (a seeded shuffle); the specials go to the first."""
    import random

    order = list(range(FIRST_ORDINARY, VOCAB))
    random.Random(seed).shuffle(order)
    return order


def cycle_map(seed: int) -> list[int]:
    """``f``: one cycle through the ordinary tokens (specials go to the first of it), seeded."""
    order = cycle_order(seed)
    f = list(range(VOCAB))
    for a, b in zip(order, order[1:] + order[:1], strict=True):
        f[a] = b
    for s in range(FIRST_ORDINARY):
        f[s] = order[0]
    return f


DRAFT_PROFILES = ("uniform", "varying", "context")
FIT_TOKENS = 256  # the request length at which a varying draft's engine-wide accept length is fitted (the perf runs')
EXPECTED_TOKENS = (48, 256)  # the request lengths made.json tabulates (the correctness checks', the perf runs')


def walk(f: list[int], right: list[bool], last: int, max_new_tokens: int) -> tuple[int, int]:
    """``(spec_verify_ct, spec_num_correct_drafts)`` of one greedy request (``ignore_eos``) whose prompt ends in
    token ``last``, with ``--speculative-num-steps 2``: the prefill commits ``f(last)``; each verify commits two
    tokens where the draft is right after ``a``, the token before the last committed one (``right[a]``), else one;
    verifies go on until ``max_new_tokens`` are committed, the last one's overshoot trimmed and its correct draft
    still counted (SGLang 0.5.16: 12 requests of 256 tokens with the always-right draft read 128 verify cycles and
    128 correct drafts each, 2026-12-05)."""
    return _walk(f, last, 0, lambda _, a: right[a], max_new_tokens)


def walk_positions(f: list[int], prompt: list[int], right_at: Callable[[int], bool],
                   max_new_tokens: int) -> tuple[int, int]:
    """:func:`walk` for a draft whose first guess depends on the position: ``right_at(i)`` says whether it is right
    at query position ``i`` (the token before the last committed one, counted from the prompt's start)."""
    return _walk(f, prompt[-1], len(prompt) - 1, lambda i, _: right_at(i), max_new_tokens)


def _walk(f: list[int], last: int, start: int, right: Callable[[int, int], bool],
          max_new_tokens: int) -> tuple[int, int]:
    """The verify loop of :func:`walk`: ``right(i, a)`` at position ``i`` holding token ``a`` (from ``start``, the
    prompt's last token ``last``); a right guess commits two tokens and moves two places, a wrong one one."""
    tokens, verify, correct, i, a = 1, 0, 0, start, last
    while tokens < max_new_tokens:
        verify += 1
        if right(i, a):
            correct, tokens, i, a = correct + 1, tokens + 2, i + 2, f[f[a]]
        else:
            tokens, i, a = tokens + 1, i + 1, f[a]
    return verify, correct


def pooled_and_mean(counts: list[tuple[int, int]]) -> tuple[float, float]:
    """SGLang's pooled accept length ``1 + Σ correct / Σ verify`` and the mean of the per-request ``1 + c / v``."""
    pooled = 1.0 + sum(c for _, c in counts) / sum(v for v, _ in counts)
    return pooled, sum(1.0 + c / v for v, c in counts) / len(counts)


def right_tokens(seed: int, quality: float) -> list[bool]:
    """Per token id: is the varying draft's first guess right after it (the module's docstring). Each ordinary
    token at cycle place ``i`` is right when its seeded draw is below ``m + A cos(2 pi i / n)`` (clipped to [0, 1]);
    ``m`` is bisected so that one request from every prompt end, ``FIT_TOKENS`` long, pools to ``1 + quality``."""
    import math
    import random

    order, f = cycle_order(seed), cycle_map(seed)
    rng = random.Random(f"varying-draft-{seed}")
    draws = [rng.random() for _ in order]
    amp = min(quality, 1.0 - quality)
    swing = [amp * math.cos(2 * math.pi * i / len(order)) for i in range(len(order))]

    def rights(offset: float) -> list[bool]:
        out = [False] * VOCAB
        for a, u, w in zip(order, draws, swing, strict=True):
            out[a] = u < min(1.0, max(0.0, offset + w))
        return out

    def pooled(offset: float) -> float:
        r = rights(offset)
        return pooled_and_mean([walk(f, r, a, FIT_TOKENS) for a in order])[0]

    lo, hi = -amp, 1.0 + amp
    for _ in range(24):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if pooled(mid) < 1.0 + quality else (lo, mid)
    best = min((lo, hi), key=lambda m: abs(pooled(m) - 1.0 - quality))
    return rights(best)


def expected(seed: int, right: list[bool]) -> dict[str, object]:
    """What a server of this draft must count: per prompt end (its last token), ``[spec_verify_ct,
    spec_num_correct_drafts]`` at each of ``EXPECTED_TOKENS`` new tokens, and over one request per prompt end the
    pooled accept length (SGLang's engine-wide one), the mean over requests, the lowest and the highest."""
    f, out = cycle_map(seed), {}
    for n in EXPECTED_TOKENS:
        by_last = {a: walk(f, right, a, n) for a in range(FIRST_ORDINARY, VOCAB)}
        pooled, mean = pooled_and_mean(list(by_last.values()))
        each = [1.0 + c / v for v, c in by_last.values()]
        out[str(n)] = {"pooled": round(pooled, 4), "request_mean": round(mean, 4), "lowest": round(min(each), 4),
                       "highest": round(max(each), 4), "by_last_token": {str(a): list(vc) for a, vc in by_last.items()}}
    return out


CONTEXT_SELF_SCORE = 8.0  # S: a key's attention score against its own query (the context draft)
CONTEXT_FIT_STEPS = 300  # Adam steps that give every ordinary token's key the same norm (sd 0.03% after them)


def _rms(x: object) -> object:
    """SGLang's RMSNorm with weight 1 (eps 1e-5), in float32."""
    import torch

    assert isinstance(x, torch.Tensor)
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)


def context_gain(sh: Shape, n_context: int, self_score: float = CONTEXT_SELF_SCORE) -> float:
    """``G``: the head's gain at which the first guess turns wrong at ``n_context`` keys (``G w(n) = 1``)."""
    import math

    sigma = self_score / math.sqrt(sh.head_dim)
    return 1.0 + n_context * math.exp(sigma * sigma / 2) / math.exp(self_score)


def context_weights(emb: object, sh: Shape, f: list[int], n_context: int,
                    self_score: float = CONTEXT_SELF_SCORE) -> dict[str, object]:
    """The context draft's midlayer attention (``midlayer.self_attn.*``) and ``lm_head``, for the target embedding
    ``emb`` (float32, on the device it was drawn on); the module's docstring says how they work."""
    import math

    import torch

    assert isinstance(emb, torch.Tensor)
    H, hd, heads, kv = sh.hidden, sh.head_dim, sh.heads, sh.kv_heads
    if kv * hd > H:
        raise ValueError(f"shape {sh.name}: {kv} KV heads of {hd} exceed the hidden size {H}")
    dev, bf = emb.device, torch.bfloat16
    normed = _rms(emb[FIRST_ORDINARY:]).to(bf).float()
    proj = torch.zeros(kv, hd, H, device=dev)
    for g in range(kv):  # start from the slice itself, then even out the keys' norms over the ordinary tokens
        proj[g, :, g * hd:(g + 1) * hd] = torch.eye(hd, device=dev)
    proj.requires_grad_(True)
    opt = torch.optim.Adam([proj], lr=1e-3)
    for _ in range(CONTEXT_FIT_STEPS):
        norms = (normed @ proj.transpose(1, 2)).pow(2).sum(-1) / hd
        loss = (norms - 1).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    root = math.sqrt(self_score / math.sqrt(hd))  # q . k / sqrt(hd) = S for a key against itself
    qk = (proj.detach() * root).reshape(kv * hd, H)
    gain = context_gain(sh, n_context, self_score)
    q = torch.zeros(heads * hd, 2 * H, device=dev)
    k = torch.zeros(kv * hd, 2 * H, device=dev)
    v = torch.zeros(kv * hd, 2 * H, device=dev)
    o = torch.zeros(H, heads * hd, device=dev)
    per = heads // kv
    k[:, H:] = qk
    v[:, H:H + kv * hd] = torch.eye(kv * hd, device=dev)
    for h in range(heads):
        g = h // per
        q[h * hd:(h + 1) * hd, H:] = qk[g * hd:(g + 1) * hd]
        o[g * hd:(g + 1) * hd, h * hd:(h + 1) * hd] = -gain / per * torch.eye(hd, device=dev)
    low = torch.zeros_like(emb)
    low[:, :kv * hd] = emb[:, :kv * hd]
    order = list(range(FIRST_ORDINARY, VOCAB))  # any fixed pairing: a's wrong guess is the next token's right one
    head = torch.zeros(VOCAB, H, device=dev)
    for a, b in zip(order, order[1:] + order[:1], strict=True):
        head[f[f[a]]] -= low[a]  # right while the head's write outweighs the residual (short contexts)
        head[f[f[b]]] += low[a]  # wrong past it: a guess of the full slice norm
    return {"midlayer.self_attn.q_proj.weight": q.to(bf), "midlayer.self_attn.k_proj.weight": k.to(bf),
            "midlayer.self_attn.v_proj.weight": v.to(bf), "midlayer.self_attn.o_proj.weight": o.to(bf),
            "lm_head.weight": head.to(bf), "gain": gain}


def _rope(x: object, pos: object, head_dim: int, base: float = 10000.0) -> object:
    """Neox-style rotary embedding (SGLang's Llama) of ``x`` (tokens, heads, head_dim) at positions ``pos``."""
    import torch

    assert isinstance(x, torch.Tensor) and isinstance(pos, torch.Tensor)
    half = head_dim // 2
    inv = base ** (-torch.arange(0, half, dtype=torch.float64, device=x.device) * 2 / head_dim)
    ang = pos[:, None].double() * inv[None]
    cos, sin = torch.cos(ang).float()[:, None], torch.sin(ang).float()[:, None]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def context_rights(emb: object, weights: dict[str, object], sh: Shape, f: list[int], tokens: list[int],
                   queries: list[int]) -> list[bool]:
    """Per query position ``i`` (of ``tokens``, a prompt and its greedy continuation): is the draft's first guess
    right, computed as SGLang's EAGLE-3 midlayer computes it from these weights: its input at key ``j`` is
    ``[norm(E[x_j+1]), norm(E[x_j])]``, the query at ``i`` attends causally to keys ``0..i``, and the guess is the
    argmax of ``lm_head . norm(E[x_i] + o_proj(attention))``; right when it is ``f(f(x_i))``."""
    import torch

    assert isinstance(emb, torch.Tensor)
    hd, heads, kv = sh.head_dim, sh.heads, sh.kv_heads
    wq, wk, wv, wo, head = (weights[n].float() for n in (  # type: ignore[union-attr]
        "midlayer.self_attn.q_proj.weight", "midlayer.self_attn.k_proj.weight", "midlayer.self_attn.v_proj.weight",
        "midlayer.self_attn.o_proj.weight", "lm_head.weight"))
    dev = emb.device
    ids = torch.tensor(tokens, device=dev)
    nxt = torch.tensor(tokens[1:] + tokens[-1:], device=dev)
    top = max(queries) + 1
    u = torch.cat([_rms(emb[nxt[:top]]).bfloat16().float(), _rms(emb[ids[:top]]).bfloat16().float()], -1)
    pos = torch.arange(top, device=dev)
    keys = _rope((u @ wk.T).view(top, kv, hd), pos, hd)
    vals = (u @ wv.T).view(top, kv, hd)
    qi = torch.tensor(queries, device=dev)
    q = _rope((u[qi] @ wq.T).view(len(queries), heads, hd), qi, hd)
    kk = keys.repeat_interleave(heads // kv, dim=1)  # (top, heads, hd)
    vv = vals.repeat_interleave(heads // kv, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, kk) / hd ** 0.5
    scores = scores.masked_fill(pos[None, None, :] > qi[None, :, None], float("-inf"))
    att = torch.einsum("hqk,khd->qhd", torch.softmax(scores, -1), vv).reshape(len(queries), heads * hd)
    h = emb[ids[qi]] + att @ wo.T
    guess = (_rms(h) @ head.T).argmax(-1).tolist()
    return [g == f[f[tokens[i]]] for g, i in zip(guess, queries, strict=True)]


def context_prediction(emb: object, weights: dict[str, object], sh: Shape, f: list[int],
                       lengths: tuple[int, ...] = (128, 1024, 2048, 3946)) -> dict[str, object]:
    """Per input length: the pooled accept length (Σ completion / Σ verify, as the context check reads it) that this
    draft gives the context check's own prompts (specwatch's default sweep, each run to its output length)."""
    import sys

    src = str(Path(__file__).resolve().parents[2] / "src")
    if src not in sys.path:  # specwatch from this checkout, installed or not
        sys.path.insert(0, src)
    from specwatch.checks.context_length import SWEEP

    out: dict[str, object] = {}
    for n in lengths:
        verify = completion = 0
        for prompt in SWEEP.ids(n):
            tokens = list(prompt)
            while len(tokens) < n + SWEEP.output_tokens + 2:
                tokens.append(f[tokens[-1]])
            queries = list(range(n - 1, n + SWEEP.output_tokens + 1))
            right = dict(zip(queries, context_rights(emb, weights, sh, f, tokens, queries), strict=True))
            v, _ = walk_positions(f, prompt, lambda i, r=right: r[i], SWEEP.output_tokens)
            verify, completion = verify + v, completion + SWEEP.output_tokens
        out[str(n)] = round(completion / verify, 4)
    return out


def tokenizer_files(dest: Path) -> None:
    """A byte-level BPE of exactly VOCAB tokens, saved for ``AutoTokenizer``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([TRAINING_TEXT], trainer=trainer)
    extra = VOCAB - tok.get_vocab_size()  # the text has fewer merges than the vocab holds: named fillers
    tok.add_tokens([f"<x{i}>" for i in range(extra)])
    if tok.get_vocab_size() != VOCAB:
        raise SystemExit(f"sglang_models: the tokenizer has {tok.get_vocab_size()} tokens, not {VOCAB}")
    tok.save(str(dest / "tokenizer.json"))
    (dest / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "model_max_length": 4096, "add_bos_token": False}, indent=2) + "\n")


def _llama_config(shape: Shape, **extra: object) -> dict[str, object]:
    return {"hidden_size": shape.hidden, "intermediate_size": shape.inter, "num_attention_heads": shape.heads,
            "num_key_value_heads": shape.kv_heads, "head_dim": shape.head_dim, "vocab_size": VOCAB,
            "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
            "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 1, "torch_dtype": "bfloat16",
            "model_type": "llama", **extra}


def target_config(shape: Shape) -> dict[str, object]:
    return _llama_config(shape, architectures=["LlamaForCausalLM"], num_hidden_layers=shape.layers)


def draft_config(shape: Shape) -> dict[str, object]:
    return _llama_config(shape, architectures=["LlamaForCausalLMEagle3"], num_hidden_layers=1,
                         draft_vocab_size=VOCAB, target_hidden_size=shape.hidden)


def params_of(config: dict[str, object], draft: bool = False) -> int:
    """The parameter count a config implies (what the built files hold), without building anything."""
    h, inter, layers = int(config["hidden_size"]), int(config["intermediate_size"]), int(config["num_hidden_layers"])
    heads, kv, hd = int(config["num_attention_heads"]), int(config["num_key_value_heads"]), int(config["head_dim"])
    q_in = 2 * h if draft else h
    layer = q_in * (heads + 2 * kv) * hd + heads * hd * h + 3 * h * inter + 2 * h + (h if draft else 0)
    return 2 * int(config["vocab_size"]) * h + h + layers * layer + (3 * h * h if draft else 0)


def _shards(shape: Shape) -> list[str]:
    n = -(-shape.layers // shape.layers_per_shard)
    return ["model.safetensors"] if n == 1 else [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)]


def _target_files(target: Path, shape: Shape) -> list[Path]:
    return [target / f for f in (*_shards(shape), "config.json", "tokenizer.json")]


def _present(dest: Path, shape: Shape, seed: int, draft_quality: float, draft_profile: str = "uniform",
             target_from: Path | None = None, draft_context: int = 1536) -> dict[str, object] | None:
    """What an earlier run wrote into ``dest``, when it is this plan and every file is there."""
    try:
        made = json.loads((dest / "made.json").read_text())
    except (OSError, ValueError):
        return None
    plan = (made.get("shape", "tiny"), made.get("seed"), made.get("draft_quality"),
            made.get("draft_profile", "uniform"), made.get("target_from"))
    if plan != (shape.name, seed, draft_quality, draft_profile, str(target_from) if target_from else None):
        return None
    if draft_profile == "context" and made.get("draft_context") != draft_context:
        return None
    files = _target_files((target_from or dest) / "target", shape)
    files += [dest / "eagle3" / f for f in ("model.safetensors", "config.json")]
    return made if all(f.is_file() and f.stat().st_size for f in files) else None


def _target_embedding(source: Path, shape: Shape, seed: int, device: str) -> object:
    """The embedding of the target an earlier call made in ``source`` (this shape and seed), read from its files."""
    from safetensors import safe_open

    try:
        made = json.loads((source / "made.json").read_text())
    except (OSError, ValueError):
        raise SystemExit(f"sglang_models: --target-from {source}: no made.json there (make the target first)") from None
    if (made.get("shape", "tiny"), made.get("seed")) != (shape.name, seed):
        raise SystemExit(f"sglang_models: --target-from {source}: made for shape {made.get('shape', 'tiny')} seed "
                         f"{made.get('seed')}, not shape {shape.name} seed {seed}")
    target = source / "target"
    if not all(f.is_file() for f in _target_files(target, shape)):
        raise SystemExit(f"sglang_models: --target-from {source}: the target's files are not all there")
    index = target / "model.safetensors.index.json"
    name = json.loads(index.read_text())["weight_map"]["model.embed_tokens.weight"] if index.exists() else (
        "model.safetensors")
    with safe_open(str(target / name), framework="pt", device=device) as fh:
        return fh.get_tensor("model.embed_tokens.weight").float()


def make(dest: Path, seed: int = 0, draft_quality: float = 1.0, shape: str | Shape = "tiny",
         device: str = "cpu", if_missing: bool = False, draft_profile: str = "uniform",
         target_from: Path | None = None, draft_context: int = 1536) -> dict[str, object]:
    """Write ``dest/target`` and ``dest/eagle3``; returns what was made (the map's seed, the expected accept).
    ``device``: where the random tensors are drawn (``cuda`` for the 8b shape: seconds instead of minutes);
    ``if_missing``: keep what an earlier run wrote for the same plan; ``draft_profile``: ``uniform`` (the
    asked fraction of first guesses right, anywhere) or ``varying`` (right on a set dense in one arc of the cycle
    and sparse in the other, engine-wide ``1 + draft_quality``); ``target_from``: write only the draft, for the
    target an earlier call made there (same shape and seed); ``draft_context``: with ``draft_profile="context"``,
    the number of keys past which the first guess turns wrong."""
    import torch
    from safetensors.torch import save_file

    sh = SHAPES[shape] if isinstance(shape, str) else shape
    if draft_profile not in DRAFT_PROFILES:
        raise ValueError(f"draft_profile {draft_profile!r}: one of {', '.join(DRAFT_PROFILES)}")
    if draft_profile == "context" and draft_context <= 0:
        raise ValueError(f"draft_context {draft_context}: a positive number of tokens")
    if if_missing and (made := _present(dest, sh, seed, draft_quality, draft_profile, target_from,
                                        draft_context)) is not None:
        return {**made, "kept": True}
    t0 = time.monotonic()
    H, bf, dev = sh.hidden, torch.bfloat16, torch.device(device)
    q_out, kv_out = sh.heads * sh.head_dim, sh.kv_heads * sh.head_dim
    g = torch.Generator(device=dev).manual_seed(seed)
    f = cycle_map(seed)
    inv = [0] * VOCAB
    for a in range(FIRST_ORDINARY, VOCAB):
        inv[f[a]] = a
    if target_from is not None:  # the target's own embedding: the draft must read the same E
        emb = _target_embedding(target_from, sh, seed, str(dev))
    else:
        emb = torch.randn(VOCAB, H, generator=g, device=dev)

    def rand(*size: int) -> torch.Tensor:
        return (torch.randn(*size, generator=g, device=dev) * 0.02).to(bf)

    def zeros(*size: int) -> torch.Tensor:
        return torch.zeros(*size, dtype=bf, device=dev)

    def ones(n: int) -> torch.Tensor:
        return torch.ones(n, dtype=bf, device=dev)

    def save(tensors: dict[str, torch.Tensor], path: Path) -> int:
        host = {k: v.contiguous().cpu() for k, v in tensors.items()}  # only bf16 bytes cross to the host
        save_file(host, str(path), metadata={"format": "pt"})
        return sum(v.numel() * v.element_size() for v in host.values())

    tdir = (target_from or dest) / "target"
    if target_from is None:
        tdir.mkdir(parents=True, exist_ok=True)
        (tdir / "model.safetensors.index.json").unlink(missing_ok=True)
        head = emb[inv].clone()  # lm_head[v] = E[f^-1(v)]
        head[:FIRST_ORDINARY] = -emb[:FIRST_ORDINARY]  # specials are never chosen
        shard: dict[str, torch.Tensor] = {"model.embed_tokens.weight": emb.to(bf), "model.norm.weight": ones(H),
                                          "lm_head.weight": head.to(bf)}
        names, weight_map, total = _shards(sh), {}, 0
        for i in range(sh.layers):
            p = f"model.layers.{i}."
            shard.update({
                p + "self_attn.q_proj.weight": rand(q_out, H),
                p + "self_attn.k_proj.weight": rand(kv_out, H),
                p + "self_attn.v_proj.weight": rand(kv_out, H),
                p + "self_attn.o_proj.weight": zeros(H, q_out),
                p + "mlp.gate_proj.weight": rand(sh.inter, H),
                p + "mlp.up_proj.weight": rand(sh.inter, H),
                p + "mlp.down_proj.weight": zeros(H, sh.inter),
                p + "input_layernorm.weight": ones(H),
                p + "post_attention_layernorm.weight": ones(H),
            })
            if (i + 1) % sh.layers_per_shard == 0 or i + 1 == sh.layers:
                name = names[i // sh.layers_per_shard]
                weight_map.update(dict.fromkeys(shard, name))
                total += save(shard, tdir / name)
                shard = {}
        if len(names) > 1:
            (tdir / "model.safetensors.index.json").write_text(json.dumps(
                {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, indent=2) + "\n")
        (tdir / "config.json").write_text(json.dumps(target_config(sh), indent=2) + "\n")
        (tdir / "generation_config.json").write_text(json.dumps({"bos_token_id": 0, "eos_token_id": 1}) + "\n")
        tokenizer_files(tdir)

    two = [inv[inv[v]] if v >= FIRST_ORDINARY else 0 for v in range(VOCAB)]  # f^-2
    dhead = emb[two].clone()  # dhead[f(f(a))] = E[a]: the first guess after a is right
    dhead[:FIRST_ORDINARY] = -emb[:FIRST_ORDINARY]
    right: list[bool] | None = None
    ctx: dict[str, object] = {}
    if draft_profile == "varying":
        right = right_tokens(seed, draft_quality)
        wrong = [a for a in cycle_order(seed) if not right[a]]
        if len(wrong) == 1:  # no other wrong row to move to: E[a] is nowhere, the guess is some other token
            dhead[f[f[wrong[0]]]] = -emb[wrong[0]]
        elif wrong:  # E[a] moves to the row of the previous wrong token: a guess the full norm above the right one
            rows = torch.tensor([f[f[a]] for a in wrong], device=dev)
            dhead[rows] = emb[torch.tensor(wrong[1:] + wrong[:1], device=dev)]
    elif draft_profile == "context":
        ctx = context_weights(emb, sh, f, draft_context)
    elif shuffled := round((1.0 - draft_quality) * (VOCAB - FIRST_ORDINARY)):
        rows = torch.randperm(VOCAB - FIRST_ORDINARY, generator=g, device=dev)[:shuffled] + FIRST_ORDINARY
        dhead[rows] = dhead[rows[torch.randperm(shuffled, generator=g, device=dev)]]
    eye = torch.eye(H, device=dev) / 3
    draft = {
        "embed_tokens.weight": emb.to(bf),
        "fc.weight": torch.cat([eye, eye, eye], dim=1).to(bf),
        "norm.weight": ones(H),
        "lm_head.weight": dhead.to(bf),
        "d2t": torch.zeros(VOCAB, dtype=torch.int64, device=dev),
        "t2d": torch.ones(VOCAB, dtype=torch.bool, device=dev),
        "midlayer.self_attn.q_proj.weight": rand(q_out, 2 * H),
        "midlayer.self_attn.k_proj.weight": rand(kv_out, 2 * H),
        "midlayer.self_attn.v_proj.weight": rand(kv_out, 2 * H),
        "midlayer.self_attn.o_proj.weight": zeros(H, q_out),
        "midlayer.mlp.gate_proj.weight": rand(sh.inter, H),
        "midlayer.mlp.up_proj.weight": rand(sh.inter, H),
        "midlayer.mlp.down_proj.weight": zeros(H, sh.inter),
        "midlayer.input_layernorm.weight": ones(H),
        "midlayer.hidden_norm.weight": ones(H),
        "midlayer.post_attention_layernorm.weight": ones(H),
    }
    draft.update({k: v for k, v in ctx.items() if k != "gain"})  # type: ignore[misc]
    ddir = dest / "eagle3"
    ddir.mkdir(parents=True, exist_ok=True)
    save(draft, ddir / "model.safetensors")
    (ddir / "config.json").write_text(json.dumps(draft_config(sh), indent=2) + "\n")
    made: dict[str, object] = {"seed": seed, "draft_quality": draft_quality,
                               "expected_accept_length_steps2": 1.0 + draft_quality, "target": str(tdir),
                               "draft": str(ddir)}
    if right is not None:
        table = expected(seed, right)
        made.update(draft_profile=draft_profile, right_tokens=[a for a in range(VOCAB) if right[a]], expected=table,
                    expected_accept_length_steps2=table[str(FIT_TOKENS)]["pooled"])  # type: ignore[index]
    if ctx:
        made.update(draft_profile=draft_profile, draft_context=draft_context, self_score=CONTEXT_SELF_SCORE,
                    gain=round(float(ctx["gain"]), 6),  # type: ignore[arg-type]
                    predicted_context_accept=context_prediction(emb, draft, sh, f))
    if target_from is not None:
        made.update(target_from=str(target_from))
    if sh.name != "tiny":  # the tiny plan's made.json as it always was
        made.update(shape=sh.name, device=str(dev), target_params=params_of(target_config(sh)),
                    draft_params=params_of(draft_config(sh), draft=True), seconds=round(time.monotonic() - t0, 1))
    (dest / "made.json").write_text(json.dumps(made, indent=2, sort_keys=True) + "\n")
    return made


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="sglang_models.py", description=__doc__.splitlines()[0])
    ap.add_argument("dest")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="tiny",
                    help="tiny (default: 8 layers, hidden 256) or 8b (Llama-3.1-8B's sizes, 13 GiB: use a GPU)")
    ap.add_argument("--device", default="auto",
                    help="where the random tensors are drawn: auto (cuda when torch sees a GPU, else cpu), cpu, cuda")
    ap.add_argument("--if-missing", action="store_true",
                    help="keep what an earlier run wrote into DEST for the same plan (shape, seed, draft profile and "
                         "quality, target source)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--draft-quality", type=float, default=1.0,
                    help="fraction of first draft guesses that are right (default 1: accept length 2.00); with "
                         "--draft-profile varying, the engine-wide accept length minus one")
    ap.add_argument("--draft-profile", choices=DRAFT_PROFILES, default="uniform",
                    help="uniform (default: right anywhere at that fraction), varying (right on a set dense in one "
                         "arc of the token cycle and sparse in the other: accept length varies by prompt and position) "
                         "or context (right for contexts shorter than --draft-context, wrong past it)")
    ap.add_argument("--draft-context", type=int, default=1536, metavar="N",
                    help="with --draft-profile context: the keys (input and output tokens) past which the first "
                         "guess turns wrong (default 1536)")
    ap.add_argument("--target-from", type=Path, default=None, metavar="DIR",
                    help="write only the draft, for the target an earlier call made in DIR (same shape and seed)")
    a = ap.parse_args(argv)
    if not 0.0 <= a.draft_quality <= 1.0:
        ap.error("--draft-quality: a fraction from 0 to 1")
    device = a.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    if a.draft_context <= 0:
        ap.error("--draft-context: a positive number of tokens")
    made = make(Path(a.dest), a.seed, a.draft_quality, a.shape, device, a.if_missing, a.draft_profile, a.target_from,
                a.draft_context)
    shown = {k: v for k, v in made.items() if k not in ("right_tokens", "expected")}
    if isinstance(table := made.get("expected"), dict):  # the means, not the per-token tables
        shown["expected"] = {n: {k: v for k, v in t.items() if k != "by_last_token"} for n, t in table.items()}
    print(json.dumps(shown, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
