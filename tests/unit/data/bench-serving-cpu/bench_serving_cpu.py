"""How bench.jsonl here was made: SGLang 0.5.16's own ``bench_serving`` (its unpacked source, unchanged) run on a
CPU host that lacks torchvision and Hugging Face ``datasets``.

    PYTHONPATH=SGLANG_0_5_16_SOURCE:SITE python bench_serving_cpu.py --backend sglang --base-url URL ...

SITE held the pure-Python packages sglang imports at start (orjson, requests, pybase64, pyzmq, triton, IPython,
transformers 5.12.1 and tokenizers 0.22.2 as the kit pins them, huggingface_hub < 2), the kit's ``datasets``
placeholder (docs/validation/sglang_kit.py) and a ``torchvision`` package whose ``io`` module only names what
sglang imports from it. Here, before the benchmark module runs: transformers is told torchvision is absent (its
image processors then need none), and ``sglang.srt.disaggregation.utils``, whose import registers image processors,
is stood in for by the one constant serving.py takes from it. Nothing of the benchmark's measuring is touched.
"""

import runpy
import sys
import types

import transformers.utils.import_utils as iu

_available = iu._is_package_available


def _without_torchvision(name: str, return_version: bool = False) -> tuple[bool, str | None]:
    if name == "torchvision":
        return False, "N/A" if return_version else None
    return _available(name, return_version)


iu._is_package_available = _without_torchvision
iu.is_torchvision_available.cache_clear()
import sglang  # noqa: E402,F401  (the package first: its __init__ applies its transformers patches)

_disaggregation = types.ModuleType("sglang.srt.disaggregation.utils")
_disaggregation.FAKE_BOOTSTRAP_HOST = "2.2.2.2"  # as 0.5.16's srt/disaggregation/utils.py defines it
sys.modules["sglang.srt.disaggregation.utils"] = _disaggregation
sys.argv[0] = "bench_serving"
runpy.run_module("sglang.bench_serving", run_name="__main__")
