"""Step-level benchmark of the reference server's engine (no HTTP).

On CUDA (default preset ref-small, bfloat16, batch 1) it measures: the bare model's graph replay of
one decode step, the same step eager, graphed and eager verify (num_steps+1 tokens), the engine's
decode step end to end (graphed), and decode tokens/s for plain decoding, speculative decoding with
a graphed verify and with an eager verify (the fault ``fault_eager_verify``). On CPU it runs the same
table without graphs (default preset ref-tiny, float32). ``--calibrate`` prints the mean accept
length of every preset family member instead (CPU float32, greedy).

    PYTHONPATH=src python benchmarks/refserver_steps.py --out /tmp/steps.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from specwatch.refserver import model as ref_model
from specwatch.refserver.engine import Engine, EngineConfig, RequestSpec
from specwatch.refserver.graph import GraphRunner
from specwatch.refserver.tokenizer import ByteTokenizer

TOK = ByteTokenizer()
PROMPTS = ["Hello world", "The quick brown fox", "abc", "Once upon a time, there", "12345", "zz",
           "Speculative decoding is", "A B C D"]


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _time_calls(fn, dev: torch.device, iters: int) -> float:
    """Median milliseconds of ``fn()`` over ``iters`` calls (5 batches, after a warm-up)."""
    for _ in range(3):
        fn()
    _sync(dev)
    per = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        _sync(dev)
        per.append((time.perf_counter() - t0) / iters * 1e3)
    return statistics.median(per)


def bare_steps(eng: Engine, steps: int, iters: int, graphs: bool) -> dict[str, float]:
    """Per-step ms of the bare model at batch 1, context position 256: decode and verify, graph and eager."""
    m, dev = eng.model, eng.device
    pos = torch.tensor([256], device=dev)
    slot = torch.tensor([0], device=dev)
    res: dict[str, float] = {}
    with torch.no_grad():
        for kind, width in (("decode", 1), ("verify", steps + 1)):
            tok = torch.full((1, width), 65, dtype=torch.long, device=dev)
            ctx = None if graphs else 256 + width
            res[f"{kind}_eager_ms"] = _time_calls(lambda t=tok, c=ctx: m.forward(t, pos, slot, ctx_len=c), dev, iters)
            if graphs:
                r = GraphRunner(lambda t, p, s: m.forward(t, p, s), role="target", kind=kind, num_tokens_per_req=width,
                                bs_list=[1], device=dev, scratch_slot=m.kv.scratch_slot)
                r.capture()
                res[f"{kind}_graph_ms"] = _time_calls(lambda r=r, t=tok: r.replay(t, pos, slot), dev, iters)
                same = torch.equal(r.replay(tok, pos, slot).argmax(-1), m.forward(tok, pos, slot).argmax(-1))
                res[f"{kind}_graph_matches_eager_argmax"] = float(same)
        tok = torch.full((1, 1), 65, dtype=torch.long, device=dev)
        res["draft_eager_ms"] = _time_calls(
            lambda: m.forward(tok, pos, slot, n_layers=eng.preset.draft_layers, ctx_len=None if graphs else 257),
            dev, iters)
    return res


def run_engine(cfg: EngineConfig, prompt: str, max_new: int) -> dict:
    """One request at batch 1 through Engine.step: decode tok/s, step ms, accept length, graph use."""
    eng = Engine(cfg)
    eng.capture()
    eng.add_request(RequestSpec("warm", TOK.encode("warm up"), 16, ignore_eos=True))
    while eng.has_work():
        eng.step()
    eng.add_request(RequestSpec("a", TOK.encode(prompt), max_new, ignore_eos=True))
    out_tokens: list[int] = []
    steps, accepts, graphed = [], [], []
    t_dec, n_dec = 0.0, 0
    while eng.has_work():
        t0 = time.perf_counter()
        o = eng.step()
        dt = time.perf_counter() - t0
        out_tokens += o.new_tokens.get("a", [])
        if o.mode == "decode":
            steps.append(o.forward_s * 1e3)
            t_dec += dt
            n_dec += len(o.new_tokens.get("a", []))
            accepts += list(o.accept_lens.values())
            graphed.append(o.can_run_cuda_graph)
    res = {"decode_tok_s": n_dec / t_dec, "step_ms_median": statistics.median(steps), "steps": len(steps),
           "graph_fraction": sum(graphed) / len(graphed), "tokens": out_tokens}
    if accepts:
        res["accept_len"] = sum(accepts) / len(accepts)
    del eng
    if cfg.device == "cuda":
        torch.cuda.empty_cache()
    return res


def calibrate(presets: list[str], steps_list: list[int], max_new: int, n_prompts: int) -> dict[str, float]:
    """Mean accept length (greedy, CPU float32) per preset and num_steps."""
    out = {}
    for name in presets:
        for steps in steps_list:
            eng = Engine(EngineConfig(preset=name, device="cpu", dtype="float32", spec_algorithm="EAGLE",
                                      num_steps=steps))
            for i, p in enumerate(PROMPTS[:n_prompts]):
                eng.add_request(RequestSpec(f"r{i}", TOK.encode(p), max_new, ignore_eos=True))
            acc = []
            while eng.has_work():
                acc += list(eng.step().accept_lens.values())
            out[f"{name}/steps={steps}"] = round(sum(acc) / len(acc), 3)
            print(f"{name:20s} num_steps={steps}  accept_len={out[f'{name}/steps={steps}']:.3f}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--preset", default=None, help="default: ref-small on CUDA, ref-tiny on CPU")
    ap.add_argument("--dtype", default=None, help="default: bfloat16 on CUDA, float32 on CPU")
    ap.add_argument("--num-steps", type=int, default=3)
    ap.add_argument("--max-new", type=int, default=256)
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--extra-presets", default="", help="comma list: also report their spec accept length")
    ap.add_argument("--calibrate", action="store_true")
    ap.add_argument("--calibrate-presets", default="ref-tiny,ref-tiny-perfect,ref-tiny-poor")
    ap.add_argument("--calibrate-tokens", type=int, default=64)
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    a = ap.parse_args(argv)
    ref_model.KEEP_CPU_WEIGHTS = True  # build each preset's weights once per process
    if a.calibrate:
        res = {"calibration": calibrate(a.calibrate_presets.split(","), [2, 3], a.calibrate_tokens, 8)}
    else:
        cuda = a.device == "cuda"
        preset = a.preset or ("ref-small" if cuda else "ref-tiny")
        dtype = a.dtype or ("bfloat16" if cuda else "float32")
        bs = (1, 2, 4, 8) if cuda else ()
        base = dict(preset=preset, device=a.device, dtype=dtype, cuda_graph_bs=bs)
        spec = dict(base, spec_algorithm="EAGLE", num_steps=a.num_steps)
        eng = Engine(EngineConfig(**base))
        bare = bare_steps(eng, a.num_steps, a.iters, cuda)
        del eng
        prompt = PROMPTS[1]
        runs = {"plain": run_engine(EngineConfig(**base), prompt, a.max_new),
                "spec": run_engine(EngineConfig(**spec), prompt, a.max_new),
                "spec_eager_verify": run_engine(EngineConfig(**spec, fault_eager_verify=True), prompt, a.max_new)}
        if cuda:
            runs["plain_eager"] = run_engine(EngineConfig(**dict(base, cuda_graph_bs=())), prompt, a.max_new)
        for extra in filter(None, a.extra_presets.split(",")):
            runs[f"spec[{extra}]"] = run_engine(EngineConfig(**dict(spec, preset=extra)), prompt, a.max_new)
        ref = runs["plain"]["tokens"]
        for k, r in runs.items():
            toks = r.pop("tokens")
            same_target = not k.startswith("spec[") or k[5:-1].rsplit("-", 1)[-1] == "perfect"
            r["tokens_equal_plain"] = (sum(x == y for x, y in zip(toks, ref, strict=True)) / len(ref)
                                       if same_target else None)
        res = {"device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
               "preset": preset, "dtype": dtype, "num_steps": a.num_steps, "bs": 1, "bare_ms": bare, "engine": runs,
               "command": "PYTHONPATH=src python benchmarks/refserver_steps.py " + " ".join(sys.argv[1:])}
        print(f"preset={preset} dtype={dtype} device={res['device']} num_steps={a.num_steps} batch=1")
        print("| bare model step | ms |\n|---|---|")
        for k, v in bare.items():
            print(f"| {k} | {v:.3f} |")
        print("| engine run | decode tok/s | step ms (median) | accept len | graph fraction | tokens = plain |")
        print("|---|---|---|---|---|---|")
        for k, r in runs.items():
            acc = f"{r['accept_len']:.2f}" if "accept_len" in r else "-"
            eq = "-" if r["tokens_equal_plain"] is None else f"{r['tokens_equal_plain']:.2f}"
            print(f"| {k} | {r['decode_tok_s']:.1f} | {r['step_ms_median']:.3f} | {acc} | {r['graph_fraction']:.2f} "
                  f"| {eq} |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=2, sort_keys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
