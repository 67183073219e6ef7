"""Inference servers specwatch recognises on a host but does not drive (a measurement's ``shared_host``):
how each is started, nothing more. Recognising one is not an adapter; see docs/architecture.md,
"Adding an engine", for what driving one takes.
"""

from __future__ import annotations

from specwatch.engines.protocol import ProcessSignature

__all__ = ["FOREIGN"]

FOREIGN: tuple[ProcessSignature, ...] = (
    ProcessSignature("vLLM server", commands=(("vllm", "serve"),),
                     modules=("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server")),
    ProcessSignature("transformers serve", commands=(("transformers", "serve"),)),
    ProcessSignature("Ollama server", commands=(("ollama", "serve"),)),
    ProcessSignature("TensorRT-LLM server", programs=("trtllm-serve",)),
    ProcessSignature("TGI server", programs=("text-generation-launcher", "text-generation-router")),
    ProcessSignature("Triton server", programs=("tritonserver",)),
    ProcessSignature("llama.cpp server", programs=("llama-server",)),
)
