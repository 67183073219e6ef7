"""The real-SGLang validation models (docs/validation/sglang_models.py) keep their plan: the target's greedy
next token is its cycle map, and the EAGLE-3 draft's first guess is right for the asked fraction of tokens,
computed here from the saved weights as SGLang's Llama and LlamaForCausalLMEagle3 compute them (the layers'
output projections are zero, so the residual stream is the token's embedding)."""

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


def _rms(x: torch.Tensor) -> torch.Tensor:
    return x / x.pow(2).mean(-1, keepdim=True).sqrt()


@pytest.mark.parametrize("quality", [1.0, 0.5])
def test_target_follows_its_map_and_the_draft_guesses_the_asked_fraction(tmp_path: Path, quality: float) -> None:
    made = sglang_models.make(tmp_path, seed=3, draft_quality=quality)
    assert made["expected_accept_length_steps2"] == 1.0 + quality
    t = safetensors_torch.load_file(str(tmp_path / "target" / "model.safetensors"))
    d = safetensors_torch.load_file(str(tmp_path / "eagle3" / "model.safetensors"))
    assert not t["model.layers.0.self_attn.o_proj.weight"].any() and not t["model.layers.7.mlp.down_proj.weight"].any()
    f = sglang_models.cycle_map(3)
    ordinary = torch.arange(sglang_models.FIRST_ORDINARY, sglang_models.VOCAB)
    emb = t["model.embed_tokens.weight"].float()[ordinary]
    target_next = (_rms(emb) @ t["lm_head.weight"].float().T).argmax(-1)
    assert target_next.tolist() == [f[int(x)] for x in ordinary]
    aux = torch.cat([emb, emb, emb], dim=-1)  # layers 2, 4, 5 all see the embedding
    guess = (_rms(aux @ d["fc.weight"].float().T) @ d["lm_head.weight"].float().T).argmax(-1)
    right = sum(int(g) == f[f[int(x)]] for g, x in zip(guess, ordinary, strict=True))
    assert right / len(ordinary) == pytest.approx(quality, abs=0.02)
    config = json.loads((tmp_path / "eagle3" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"] and config["draft_vocab_size"] == sglang_models.VOCAB


def test_a_bad_draft_quality_is_one_line(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(ROOT / "docs" / "validation" / "sglang_models.py"), str(tmp_path),
                          "--draft-quality", "2"], capture_output=True, text=True, check=False)
    assert out.returncode == 2 and "--draft-quality: a fraction from 0 to 1" in out.stderr
    assert not (tmp_path / "target").exists()
