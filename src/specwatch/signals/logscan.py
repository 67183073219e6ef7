"""SGLang 0.5.12-0.5.23 log-line parsing (Decode, Prefill, Capture) and log windows by byte offset.

Pure: stdlib only. The formats come from the wheels (``metrics_reporter.py``, ``pool_stats_observer.py``,
``cuda_graph_setup.py``, ``eagle_worker_v2.py``; docs/reference/sglang-versions.md lists the differences,
e.g. a target capture's ``bs=[...]`` on the begin line before 0.5.23, and 0.5.12/0.5.13's capture lines that
name no phase); the regex bundled in ``srt/debug_utils/log_parser.py`` is stale and is not used. The reference
server prints 0.5.23's formats.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import IO

__all__ = ["CaptureRecord", "DecodeRecord", "LogTail", "LogWindow", "PrefillRecord", "Record", "parse_line",
           "parse_lines", "parse_log_main", "record_to_json", "tail"]

_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+|nan|inf)"
PREFIX = (
    r"^\[(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{3})?)"
    r"(?P<ranks>(?: [A-Z][A-Z_]*\d+)*)\] "
)
GRAPH_LABELS = ("cuda graph", "cpu graph", "npu graph", "musa graph")
_GRAPH = r"(?P<label>(?:cuda|cpu|npu|musa) graph): (?P<graph>True|False)"
_DECODE_RE = re.compile(
    PREFIX + r"Decode batch(?: \[(?P<iter>\d+)\])?, #running-req: (?P<running>\d+), (?P<body>.*?)"
    + _GRAPH + rf", gen throughput \(token/s\): (?P<gen_tput>{_NUM}), #queue-req: (?P<queue>\d+)"
    r"(?P<suffix>.*)$"
)
_PREFILL_RE = re.compile(
    PREFIX + r"Prefill batch(?: \[(?P<iter>\d+)\])?, #new-seq: (?P<new_seq>\d+), "
    r"#new-token: (?P<new_tok>\d+), #cached-token: (?P<cached>\d+), (?P<body>.*?)"
    + _GRAPH + rf", input throughput \(token/s\): (?P<in_tput>{_NUM})(?P<suffix>.*)$"
)
_CAPTURE_RE = re.compile(
    PREFIX + r"Capture (?P<role>target|draft) (?P<kind>verify|decode|prefill|extend) "
    r"(?P<dev>CUDA|CPU|NPU|XPU|MUSA) graph (?P<ev>begin|end)\.\s*(?P<rest>.*)$"
)
# 0.5.12/0.5.13 name no phase (model_runner.py ``init_device_graphs``, eagle_worker_v2.py ``init_cuda_graphs``):
# "Capture cuda graph begin." (the target), "Capture draft cuda graph end." (draft decode), "Capture draft extend
# cuda graph begin.", "Capture piecewise CUDA graph begin." (target prefill); the target's sizes are a line of their
# own, "Capture cuda graph bs [1, 2]" (cuda_graph_runner.py), read as event "bs"
_OLD_CAPTURE_RE = re.compile(
    PREFIX + r"Capture (?:(?P<role>draft) (?P<extend>extend )?|(?P<piecewise>piecewise ))?(?P<dev>cuda|cpu|npu|musa|"
    r"CUDA) graph (?:(?P<ev>begin|end)\b[^.]*\.\s*|bs \[(?P<bs>[\d, ]*)\])(?P<rest>.*)$"
)
_BS_RE = re.compile(r"\bbs=\[(?P<bs>[\d, ]*)\]")
_NUM_TOKENS_RE = re.compile(r"\bnum_tokens=\[(?P<nt>[\d, ]*)\]")
_KV_FLOAT = {
    "backend": re.compile(r"\bbackend=(?P<v>[\w-]+)"),
    "num_tokens_per_req": re.compile(r"\bnum_tokens_per_(?:req|bs)=(?P<v>\d+)"),  # per_bs: 0.5.14/0.5.15
    "elapsed_s": re.compile(rf"\b(?:elapsed=|Time elapsed: )(?P<v>{_NUM}) s"),  # "Time elapsed: ": 0.5.12/0.5.13
    "mem_usage_gb": re.compile(rf"\bmem usage=(?P<v>{_NUM}) GB"),
    "avail_mem_gb": re.compile(rf"\bavail mem=(?P<v>{_NUM}) GB"),
}
_RANK_RE = re.compile(r"([A-Z][A-Z_]*?)(\d+)$")
# Names of the pool fields in the Decode line ("key: value" pieces) -> record attribute.
_POOL_KEYS = {
    "#token": "tokens", "token usage": "usage", "#full token": "full_tokens", "full token usage": "full_usage",
    "#swa token": "swa_tokens", "swa token usage": "swa_usage", "mamba num": "mamba_num", "mamba usage": "mamba_usage",
    "#gpu token": "gpu_tokens", "gpu token usage": "gpu_usage", "#cpu token": "cpu_tokens",
    "cpu token usage": "cpu_usage",
}
_MFU_KEYS = {
    "est. decode TFLOPS/s (per GPU)": "tflops",
    "est. prefill TFLOPS/s (per GPU)": "tflops",
    "est. read BW (GB/s per GPU)": "read_gbps",
    "est. write BW (GB/s per GPU)": "write_gbps",
}


def _kv_pieces(text: str) -> dict[str, str]:
    """Split ``"a: 1, b: 2, "`` into ``{"a": "1", "b": "2"}`` (pieces without ': ' are skipped)."""
    out: dict[str, str] = {}
    for piece in text.split(", "):
        key, sep, value = piece.strip().strip(",").partition(": ")
        if sep:
            out[key.strip()] = value.strip()
    return out


def _num(text: str) -> float:
    return float(text)


def _parse_ranks(text: str) -> dict[str, int]:
    """``" DP0 TP1"`` -> ``{"DP": 0, "TP": 1}``."""
    ranks: dict[str, int] = {}
    for tok in text.split():
        m = _RANK_RE.match(tok)
        if m:
            ranks[m.group(1)] = int(m.group(2))
    return ranks


@dataclass(frozen=True)
class _Base:
    ts: str
    ranks: dict[str, int]

    @property
    def time(self) -> datetime:
        """The timestamp as a naive local datetime (milliseconds kept when logged)."""
        fmt = "%Y-%m-%d %H:%M:%S.%f" if "." in self.ts else "%Y-%m-%d %H:%M:%S"
        return datetime.strptime(self.ts, fmt)


@dataclass(frozen=True)
class DecodeRecord(_Base):
    """One ``Decode batch`` line (emitted every ``--decode-log-interval`` decode batches)."""

    running: int
    graph_label: str  # "cuda graph" | "cpu graph" | "npu graph" | "musa graph"
    graph: bool  # can_run_cuda_graph of the LAST batch of the window (verify graph when speculative)
    gen_tput: float
    queue: int
    iter: int | None = None
    tokens: int | None = None  # plain KV pool only
    usage: float | None = None  # plain KV pool only
    pool: dict[str, float] = field(default_factory=dict)  # hybrid pool fields (full_tokens, swa_usage...)
    accept_len: float | None = None  # canonical: committed tokens per request per verify, bonus incl.
    accept_rate: float | None = None
    cap_len: float | None = None
    block_accept_len: float | None = None
    mfu: dict[str, float] = field(default_factory=dict)  # tflops, read_gbps, write_gbps
    extra: dict[str, str] = field(default_factory=dict)  # PD-decode and other unknown fields

    @property
    def speculative(self) -> bool:
        return self.accept_len is not None


@dataclass(frozen=True)
class PrefillRecord(_Base):
    """One ``Prefill batch`` line (one per prefill batch)."""

    new_seq: int
    new_tok: int
    cached: int
    running: int
    queue: int
    graph_label: str
    graph: bool  # whether the prefill graph ran
    in_tput: float
    iter: int | None = None
    pending: int | None = None
    usage: float | None = None
    pool: dict[str, float] = field(default_factory=dict)
    mfu: dict[str, float] = field(default_factory=dict)
    extra: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CaptureRecord(_Base):
    """One ``Capture {role} {kind} CUDA graph begin|end.`` line. 0.5.12/0.5.13's lines name no phase: their
    target line is read as "target verify" (its runner captures the verify on a speculative server, the decode
    on a plain one), their draft line as "draft decode", and their target's ``bs [...]`` line is event "bs"."""

    role: str  # "target" | "draft"
    kind: str  # "verify" | "decode" | "prefill" | "extend"
    event: str  # "begin" | "end" | "bs" (0.5.12/0.5.13: the target's captured sizes, a line of their own)
    device: str = "CUDA"
    bs: list[int] | None = None  # target "end" lines (0.5.23), target "begin" lines (0.5.16/17), draft "begin"
    num_tokens: list[int] | None = None  # prefill graphs
    backend: str | None = None  # begin lines: "full" | "breakable"
    num_tokens_per_req: int | None = None
    elapsed_s: float | None = None  # end lines
    mem_usage_gb: float | None = None
    avail_mem_gb: float | None = None

    @property
    def name(self) -> str:
        """``"target verify"``, ``"draft decode"``, ..."""
        return f"{self.role} {self.kind}"


Record = DecodeRecord | PrefillRecord | CaptureRecord


def _split_body(body: str) -> tuple[dict[str, str], dict[str, float], dict[str, str]]:
    """Body pieces -> (kv, pool, extra-not-pool)."""
    kv = _kv_pieces(body)
    pool: dict[str, float] = {}
    rest: dict[str, str] = {}
    for key, value in kv.items():
        if key in _POOL_KEYS:
            try:
                pool[_POOL_KEYS[key]] = _num(value)
            except ValueError:
                rest[key] = value
        else:
            rest[key] = value
    return kv, pool, rest


def _suffix_fields(suffix: str) -> tuple[dict[str, float], dict[str, str]]:
    mfu: dict[str, float] = {}
    extra: dict[str, str] = {}
    for key, value in _kv_pieces(suffix).items():
        if key in _MFU_KEYS:
            try:
                mfu[_MFU_KEYS[key]] = _num(value)
                continue
            except ValueError:
                pass
        extra[key] = value
    return mfu, extra


def _opt_float(d: dict[str, str], key: str) -> float | None:
    if key not in d:
        return None
    try:
        return _num(d.pop(key))
    except ValueError:
        return None


def _parse_decode(m: re.Match[str]) -> DecodeRecord:
    _, pool_all, rest = _split_body(m.group("body"))
    tokens = pool_all.pop("tokens", None)
    usage = pool_all.pop("usage", None)
    accept_len = _opt_float(rest, "accept len")
    accept_rate = _opt_float(rest, "accept rate")
    cap_len = _opt_float(rest, "cap len")
    block = _opt_float(rest, "block accept len")
    mfu, extra_suffix = _suffix_fields(m.group("suffix"))
    return DecodeRecord(
        ts=m.group("ts"),
        ranks=_parse_ranks(m.group("ranks")),
        running=int(m.group("running")),
        graph_label=m.group("label"),
        graph=m.group("graph") == "True",
        gen_tput=_num(m.group("gen_tput")),
        queue=int(m.group("queue")),
        iter=int(m.group("iter")) if m.group("iter") else None,
        tokens=int(tokens) if tokens is not None else None,
        usage=usage,
        pool=pool_all,
        accept_len=accept_len,
        accept_rate=accept_rate,
        cap_len=cap_len,
        block_accept_len=block,
        mfu=mfu,
        extra={**rest, **extra_suffix},
    )


def _parse_prefill(m: re.Match[str]) -> PrefillRecord:
    _, pool_all, rest = _split_body(m.group("body"))
    usage = pool_all.pop("usage", None)
    running = rest.pop("#running-req", "0")
    queue = rest.pop("#queue-req", "0")
    pending = rest.pop("#pending-token", None)
    mfu, extra_suffix = _suffix_fields(m.group("suffix"))
    return PrefillRecord(
        ts=m.group("ts"),
        ranks=_parse_ranks(m.group("ranks")),
        new_seq=int(m.group("new_seq")),
        new_tok=int(m.group("new_tok")),
        cached=int(m.group("cached")),
        running=int(running),
        queue=int(queue),
        graph_label=m.group("label"),
        graph=m.group("graph") == "True",
        in_tput=_num(m.group("in_tput")),
        iter=int(m.group("iter")) if m.group("iter") else None,
        pending=int(pending) if pending is not None else None,
        usage=usage,
        pool=pool_all,
        mfu=mfu,
        extra={**rest, **extra_suffix},
    )


def _int_list(text: str) -> list[int]:
    return [int(x) for x in text.replace(" ", "").split(",") if x]


def _parse_capture(m: re.Match[str], old: bool = False) -> CaptureRecord:
    rest = m.group("rest")
    if old:  # 0.5.12/0.5.13: the phase from the words the line has (see CaptureRecord)
        role = m.group("role") or "target"
        kind = ("extend" if m.group("extend") else "decode" if role == "draft" else
                "prefill" if m.group("piecewise") else "verify")
        bs_text = m.group("bs")
    else:
        role, kind, bs_text = m.group("role"), m.group("kind"), None
    vals: dict[str, object] = {}
    for key, rx in _KV_FLOAT.items():
        km = rx.search(rest)
        if km:
            v = km.group("v")
            vals[key] = v if key == "backend" else (int(v) if key == "num_tokens_per_req" else _num(v))
    if bs_text is None and (bs := _BS_RE.search(rest)):
        bs_text = bs.group("bs")
    nt = _NUM_TOKENS_RE.search(rest)
    return CaptureRecord(
        ts=m.group("ts"),
        ranks=_parse_ranks(m.group("ranks")),
        role=role,
        kind=kind,
        event=m.group("ev") or "bs",
        device=m.group("dev").upper(),
        bs=_int_list(bs_text) if bs_text is not None else None,
        num_tokens=_int_list(nt.group("nt")) if nt else None,
        **vals,  # type: ignore[arg-type]
    )


def parse_line(line: str) -> Record | None:
    """Parse one log line; ``None`` for anything that is not a Decode, Prefill or Capture line."""
    line = line.rstrip("\r\n")
    if "batch" in line:
        m = _DECODE_RE.match(line)
        if m:
            return _parse_decode(m)
        m = _PREFILL_RE.match(line)
        if m:
            return _parse_prefill(m)
        return None
    if "Capture " in line:
        m = _CAPTURE_RE.match(line)
        if m:
            return _parse_capture(m)
        m = _OLD_CAPTURE_RE.match(line)
        if m:
            return _parse_capture(m, old=True)
    return None


def _physical_to_logical(lines: Iterable[str]) -> Iterator[str]:
    """tqdm bars rewrite a line with ``\\r``; every ``\\r``-separated piece is its own line."""
    for raw in lines:
        yield from raw.rstrip("\n").split("\r")


def parse_lines(lines: Iterable[str]) -> list[Record]:
    """Parse many lines, keeping only the recognised records, in order."""
    out: list[Record] = []
    for line in _physical_to_logical(lines):
        rec = parse_line(line)
        if rec is not None:
            out.append(rec)
    return out


def record_to_json(rec: Record) -> dict:
    """A plain dict with a ``"type"`` key (``decode``/``prefill``/``capture``)."""
    kind = {DecodeRecord: "decode", PrefillRecord: "prefill", CaptureRecord: "capture"}[type(rec)]
    return {"type": kind, **asdict(rec)}


# ----------------------------------------------------------------------------------------------
# Log files that grow while we read them.


class LogTail:
    """Read the complete lines a growing log file gained after a byte offset.

    ``mark()`` returns the current end; ``read_since(offset)`` returns the complete lines written
    after it (a partial last line is left for later unless ``final=True``). A file that shrank
    below the offset (truncated or replaced) is read from its start.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)

    def size(self) -> int:
        try:
            return os.path.getsize(self.path)
        except OSError:
            return 0

    def mark(self) -> int:
        return self.size()

    def read_bytes_since(self, offset: int, final: bool = False) -> tuple[bytes, int]:
        """(complete-line bytes after ``offset``, offset just after them)."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                end = fh.tell()
                if end < offset:
                    offset = 0
                fh.seek(offset)
                data = fh.read(end - offset)
        except OSError:
            return b"", offset
        if not final:
            cut = data.rfind(b"\n")
            data = data[: cut + 1] if cut >= 0 else b""
        return data, offset + len(data)

    def read_since(self, offset: int, final: bool = False) -> tuple[list[str], int]:
        """(lines after ``offset``, new offset). Lines are decoded as UTF-8 with replacement."""
        data, new = self.read_bytes_since(offset, final=final)
        text = data.decode("utf-8", errors="replace")
        return list(_physical_to_logical(text.splitlines(keepends=False))), new


class LogWindow:
    """The lines of one log file written between ``start()`` (or construction) and now.

    Use it around a workload so a check looks only at what that workload produced::

        win = LogWindow(log_path)      # starts at the current end of the file
        run_workload()
        decodes = win.decode_records()
    """

    def __init__(self, path: str | os.PathLike[str], start: int | None = None) -> None:
        self._tail = LogTail(path)
        self.start_offset = self._tail.mark() if start is None else start
        self.end_offset: int | None = None

    @property
    def path(self) -> str:
        return self._tail.path

    def restart(self) -> int:
        """Move the start to the current end of the file; return it."""
        self.start_offset = self._tail.mark()
        self.end_offset = None
        return self.start_offset

    def close(self) -> None:
        """Freeze the end: later lines are no longer part of this window."""
        self.end_offset = self._tail.mark()

    def __enter__(self) -> LogWindow:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def lines(self, final: bool = True) -> list[str]:
        data, _ = self._tail.read_bytes_since(self.start_offset, final=final)
        if self.end_offset is not None:
            data = data[: max(0, self.end_offset - self.start_offset)]
        return list(_physical_to_logical(data.decode("utf-8", errors="replace").splitlines()))

    def records(self) -> list[Record]:
        return parse_lines(self.lines())

    def decode_records(self) -> list[DecodeRecord]:
        return [r for r in self.records() if isinstance(r, DecodeRecord)]

    def prefill_records(self) -> list[PrefillRecord]:
        return [r for r in self.records() if isinstance(r, PrefillRecord)]

    def capture_records(self) -> list[CaptureRecord]:
        return [r for r in self.records() if isinstance(r, CaptureRecord)]


def tail(path: str | os.PathLike[str], n: int = 50, max_bytes: int = 1 << 20) -> str:
    """The last ``n`` lines of a file (reading at most ``max_bytes`` from its end); '' if absent."""
    if n <= 0:
        return ""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            end = fh.tell()
            start = max(0, end - max_bytes)
            fh.seek(start)
            data = fh.read(end - start)
    except OSError:
        return ""
    lines = data.decode("utf-8", errors="replace").splitlines()
    if start > 0 and lines:
        lines = lines[1:]  # the first one is probably cut
    return "\n".join(lines[-n:])


def parse_log_main(path: str | os.PathLike[str], out: IO[str] | None = None) -> int:
    """``specwatch parse-log FILE``: one JSON object per Decode/Prefill/Capture record. Returns 0."""
    from specwatch.errors import UsageError

    out = out if out is not None else sys.stdout
    try:
        fh = open(path, encoding="utf-8", errors="replace")  # noqa: SIM115
    except OSError as exc:
        raise UsageError(f"parse-log: cannot read {os.fspath(path)!r}: {exc.strerror}") from exc
    with fh:
        for line in _physical_to_logical(fh):
            rec = parse_line(line)
            if rec is not None:
                out.write(json.dumps(record_to_json(rec), sort_keys=True) + "\n")
    return 0
