"""Static KV cache: one [slots + 1, max_ctx, 2, heads_local, head_dim] buffer per layer (K and V).

The buffers never move, so CUDA graphs that read and write them can be replayed. A request owns one
slot; how many positions of it are valid is kept by the engine (``kv_len``), so rolling back
rejected draft positions is setting that length back: stale positions beyond it are masked out by
attention and overwritten by the next write. The last slot is a scratch slot for padded batch rows.
Reads and writes go through the flat view [(slots + 1) * max_ctx, 2, H, D] with one index kernel each.
"""

from __future__ import annotations

import torch


class KVCache:
    """K and V of ``n_layers`` layers for ``num_slots`` request slots plus one scratch slot."""

    def __init__(self, n_layers: int, num_slots: int, max_ctx: int, heads: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device | str) -> None:
        shape = (num_slots + 1, max_ctx, 2, heads, head_dim)
        self.buf = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.flat = [b.view(-1, 2, heads, head_dim) for b in self.buf]
        self.num_slots = num_slots
        self.scratch_slot = num_slots
        self.max_ctx = max_ctx

    def keys(self, layer: int) -> torch.Tensor:
        """K of one layer, a view [slots + 1, max_ctx, H, D]."""
        return self.buf[layer][:, :, 0]

    def values(self, layer: int) -> torch.Tensor:
        """V of one layer, a view [slots + 1, max_ctx, H, D]."""
        return self.buf[layer][:, :, 1]

    def write_index(self, slots: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Flat row index [B * T] of ``positions`` [B, T] in ``slots`` [B]."""
        return (slots[:, None] * self.max_ctx + positions).reshape(-1)

    def read_index(self, slots: torch.Tensor, length: int) -> torch.Tensor:
        """Flat row index [B * length] of the first ``length`` positions of ``slots`` [B]."""
        ar = torch.arange(length, device=slots.device)
        return (slots[:, None] * self.max_ctx + ar[None, :]).reshape(-1)

    def write(self, layer: int, index: torch.Tensor, kv: torch.Tensor) -> None:
        """Store kv [B, T, 2, H, D] at the flat rows ``index`` [B * T]."""
        self.flat[layer].index_copy_(0, index, kv.reshape(-1, *kv.shape[2:]))

    def read(self, layer: int, index: torch.Tensor, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V [B, L, H, D] (views of one gathered copy) at the flat rows ``index`` [B * L]."""
        g = self.flat[layer].index_select(0, index)
        g = g.view(batch, -1, *g.shape[1:])
        return g[:, :, 0], g[:, :, 1]

    def zero_(self) -> None:
        """Clear every buffer."""
        for b in self.buf:
            b.zero_()

    def nbytes(self) -> int:
        """Bytes held by all buffers."""
        return sum(b.numel() * b.element_size() for b in self.buf)
