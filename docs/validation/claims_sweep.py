"""Claims about the concurrency sweep on real SGLang 0.5.16 at Llama-3.1-8B's sizes (issue 43, item 6).

Registered into claims.CLAIMS when claims.py imports this module. The run: 2026-12-05-sglang-8b-sweep-x1 (one lent
H100, healthy servers, the draft that accepts exactly 2.00, decode graphs captured up to batch 8). Each level is judged
again with today's rule (``judge/compare.relative_gate``, ``judge/levels.crossover``), and the servers' own Decode
lines say which batches ran as CUDA graphs.
"""

from __future__ import annotations

import json
import re
import statistics

import outputs as parse
from claims import MEASURED, NOT_MET, Finding, claim, table

SWEEP = "2026-12-05-sglang-8b-sweep-x1"
DECODE = re.compile(r"Decode batch, #running-req: (\d+),.*cuda graph: (True|False)")
CAPTURED_BS = 8


def _graph_batches(log: str) -> dict[tuple[bool, bool], int]:
    """Decode lines by (batch above the captured sizes, ran as a CUDA graph)."""
    out: dict[tuple[bool, bool], int] = {}
    for bs, graph in DECODE.findall(parse.read(log)):
        key = (int(bs) > CAPTURED_BS, graph == "True")
        out[key] = out.get(key, 0) + 1
    return out


@claim("sglang-8b-sweep", "The concurrency sweep on real SGLang 0.5.16 (8B shape): EAGLE-3 (accept length 2.00) "
       "against plain decoding at 1, 4, 16 and 48 requests in flight, and the batches past the captured sizes "
       "running eagerly",
       "each level's speedup with the gate's verdict, the crossover, and which decode batches ran as graphs", "43",
       again=("sglang-8b-sweep-x1",))
def sglang_8b_sweep() -> Finding:
    """Both servers' runs per level judged again, and their Decode lines counted."""
    from specwatch.judge.compare import relative_gate
    from specwatch.judge.levels import crossover

    rel = f"{SWEEP}/sgl8b-sweep-exact.json"
    results = {r["key"]: r["samples"] for r in json.loads(parse.read(rel))["results"]}
    levels = sorted({int(m[1]) for k in results if (m := re.search(r"/concurrency-(\d+)/", k))})
    rows, judged = [], []
    for c in levels:
        spec = results[f"sgl8b-eagle3/concurrency-{c}/output_throughput"]
        plain = results[f"sgl8b-plain/concurrency-{c}/output_throughput"]
        gate = relative_gate(spec, plain, margin=0.0, alpha=0.01)
        judged.append((c, gate.verdict.value))
        apart = min(spec) > max(plain)
        rows.append([str(c), f"{statistics.median(plain):.1f} [{min(plain):.0f}-{max(plain):.0f}]",
                     f"{statistics.median(spec):.1f} [{min(spec):.0f}-{max(spec):.0f}]", f"{gate.ratio:.2f}x",
                     "no" if apart else "yes", gate.verdict.value])
    found = crossover(judged)
    logs = {name: next(p for p in (parse.DATA / SWEEP / "sgl8b-sweep-exact" / "servers").glob(f"*/{name}-1/server.log"))
            for name in ("sgl8b-plain", "sgl8b-eagle3")}
    graphs = {name: _graph_batches(p.relative_to(parse.DATA).as_posix()) for name, p in logs.items()}
    eager_above = all(g.get((True, True), 0) == 0 and g.get((True, False), 0) > 0 for g in graphs.values())
    graphed_within = all(g.get((False, False), 0) == 0 and g.get((False, True), 0) > 0 for g in graphs.values())
    ratios = [float(r[3].rstrip("x")) for r in rows]
    ok = len(levels) == 4 and eager_above and graphed_within
    detail = table(["concurrency", "plain output tok/s (median [range])", "EAGLE-3 output tok/s", "speedup",
                    "ranges overlap", "gate (3 runs a side)"], rows)
    detail += "\n\n" + table(["server", "decode lines, batch <= 8: graphed / eager", "batch > 8: graphed / eager"],
                             [[n, f"{g.get((False, True), 0)} / {g.get((False, False), 0)}",
                               f"{g.get((True, True), 0)} / {g.get((True, False), 0)}"] for n, g in graphs.items()])
    detail += (f"\n\nOne boot of each server, every level on it (lowest first), 3 runs a level of a builtin workload "
               f"(32-96 input words, output lengths lognormal around 128). EAGLE-3's median ran {min(ratios):.2f}x to "
               f"{max(ratios):.2f}x plain's at every level, its runs above all of plain's at "
               f"{', '.join(r[0] for r in rows if r[4] == 'no')} in flight, though every decode batch above the "
               f"captured {CAPTURED_BS} ran eagerly "
               f"on both servers (their Decode lines: "
               f"\"cuda graph: False\" at every batch above {CAPTURED_BS}, \"True\" at every batch within): at this "
               f"shape the step is GPU-bound, so losing the graphs costs both sides alike and speculation's two "
               f"tokens a cycle still win. No level has a verdict: three runs a side cannot reach p < 0.01 under the "
               f"gate's one-sided Mann-Whitney (its least p is 0.05), so the gate says inconclusive and, now, that the "
               f"crossover is \"{found.message}\" (it read \"does not pay\" on the device: fixed, and the scenario "
               f"runs 5 a side). The verify-graph checks of the same call were cut by its limit; the eager-verify "
               f"fault at "
               f"batches past the captured sizes is caught on the real engine in `2026-12-03-sglang-faults-x1` (tiny "
               f"shape). Left: the same sweep with drafts that accept less (`--set sweep_draft=vary|q0`). History: "
               f"[changelog section 21](changelog.md#section-21).")
    measured = (f"EAGLE-3 {min(ratios):.2f}x-{max(ratios):.2f}x plain at concurrency "
                f"{', '.join(map(str, levels))}; no crossover shown (3 runs a side: inconclusive); batches above "
                f"{CAPTURED_BS} eager on both servers ({sum(g.get((True, False), 0) for g in graphs.values())} "
                f"decode lines)")
    return Finding(MEASURED if ok else NOT_MET, measured,
                   [rel, *(p.relative_to(parse.DATA).as_posix() for p in logs.values()), f"{SWEEP}/commands.txt"],
                   detail)
