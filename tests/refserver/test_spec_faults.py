"""The speculation-health faults of the reference engine (CPU, ref-tiny): a perturbed draft lowers acceptance
with greedy output lossless; an eager verify on CPU does the verify's work position by position."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from specwatch.refserver.args import ArgError, build_parser, resolve  # noqa: E402
from specwatch.refserver.engine import Engine, EngineConfig, RequestSpec  # noqa: E402
from specwatch.refserver.tokenizer import ByteTokenizer  # noqa: E402

TOK = ByteTokenizer()
PROMPTS = ["the model drafts tokens and the target", "Once upon a time, there"]


def _run(steps: int = 0, **faults: object) -> tuple[Engine, dict[str, list[int]], dict[str, int]]:
    """Greedy outputs and verify cycles per prompt, one request at a time."""
    eng = Engine(EngineConfig(preset="ref-tiny", device="cpu", dtype="float32",
                              spec_algorithm="EAGLE3" if steps else None, num_steps=steps, **faults))
    outs: dict[str, list[int]] = {}
    cycles: dict[str, int] = {}
    for i, p in enumerate(PROMPTS):
        rid = f"r{i}"
        eng.add_request(RequestSpec(rid, TOK.encode(p), 32, ignore_eos=True))
        while eng.has_work():
            out = eng.step()
            outs.setdefault(rid, []).extend(out.new_tokens.get(rid, []))
            cycles[rid] = cycles.get(rid, 0) + (rid in out.accept_lens)
    return eng, outs, cycles


def test_a_perturbed_draft_lowers_acceptance_and_leaves_greedy_output_lossless() -> None:
    _, plain, _ = _run()
    _, healthy, healthy_cycles = _run(2)
    _, perturbed, perturbed_cycles = _run(2, fault_perturb_draft=1.0)
    _, again, again_cycles = _run(2, fault_perturb_draft=1.0)
    assert healthy == plain and perturbed == plain  # the target verifies every draft token
    assert all(perturbed_cycles[r] > healthy_cycles[r] for r in healthy_cycles), (healthy_cycles, perturbed_cycles)
    assert (again, again_cycles) == (perturbed, perturbed_cycles)  # a fixed bias: the same drafts every boot


def test_an_eager_verify_on_cpu_runs_a_forward_per_position_with_the_same_tokens() -> None:
    widths: list[int] = []

    def counting(eng: Engine) -> None:
        forward = eng.model.forward

        def wrapped(tokens, *args, **kwargs):  # type: ignore[no-untyped-def]
            if kwargs.get("n_layers") in (None, eng.preset.n_layers) and tokens.shape[0] == 1:
                widths.append(int(tokens.shape[1]))
            return forward(tokens, *args, **kwargs)

        eng.model.forward = wrapped  # type: ignore[method-assign]

    _, outs, cycles = _run(2)
    eng = Engine(EngineConfig(preset="ref-tiny", device="cpu", dtype="float32", spec_algorithm="EAGLE3",
                              num_steps=2, fault_eager_verify=True))
    counting(eng)
    eng.add_request(RequestSpec("r0", TOK.encode(PROMPTS[0]), 32, ignore_eos=True))
    got, n = [], 0
    while eng.has_work():
        out = eng.step()
        got += out.new_tokens.get("r0", [])
        n += "r0" in out.accept_lens
        assert not out.can_run_cuda_graph
    assert got == outs["r0"] and n == cycles["r0"]
    verify = [w for w in widths if w != len(TOK.encode(PROMPTS[0]))]  # the prefill is one forward of the prompt
    assert verify == [1] * (3 * n)  # num_steps + 1 = 3 one-position forwards per cycle, none of width 3


def test_the_perturbed_draft_flag_is_documented_and_bounded() -> None:
    assert "--ref-fault-perturb-draft" in build_parser().format_help()
    assert resolve(build_parser().parse_args(["--ref-fault-perturb-draft", "0.5"]),
                   cuda_available=False).ref_fault_perturb_draft == 0.5
    with pytest.raises(ArgError, match="--ref-fault-perturb-draft"):
        resolve(build_parser().parse_args(["--ref-fault-perturb-draft", "-1"]), cuda_available=False)


def _ids(seed: int, n: int) -> list[int]:
    import random

    rng = random.Random(seed)
    return [rng.randrange(32, 127) for _ in range(n)]


def _cycles(eng: Engine, prompt: list[int], n: int = 24) -> tuple[list[int], int]:
    """One greedy request alone: its output and its verify cycles."""
    rid = f"r{eng.prefilled}-{len(prompt)}"
    eng.add_request(RequestSpec(rid, prompt, n, ignore_eos=True))
    out, cycles = [], 0
    while eng.has_work():
        step = eng.step()
        out += step.new_tokens.get(rid, [])
        cycles += rid in step.accept_lens
    return out, cycles


def test_a_stale_draft_accepts_less_after_a_pools_worth_of_prompts_until_a_flush() -> None:
    eng = Engine(EngineConfig(preset="ref-tiny", device="cpu", dtype="float32", spec_algorithm="EAGLE3", num_steps=2,
                              max_running_requests=2, fault_stale_draft_after=0))
    assert eng.max_total_tokens == 2048  # 2 slots x ref-tiny's 1,024: the limit when the flag has no value
    fresh = _cycles(eng, _ids(1, 200))
    for seed in (10, 11):  # 2 x 1,000 prompt tokens: 2,200 prefilled in all, past the pool
        _cycles(eng, _ids(seed, 1000), 1)
    assert eng.prefilled == 2200 and eng.draft_stale
    stale = _cycles(eng, _ids(1, 200))
    assert stale[0] == fresh[0] and stale[1] > fresh[1], (fresh, stale)  # lossless, more cycles
    assert eng.flush() and eng.prefilled == 0 and not eng.draft_stale
    assert _cycles(eng, _ids(1, 200)) == fresh  # the flush restores it exactly
    limited = Engine(EngineConfig(preset="ref-tiny", device="cpu", dtype="float32", spec_algorithm="EAGLE3",
                                  num_steps=2, fault_stale_draft_after=150))
    assert not limited.draft_stale
    _cycles(limited, _ids(1, 200))
    assert limited.draft_stale  # 200 > 150 prompt tokens


def test_a_draft_past_its_context_accepts_little_there_and_stays_lossless() -> None:
    healthy = Engine(EngineConfig(preset="ref-tiny", device="cpu", dtype="float32", spec_algorithm="EAGLE3",
                                  num_steps=2))
    faulty = Engine(EngineConfig(preset="ref-tiny", device="cpu", dtype="float32", spec_algorithm="EAGLE3",
                                 num_steps=2, fault_draft_context=256))
    short, long = _ids(3, 64), _ids(4, 600)
    assert _cycles(faulty, short) == _cycles(healthy, short)  # positions below 256: untouched
    (h_out, h_cycles), (f_out, f_cycles) = _cycles(healthy, long), _cycles(faulty, long)
    assert f_out == h_out and f_cycles > h_cycles
    assert 24 / f_cycles < 1.3, f_cycles  # nearly every draft token refused past the limit


def test_the_cache_and_context_fault_flags_are_documented_and_bounded() -> None:
    text = build_parser().format_help()
    assert "--ref-fault-stale-draft" in text and "--ref-fault-draft-context" in text
    parse = build_parser().parse_args
    assert resolve(parse(["--ref-fault-stale-draft"]), cuda_available=False).ref_fault_stale_draft == 0
    assert resolve(parse(["--ref-fault-stale-draft", "5000"]), cuda_available=False).ref_fault_stale_draft == 5000
    assert resolve(parse([]), cuda_available=False).ref_fault_stale_draft is None
    assert resolve(parse(["--ref-fault-draft-context", "2048"]), cuda_available=False).ref_fault_draft_context == 2048
    with pytest.raises(ArgError, match="--ref-fault-stale-draft"):
        resolve(parse(["--ref-fault-stale-draft", "-1"]), cuda_available=False)
    with pytest.raises(ArgError, match="--ref-fault-draft-context"):
        resolve(parse(["--ref-fault-draft-context", "-5"]), cuda_available=False)


def _batched(**faults: object) -> tuple[dict[str, list[int]], dict[str, int]]:
    """Greedy outputs and verify cycles of every prompt in one batch (all added before the first step)."""
    eng = Engine(EngineConfig(preset="ref-tiny", device="cpu", dtype="float32", spec_algorithm="EAGLE3", num_steps=2,
                              **faults))
    outs: dict[str, list[int]] = {}
    cycles: dict[str, int] = {}
    for i, p in enumerate(PROMPTS):
        eng.add_request(RequestSpec(f"r{i}", TOK.encode(p), 32, ignore_eos=True))
    while eng.has_work():
        out = eng.step()
        for rid, toks in out.new_tokens.items():
            outs.setdefault(rid, []).extend(toks)
            cycles[rid] = cycles.get(rid, 0) + (rid in out.accept_lens)
    return outs, cycles


def test_a_draft_gathered_one_request_off_lowers_acceptance_only_in_shared_batches() -> None:
    """--ref-fault-batch-draft: alone, a request drafts and accepts as a healthy one; in a batch of two each is
    verified against the other's drafts, accepts (almost) nothing, and its greedy output is unchanged."""
    _, plain, _ = _run()
    _, alone, alone_cycles = _run(2, fault_batch_draft=True)
    _, healthy_alone, healthy_cycles = _run(2)
    assert (alone, alone_cycles) == (healthy_alone, healthy_cycles)  # a batch of one is untouched
    healthy, batch_healthy_cycles = _batched()
    faulty, faulty_cycles = _batched(fault_batch_draft=True)
    assert healthy == faulty == plain
    assert batch_healthy_cycles == healthy_cycles  # healthy: the batch changes nothing (CPU float32)
    assert all(faulty_cycles[r] > healthy_cycles[r] + 5 for r in healthy_cycles), (healthy_cycles, faulty_cycles)
    assert "--ref-fault-batch-draft" in build_parser().format_help()
    assert resolve(build_parser().parse_args(["--ref-fault-batch-draft"]), cuda_available=False).ref_fault_batch_draft
