"""The 8B shape of the real-SGLang validation models (docs/validation/sglang_models.py --shape 8b): its config is
Llama-3.1-8B's sizes with the tiny plan's vocabulary (6.98 B parameters, counted from the config, never built
here), and the code path that builds it (sharded, GQA, ``--if-missing``) writes loadable files, checked on the
tiny shape and on a small sharded GQA shape on CPU; the harness scenarios that boot it are wired as planned."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")
pytest.importorskip("tokenizers")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "validation"))
import sglang_models  # noqa: E402 (docs/validation is not a package)

#: a small shape that takes the 8B path's branches: several shards, fewer KV heads than heads, head_dim != hidden/heads
MINI = sglang_models.Shape("mini", layers=6, hidden=64, heads=4, kv_heads=2, head_dim=32, inter=96,
                           layers_per_shard=4)


def _rms(x: torch.Tensor) -> torch.Tensor:
    return x / x.pow(2).mean(-1, keepdim=True).sqrt()


def test_the_8b_plan_is_llama_3_1_8b_sized_with_the_tiny_vocabulary() -> None:
    shape = sglang_models.SHAPES["8b"]
    c = sglang_models.target_config(shape)
    assert (c["num_hidden_layers"], c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"],
            c["head_dim"], c["intermediate_size"], c["vocab_size"]) == (32, 4096, 32, 8, 128, 14336, 512)
    assert c["architectures"] == ["LlamaForCausalLM"] and c["torch_dtype"] == "bfloat16"
    params = sglang_models.params_of(c)
    assert params == pytest.approx(6.98e9, rel=0.002)
    assert params * 2 / 2**30 == pytest.approx(13.0, abs=0.1)  # GiB in bf16
    d = sglang_models.draft_config(shape)
    assert (d["architectures"], d["num_hidden_layers"], d["hidden_size"], d["target_hidden_size"],
            d["draft_vocab_size"], d["num_key_value_heads"]) == (["LlamaForCausalLMEagle3"], 1, 4096, 4096, 512, 8)
    assert shape.aux_layers() == (2, 16, 29)  # distinct, so the three aux states are three reads of the embedding
    assert sglang_models.SHAPES["tiny"].aux_layers() == (2, 4, 5)


def test_the_tiny_shape_counts_what_it_writes_and_is_kept_if_present(tmp_path: Path) -> None:
    made = sglang_models.make(tmp_path, shape="tiny", device="cpu")
    t = safetensors_torch.load_file(str(tmp_path / "target" / "model.safetensors"))
    d = safetensors_torch.load_file(str(tmp_path / "eagle3" / "model.safetensors"))
    tiny = sglang_models.SHAPES["tiny"]
    assert sum(v.numel() for v in t.values()) == sglang_models.params_of(sglang_models.target_config(tiny))
    assert sum(v.numel() for k, v in d.items() if k not in ("d2t", "t2d")) == sglang_models.params_of(
        sglang_models.draft_config(tiny), draft=True)
    assert "shape" not in made and not (tmp_path / "target" / "model.safetensors.index.json").exists()
    stamp = (tmp_path / "target" / "model.safetensors").stat().st_mtime_ns
    again = sglang_models.make(tmp_path, shape="tiny", device="cpu", if_missing=True)
    assert again["kept"] and (tmp_path / "target" / "model.safetensors").stat().st_mtime_ns == stamp
    other = sglang_models.make(tmp_path, seed=1, shape="tiny", device="cpu", if_missing=True)  # another plan: made
    assert "kept" not in other and other["seed"] == 1


def test_a_sharded_gqa_shape_keeps_the_plan(tmp_path: Path) -> None:
    made = sglang_models.make(tmp_path, seed=5, shape=MINI, device="cpu")
    assert made["shape"] == "mini" and made["target_params"] == sglang_models.params_of(
        sglang_models.target_config(MINI))
    index = json.loads((tmp_path / "target" / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert files == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    t: dict[str, torch.Tensor] = {}
    for name in files:
        part = safetensors_torch.load_file(str(tmp_path / "target" / name))
        assert all(index["weight_map"][k] == name for k in part)
        t.update(part)
    assert set(t) == set(index["weight_map"])
    assert sum(v.numel() for v in t.values()) == made["target_params"]
    assert t["model.layers.5.self_attn.k_proj.weight"].shape == (2 * 32, 64)
    assert t["model.layers.5.self_attn.o_proj.weight"].shape == (64, 4 * 32)
    assert not t["model.layers.5.self_attn.o_proj.weight"].any() and not t["model.layers.0.mlp.down_proj.weight"].any()
    d = safetensors_torch.load_file(str(tmp_path / "eagle3" / "model.safetensors"))
    assert d["midlayer.self_attn.q_proj.weight"].shape == (4 * 32, 2 * 64)
    assert d["midlayer.self_attn.v_proj.weight"].shape == (2 * 32, 2 * 64)
    assert d["fc.weight"].shape == (64, 3 * 64)
    f = sglang_models.cycle_map(5)
    ordinary = torch.arange(sglang_models.FIRST_ORDINARY, sglang_models.VOCAB)
    emb = t["model.embed_tokens.weight"].float()[ordinary]
    assert (_rms(emb) @ t["lm_head.weight"].float().T).argmax(-1).tolist() == [f[int(x)] for x in ordinary]
    guess = (_rms(torch.cat([emb] * 3, -1) @ d["fc.weight"].float().T) @ d["lm_head.weight"].float().T).argmax(-1)
    assert guess.tolist() == [f[f[int(x)]] for x in ordinary]


def test_the_command_line_takes_a_shape_and_if_missing(tmp_path: Path) -> None:
    script = str(ROOT / "docs" / "validation" / "sglang_models.py")
    out = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True, check=True).stdout
    assert "--shape {8b,tiny}" in out and "--if-missing" in out
    bad = subprocess.run([sys.executable, script, str(tmp_path), "--shape", "70b"], capture_output=True, text=True,
                         check=False)
    assert bad.returncode == 2 and "invalid choice: '70b'" in bad.stderr


def test_the_8b_scenarios_build_the_shape_and_record_where_the_drift_reads() -> None:
    """sglang-8b-x1: models at the 8b shape, an A/A ab whose measurements record into the run's baselines, the
    kept in /tmp for sglang-8b-ab-x1 (which reads them there), then the slowed drift judged against them."""
    import harness  # docs/validation is on sys.path (above)

    run = harness.DATA / "zz-test-8b"
    a = [i for st in harness.plan_for("sglang-8b-x1", dict(harness.SETTINGS), run).stages for ln in st for i in ln]
    names = [i.name for i in a]
    assert names == ["sglang-setup", "sgl8b-models", "round-spread", "sgl8b-ab-same", "keep-baselines",
                     "sgl8b-drift-slow8"]
    models, ab, drift = a[1].argv, a[3].argv, a[5].argv
    assert models[-3:] == ["8b", "/tmp/sgl/models8b", "--if-missing"] and "--shape" in models
    rest = ab[ab.index("--") + 1:]
    scratch = f"--specwatch-baseline-dir={run.relative_to(ROOT)}/baselines"
    assert scratch in rest and "--update-baselines" in rest
    assert ab[ab.index("--round-history") + 1] == "docs/validation/sglang/baselines"
    assert ab[ab.index("--base-profile") + 1] == ab[ab.index("--head-profile") + 1] == harness.SGL8B_BASE
    assert scratch in drift and f"--specwatch-profiles={harness.SGL8B_SLOW8}" in drift
    b = [i for st in harness.plan_for("sglang-8b-ab-x1", dict(harness.SETTINGS), run).stages for ln in st for i in ln]
    ab_b = b[2].argv
    assert "--resume" in ab_b and ab_b[ab_b.index("--max-rounds") + 1] == "3"
    assert ab_b[ab_b.index("--head-profile") + 1] == "docs/validation/sglang/eagle3-8b-slow3.toml"
    healthy = b[3].steps[0].argv
    assert "--specwatch-baseline-dir=/tmp/sgl8b-baselines" in healthy and b[3].limit == 1
