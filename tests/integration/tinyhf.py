"""A tiny random-weight Llama and its tokenizer, made at test time with ``transformers`` and
``tokenizers`` (nothing is downloaded), saved as a local model folder that ``transformers serve``
loads like any Hub checkpoint.

The tokenizer is a BPE trained on a few sentences over the printable ASCII alphabet with a
Metaspace pre-tokenizer and decoder, so every token decodes to text on its own (a byte-level BPE
would let a random model emit half a UTF-8 character, which the server holds back). The model's
generation config has no end-of-sequence token, so a request always runs to ``max_tokens``: the
server refuses ``ignore_eos``, and a random model would otherwise stop at random.

``python tinyhf.py FOLDER serve FOLDER --port N ...`` builds the model, then runs the ``transformers``
command line (what its console script runs) in the same process: torch and transformers are
imported once, which on a loaded 2-core machine saves about 13 s of the server's start.
"""

from __future__ import annotations

import string
import sys
from pathlib import Path

#: the chat template the server applies to /v1/chat/completions messages
CHAT_TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant:{% endif %}"
)
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]
CORPUS = [
    "the model drafts tokens and the target verifies them in one forward pass",
    "speculative decoding wins only when the accepted length pays for the draft",
    "the scheduler keeps batches full and the interconnect carries all reduce traffic",
    "write a function that returns the n-th Fibonacci number using an iterative loop",
    "summarise the report in three sentences and name the main finding",
    "a user asks the assistant how to bake bread at home with simple tools",
]


def build(folder: Path, *, layers: int = 2, hidden: int = 64, seed: int = 0) -> Path:
    """Write a random Llama (``layers`` layers of width ``hidden``) and its tokenizer to ``folder``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE(unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Metaspace()
    raw.decoder = decoders.Metaspace()
    alphabet = [c for c in string.printable if c not in string.whitespace] + ["\u2581"]
    raw.train_from_iterator(CORPUS * 4, trainers.BpeTrainer(vocab_size=320, special_tokens=SPECIALS,
                                                           initial_alphabet=alphabet, show_progress=False))
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                  pad_token="<pad>")
    tok.chat_template = CHAT_TEMPLATE
    folder.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(folder)

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=4096, tie_word_embeddings=True, initializer_range=0.5,
                         bos_token_id=tok.bos_token_id, eos_token_id=None, pad_token_id=tok.pad_token_id)
    model = LlamaForCausalLM(config).eval()
    model.generation_config = GenerationConfig(bos_token_id=tok.bos_token_id, pad_token_id=tok.pad_token_id,
                                               eos_token_id=None, do_sample=False)
    model.save_pretrained(folder)
    return folder


def main(argv: list[str]) -> None:
    """Build the model in ``argv[0]``; then, with more arguments, run ``transformers ARGS...``."""
    build(Path(argv[0]))
    if len(argv) > 1:
        from transformers.cli.transformers import main as transformers_cli

        sys.argv = ["transformers", *argv[1:]]
        transformers_cli()


if __name__ == "__main__":
    main(sys.argv[1:])
