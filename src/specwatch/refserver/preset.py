"""Model presets: the values of ``--model-path`` that the reference server understands.

A preset fixes the shape, the weight seed, the context length and how well the draft agrees with
the target. The draft is self-speculative: the target's first ``draft_layers`` layers, then the
target's final norm and its (shared) LM head. Layers at or beyond the draft depth add to the
residual stream with the factor ``tail_scale``, so a small ``tail_scale`` makes the early-exit
draft agree often with the full target, a large one rarely. A "perfect" preset uses the whole
target as the draft, so every draft token is accepted.

| preset | layers x width | heads | ffn | ctx | draft layers | tail scale | accept len, steps 2 / 3 |
|---|---|---|---|---|---|---|---|
| ref-tiny | 4 x 128 | 4 | 384 | 1024 | 1 | 0.35 | 1.96 / 2.16 |
| ref-tiny-perfect | 4 x 128 | 4 | 384 | 1024 | 4 (= target) | 0.35 | 3.00 / 4.00 (exact) |
| ref-tiny-poor | 4 x 128 | 4 | 384 | 1024 | 1 | 3.0 | 1.04 / 1.04 |
| ref-small | 16 x 1024 | 16 | 2816 | 1024 | 1 | 0.08 | 2.42 / 2.91 |
| ref-small-perfect | 16 x 1024 | 16 | 2816 | 1024 | 16 (= target) | 0.08 | 3 / 4 (f32 exact; bf16 ~3.98) |
| ref-small-poor | 16 x 1024 | 16 | 2816 | 1024 | 1 | 1.0 | 1.01 / 1.01 |
| ref-large | 32 x 6144 | 48 | 16384 | 1024 | 1 | 0.045 | 2.35 (H200, bf16) / - |
| ref-large-perfect | 32 x 6144 | 48 | 16384 | 1024 | 32 (= target) | 0.045 | 3.00 (H200, bf16) / - |
| ref-large-poor | 32 x 6144 | 48 | 16384 | 1024 | 1 | 0.7 | 1.04 (H200, bf16) / - |

``ref-large`` (14.5 B parameters, 29 GB in bfloat16) is for GPUs only. Its decode step is bound by
memory bandwidth: 9.7 ms as a CUDA graph on an H200 (31 ms eager), like the case study's 12 ms
step on a 70 B model over 8 GPUs: the server spends most of a cycle on the GPU, as a real one does,
and little in Python, where a shared machine's noise lives (docs/validation/, section 7). Its
weights are generated on the target device (``weights_on_device``), one layer at a time, so it
boots in seconds; they are identical on every rank of one GPU model, not between a CPU and a GPU.

A "-perfect" preset has the same target model as the plain (realistic) one, so greedy outputs of
the two are identical. Accept lengths: greedy, float32 on CPU, 8 prompts (64 new tokens for tiny,
32 for small), mean over verify cycles, bonus token included, raw before any trim; measured with
``python benchmarks/refserver_steps.py --calibrate [--calibrate-presets ...]``. They depend on the
prompts (a greedy random model that falls into a repetition loop is easy to draft), so treat them as
+-0.3. In bfloat16 on a GPU the float32-exact "perfect" acceptance can miss by an argmax flip now and
then (measured 3.979 instead of 4 for num_steps=3 on an H200). ``MEASURED_ACCEPT_LEN`` holds the
numbers; tests/refserver/test_engine.py checks the tiny ones.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from specwatch.refserver.tokenizer import VOCAB_SIZE


@dataclass(frozen=True)
class Preset:
    """Shape, seed and draft quality of one reference model."""

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    d_ff: int
    context_len: int
    seed: int
    draft_layers: int  # depth of the early-exit draft; == n_layers means the draft is the target
    tail_scale: float  # residual factor of the layers at or beyond tail_from
    tail_from: int  # first scaled layer: the realistic draft depth (so all quality variants of a family
    # with the same tail_scale share one target model)
    quality: str  # "realistic" | "perfect" | "poor"
    weights_on_device: bool = False  # generate the weights on the serving device (big presets)
    vocab_size: int = VOCAB_SIZE
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.d_model // self.n_heads

    @property
    def draft_is_target(self) -> bool:
        """True when the draft runs every target layer (every draft token is accepted)."""
        return self.draft_layers >= self.n_layers


def _family(base: str, n_layers: int, d_model: int, n_heads: int, d_ff: int, ctx: int, seed: int,
            draft_layers: int, realistic: float, poor: float, on_device: bool = False) -> dict[str, Preset]:
    preset = functools.partial(Preset, n_layers=n_layers, d_model=d_model, n_heads=n_heads, d_ff=d_ff,
                               context_len=ctx, seed=seed, tail_from=draft_layers, weights_on_device=on_device)
    return {
        base: preset(base, draft_layers=draft_layers, tail_scale=realistic, quality="realistic"),
        # the same target as the realistic preset, drafted by the whole target
        f"{base}-perfect": preset(f"{base}-perfect", draft_layers=n_layers, tail_scale=realistic,
                                  quality="perfect"),
        f"{base}-poor": preset(f"{base}-poor", draft_layers=draft_layers, tail_scale=poor, quality="poor"),
    }


# tail_scale values calibrated with benchmarks/refserver_steps.py --calibrate (see MEASURED_ACCEPT_LEN).
PRESETS: dict[str, Preset] = {
    **_family("ref-tiny", 4, 128, 4, 384, 1024, 1234, 1, realistic=0.35, poor=3.0),
    **_family("ref-small", 16, 1024, 16, 2816, 1024, 4321, 1, realistic=0.08, poor=1.0),
    **_family("ref-large", 32, 6144, 48, 16384, 1024, 8765, 1, realistic=0.045, poor=0.7, on_device=True),
}

# Mean accept length per verify cycle (greedy, CPU float32), keyed by (preset, num_steps).
MEASURED_ACCEPT_LEN: dict[tuple[str, int], float] = {
    ("ref-tiny", 2): 1.961, ("ref-tiny", 3): 2.162,
    ("ref-tiny-perfect", 2): 3.0, ("ref-tiny-perfect", 3): 4.0,
    ("ref-tiny-poor", 2): 1.039, ("ref-tiny-poor", 3): 1.039,
    ("ref-small", 2): 2.418, ("ref-small", 3): 2.91,  # tail 0.08 (0.15: 1.77/1.86, too low to pay off on the H200)
    ("ref-small-perfect", 2): 3.0, ("ref-small-perfect", 3): 4.0,
    ("ref-small-poor", 2): 1.008, ("ref-small-poor", 3): 1.008,
    # ref-large: bfloat16 on an H200, one prompt, 128 new tokens (docs/validation/, section 7)
    ("ref-large", 2): 2.35, ("ref-large-perfect", 2): 3.0, ("ref-large-poor", 2): 1.04,
}


def get_preset(name: str) -> Preset:
    """The preset called ``name`` (a trailing slash or directory prefix is ignored)."""
    key = name.rstrip("/").rsplit("/", 1)[-1]
    if key not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}; known: {', '.join(sorted(PRESETS))}")
    return PRESETS[key]
