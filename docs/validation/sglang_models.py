"""A tiny Llama target and an EAGLE-3 draft that it accepts, made in seconds wherever torch runs.

    python docs/validation/sglang_models.py /tmp/models     # writes /tmp/models/target and /tmp/models/eagle3

Real SGLang on the lent H200 needs a model and a draft without a network. A random draft is accepted almost
never (accept length 1.00 on the H200), which hides everything the accept-length checks exist for. So both
models are built to a plan whose accept length is known before the server starts:

* **target**: 8 Llama layers (EAGLE-3's default aux layers [2, 4, 5] are distinct), hidden 256, 4 heads x 64,
  vocab 512, bf16. Every layer's output projections (``o_proj``, ``down_proj``) are zero, so the residual stream
  at every layer is the current token's embedding and the next token is a fixed map of the current one:
  ``lm_head[v] = E[f^-1(v)]`` with ``E`` random and ``f`` one cycle over the ordinary tokens. Greedy output is
  ``x, f(x), f(f(x)), ...`` with a margin of about 200 logits: no near-ties, so greedy runs repeat exactly.
  The layers still run their attention and MLP matmuls (their input projections are random), so a decode step
  costs what an 8-layer model's step costs.
* **eagle3** (SGLang's ``LlamaForCausalLMEagle3`` layout: ``midlayer.*``, ``fc``, ``norm``, ``lm_head``, ``d2t``,
  ``t2d``): ``fc`` averages the three aux states (each ``E[x_t]``), the midlayer adds nothing, and
  ``lm_head[v] = E[f^-2(v)]``. Its first draft token, ``f(f(x_t))``, is always right; its second repeats the
  first guess and is right only where ``f^3 = f^2``, never on one cycle. So with ``--speculative-num-steps 2``
  every verify commits one drafted token and the bonus: accept length 2.00, accept rate 0.50.

``--draft-quality`` lowers that on purpose: the given fraction of ``lm_head`` rows of the draft are shuffled, so
that fraction of first guesses fail (accept length about ``1 + quality``). The tokenizer is a byte-level BPE of
512 tokens (merges trained on a fixed text, then
named fillers), so the same ids come out everywhere.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HIDDEN, LAYERS, HEADS, HEAD_DIM, VOCAB, INTER = 256, 8, 4, 64, 512, 512
SPECIALS = ["<s>", "</s>", "<unk>"]  # ids 0, 1, 2: bos, eos, unk
FIRST_ORDINARY = len(SPECIALS)
TRAINING_TEXT = (
    "Speculative decoding drafts a few tokens with a small model and verifies them with the target in one "
    "forward pass. The accept length counts the committed tokens per verify cycle, the bonus token included. "
    "A verify step that runs without CUDA graphs costs several times a graphed one, and the gain is lost. "
    "Tensor parallelism splits each layer across GPUs, and NCCL all-reduces the partial results. "
) * 4


def cycle_map(seed: int) -> list[int]:
    """``f``: one cycle through the ordinary tokens (specials go to the first of it), seeded."""
    import random

    order = list(range(FIRST_ORDINARY, VOCAB))
    random.Random(seed).shuffle(order)
    f = list(range(VOCAB))
    for a, b in zip(order, order[1:] + order[:1], strict=True):
        f[a] = b
    for s in range(FIRST_ORDINARY):
        f[s] = order[0]
    return f


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


def _llama_config(**extra: object) -> dict[str, object]:
    return {"hidden_size": HIDDEN, "intermediate_size": INTER, "num_attention_heads": HEADS,
            "num_key_value_heads": HEADS, "head_dim": HEAD_DIM, "vocab_size": VOCAB, "max_position_embeddings": 4096,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False,
            "bos_token_id": 0, "eos_token_id": 1, "torch_dtype": "bfloat16", "model_type": "llama", **extra}


def make(dest: Path, seed: int = 0, draft_quality: float = 1.0) -> dict[str, object]:
    """Write ``dest/target`` and ``dest/eagle3``; returns what was made (the map's seed, the expected accept)."""
    import torch
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(seed)
    f = cycle_map(seed)
    inv = [0] * VOCAB
    for a in range(FIRST_ORDINARY, VOCAB):
        inv[f[a]] = a
    emb = torch.randn(VOCAB, HIDDEN, generator=g)
    bf = torch.bfloat16

    def rand(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * 0.02).to(bf)

    target: dict[str, torch.Tensor] = {"model.embed_tokens.weight": emb.to(bf),
                                       "model.norm.weight": torch.ones(HIDDEN, dtype=bf)}
    head = emb[inv].clone()  # lm_head[v] = E[f^-1(v)]
    head[:FIRST_ORDINARY] = -emb[:FIRST_ORDINARY]  # specials are never chosen
    target["lm_head.weight"] = head.to(bf)
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        target.update({
            p + "self_attn.q_proj.weight": rand(HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.k_proj.weight": rand(HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.v_proj.weight": rand(HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.o_proj.weight": torch.zeros(HIDDEN, HEADS * HEAD_DIM, dtype=bf),
            p + "mlp.gate_proj.weight": rand(INTER, HIDDEN),
            p + "mlp.up_proj.weight": rand(INTER, HIDDEN),
            p + "mlp.down_proj.weight": torch.zeros(HIDDEN, INTER, dtype=bf),
            p + "input_layernorm.weight": torch.ones(HIDDEN, dtype=bf),
            p + "post_attention_layernorm.weight": torch.ones(HIDDEN, dtype=bf),
        })
    tdir = dest / "target"
    tdir.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in target.items()}, str(tdir / "model.safetensors"),
              metadata={"format": "pt"})
    (tdir / "config.json").write_text(json.dumps(_llama_config(
        architectures=["LlamaForCausalLM"], num_hidden_layers=LAYERS), indent=2) + "\n")
    (tdir / "generation_config.json").write_text(json.dumps({"bos_token_id": 0, "eos_token_id": 1}) + "\n")
    tokenizer_files(tdir)

    two = [inv[inv[v]] if v >= FIRST_ORDINARY else 0 for v in range(VOCAB)]  # f^-2
    dhead = emb[two].clone()
    dhead[:FIRST_ORDINARY] = -emb[:FIRST_ORDINARY]
    shuffled = round((1.0 - draft_quality) * (VOCAB - FIRST_ORDINARY))
    if shuffled:
        rows = torch.randperm(VOCAB - FIRST_ORDINARY, generator=g)[:shuffled] + FIRST_ORDINARY
        dhead[rows] = dhead[rows[torch.randperm(shuffled, generator=g)]]
    eye = torch.eye(HIDDEN) / 3
    draft = {
        "embed_tokens.weight": emb.to(bf),
        "fc.weight": torch.cat([eye, eye, eye], dim=1).to(bf),
        "norm.weight": torch.ones(HIDDEN, dtype=bf),
        "lm_head.weight": dhead.to(bf),
        "d2t": torch.zeros(VOCAB, dtype=torch.int64),
        "t2d": torch.ones(VOCAB, dtype=torch.bool),
        "midlayer.self_attn.q_proj.weight": rand(HEADS * HEAD_DIM, 2 * HIDDEN),
        "midlayer.self_attn.k_proj.weight": rand(HEADS * HEAD_DIM, 2 * HIDDEN),
        "midlayer.self_attn.v_proj.weight": rand(HEADS * HEAD_DIM, 2 * HIDDEN),
        "midlayer.self_attn.o_proj.weight": torch.zeros(HIDDEN, HEADS * HEAD_DIM, dtype=bf),
        "midlayer.mlp.gate_proj.weight": rand(INTER, HIDDEN),
        "midlayer.mlp.up_proj.weight": rand(INTER, HIDDEN),
        "midlayer.mlp.down_proj.weight": torch.zeros(HIDDEN, INTER, dtype=bf),
        "midlayer.input_layernorm.weight": torch.ones(HIDDEN, dtype=bf),
        "midlayer.hidden_norm.weight": torch.ones(HIDDEN, dtype=bf),
        "midlayer.post_attention_layernorm.weight": torch.ones(HIDDEN, dtype=bf),
    }
    ddir = dest / "eagle3"
    ddir.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in draft.items()}, str(ddir / "model.safetensors"),
              metadata={"format": "pt"})
    (ddir / "config.json").write_text(json.dumps(_llama_config(
        architectures=["LlamaForCausalLMEagle3"], num_hidden_layers=1, draft_vocab_size=VOCAB,
        target_hidden_size=HIDDEN), indent=2) + "\n")
    made = {"seed": seed, "draft_quality": draft_quality, "expected_accept_length_steps2": 1.0 + draft_quality,
            "target": str(tdir), "draft": str(ddir)}
    (dest / "made.json").write_text(json.dumps(made, indent=2, sort_keys=True) + "\n")
    return made


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="sglang_models.py", description=__doc__.splitlines()[0])
    ap.add_argument("dest")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--draft-quality", type=float, default=1.0,
                    help="fraction of first draft guesses that are right (default 1: accept length 2.00)")
    a = ap.parse_args(argv)
    if not 0.0 <= a.draft_quality <= 1.0:
        ap.error("--draft-quality: a fraction from 0 to 1")
    print(json.dumps(make(Path(a.dest), a.seed, a.draft_quality), sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
