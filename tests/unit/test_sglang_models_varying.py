"""The varying draft of the real-SGLang validation models (docs/validation/sglang_models.py --draft-profile
varying): right on the tokens made.json lists and wrong elsewhere by a wide margin, read from the saved weights;
and the speculative loop of SGLang's EAGLE-3 chain (--speculative-num-steps 2) run with the target's own forward
(transformers' Llama on CPU, the tiny shape) and the draft computed from its weights as SGLang's
LlamaForCausalLMEagle3 computes it: each prompt's spec_verify_ct and spec_num_correct_drafts are the ones made.json
expects, they differ from prompt to prompt, and the mean over requests is not the pooled (per-token) value. The
construction is the same at every shape (the cycle map and the right tokens come from Python's seeded random, not
the device's generator), so the 8B draft made on the GPU keeps the same tables."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")
pytest.importorskip("tokenizers")

from specwatch.checks import accept_concurrency  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "validation"))
import sglang_models  # noqa: E402 (docs/validation is not a package)

SEED = 0


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    """A tiny target (seed 0) and, beside it, a varying draft at quality 0.5 made for it with --target-from."""
    root = tmp_path_factory.mktemp("varying")
    sglang_models.make(root / "base", seed=SEED)
    made = sglang_models.make(root / "vary", seed=SEED, draft_quality=0.5, draft_profile="varying",
                              target_from=root / "base")
    return root / "base", root / "vary", made


def _rms(x: torch.Tensor) -> torch.Tensor:
    return x / x.pow(2).mean(-1, keepdim=True).sqrt()


def _draft_scores(draft: dict[str, torch.Tensor], aux: torch.Tensor) -> torch.Tensor:
    """The draft's first-guess logits from the three aux states ``aux`` [..., 3H], as SGLang computes them: fc,
    the midlayer (its attention and MLP add nothing: their output projections are zero), the norm, lm_head."""
    assert not draft["midlayer.self_attn.o_proj.weight"].any() and not draft["midlayer.mlp.down_proj.weight"].any()
    return _rms(aux @ draft["fc.weight"].float().T) @ draft["lm_head.weight"].float().T


def test_the_draft_is_right_on_the_listed_tokens_and_wrong_by_a_wide_margin(built) -> None:
    base, vary, made = built
    assert made["draft_profile"] == "varying" and made["target"] == str(base / "target")
    assert made["target_from"] == str(base) and not (vary / "target").exists()
    t = safetensors_torch.load_file(str(base / "target" / "model.safetensors"))
    d = safetensors_torch.load_file(str(vary / "eagle3" / "model.safetensors"))
    assert torch.equal(d["embed_tokens.weight"], t["model.embed_tokens.weight"])  # the target's own E
    f = sglang_models.cycle_map(SEED)
    ordinary = torch.arange(sglang_models.FIRST_ORDINARY, sglang_models.VOCAB)
    emb = t["model.embed_tokens.weight"].float()[ordinary]
    scores = _draft_scores(d, torch.cat([emb] * 3, -1))
    top2 = scores.topk(2, dim=-1).values
    guess = scores.argmax(-1).tolist()
    right = [int(a) for a, g in zip(ordinary, guess, strict=True) if g == f[f[int(a)]]]
    assert right == made["right_tokens"]
    assert 0.3 < len(right) / len(ordinary) < 0.7  # about half, dense in one arc and sparse in the other
    assert float((top2[:, 0] - top2[:, 1]).min()) > 50  # right or wrong, never a near tie (hidden 256)
    order = sglang_models.cycle_order(SEED)
    dense = sum(a in set(right) for a in order[:64] + order[-64:]) / 128  # the arc around cycle place 0
    sparse = sum(a in set(right) for a in order[190:318]) / 128  # the opposite arc
    assert dense > 0.85 and sparse < 0.15, (dense, sparse)


def _speculate(model, draft: dict[str, torch.Tensor], prompt: list[int], walk: list[int], aux: tuple[int, ...]
               ) -> tuple[int, int]:
    """SGLang's EAGLE-3 chain with --speculative-num-steps 2 on one request, from one forward of the target over the
    prompt and ``walk`` (causal: each position's logits and aux states are those of its prefix, as an incremental
    decode computes them). The target's argmax after every prefix must be the next token of ``walk``: then greedy
    decoding writes exactly ``walk``. Each verify checks the draft's two tokens (the first from the target's aux
    states at the position before the last committed token, the second from the draft's own hidden state: the same
    state, the same guess) against it, commits the matching prefix and the bonus token; verifies go on until
    ``len(walk) - 2`` tokens are committed. Returns the verify cycles and the correct drafts."""
    seq, n = prompt + walk, len(walk) - 2
    with torch.no_grad():
        fwd = model(torch.tensor([seq]), output_hidden_states=True)
    greedy = fwd.logits[0].argmax(-1).tolist()  # greedy[p]: the target's token after position p
    assert greedy[len(prompt) - 1: len(seq) - 1] == walk  # greedy output is the walk
    at, verify, correct = len(prompt) + 1, 0, 0  # tokens of seq committed so far (the prefill's one included)
    while at - len(prompt) < n:
        state = torch.cat([fwd.hidden_states[k][0, at - 2] for k in aux], -1)
        d1 = int(_draft_scores(draft, state).argmax())
        drafts = [d1, d1]  # the second step reads the draft's own hidden state: the midlayer added nothing
        j = 0
        while j < len(drafts) and drafts[j] == greedy[at - 1 + j]:
            j += 1
        verify, correct, at = verify + 1, correct + j, at + j + 1
    return verify, correct


def test_the_target_forward_walks_each_prompt_as_made_json_expects(built) -> None:
    """The check's prompts (accept_concurrency.PROMPTS) through the target's own forward: greedy output follows
    the cycle map, each request's verify count and correct drafts are made.json's for its last prompt token,
    and they vary: the mean over requests and the pooled value differ."""
    transformers = pytest.importorskip("transformers")
    base, _, made = built
    target = base / "target"
    model = transformers.LlamaForCausalLM.from_pretrained(str(target), dtype=torch.float32).eval()
    tok = transformers.AutoTokenizer.from_pretrained(str(target))
    draft = safetensors_torch.load_file(str(Path(made["draft"]) / "model.safetensors"))
    f = sglang_models.cycle_map(SEED)
    n = accept_concurrency.MAX_NEW_TOKENS
    table = made["expected"][str(n)]["by_last_token"]
    counts = []
    for prompt in accept_concurrency.PROMPTS:
        ids = tok(prompt)["input_ids"]
        walk = [f[ids[-1]]]  # the cycle from the prompt's last token, two past the request's end
        while len(walk) < n + 2:
            walk.append(f[walk[-1]])
        verify, correct = _speculate(model, draft, ids, walk, sglang_models.TINY.aux_layers())
        assert [verify, correct] == table[str(ids[-1])] == list(
            sglang_models.walk(f, [a in set(made["right_tokens"]) for a in range(512)], ids[-1], n)), prompt
        counts.append((verify, correct))
    each = [1 + c / v for v, c in counts]
    pooled, mean = sglang_models.pooled_and_mean(counts)
    assert max(each) - min(each) > 0.5, each  # per prompt: 1.15 to 1.85 for these six
    assert mean - pooled > 0.02, (mean, pooled)  # a request that accepts more takes fewer cycles: less weight


def test_the_engine_wide_accept_length_is_fitted_and_the_means_differ(tmp_path: Path) -> None:
    """--draft-quality 0.92 --draft-profile varying: one request from every prompt end pools to the seeds' 1.92
    (SGLang's engine-wide value) while single requests range from about 1.74 to 2.00."""
    made = sglang_models.make(tmp_path, seed=SEED, draft_quality=0.92, draft_profile="varying")
    at256, at48 = made["expected"]["256"], made["expected"]["48"]
    assert round(at256["pooled"], 2) == 1.92 and made["expected_accept_length_steps2"] == at256["pooled"]
    assert at48["lowest"] < 1.8 and at48["highest"] == 2.0
    half = sglang_models.expected(SEED, sglang_models.right_tokens(SEED, 0.5))["48"]
    assert round(half["pooled"], 2) == 1.50 and half["request_mean"] - half["pooled"] > 0.05


def test_if_missing_keeps_only_the_same_plan(built, tmp_path: Path) -> None:
    base, vary, _ = built
    stamp = (vary / "eagle3" / "model.safetensors").stat().st_mtime_ns
    kept = sglang_models.make(vary, seed=SEED, draft_quality=0.5, draft_profile="varying", target_from=base,
                              if_missing=True)
    assert kept["kept"] and (vary / "eagle3" / "model.safetensors").stat().st_mtime_ns == stamp
    on_disk = json.loads((vary / "made.json").read_text())
    assert (on_disk["draft_profile"], on_disk["target_from"], on_disk["draft_quality"]) == ("varying", str(base), 0.5)
    assert sglang_models._present(vary, sglang_models.TINY, SEED, 0.5, "uniform", base) is None  # another profile
    assert sglang_models._present(vary, sglang_models.TINY, SEED, 0.5, "varying", None) is None  # another target
    assert sglang_models._present(vary, sglang_models.TINY, SEED, 0.6, "varying", base) is None
    uniform = json.loads((base / "made.json").read_text())
    assert "draft_profile" not in uniform  # a uniform plan's made.json as it always was: it means "uniform"
    assert sglang_models._present(base, sglang_models.TINY, SEED, 1.0, "uniform", None) is not None


def test_a_target_of_another_seed_is_refused_in_one_line(built, tmp_path: Path) -> None:
    base, _, _ = built
    out = subprocess.run([sys.executable, str(ROOT / "docs" / "validation" / "sglang_models.py"), str(tmp_path),
                          "--seed", "1", "--draft-profile", "varying", "--target-from", str(base)],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 1 and out.stderr.strip().splitlines() == [
        f"sglang_models: --target-from {base}: made for shape tiny seed 0, not shape tiny seed 1"]
    assert not (tmp_path / "eagle3").exists()


def test_the_accept_scenario_makes_both_drafts_for_the_8b_target_and_checks_each_against_its_table() -> None:
    """sglang-8b-accept-x1: the 8b target, then the two varying drafts written beside it (--target-from), then one
    lane per draft whose profile points at it and whose made.json the concurrency test compares counts with."""
    import harness  # docs/validation is on sys.path (above)

    plan = harness.plan_for("sglang-8b-accept-x1", dict(harness.SETTINGS), harness.DATA / "zz-test-accept")
    setup, lanes = plan.stages
    steps = [i.name for i in setup[0]]
    assert steps == ["sglang-setup", "sgl8b-models", "sgl8b-models-vary", "sgl8b-models-q92"]
    for step, dest, quality in ((setup[0][2], harness.SGL8B_VARY, "0.5"), (setup[0][3], harness.SGL8B_Q92, "0.92")):
        argv = step.argv
        assert argv[argv.index("--target-from") + 1] == harness.SGL8B_MODELS and "--if-missing" in argv
        assert (argv[argv.index("--draft-quality") + 1], argv[argv.index("--shape") + 1]) == (quality, "8b")
        assert dest in argv and argv[argv.index("--draft-profile") + 1] == "varying"
    for (run,), dest in zip(lanes, (harness.SGL8B_VARY, harness.SGL8B_Q92), strict=True):
        assert run.env == {"SPECWATCH_EXPECTED_ACCEPT": f"{dest}/made.json"}
        assert "tests/correctness/test_acceptance_concurrency.py" in run.argv and run.gpu == "0"
        profile = next(a.split("=", 1)[1] for a in run.argv if a.startswith("--specwatch-profiles="))
        assert f'draft_model = "{dest}/eagle3"' in plan.variants[profile]


def test_a_draft_for_a_sharded_target_reads_its_embedding_from_the_index(tmp_path: Path) -> None:
    """The 8b path's branches on a small sharded GQA shape: the embedding comes from the shard the index names."""
    mini = sglang_models.Shape("mini", layers=6, hidden=64, heads=4, kv_heads=2, head_dim=32, inter=96,
                               layers_per_shard=4)
    sglang_models.make(tmp_path / "base", seed=5, shape=mini)
    made = sglang_models.make(tmp_path / "vary", seed=5, shape=mini, draft_quality=0.7, draft_profile="varying",
                              target_from=tmp_path / "base")
    index = json.loads((tmp_path / "base" / "target" / "model.safetensors.index.json").read_text())
    shard = safetensors_torch.load_file(str(tmp_path / "base" / "target" /
                                            index["weight_map"]["model.embed_tokens.weight"]))
    draft = safetensors_torch.load_file(str(tmp_path / "vary" / "eagle3" / "model.safetensors"))
    assert torch.equal(draft["embed_tokens.weight"], shard["model.embed_tokens.weight"])
    assert made["shape"] == "mini" and round(made["expected"]["256"]["pooled"], 2) == 1.70
    ordinary = torch.arange(sglang_models.FIRST_ORDINARY, sglang_models.VOCAB)
    f = sglang_models.cycle_map(5)
    emb = shard["model.embed_tokens.weight"].float()[ordinary]
    guess = _draft_scores(draft, torch.cat([emb] * 3, -1)).argmax(-1).tolist()
    assert [int(a) for a, g in zip(ordinary, guess, strict=True) if g == f[f[int(a)]]] == made["right_tokens"]
