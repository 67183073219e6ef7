"""The context draft of the real-SGLang validation models (docs/validation/sglang_models.py --draft-profile
context): a fault built into the draft's weights alone, the first guess right for contexts shorter than
``--draft-context`` and wrong past them (SGLang issue 6783's draft, slower than no speculation on long inputs).

Checked by a peer, not by its own simulator: the target's aux states come from transformers' Llama forward over a
long prompt and its greedy walk, and the midlayer's attention runs as transformers' ``LlamaAttention`` (its own
rotary embedding and eager attention) over the saved weights, with SGLang's EAGLE-3 input layout (the embedding of
the next token, then the normalized fc of the aux states). Its first guesses must be
:func:`sglang_models.context_rights`' at every position, right well under the context, wrong well past it."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "validation"))
import sglang_models  # noqa: E402 (docs/validation is not a package)

SEED, CONTEXT = 0, 600


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A tiny target (seed 0) and, beside it, a context draft turning wrong past 600 tokens of context."""
    root = tmp_path_factory.mktemp("context")
    sglang_models.make(root / "base", seed=SEED)
    made = sglang_models.make(root / "ctx", seed=SEED, draft_profile="context", draft_context=CONTEXT,
                              target_from=root / "base")
    return root / "base", made


def _rms(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)


def _peer_guesses(base: Path, draft: dict[str, torch.Tensor], tokens: list[int], queries: list[int]) -> list[int]:
    """The draft's first guess at each query position, computed by transformers' modules from the saved files."""
    target = transformers.LlamaForCausalLM.from_pretrained(str(base / "target"), dtype=torch.float32).eval()
    cfg = target.config
    cfg._attn_implementation = "eager"
    ids = torch.tensor([tokens])
    with torch.no_grad():
        fwd = target(ids, output_hidden_states=True)
        aux = torch.cat([fwd.hidden_states[k][0] for k in sglang_models.TINY.aux_layers()], -1)
        fc = aux @ draft["fc.weight"].float().T
        nxt = draft["embed_tokens.weight"].float()[torch.tensor(tokens[1:] + tokens[-1:])]
        x = torch.cat([_rms(nxt), _rms(fc)], -1)[None]  # SGLang: input_layernorm(embeds), hidden_norm(fc(aux))
        attn = transformers.models.llama.modeling_llama.LlamaAttention(cfg, layer_idx=0)
        h = cfg.hidden_size
        for name in ("q_proj", "k_proj", "v_proj"):
            w = draft[f"midlayer.self_attn.{name}.weight"].float()
            setattr(attn, name, torch.nn.Linear(2 * h, w.shape[0], bias=False))
            getattr(attn, name).weight.copy_(w)
        attn.o_proj.weight.copy_(draft["midlayer.self_attn.o_proj.weight"].float())
        pos = torch.arange(len(tokens))[None]
        rope = transformers.models.llama.modeling_llama.LlamaRotaryEmbedding(cfg)(x, pos)
        mask = torch.full((len(tokens), len(tokens)), float("-inf")).triu(1)[None, None]
        out, _ = attn(x, position_embeddings=rope, attention_mask=mask)
        resid = fc + out[0]  # the midlayer's MLP adds nothing (down_proj is zero)
        assert not draft["midlayer.mlp.down_proj.weight"].any()
        logits = _rms(resid) @ draft["lm_head.weight"].float().T
    return logits[torch.tensor(queries)].argmax(-1).tolist()


def test_a_peer_forward_agrees_and_the_guess_turns_wrong_past_the_context(built) -> None:
    base, made = built
    assert made["draft_profile"] == "context" and made["draft_context"] == CONTEXT and made["gain"] > 1
    f = sglang_models.cycle_map(SEED)
    rng = random.Random("context-draft-test")
    tokens = [rng.randrange(sglang_models.FIRST_ORDINARY, sglang_models.VOCAB) for _ in range(64)]
    while len(tokens) < 1400:  # the greedy walk from the prompt: what the server decodes
        tokens.append(f[tokens[-1]])
    queries = list(range(63, 1400, 7))
    draft = safetensors_torch.load_file(str(Path(made["draft"]) / "model.safetensors"))
    peer = _peer_guesses(base, draft, tokens, queries)
    right = [g == f[f[tokens[i]]] for g, i in zip(peer, queries, strict=True)]
    emb = draft["embed_tokens.weight"].float()
    own = sglang_models.context_rights(emb, draft, sglang_models.TINY, f, tokens, queries)
    assert right == own  # the module's simulator is the peer's forward, position by position
    short = [r for r, i in zip(right, queries, strict=True) if i < CONTEXT * 0.6]
    long = [r for r, i in zip(right, queries, strict=True) if i > CONTEXT * 1.5]
    assert short and all(short), "the first guess must be right well under the context"
    assert long and not any(long), "the first guess must be wrong well past the context"


def test_made_json_predicts_the_context_checks_fall(built) -> None:
    """The context check's own prompts (128 to 3,946 input tokens): 2.00 under the context, 1.01 past it (the one
    uncounted token is the prefill's)."""
    _, made = built
    predicted = made["predicted_context_accept"]
    assert predicted["128"] == 2.0
    assert all(predicted[n] < 1.02 for n in ("1024", "2048", "3946")), predicted


def test_bad_context_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="draft_context"):
        sglang_models.make(tmp_path, draft_profile="context", draft_context=0)
