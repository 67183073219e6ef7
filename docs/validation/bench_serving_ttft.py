"""Why ``bench_serving``'s TTFT reads later than specwatch's on the validation models, predicted from the prompts.

    cd docs/validation && python bench_serving_ttft.py data/2026-12-05-sglang-8b-bench-serving-x1/bench-serving

The two tools start the clock alike (request sent) and stop it at different chunks of the stream: specwatch at the
first chunk that carries a token, SGLang's ``bench_serving`` (``async_request_sglang_generate``, 0.5.16) at the first
chunk whose ``text`` is not empty. The validation models (``sglang_models.py``) speak a byte-level BPE of 512 tokens
along a fixed cycle, and many of their tokens are a lone byte of a UTF-8 sequence. SGLang's streaming detokenizer
(``DetokenizerManager``, 0.5.16) holds back text that ends in an incomplete character and sends only its printable
prefix (up to the last space), so a request whose first tokens are such bytes streams empty text first, and
``bench_serving`` waits for a later chunk.

Each request's output is known before it runs: the target's greedy output walks the cycle from the prompt's last
token, and at accept length 2.00 the stream brings 1 token (the prefill's), then 2 a verify cycle. This replays the
detokenizer's rule on those tokens and says, per prompt, which chunk first carries text (0: the first). With ``d1``
the gap from the first chunk to the second and ``d2`` a verify cycle (twice the median ITL specwatch measured), a
prompt whose text comes at chunk k reads ``bench_serving``'s TTFT = specwatch's + (d1 if k >= 1) + (k - 1) d2.
``d1`` is fitted on the median (the one free number); the p90, p99 and mean are then predictions. Pure: the files in,
the numbers out (``predict``); no server, no GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import sglang_models

#: the prompt tokens SGLang's detokenizer keeps before a request's output to decode against
#: (``INIT_INCREMENTAL_DETOKENIZATION_OFFSET``, 0.5.16)
SURROUNDING = 5
CHUNKS = 24  # chunks replayed per request: far past the first with text on every prompt seen


@dataclass(frozen=True)
class Prediction:
    """Per prompt, the chunk that first carries text; the two tools' TTFTs at concurrency 1 and the model's."""

    first_text_chunk: list[int]
    specwatch_ms: dict[str, float]  # the runs' median, p90 and p99 TTFT (its results hold no mean TTFT)
    bench_ms: dict[str, float]
    d1_ms: float
    d2_ms: float
    predicted_ms: dict[str, float]


def _printable(text: str) -> str:
    """SGLang's ``find_printable_text`` for text without CJK: the prefix up to its last space (all of it at a
    newline)."""
    return text if text.endswith("\n") else text[: text.rfind(" ") + 1]


def first_text_chunks(prompts: list[str], seed: int = 0) -> list[int]:
    """For each prompt, the index of the first streamed chunk whose text is not empty (chunks of 1, then 2 tokens)."""
    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory() as folder:
        sglang_models.tokenizer_files(Path(folder))
        tok = AutoTokenizer.from_pretrained(folder)
    f = sglang_models.cycle_map(seed)

    def decode(ids: list[int]) -> str:
        return tok.decode(ids, skip_special_tokens=True, spaces_between_special_tokens=True)

    found = []
    for prompt in prompts:
        ids = tok(prompt)["input_ids"]
        out, x = [], ids[-1]
        for _ in range(1 + 2 * CHUNKS):
            x = f[x]
            out.append(x)
        window = ids[-SURROUNDING:]
        surr, read, n, first = 0, len(window), 0, None
        for k in range(CHUNKS):
            size = 1 if k == 0 else 2
            window += out[n:n + size]
            n += size
            new = decode(window[surr:])[len(decode(window[surr:read])):]
            if new and not new.endswith("\ufffd"):
                sent, surr, read = new, read, len(window)  # committed
            else:
                sent = _printable(new)
            if sent:
                first = k
                break
        if first is None:
            raise ValueError(f"no text in {CHUNKS} chunks for prompt {prompt[:40]!r}")
        found.append(first)
    return found


def _stats(values: list[float]) -> dict[str, float]:
    """The median and p90 (numpy's linear) and the mean of per-request TTFTs."""
    return {"median": float(np.percentile(values, 50)), "p90": float(np.percentile(values, 90)),
            "p99": float(np.percentile(values, 99)), "mean": float(np.mean(values))}


def predict(folder: Path, level: str = "concurrency-1") -> Prediction:
    """The prediction for one bench-serving check's folder (``prompts.jsonl``, ``specwatch.json``, ``bench.jsonl``)."""
    prompts = [json.loads(line)["prompt"] for line in (folder / "prompts.jsonl").read_text().splitlines() if line]
    results = {r["key"]: r for r in json.loads((folder / "specwatch.json").read_text())["results"]}

    def ours(metric: str) -> float:
        return statistics.mean(next(r for k, r in results.items()
                                    if k.endswith(f"/{level}/{metric}"))["samples"])

    concurrency = int(level.split("-")[1])
    runs = [json.loads(line) for line in (folder / "bench.jsonl").read_text().splitlines() if line]
    runs = [r for r in runs if r.get("max_concurrency") == concurrency]
    bench = {"median": statistics.mean(r["median_ttft_ms"] for r in runs),
             "p90": statistics.mean(r["p90_ttft_ms"] for r in runs),
             "p99": statistics.mean(r["p99_ttft_ms"] for r in runs),
             "mean": statistics.mean(r["mean_ttft_ms"] for r in runs)}
    sw = {"median": ours("median_ttft_ms"), "p90": ours("p90_ttft_ms"), "p99": ours("p99_ttft_ms")}
    chunks = first_text_chunks(prompts)
    d2 = 2 * ours("median_itl_ms")
    shift = [(0.0 if k == 0 else 1.0, max(0, k - 1)) for k in chunks]  # (d1 count, d2 count) per prompt
    base = sw["median"]

    def model(d1: float) -> dict[str, float]:
        return _stats([base + a * d1 + b * d2 for a, b in shift])

    # d1 such that the model's median is bench_serving's (it grows with d1): bisection over one cycle and more
    lo, hi = 0.0, 4 * d2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if model(mid)["median"] < bench["median"] else (lo, mid)
    d1 = (lo + hi) / 2
    predicted = model(d1)
    return Prediction(chunks, sw, bench, d1, d2, predicted)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_serving_ttft.py", description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, help="a bench_serving_check.py output folder")
    a = ap.parse_args(argv)
    p = predict(a.folder)
    print(f"first chunk with text, per prompt: {p.first_text_chunk} (0: the first chunk, the prefill's token)")
    print(f"d1 {p.d1_ms:.2f} ms (fitted on the median), d2 {p.d2_ms:.2f} ms (two of specwatch's median ITL)")
    for stat in ("median", "p90", "p99", "mean"):
        ours = f"{p.specwatch_ms[stat]:6.2f}" if stat in p.specwatch_ms else "     -"
        print(f"{stat:>6}: specwatch {ours} ms  bench_serving {p.bench_ms[stat]:6.2f} ms  "
              f"predicted {p.predicted_ms[stat]:6.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
