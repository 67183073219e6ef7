"""The reference transformer: RMSNorm, rotary positions, multi-head attention over a static KV cache,
SwiGLU MLP, Megatron tensor parallelism.

Weights are random from the preset's seed, generated in full on the CPU with a ``torch.Generator``
(the same on every rank and device), scaled, then sliced for this tensor-parallel rank, cast and
moved. A ``weights_on_device`` preset (ref-large) is generated on the serving device instead, one
layer at a time (the same on every rank of one GPU model). Layers at or beyond
``preset.tail_from`` (the realistic draft depth) have their output projections scaled by
``preset.tail_scale``, which sets how often the early-exit draft (first layers + final norm + shared
LM head) agrees with the full target.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from specwatch.refserver.kvcache import KVCache
from specwatch.refserver.preset import Preset
from specwatch.refserver.tokenizer import EOS_ID

LOGIT_SCALE = 3.0  # head init scale; larger gives larger logit margins
KEEP_CPU_WEIGHTS = False  # benchmarks set True to reuse the full CPU weights across engines in one process
_CPU_WEIGHTS: dict[tuple, dict] = {}


def _generate(p: Preset, device: str | torch.device) -> Iterator[torch.Tensor | tuple[torch.Tensor, ...]]:
    """Preset ``p``'s float32 weights from its seed, made on ``device`` one piece at a time: the
    embedding, then one 7-tuple per layer (wq, wk, wv, wo, wgate, wup, wdown), then the LM head."""
    g = torch.Generator(device=device).manual_seed(p.seed)
    d, hd, ff = p.d_model, p.head_dim, p.d_ff

    def randn(*shape: int, std: float) -> torch.Tensor:
        return torch.randn(*shape, generator=g, device=device) * std

    yield randn(p.vocab_size, d, std=1.0)
    for i in range(p.n_layers):
        scale = 1.0 if i < p.tail_from else p.tail_scale
        wq, wk, wv = (randn(d, p.n_heads * hd, std=1 / math.sqrt(d)) for _ in range(3))
        wo = randn(p.n_heads * hd, d, std=1 / math.sqrt(d)) * scale
        wgate, wup = (randn(d, ff, std=1 / math.sqrt(d)) for _ in range(2))
        wdown = randn(ff, d, std=1 / math.sqrt(ff)) * scale
        yield wq, wk, wv, wo, wgate, wup, wdown
    yield randn(d, p.vocab_size, std=LOGIT_SCALE / math.sqrt(d))


def full_weights(p: Preset) -> dict:
    """The unsharded float32 CPU weights of preset ``p``, from its seed (identical on every rank/device)."""
    key = (p.seed, p.n_layers, p.d_model, p.n_heads, p.d_ff, p.vocab_size, p.tail_from, p.tail_scale)
    if key in _CPU_WEIGHTS:
        return _CPU_WEIGHTS[key]
    parts = list(_generate(p, "cpu"))
    out = {"embed": parts[0], "layers": parts[1:-1], "head": parts[-1]}
    if KEEP_CPU_WEIGHTS:
        _CPU_WEIGHTS[key] = out
    return out


def weight_parts(p: Preset, device: torch.device) -> Iterator[torch.Tensor | tuple[torch.Tensor, ...]]:
    """The pieces of :func:`_generate` in order: made on ``device`` for a ``weights_on_device`` preset
    served on an accelerator (one layer in memory at a time), else from the CPU weights."""
    if p.weights_on_device and device.type != "cpu":
        return _generate(p, device)
    full = full_weights(p)
    return iter([full["embed"], *full["layers"], full["head"]])


class _Layer:
    """One decoder layer's weights (this rank's shard)."""

    def __init__(self, wqkv: torch.Tensor, wo: torch.Tensor, wgu: torch.Tensor, wdown: torch.Tensor,
                 attn_norm: torch.Tensor, mlp_norm: torch.Tensor) -> None:
        self.wqkv, self.wo, self.wgu, self.wdown = wqkv, wo, wgu, wdown
        self.attn_norm, self.mlp_norm = attn_norm, mlp_norm


def _rms_norm(x: torch.Tensor, w: torch.Tensor, dtype: torch.dtype, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm of the float32 residual ``x``, returned in the compute ``dtype``."""
    return F.rms_norm(x, (x.shape[-1],), w, eps).to(dtype)


class RefModel:
    """Random-weight decoder-only transformer with a KV cache, sharded over ``tp_size`` ranks."""

    def __init__(self, preset: Preset, *, device: str | torch.device, dtype: torch.dtype, num_slots: int,
                 max_ctx: int, tp_rank: int = 0, tp_size: int = 1, tp_group=None) -> None:
        p = preset
        if p.n_heads % tp_size or p.d_ff % tp_size:
            raise ValueError(f"{p.name}: heads ({p.n_heads}) and ffn ({p.d_ff}) must divide by tp_size {tp_size}")
        self.preset, self.device, self.dtype = p, torch.device(device), dtype
        self.tp_rank, self.tp_size, self.tp_group = tp_rank, tp_size, tp_group
        self.max_ctx = max_ctx
        self.heads = p.n_heads // tp_size
        self.head_dim = p.head_dim
        self._build_weights()
        self._build_rope()
        self.kv = KVCache(p.n_layers, num_slots, max_ctx, self.heads, self.head_dim, dtype, self.device)
        bias = torch.full((p.vocab_size,), float("-inf"))
        bias[:256] = 0.0
        bias[EOS_ID] = 0.0
        self.logit_bias = bias.to(self.device)  # only bytes and EOS can be generated
        self._arange_ctx = torch.arange(max_ctx, device=self.device)

    # ---- construction -------------------------------------------------------------------------
    def _build_weights(self) -> None:
        p, r, n = self.preset, self.tp_rank, self.tp_size
        hd, hl, ffl = p.head_dim, self.heads, p.d_ff // n
        parts = weight_parts(p, self.device)

        def put(t: torch.Tensor) -> torch.Tensor:
            return t.to(dtype=self.dtype).contiguous().to(self.device)

        embed = next(parts)
        assert isinstance(embed, torch.Tensor)  # weight_parts: the embedding, a tuple per layer, the head
        self.embed = embed.to(self.device)  # float32: the residual stream is float32
        self.layers: list[_Layer] = []
        for _ in range(p.n_layers):
            wq, wk, wv, wo, wgate, wup, wdown = next(parts)
            cols = slice(r * hl * hd, (r + 1) * hl * hd)
            fcols = slice(r * ffl, (r + 1) * ffl)
            self.layers.append(_Layer(
                wqkv=put(torch.cat([wq[:, cols], wk[:, cols], wv[:, cols]], dim=1)),
                wo=put(wo[cols]),
                wgu=put(torch.cat([wgate[:, fcols], wup[:, fcols]], dim=1)),
                wdown=put(wdown[fcols]),
                attn_norm=torch.ones(p.d_model, device=self.device),
                mlp_norm=torch.ones(p.d_model, device=self.device),
            ))
            del wq, wk, wv, wo, wgate, wup, wdown
        self.final_norm = torch.ones(p.d_model, device=self.device)
        head = next(parts)
        assert isinstance(head, torch.Tensor)
        self.head = put(head)

    def _build_rope(self) -> None:
        half = self.head_dim // 2
        inv = 1.0 / (self.preset.rope_theta ** (torch.arange(half, dtype=torch.float64) / half))
        ang = torch.arange(self.max_ctx, dtype=torch.float64)[:, None] * inv[None, :]
        cos = torch.cat([ang.cos(), ang.cos()], dim=-1)  # rotate-half layout: x*cos + roll(x)*sin
        sin = torch.cat([-ang.sin(), ang.sin()], dim=-1)
        one, zero = torch.ones_like(cos), torch.zeros_like(sin)
        self.cos3 = torch.stack([cos, cos, one], dim=1)[:, :, None].to(self.dtype).to(self.device)
        self.sin3 = torch.stack([sin, sin, zero], dim=1)[:, :, None].to(self.dtype).to(self.device)

    # ---- forward --------------------------------------------------------------------------------
    def _all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        if self.tp_size > 1:
            torch.distributed.all_reduce(x, group=self.tp_group)
        return x

    def forward(self, tokens: torch.Tensor, start_pos: torch.Tensor, slots: torch.Tensor, *,
                n_layers: int | None = None, ctx_len: int | None = None,
                logit_idx: torch.Tensor | None = None) -> torch.Tensor:
        """Logits [B, T, V] (float32) for ``tokens`` [B, T] placed at ``start_pos`` [B] + 0..T-1.

        Writes K/V of the first ``n_layers`` layers (default all) into ``slots`` [B] and attends over
        the first ``ctx_len`` cache positions (default all: the static shape CUDA graphs need).
        ``logit_idx`` [B] keeps only that position per row (prefill), giving [B, 1, V]. The residual
        stream is float32; matmuls run in the model dtype.
        """
        nl = self.preset.n_layers if n_layers is None else n_layers
        length = self.max_ctx if ctx_len is None else min(ctx_len, self.max_ctx)
        b, t = tokens.shape
        hl, hd, dt = self.heads, self.head_dim, self.dtype
        pos = start_pos[:, None] + torch.arange(t, device=tokens.device)[None, :]  # [B, T]
        cos, sin = self.cos3[pos], self.sin3[pos]  # [B, T, 3, 1, D]: rotary on q and k, identity on v
        mask = (self._arange_ctx[:length][None, None, :] <= pos[:, :, None])[:, None]  # [B, 1, T, L]
        w_idx = self.kv.write_index(slots, pos)
        r_idx = self.kv.read_index(slots, length)
        x = self.embed[tokens].float()
        for i in range(nl):
            w = self.layers[i]
            qkv = (_rms_norm(x, w.attn_norm, dt) @ w.wqkv).view(b, t, 3, hl, hd)
            qkv = torch.addcmul(qkv * cos, qkv.roll(hd // 2, dims=-1), sin)
            self.kv.write(i, w_idx, qkv[:, :, 1:])
            kc, vc = self.kv.read(i, r_idx, b)
            a = F.scaled_dot_product_attention(qkv[:, :, 0].transpose(1, 2), kc.transpose(1, 2),
                                               vc.transpose(1, 2), attn_mask=mask)
            x = x + self._all_reduce(a.transpose(1, 2).reshape(b, t, hl * hd) @ w.wo)
            gate, up = (_rms_norm(x, w.mlp_norm, dt) @ w.wgu).chunk(2, dim=-1)
            x = x + self._all_reduce((F.silu(gate) * up) @ w.wdown)
        if logit_idx is not None:
            x = x[torch.arange(b, device=x.device), logit_idx][:, None]
        return (_rms_norm(x, self.final_norm, dt) @ self.head).float() + self.logit_bias
