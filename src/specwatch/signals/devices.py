"""``CUDA_VISIBLE_DEVICES`` as CUDA reads it: the one parser of that variable (pure)."""

from __future__ import annotations

from collections.abc import Mapping


def visible_devices(env: Mapping[str, str]) -> list[str] | None:
    """The entries of ``CUDA_VISIBLE_DEVICES`` that CUDA would use, or None when it is unset.

    Like CUDA, enumeration stops at the first entry that is neither an index ≥ 0 nor a GPU UUID
    (so ``-1`` or an empty value hide every GPU).
    """
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return None
    out: list[str] = []
    for tok in (t.strip() for t in raw.split(",")):
        if not (tok.isdigit() or tok.startswith(("GPU-", "MIG-"))):
            break
        out.append(tok)
    return out


def select_visible(uuids: list[str], visible: list[str]) -> list[int] | None:
    """nvidia-smi indices of the GPUs that ``visible`` (from :func:`visible_devices`) names, in its
    order; None when that cannot be told (a MIG instance, or an index or UUID that does not exist)."""
    picked: list[int] = []
    for tok in visible:
        if tok.isdigit():
            idx = int(tok)
            if idx >= len(uuids):
                return None
        elif tok.startswith("GPU-"):
            hits = [i for i, u in enumerate(uuids) if u.startswith(tok)]
            if len(hits) != 1:
                return None
            idx = hits[0]
        else:
            return None
        if idx not in picked:
            picked.append(idx)
    return picked
