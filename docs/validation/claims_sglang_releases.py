"""Claims about SGLang's releases 0.5.12 to 0.5.17 read from their own sources (issue 46), before and beside the
release ladder measured on a GPU.

Registered into claims.CLAIMS when claims.py imports this module. The data: 2026-12-05-sglang-release-sources,
``docs/validation/sglang_releases.py`` run on the six wheels (its ``commands.txt`` holds their sha256s).
"""

from __future__ import annotations

import json
import re

import outputs as parse
import sglang_releases
from claims import HOLDS, MEASURED, NOT_MET, PARTIAL, Finding, claim, table

SOURCES = "2026-12-05-sglang-release-sources"


@claim("sglang-release-sources", "What SGLang 0.5.12 to 0.5.17 change on the path batch-1 EAGLE-3 decode runs (triton, "
       "topk 1), read from each release's wheel",
       "every fact read by a detector anchored in the release's code (a missing anchor stops the run); each "
       "consecutive pair's changed path files listed with their changed definitions", "46",
       again=("python docs/validation/sglang_releases.py --wheels DIR --json sources.json",))
def sglang_release_sources() -> Finding:
    """The facts that differ between releases, those that hold in all six, and each pair's count of changed files."""
    data = json.loads(parse.read(f"{SOURCES}/sources.json"))
    versions = data["versions"]
    cells = {v: sglang_releases.fact_rows(data["releases"][v]["facts"], data["max_bs"]) for v in versions}
    facts = list(cells[versions[0]])
    differ = [f for f in facts if len({cells[v].get(f) for v in versions}) > 1]
    same = [f for f in facts if f not in differ]
    pairs = [(p["old"], p["new"], [d for d in p["files"] if d["status"] not in ("unchanged", "absent")])
             for p in data["pairs"]]
    cap_first = all(data["releases"][v]["facts"]["finish_order"]["length_before_stop"] for v in versions)
    fa3_eager = not any(data["releases"][v]["facts"]["draft_extend_graph"]["fa3"] for v in versions)
    measured = (f"{len(versions)} releases, {len(facts)} facts: {len(differ)} differ between releases, "
                f"{len(same)} hold in all; the cap tested before the stop in "
                f"{'all six' if cap_first else 'some only'}; FA3 (the Hopper default) "
                f"{'never graphs draft extend' if fa3_eager else 'graphs draft extend in some'}; "
                + ", ".join(f"{a} -> {b}: {len(moved)} path files changed" for a, b, moved in pairs))
    detail = "\n\n".join([
        "Facts that differ between releases:",
        table(["fact", *versions], [[f, *(cells[v][f] for v in versions)] for f in differ]),
        "Facts that hold in all six: " + "; ".join(f"{f}: {cells[versions[0]][f]}" for f in same) + ".",
        "Path files changed per pair (the files with the most lines changed first; the whole lists, with each "
        f"file's changed definitions, are in `data/{SOURCES}/sources.md`):",
        table(["pair", "files changed", "most lines changed"],
              [[f"{a} -> {b}", len(moved), ", ".join(
                  f"`{(d['new'] or d['old']).rsplit('/', 1)[-1]}` +{d['added_lines']}/-{d['removed_lines']}"
                  for d in sorted(moved, key=lambda d: -(d["added_lines"] + d["removed_lines"]))[:4])]
               for a, b, moved in pairs]),
    ])
    return Finding(MEASURED, measured, [f"{SOURCES}/sources.json", f"{SOURCES}/sources.md"], detail)


def faster(key: dict) -> str | None:
    """A verdict file key's FASTER words: its own ``faster`` field, or for a file written before the field, the
    same rule (``specwatch.revisions.rounds.faster_by``) on its change, interval and tolerance."""
    from specwatch.judge.paired import PairedRounds
    from specwatch.revisions.rounds import faster_by

    if "faster" in key:
        return key["faster"]
    if key["verdict"] != "no_regression" or None in (key["change"], key["low"], key["high"], key["tolerance"]):
        return None
    summary = PairedRounds(key["rounds"], 1 + key["change"], 1 + key["low"], 1 + key["high"], key["p"] or 1.0, 0.0)
    return faster_by(summary, key["higher_is_better"], key["tolerance"])


def ladder_tables(data: dict) -> str:
    """The release ladder's tables from its verdict file (``ab-ladder --json``): each pair's keys (change with the
    look's interval, tolerance, verdict), then each check's outcome per release. For the ladder's claim, once a
    device has run ``harness.py run sglang-8b-ladder-1-x1`` to ``-4-x1``."""
    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x * 100:+.1f}%"

    rows = []
    for pair in data["pairs"]:
        for k in pair["keys"]:
            verdict = k["verdict"].replace("_", " ") + (" (faster beyond the tolerance)" if faster(k) else "")
            rows.append([f"{pair['base']} -> {pair['head']}", k["key"].rsplit("/", 1)[-1],
                         f"{pct(k['change'])} [{pct(k['low'])}, {pct(k['high'])}]",
                         f"±{k['tolerance'] * 100:.1f}%" if k["tolerance"] is not None else "-",
                         verdict, " ".join(pct(r - 1) if r else "-" for r in k["round_ratios"])])
    parts = [table(["pair", "key", "change [interval]", "tolerance", "verdict", "per round"], rows)]
    if data.get("dropped"):
        parts.append("Dropped (not measured): " + "; ".join(f"{v}: {why}" for v, why in data["dropped"].items()))
    if data.get("checks"):
        chain = data["chain"]
        cells = [[c["test"] + (" (differs)" if c["differs"] else ""),
                  *((c["outcomes"].get(v) or "-").split(":", 1)[0] for v in chain)] for c in data["checks"]]
        parts.append(table(["check", *chain], cells))
    return "\n\n".join(parts)


#: the ladder's runs, oldest first: the folder of each one's last call (its verdict file and memo), its GPU and the
#: last call's output (the verdicts in words)
LADDERS = (("2026-12-05-sglang-8b-ladder-3-x1", "H200", "sgl8b-ladder-eagle3-3.txt"),
           ("2026-12-06-sglang-8b-ladder-3-x1", "H100", "sgl8b-ladder-eagle3-3.txt"),
           ("2026-12-06-sglang-8b-ladder-4-x1", "H200", "sgl8b-ladder-eagle3-4.txt"))


#: a ladder boot's results file in its memo: ladder-<rung>-<profile>-<ladder id>-r<round>.results.json
BOOT = re.compile(r"ladder-\d+-(eagle3-8b-[\w.]+?)-[0-9a-f]{12}-r(\d+)\.results\.json$")


def boots(folder: str, key: str = "sgl8b-eagle3/single-stream/decode_tok_s") -> dict[str, list[tuple[float, float]]]:
    """Per release of a ladder run, each boot's (median, spread) of ``key`` over its requests, in round order: the
    spread from request to request is the median absolute deviation over the median (robust to one slow request)."""
    import statistics

    out: dict[str, list[tuple[int, float, float]]] = {}
    for path in sorted((parse.DATA / folder / "memo").glob("*/ladder-*.results.json")):
        if (m := BOOT.search(path.name)) is None:
            continue
        samples = next(r["samples"] for r in json.loads(path.read_text())["results"] if r["key"] == key)
        mid = statistics.median(samples)
        out.setdefault(_release(m[1]), []).append((int(m[2]), mid,
                                                   statistics.median(abs(x - mid) for x in samples) / mid))
    return {release: [(mid, spread) for _, mid, spread in sorted(each)] for release, each in out.items()}


def _release(profile: str) -> str:
    """eagle3-8b-0.5.12 -> 0.5.12; eagle3-8b-base is 0.5.16's kit."""
    return "0.5.16" if profile == "eagle3-8b-base" else profile.removeprefix("eagle3-8b-")


def _key(pair: dict, name: str) -> dict:
    return next(k for k in pair["keys"] if k["key"].endswith("/" + name))


def ladder_line(data: dict, gpu: str) -> str:
    """One ladder run in words: each pair's verdict and decode change, what was dropped, the checks."""
    pairs = [f"{_release(p['base'])} -> {_release(p['head'])}: {p['verdict'].replace('_', ' ')}, decode "
             f"{_key(p, 'decode_tok_s')['change'] * 100:+.1f}% [{_key(p, 'decode_tok_s')['low'] * 100:+.1f}%, "
             f"{_key(p, 'decode_tok_s')['high'] * 100:+.1f}%] (±{_key(p, 'decode_tok_s')['tolerance'] * 100:.0f}%)"
             for p in data["pairs"]]
    rounds = sorted({p["rounds"] for p in data["pairs"]})
    dropped = [f"{_release(v)} dropped" for v in data["dropped"]]
    failing = [c["test"] for c in data["checks"] if any(o and not o.startswith("passed")
                                                         for o in c["outcomes"].values())]
    checks = (f"checks failing: {', '.join(failing)}" if failing else
              f"all {len(data['checks'])} checks passed on every release measured")
    return (f"{gpu}, {'-'.join(map(str, rounds))} round(s): " + "; ".join(pairs + dropped) + f"; {checks}")


def per_cycle_saving(data: dict, base: str, head: str) -> tuple[float, float, float]:
    """The verify cycle of ``base`` and ``head`` (ms, the ladder's medians) and its saving in ms, across the pairs
    between them (their cycle medians chain: each pair's head is the next one's base)."""
    chain = data["pairs"]
    first = next(i for i, p in enumerate(chain) if _release(p["base"]) == base)
    last = next(i for i, p in enumerate(chain) if _release(p["head"]) == head)
    b, h = _key(chain[first], "cycle_ms")["base_median"], _key(chain[last], "cycle_ms")["head_median"]
    return b, h, b - h


@claim("sglang-8b-ladder", "SGLang's release history at Llama-3.1-8B's sizes on one GPU (an H200 twice, an H100 "
       "once): `specwatch ab-ladder` of 0.5.12 < 0.5.13 < 0.5.14 < 0.5.15.post1 < 0.5.16, EAGLE-3 (triton, the exact "
       "draft), nothing injected",
       "each consecutive pair judged (no regression, regression or slower) on throughput, accept length and cycle "
       "cost, each check per release; a release that cannot boot named with why; a change beyond its tolerance "
       "confirmed on a second machine", "46",
       again=("sglang-8b-ladder-1-x1 --set sgl_ladder_rounds=1", "sglang-8b-ladder-2-x1 --set sgl_ladder_rounds=1",
              "sglang-8b-ladder-3-x1 --set sgl_ladder_rounds=1", "sglang-8b-ladder-4-x1 --set sgl_ladder_rounds=1"))
def sglang_8b_ladder() -> Finding:
    """Each ladder run's verdict file (its last call's), rendered by :func:`ladder_tables`; partial while a release of
    the chain was dropped on every machine (its pairs never judged)."""
    runs = [(folder, gpu, json.loads(parse.read(f"{folder}/sgl8b-ladder-eagle3.json"))) for folder, gpu, _ in LADDERS]
    cycles = [(gpu, *per_cycle_saving(data, "0.5.13", "0.5.14")) for _, gpu, data in runs
              if any(_release(p["base"]) == "0.5.13" for p in data["pairs"])]
    measured = (". ".join(ladder_line(data, gpu) for _, gpu, data in runs)
                + ". 0.5.13 -> 0.5.14, the verify cycle: "
                + "; ".join(f"{gpu} {b:.2f} -> {h:.2f} ms ({-d:+.2f} ms)" for gpu, b, h, d in cycles))
    never = set.intersection(*(set(data["dropped"]) for _, _, data in runs))
    status = PARTIAL if never else (NOT_MET if any(d["verdict"] == "regression" for _, _, d in runs) else HOLDS)
    parts = [f"**{gpu}** (`data/{folder}`):\n\n{ladder_tables(data)}" for folder, gpu, data in runs]
    per_run = [boots(folder) for folder, _, _ in LADDERS]
    releases = sorted({r for by in per_run for r in by}, key=lambda r: tuple(int(x) for x in re.findall(r"\d+", r)))
    older = [v for by in per_run for r, each in by.items() if r in ("0.5.12", "0.5.13") for _, v in each]
    newer = [v for by in per_run for r, each in by.items() if r not in ("0.5.12", "0.5.13") for _, v in each]
    apart = bool(older and newer) and min(older) > 3 * max(newer)
    jitter = table(["release", *(f"{gpu} (`{folder[:10]}`)" for folder, gpu, _ in LADDERS)],
                   [[r, *(", ".join(f"{v * 100:.2f}%" for _, v in by.get(r, [])) or "-" for by in per_run)]
                    for r in releases])
    twice = {r: each for r, each in per_run[-1].items() if len(each) == 2}  # the last run's releases, two rounds
    moved = {r: abs(b[0] / a[0] - 1) for r, (a, b) in twice.items()}
    medians = "; ".join(f"{r} {a[0]:.1f} and {b[0]:.1f}" for r, (a, b) in twice.items())
    old_moved = [moved[r] for r in moved if r in ("0.5.12", "0.5.13")]
    new_moved = [moved[r] for r in moved if r not in ("0.5.12", "0.5.13")]
    why = ("**Five consecutive pairs on the H200.** The second H200 ladder (2026-12-06, two rounds, every release "
           "booted) judged 0.5.12 -> 0.5.13, 0.5.13 -> 0.5.14, 0.5.14 -> 0.5.15.post1 and 0.5.15.post1 -> 0.5.16; "
           "with 0.5.16 -> 0.5.17 (`sglang-8b-versions`, the same shape on an H200: no regression, +0.5%) that is "
           "every consecutive pair from 0.5.12 to 0.5.17. Three pairs were still open after round 1 at the H200's "
           "±2% and settled after round 2: each moved less than 1%, and each interval rules out a slowdown beyond "
           "1.2%.\n\n"
           "**The finding: 0.5.13 -> 0.5.14 is faster, by the same time per verify cycle on both GPUs.** Decode +13.7% "
           "[+11.7%, +17.0%] on the H200 (rounds +13.7% and +9.7%), +7.0% on the H100 (one round); output throughput "
           "moves with it. That interval is too narrow: the pair settled after round 1, its spread pooled with the "
           "round history's 0.7% (boots and A/B runs of 0.5.16, a release without the host cost below), and round 2, "
           "measured for the other pairs, read +9.7%, outside it. The conclusion, faster by about 10% to 14%, stands. "
           "`ab` now keeps such a pair open until round 2, where its two sides differ in noise within a boot (as "
           "0.5.13's and 0.5.14's do, below): judged again so, it settles after round 2, faster by 11.7%. "
           "The first H200 ladder, without 0.5.13, measured 0.5.12 -> 0.5.14 at +12.0%. Every other "
           "pair is within ±1%. The verify cycle is shorter by 0.63 ms on the H200 (6.43 -> 5.80 ms) and 0.51 ms on "
           "the H100 (7.89 -> 7.37 ms): nearly the same time per step on two GPUs whose kernels run at different "
           "speeds, which is what a host-side cost looks like. The sources put one on that path in 0.5.13 -> 0.5.14: "
           "0.5.14 stops copying `seq_lens` to the host and synchronising every step for triton "
           "(`sglang-release-sources`). Not measured directly: a profile of one decode step would show the sync.\n\n"
           "**A second sign of a host-side cost: jitter.** Each boot measures 12 requests one at a time; the spread of "
           "their decode tok/s (median absolute deviation over the median, per boot, every boot of the three runs):"
           "\n\n" + jitter + "\n\n"
           f"0.5.12 and 0.5.13 spread {min(older) * 100:.2f}% to {max(older) * 100:.2f}% from request to request, "
           f"0.5.14 and later {min(newer) * 100:.2f}% to {max(newer) * 100:.2f}% "
           f"({'every older boot above three times every newer one' if apart else 'the two groups overlap'}), on "
           "both GPUs. A GPU-bound step repeats to within a few hundredths of a percent; a step that waits on the "
           "host each time takes on the host's timing noise. The same shows between boots of the last run (decode "
           f"tok/s, rounds 1 and 2: {medians}): 0.5.12 and 0.5.13 moved "
           f"{' and '.join(f'{v * 100:.1f}%' for v in old_moved)} between their two boots, the later releases at most "
           f"{max(new_moved, default=0) * 100:.1f}%. The ladder pairs boots back to back and alternates their order, "
           "so that spread enters each pair's interval rather than its verdict.\n\n"
           "**Why releases did not boot before.** On the first H200 ladder, 0.5.13 was given `--port 58147`, and "
           "0.5.12 to 0.5.15.post1 derive a gRPC port of `--port` + 10000 and refuse to start past 65535, even when "
           "serving HTTP only (`server_args.py` `_handle_deprecated_args`; 0.5.16 derives it only in gRPC mode); "
           "specwatch now gives servers ports at or below 55535. 0.5.15.post1 imports `nvidia-cutlass-dsl` when it "
           "captures the draft's graphs (its DSA indexer), a declared dependency of about 150 MB that the kit cannot "
           "carry: on the first H200 ladder the import failed; on the H100 the kit carried a placeholder of it, and "
           "flashinfer, finding `cutlass` importable, chose its CuTe DSL RMSNorm, whose first call the placeholder "
           "refused. The 0.5.15.post1 profiles now set `FLASHINFER_USE_CUDA_NORM=1`, the CUDA JIT kernels every other "
           "release of the kit runs on its own, and it booted on the second H200 ladder (twice) and passed every "
           "check. So the kit measures every release with flashinfer's CUDA JIT RMSNorm, where an install runs the "
           "CuTe DSL one: a change in those kernels between releases is not seen "
           "(`docs/reference/sglang-versions.md`). "
           "The accept length was 2.00 on every release (the exact draft), so its interval is the default prior's, "
           "not the data's. Not run: the plain server's ladder (`--set sgl_release_server=plain`).")
    sources = [f"{folder}/{f}" for folder, _, txt in LADDERS for f in ("sgl8b-ladder-eagle3.json", txt)]
    return Finding(status, measured, sources, "\n\n".join(parts) + "\n\n" + why)
