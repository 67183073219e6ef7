"""Placeholder of specwatch's SGLang kit for ``nvidia-cutlass-dsl`` (the ``cutlass`` package), in 0.5.15.post1's
overlay only.

The real package is about 150 MB of wheels (``nvidia-cutlass-dsl-libs-base`` and ``-libs-cu13`` 4.5.2) and cannot
travel in a device call. SGLang 0.5.15.post1 imports it when the EAGLE-3 worker captures the draft's CUDA graphs:
``dsa_backend`` -> ``dsa_indexer`` -> ``sglang.jit_kernel.dsa`` -> ``cutedsl_paged_mqa_logits`` -> ``import
cutlass``, for Blackwell DSA kernels a triton-attention Llama never runs (0.5.16 made that import lazy, so its kit
needs no placeholder). The placeholder lets such modules be imported: any ``cutlass.X.Y`` module exists, any name in
it is a :class:`Placeholder`, which works as a decorator, an annotation, a dict value or a base class. A call with
arguments that is not decoration, and arithmetic, comparison, iteration or truth, raise at once, naming the
placeholder; a call with no positional argument returns a placeholder (as a decorator factory such as
``@cute.jit(preprocess=False)`` does), which raises at its first such use. So a path that would need the real package
fails loudly instead of running something else.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any

__version__ = "0+specwatch.placeholder"


class PlaceholderUsed(RuntimeError):
    """A placeholder name was used for more than being imported, decorating or annotating."""


class Placeholder:
    """Any name under the placeholder ``cutlass``."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return f"<cutlass placeholder {self._name}>"

    def __getattr__(self, attr: str) -> Placeholder:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Placeholder(f"{self._name}.{attr}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], Placeholder):
            return args[0]  # @cute.jit, @dsl_user_op: the function itself
        if not args:
            return self  # @cute.jit(preprocess=False) and the like: a decorator again
        raise PlaceholderUsed(f"{self._name}(...): nvidia-cutlass-dsl is a placeholder in specwatch's SGLang kit "
                              "(docs/validation/kit_placeholders/cutlass)")

    def __getitem__(self, item: Any) -> Placeholder:  # cutlass.Constexpr[int] in annotations
        return self

    def __or__(self, other: Any) -> Placeholder:  # cute.Tensor | None in annotations
        return self

    __ror__ = __or__

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:  # class K(cutlass.SomeBase)
        return (object,)

    def _used(self, *args: Any) -> Any:
        raise PlaceholderUsed(f"{self._name} was used: nvidia-cutlass-dsl is a placeholder in specwatch's SGLang kit")

    __bool__ = __iter__ = __len__ = __int__ = __float__ = __index__ = _used
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __floordiv__ = __mod__ = _used
    __lt__ = __le__ = __gt__ = __ge__ = _used


class _Module(types.ModuleType):
    def __getattr__(self, attr: str) -> Placeholder:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Placeholder(f"{self.__name__}.{attr}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Every ``cutlass.*`` submodule, made on import."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(__name__ + "."):
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _Module(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def __getattr__(attr: str) -> Placeholder:
    if attr.startswith("__"):
        raise AttributeError(attr)
    return Placeholder(f"{__name__}.{attr}")


if not any(isinstance(f, _Finder) for f in sys.meta_path):
    sys.meta_path.append(_Finder())
