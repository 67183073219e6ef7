"""Seed baselines/{h200x1,h200x2-nvlink}/round-spread.json from the recorded data under docs/validation/data.

Every run written names its result key, its source file and how its ratios were made:

* ``specwatch ab`` logs (``session6/call*-ab-*.txt``, ``session7/s7a-ab-*.txt`` on h200x1,
  ``session7/s7c-ab-tp2-*.txt`` on h200x2-nvlink): each round's head/base ratio, recomputed from the
  medians the log printed (4 significant digits). Only ``decode_tok_s`` was printed, so these give
  that metric alone.
* Boots of the healthy server recorded one after another on one GPU (``session3/drift-large-*.json``,
  ``session4/drift-large-*-c.json``: ref-large, ``large-eagle3-tuned``; ``drift-seq-gpu0.json``:
  ref-small, ``eagle3-tuned``, alone on its GPU): consecutive boots paired as the rounds of an A/A,
  the pair's order alternating as ab alternates its sides (boot 2k+1 / boot 2k, then 2k+2 / 2k+3),
  on the median of the level-0 (no fault) runs, for ``decode_tok_s`` and ``output_tok_s``.
* Recording sessions of one h200x2-nvlink lease (``session5/baseline-x2-7-sessions-*.json``, the six
  sessions of 23:28-23:35; the seventh is another lease): paired the same way, both metrics.

* Real SGLang 0.5.16 + EAGLE-3 on h200x1 (``2026-12-03-sglang-ab-x1/sgl-ab-slow.txt``,
  ``2026-12-03-sglang-ab-same-x1/sgl-ab-same.txt``, and 0.5.16 against 0.5.17 in
  ``2026-12-03-sglang-versions-x1/sgl-ab-versions.txt``, cut by its call's limit after two whole rounds):
  ``specwatch ab`` logs, engine ``sglang``. And the two identical EAGLE-3 servers of each real-SGLang perf
  session (``sgl-eagle3`` and ``sgl-eagle3-untuned``: they differ only in NCCL variables, which one rank never
  reads), booted one after the other on one GPU: one A/A round per session (``2026-12-03-sglang-perf-x1``,
  ``-x1-2``, ``-x1-3``), ``decode_tok_s``.

The real-SGLang runs are also written to the validation store of real SGLang
(``docs/validation/sglang/baselines/h200x1/round-spread.json``), whose baselines the drift gate judges with them.

Every run names its engine: ``reference`` (the reference server) for sessions 1-8, ``sglang`` for the real
server. The real-SGLang runs also name what they served (``served``, ``Measurement.identity`` of the profile that
ran them: the tiny model's 128-token workload, or the 8B shape's 256-token one), so that a profile that reuses a
name with another model never borrows them (store/roundspread.py says why).

A run's spread is taken around its own mean, so a slowdown in an A/B run does not inflate it. Run
from the repository root: ``python docs/validation/seed_round_spread.py`` (it rewrites both files).
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import replace
from pathlib import Path

from specwatch.load.workload import resolve as resolve_workload
from specwatch.profiles.loading import load_profiles
from specwatch.store.roundspread import RoundRun, RoundSpread

DATA = Path("docs/validation/data")
REF = "reference"  # the engine of sessions 1-8: the reference server
LINE = re.compile(r"^\[ab\] round (\d+) (base|head): (\S+/decode_tok_s) ([\d.]+) tok/s")


def ab_log(path: Path, metric: str = "decode_tok_s") -> tuple[str, list[float]]:
    """(key, per-round head/base ratios) of one ab log, of ``metric`` (the first key of it on each round's line)."""
    line_re = LINE if metric == "decode_tok_s" else re.compile(
        rf"^\[ab\] round (\d+) (base|head): (?:.*?; )?(\S+/{re.escape(metric)}) ([\d.]+) tok/s")
    medians: dict[tuple[int, str], float] = {}
    key = ""
    for line in path.read_text().splitlines():
        if m := line_re.match(line):
            medians[(int(m[1]), m[2])] = float(m[4])
            key = m[3]
    rounds = sorted({r for r, _ in medians})  # a log cut by its call's time limit may end inside a round
    return key, [medians[(r, "head")] / medians[(r, "base")] for r in rounds
                 if (r, "head") in medians and (r, "base") in medians]


def alternate_pairs(values: list[float]) -> list[float]:
    """Consecutive values paired as A/A rounds whose order alternates (B/A, then A/B, ...)."""
    out = []
    for k in range(len(values) // 2):
        a, b = values[2 * k], values[2 * k + 1]
        out.append(b / a if k % 2 == 0 else a / b)
    return out


def boots(path: Path, metric: str) -> list[float]:
    """The level-0 medians of ``metric`` of a drift experiment's boots, in boot order."""
    data = json.loads(path.read_text())
    return [statistics.median(b["levels"]["0"][metric]) for b in data["boots"] if "0" in b["levels"]]


def boot_set_ratios(boots_tok_s: list[float]) -> tuple[float, ...]:
    """One boot set as one run of round ratios: each boot over the set's geometric mean, its log scaled by sqrt(2)
    (a round is a boot over a boot), so the run's round spread is the boots' spread times sqrt(2)."""
    logs = [math.log(x) for x in boots_tok_s]
    mean = sum(logs) / len(logs)
    return tuple(math.exp(math.sqrt(2.0) * (x - mean)) for x in logs)


def boot_sets(path: Path) -> list[RoundRun]:
    """The seeded boot sets of a boots file (``sets[].seed``) as runs, labelled with the file's provenance."""
    data = json.loads(path.read_text())
    return [RoundRun(s["metric"], boot_set_ratios(s["boots_tok_s"]), path.stem[:10],
                     f"fresh boots, each over their geometric mean, log scaled by sqrt(2) (a round is a boot over a "
                     f"boot): {data['provenance']}: {path}", s["key"], s["engine"])
            for s in data["sets"] if s["seed"]]


#: the profile each real-SGLang key was measured with (its served identity is recorded with its runs)
SERVED_BY = {"sgl-eagle3": "docs/validation/sglang/eagle3-base.toml",
             "sgl8b-eagle3": "docs/validation/sglang/eagle3-8b-base.toml",
             "sgl8b-plain": "docs/validation/sglang/plain-8b.toml"}


def served(key: str) -> str:
    """What the real-SGLang profile of ``key`` served, as a measurement of it records it (the string form of
    ``Measurement.served``)."""
    server, workload, _ = key.split("/", 2)
    profiles = load_profiles(SERVED_BY[server])
    wl = resolve_workload(workload, profiles.workload)
    return profiles.servers[server].setup().at(wl.name, wl.concurrency, wl.max_new_tokens).text()


def twin_ratio(path: Path) -> float:
    """sgl-eagle3-untuned's single-stream decode tok/s median over sgl-eagle3's, in one perf results file."""
    found = {r["key"]: statistics.median(r["samples"]) for r in json.loads(path.read_text())["results"]}
    return found["sgl-eagle3-untuned/single-stream/decode_tok_s"] / found["sgl-eagle3/single-stream/decode_tok_s"]


def main() -> None:
    h1: list[RoundRun] = []
    for log in [*sorted((DATA / "session6").glob("call*-ab-*.txt")), *sorted((DATA / "session7").glob("s7a-ab-*.txt"))]:
        key, ratios = ab_log(log)
        h1.append(RoundRun("decode_tok_s", tuple(ratios), "2026-11-30", f"ab log {log}", key, REF))
    drift = [(p, "large-eagle3-tuned") for p in sorted((DATA / "session3").glob("drift-large-gpu?*.json"))]
    drift += [(p, "large-eagle3-tuned") for p in sorted((DATA / "session4").glob("drift-large-gpu?-c.json"))]
    drift += [(DATA / "drift-seq-gpu0.json", "eagle3-tuned")]
    for path, profile in drift:
        for metric in ("decode_tok_s", "output_tok_s"):
            ratios = alternate_pairs(boots(path, metric))
            h1.append(RoundRun(metric, tuple(ratios), "2026-11-29",
                               f"consecutive healthy boots on one GPU, paired as A/A rounds: {path}",
                               f"{profile}/single-stream/{metric}", REF))
    sgl: list[RoundRun] = []
    for log in (DATA / "2026-12-03-sglang-ab-x1" / "sgl-ab-slow.txt",
                DATA / "2026-12-03-sglang-ab-same-x1" / "sgl-ab-same.txt",
                DATA / "2026-12-03-sglang-versions-x1" / "sgl-ab-versions.txt"):
        key, ratios = ab_log(log)
        sgl.append(RoundRun("decode_tok_s", tuple(ratios), "2026-12-03", f"ab log {log}", key, "sglang"))
    twins = [twin_ratio(DATA / name / "sgl-perf.json") for name in ("2026-12-03-sglang-perf-x1",
                                                                     "2026-12-03-sglang-perf-x1-2",
                                                                     "2026-12-03-sglang-perf-x1-3")]
    sgl.append(RoundRun("decode_tok_s", tuple(twins), "2026-12-03",
                        "identical servers sgl-eagle3-untuned / sgl-eagle3 booted one after the other, one A/A round "
                        "per perf session: docs/validation/data/2026-12-03-sglang-perf-x1{,-2,-3}/sgl-perf.json",
                        "sgl-eagle3/single-stream/decode_tok_s", "sglang"))
    sgl = [replace(r, served=served(r.key)) for r in sgl]
    h1 += sgl  # the shipped class file keeps the tiny model's rounds of sgl-eagle3 (the profile it ships)
    sgl += [replace(r, served=served(r.key))  # the 8B shape's: its validation profiles' alone
            for r in boot_sets(DATA / "2026-12-04-issue36-boots.json")]
    for log in (DATA / "2026-12-04-sglang-8b-aa-x1" / "sgl8b-ab-same-resume.txt",
                DATA / "2026-12-04-sglang-8b-aa-x1" / "sgl8b-plain-ab-same.txt",
                DATA / "2026-12-04-sglang-8b-ab-x1" / "sgl8b-ab-slow3.txt"):
        for metric in ("decode_tok_s", "output_tok_s"):
            key, ratios = ab_log(log, metric)
            sgl.append(RoundRun(metric, tuple(ratios), "2026-12-04", f"ab log {log}", key, "sglang", served(key)))
    x2: list[RoundRun] = []
    for log in sorted((DATA / "session7").glob("s7c-ab-tp2-*.txt")):
        key, ratios = ab_log(log)
        x2.append(RoundRun("decode_tok_s", tuple(ratios), "2026-12-01", f"ab log {log}", key, REF))
    for profile in ("baseline-tuned", "eagle3-tuned"):
        path = DATA / "session5" / f"baseline-x2-7-sessions-{profile}.json"
        metrics = json.loads(path.read_text())["metrics"]
        for metric in ("decode_tok_s", "output_tok_s"):
            medians = [statistics.median(s["samples"]) for s in metrics[f"single-stream/{metric}"]["sessions"][:6]]
            x2.append(RoundRun(metric, tuple(alternate_pairs(medians)), "2026-11-29",
                               f"consecutive recording sessions of one lease, paired as A/A rounds: {path} "
                               f"(sessions 1-6)", f"{profile}/single-stream/{metric}", REF))
    for folder, machine_class, runs in (("baselines", "h200x1", h1), ("baselines", "h200x2-nvlink", x2),
                                        ("docs/validation/sglang/baselines", "h200x1", sgl)):
        spread = RoundSpread(Path(folder) / machine_class / "round-spread.json", machine_class, runs)
        print(spread.save())
        for key in sorted({r.key for r in runs}):
            engine = next(r.engine for r in runs if r.key == key)
            prior, source = spread.prior_for(key, engine, next(r.served for r in runs if r.key == key))
            print(f"  {key}: {prior.spread:.2%} over {prior.df} df ({source.split(' (')[0]})" if prior else key)


if __name__ == "__main__":
    main()
