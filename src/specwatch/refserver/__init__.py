"""The reference server: a real (small, random-weight) transformer served like SGLang.

Started as ``python -m specwatch.refserver [SGLang flags]``. The tester never imports this package.
Modules: ``preset`` (model shapes and draft quality), ``tokenizer`` (byte-level), ``model`` (the
transformer and its KV cache), ``graph`` (CUDA graph runners), ``engine`` (scheduling, speculative
decoding, the engine contract of docs/architecture.md).
"""
