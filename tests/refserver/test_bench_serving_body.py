"""The reference server takes the /generate body SGLang 0.5.16's bench_serving sends (its payload in
``async_request_sglang_generate``, sglang/benchmark/serving.py), as SGLang does: ``return_routed_experts`` is a field
of 0.5.16's ``GenerateReqInput`` (srt/managers/io_struct.py), accepted and not acted on here."""

from __future__ import annotations

import pytest

from specwatch.refserver.validate import BadRequest, generate_request

#: the payload of a streamed ``--backend sglang`` request with the benchmark's defaults, field for field
PAYLOAD = {"text": "a prompt", "sampling_params": {"temperature": 0.0, "max_new_tokens": 32, "ignore_eos": True},
           "stream": True, "lora_path": None, "return_logprob": False, "return_routed_experts": False,
           "logprob_start_len": -1}


def _check(body: dict) -> object:
    return generate_request(body, encode=lambda s: [ord(c) % 256 for c in s], vocab_size=512, context_len=1024,
                            max_batch=8)


def test_the_benchmarks_body_is_accepted() -> None:
    got = _check(PAYLOAD)
    assert got.stream and got.sampling[0]["max_new_tokens"] == 32


def test_a_bad_value_of_the_field_is_refused() -> None:
    with pytest.raises(BadRequest, match="return_routed_experts"):
        _check({**PAYLOAD, "return_routed_experts": "yes"})
