"""Presets and weight generation: ref-large's shape and its on-device weight stream."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")

from specwatch.refserver import model as ref_model  # noqa: E402
from specwatch.refserver.preset import PRESETS, get_preset  # noqa: E402


def test_ref_large_is_a_gpu_bound_family_sharing_one_target() -> None:
    """ref-large: 32 x 6144 (about 14.5 B parameters), weights made on the device, TP=2 and 8 divide it,
    and its perfect / poor members share the realistic member's seed and shape."""
    p = get_preset("ref-large")
    per_layer = 4 * p.d_model * p.n_heads * p.head_dim + 3 * p.d_model * p.d_ff
    assert 14.0e9 < p.n_layers * per_layer < 15.0e9
    assert p.weights_on_device and not get_preset("ref-small").weights_on_device
    for tp in (2, 4, 8):
        assert p.n_heads % tp == 0 and p.d_ff % tp == 0
    for member in ("ref-large-perfect", "ref-large-poor"):
        q = PRESETS[member]
        assert (q.seed, q.n_layers, q.d_model, q.d_ff, q.tail_from) == (p.seed, p.n_layers, p.d_model, p.d_ff,
                                                                        p.tail_from)
        assert q.weights_on_device
    assert PRESETS["ref-large-perfect"].draft_is_target


def _tiny_on_device() -> ref_model.Preset:
    return dataclasses.replace(get_preset("ref-tiny"), name="tiny-on-device", weights_on_device=True)


def test_weight_stream_is_the_cpu_weights_in_generation_order() -> None:
    """The piecewise generator yields exactly the cached CPU weights: embedding, layers, head."""
    p = get_preset("ref-tiny")
    full = ref_model.full_weights(p)
    parts = list(ref_model.weight_parts(p, torch.device("cpu")))
    assert len(parts) == p.n_layers + 2
    assert torch.equal(parts[0], full["embed"]) and torch.equal(parts[-1], full["head"])
    for got, want in zip(parts[1:-1], full["layers"], strict=True):
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    fresh = list(ref_model._generate(p, "cpu"))
    assert torch.equal(fresh[3][6], full["layers"][2][6])


def test_on_device_preset_served_on_cpu_uses_the_cpu_weights_and_shards_like_them() -> None:
    """On a CPU, a weights_on_device preset falls back to the CPU weights; its TP shards re-form them."""
    p = _tiny_on_device()
    base = ref_model.RefModel(get_preset("ref-tiny"), device="cpu", dtype=torch.float32, num_slots=1, max_ctx=16)
    same = ref_model.RefModel(p, device="cpu", dtype=torch.float32, num_slots=1, max_ctx=16)
    assert torch.equal(base.layers[1].wdown, same.layers[1].wdown) and torch.equal(base.head, same.head)
    shards = [ref_model.RefModel(p, device="cpu", dtype=torch.float32, num_slots=1, max_ctx=16, tp_rank=r,
                                 tp_size=2) for r in range(2)]
    assert torch.equal(torch.cat([s.layers[0].wdown for s in shards]), base.layers[0].wdown)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: the on-device generator")
def test_on_device_weights_are_the_same_on_every_build() -> None:
    """Two builds on one GPU (as two TP ranks of one GPU model would) generate identical weights."""
    p = _tiny_on_device()
    a = list(ref_model.weight_parts(p, torch.device("cuda")))
    b = list(ref_model.weight_parts(p, torch.device("cuda")))
    assert a[0].is_cuda and torch.equal(a[0], b[0]) and torch.equal(a[2][4], b[2][4])
