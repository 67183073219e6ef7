"""Parsers of the raw outputs under docs/validation/data/: pytest logs, specwatch tables, ab runs, step logs.

Each function takes the text of one file (or a parsed JSON document) and returns plain values; the claims
of claims.py compute everything they state from these, so no number on the generated page is typed by hand.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"

_COUNTS = re.compile(r"(\d+) (passed|failed|skipped|deselected|xfailed|xpassed|errors?|error)")
_SUMMARY = re.compile(r"^=*\s*((?:\d+ \w+(?:, )?)+) in ([\d.]+)s")


def read(rel: str) -> str:
    """The text of ``data/<rel>``."""
    return (DATA / rel).read_text(errors="replace")


def load(rel: str) -> dict:
    """The JSON document ``data/<rel>``."""
    return json.loads((DATA / rel).read_text())


def files(pattern: str) -> list[str]:
    """The files under data/ matching ``pattern``, relative to data/, sorted."""
    return sorted(str(p.relative_to(DATA)) for p in DATA.glob(pattern) if p.is_file())


@dataclass(frozen=True)
class PytestRun:
    """A pytest run's final line: counts per outcome and the seconds it reports."""

    counts: dict[str, int]
    seconds: float | None

    def n(self, outcome: str) -> int:
        return self.counts.get(outcome, 0)

    @property
    def text(self) -> str:
        parts = ", ".join(f"{v} {k}" for k, v in self.counts.items())
        return f"{parts} in {self.seconds:.0f} s" if self.seconds is not None else parts


def pytest_run(text: str) -> PytestRun | None:
    """The last pytest summary line of ``text`` ("17 passed in 146.36s"); None when the run never ended."""
    for line in reversed(text.splitlines()):
        m = _SUMMARY.match(line.strip())
        if m:
            counts = {k if not k.startswith("error") else "errors": int(v) for v, k in _COUNTS.findall(m[1])}
            return PytestRun(counts, float(m[2]))
    return None


def outcomes(text: str) -> dict[str, str]:
    """Test id -> PASSED / FAILED / SKIPPED / ERROR, from pytest's short test summary (``-rA``)."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(PASSED|FAILED|SKIPPED|ERROR|XFAIL) (\S+)", line)
        if m:
            out[m[2]] = m[1]
    return out


def tagged(text: str, tag: str) -> list[str]:
    """The lines a check printed under ``[tag] `` (e.g. ``[verify graphs]``), without the tag."""
    prefix = f"[{tag}] "
    return [line[len(prefix):].rstrip() for line in text.splitlines() if line.startswith(prefix)]


def row(text: str, key: str) -> list[str] | None:
    """The cells (split on runs of 2+ spaces) of the last specwatch table row whose first cell is ``key``."""
    found = None
    for line in text.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if cells and cells[0] == key:
            found = cells
    return found


def percent(cell: str) -> float:
    """'+78.2%' -> 0.782."""
    return float(cell.strip().rstrip("%")) / 100


@dataclass(frozen=True)
class AbRun:
    """One ``specwatch ab`` output: the final verdict, each key's verdict line and the boots' medians."""

    verdict: str | None  # "REGRESSION", "UNSURE", "no regression"; None when the run was cut
    keys: dict[str, str]  # key -> its verdict line
    per_round: dict[str, list[float]]  # key -> head/base change per round, as printed
    medians: dict[str, list[float]]  # "base" / "head" -> each boot's median, in order

    def key_verdict(self, key: str) -> str | None:
        line = self.keys.get(key)
        return line.split(":", 1)[0] if line else None


def ab_run(text: str) -> AbRun:
    verdict, keys, per_round = None, {}, {}
    medians: dict[str, list[float]] = {"base": [], "head": []}
    for line in text.splitlines():
        if m := re.match(r"^\[ab\] (REGRESSION|UNSURE|no regression)\b", line):
            verdict = m[1]
        elif m := re.match(r"^\[ab\] round \d+ (base|head): \S+ ([\d.]+) ", line):
            medians[m[1]].append(float(m[2]))
        elif m := re.match(r"^\[ab\] (\S+/\S+): (.*)$", line):
            keys[m[1]] = m[2]
            if r := re.search(r"per round: ([-+\d.% ]+)$", m[2]):
                per_round[m[1]] = [percent(x) for x in r[1].split()]
    return AbRun(verdict, keys, per_round, medians)


@dataclass(frozen=True)
class AbRound:
    """One measured side of one ``specwatch ab`` round: every key's median as the round line printed it."""

    round: int
    side: str  # "base" / "head"
    values: dict[str, float]  # key -> the boot's median
    seconds: float
    kept: bool  # kept from a stopped run's memo (``--resume``): the same boot as the stopped run's line


def ab_rounds(text: str) -> list[AbRound]:
    """Every ``[ab] round N base|head: KEY V unit; KEY V unit (S s[, kept from the stopped run])`` line, in order."""
    out = []
    for m in re.finditer(r"^\[ab\] round (\d+) (base|head): (.*) \(([\d.]+) s(, kept from the stopped run)?\)$", text,
                         re.M):
        values = {k: float(v) for k, v in re.findall(r"(\S+/\S+/\S+) ([\d.]+) \S+?(?:;|$)", m[3])}
        out.append(AbRound(int(m[1]), m[2], values, float(m[4]), bool(m[5])))
    return out


def ab_ratios(text: str, key: str) -> list[float]:
    """A key's head/base ratio of each whole round of an ab log (as ab judges them: the ratio of the two medians)."""
    found = {(r.round, r.side): r.values[key] for r in ab_rounds(text) if key in r.values}
    return [found[(n, "head")] / found[(n, "base")] for n in sorted({n for n, _ in found})
            if (n, "head") in found and (n, "base") in found]


@dataclass(frozen=True)
class Step:
    """One line of a harness or session step log: ``[12s] name: exit 0 in 60 s; rest``."""

    name: str
    exit: int
    seconds: int
    rest: str


def steps(text: str) -> list[Step]:
    out = []
    for line in text.splitlines():
        m = re.match(r"^(?:\[\d+s\] )?(.+?): exit (\d+) in (\d+) s;? ?(.*)$", line)
        if m:
            out.append(Step(m[1], int(m[2]), int(m[3]), m[4]))
    return out


@dataclass(frozen=True)
class Boot:
    """One server boot in a pytest log: its name, model, tensor-parallel size and seconds to ready."""

    name: str
    model: str
    tp: int
    device: str
    seconds: float


def boots(text: str) -> list[Boot]:
    """Every ``[specwatch] NAME ready in X s``, with the model, TP and device of its ``booting NAME:`` line."""
    booting: dict[str, tuple[str, int, str]] = {}
    out = []
    for line in text.splitlines():
        if m := re.search(r"\[specwatch\] booting (\S+): (.*)$", line):
            model = re.search(r"--model-path (\S+)", m[2])
            tp = re.search(r"--tp-size (\d+)", m[2])
            device = re.search(r"--device (\S+)", m[2])
            booting[m[1]] = (model[1] if model else "?", int(tp[1]) if tp else 1, device[1] if device else "?")
        elif (m := re.search(r"\[specwatch\] (\S+) ready in ([\d.]+) s", line)) and m[1] in booting:
            out.append(Boot(m[1], *booting[m[1]], float(m[2])))
    return out


def result_samples(doc: dict, key: str) -> list[float]:
    """The samples of one results-file key (``profile/workload/metric``)."""
    for r in doc["results"]:
        if f"{r['profile']}/{r['workload']}/{r['metric']}" == key:
            return [float(x) for x in r["samples"]]
    raise KeyError(key)


def cv(samples: list[float]) -> float:
    """Coefficient of variation (sample SD over mean)."""
    return statistics.stdev(samples) / statistics.fmean(samples)


def pct(x: float, digits: int = 1, sign: bool = True) -> str:
    """0.0123 -> '+1.2%'."""
    return f"{x * 100:+.{digits}f}%" if sign else f"{x * 100:.{digits}f}%"


def span(values: list[float], fmt: str = "{:.1f}") -> str:
    """'11.6–23.5' (one value alone when all agree)."""
    lo, hi = min(values), max(values)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}–{fmt.format(hi)}"
