"""Claims measured on real SGLang 0.5.16 with an EAGLE-3 draft and CUDA graphs on one H200 (issue 29).

Registered into claims.CLAIMS when claims.py imports this module. The runs: harness scenarios sglang-x1 (both
suites side by side, the first contact), sglang-faults-x1 (the case study's faults from outside the server's
code, three lanes on one GPU) and sglang-drift-x1 (a baseline session, then the slowed server, alone on the GPU);
then, in a second session, sglang-ab-x1 (the concurrency-16 row, ab of a slowed server), sglang-perf-x1 (pytest -m perf
against the baselines, alone) and an A/A ab (2026-12-03-sglang-ab-same-x1); in a third, sglang-perf-x1 again on a
fresh machine against the alone baselines (2026-12-03-sglang-perf-x1-2) and sglang-versions-x1 (ab of 0.5.16 against
0.5.17, twice cut by the call's limit).
The models are built to an accept length of 2.00 (docs/validation/sglang_models.py).
"""

from __future__ import annotations

import math
import re

import outputs as parse
from claims import HOLDS, MEASURED, NOT_MET, Finding, claim, quote, table

X1, FAULTS, DRIFT = "2026-12-03-sglang-x1", "2026-12-03-sglang-faults-x1", "2026-12-03-sglang-drift-x1"
AB, PERF, AA = "2026-12-03-sglang-ab-x1", "2026-12-03-sglang-perf-x1", "2026-12-03-sglang-ab-same-x1"
PERF2, PERF3, VERSIONS = "2026-12-03-sglang-perf-x1-2", "2026-12-03-sglang-perf-x1-3", "2026-12-03-sglang-versions-x1"

#: (the case study's failure, the run's file, the test that must pass there)
REAL_FAULTS = [
    ("verify without CUDA graphs (--disable-cuda-graph on the EAGLE-3 server only)", f"{FAULTS}/sgl-graphs.txt",
     "tests/correctness/test_verify_graphs.py::test_eager_verify_fault_is_reported"),
    ("verify batches past the captured sizes (--cuda-graph-max-bs-decode 4 at concurrency 16)",
     f"{FAULTS}/sgl-graphs.txt",
     "tests/correctness/test_verify_graphs.py::test_batches_past_the_captured_sizes_fail_naming_the_capture_flag"),
    ("an untuned server contaminated by a sitecustomize.py", f"{FAULTS}/sgl-correctness-a.txt",
     "tests/correctness/test_faults.py::test_leaked_sitecustomize_contaminates_untuned_server"),
    ("a claimed accept length of 0.92 against the live sources", f"{FAULTS}/sgl-correctness-a.txt",
     "tests/correctness/test_faults.py::test_claimed_092_disagrees_with_the_live_sources"),
    ("EAGLE-3 output against plain decoding, greedy (lossless)", f"{FAULTS}/sgl-correctness-a.txt",
     "tests/correctness/test_lossless.py::test_speculative_output_equals_baseline"),
    ("every accept-length source by its own definition, reconciled", f"{FAULTS}/sgl-correctness-a.txt",
     "tests/correctness/test_accept_length.py::test_sources_reconcile_on_the_live_server"),
]


@claim("sglang-real-suites", "tests/correctness on real SGLang 0.5.16 + EAGLE-3 with CUDA graphs (H200)",
       "every test passes, or skips with its real reason", "29", again=("sglang-faults-x1", "sglang-ab-x1"))
def sglang_real_suites() -> Finding:
    rels = [f"{FAULTS}/sgl-correctness-a.txt", f"{FAULTS}/sgl-graphs.txt", f"{AB}/sgl-graphs-c16.txt"]
    c16 = "tests/correctness/test_verify_graphs.py::test_batches_within_the_captured_sizes_pass_at_concurrency_16"
    rows, failed, skipped = [], [], []
    for rel in rels:
        text = parse.read(rel)
        run = parse.pytest_run(text)
        rows.append([rel.split("/")[-1], run.text if run else "did not finish"])
        failed += [t for t, o in parse.outcomes(text).items() if o in ("FAILED", "ERROR")]
        skipped += [m[1] for m in re.finditer(r"^SKIPPED \[\d+\] \S+: (.*)$", text, re.M)]
    rerun = parse.outcomes(parse.read(f"{AB}/sgl-graphs-c16.txt")).get(c16)
    left = [t for t in failed if not (t == c16 and rerun == "PASSED")]
    detail = table(["run", "outcome"], rows)
    if c16 in failed:
        detail += (f"\n\nThe first run failed `{c16.split('::')[1]}`: the row kept the profile's capture limit of 8, "
                   "so batches of 9-16 verified eagerly and the check failed them rightly. The row now captures up to "
                   f"16 (commit e907526); run again alone on the GPU it {rerun or 'did not run'}.")
    detail += "\n\nSkip reasons:\n\n" + quote(sorted(set(skipped)))
    return Finding(NOT_MET if left else HOLDS, "; ".join(f"{r[0]}: {r[1]}" for r in rows), rels, detail)


@claim("sglang-real-perf", "pytest -m perf on real SGLang 0.5.16 + EAGLE-3 (H200), alone, against recorded baselines",
       "every gate passes, or skips with its real reason", "29", again=("sglang-perf-x1",))
def sglang_real_perf() -> Finding:
    """Two runs, each alone on a fresh H200: the first against baselines recorded beside another lane, the second
    against the first's (alone). The second's failures are judged again with today's rule: a one-session baseline
    takes real SGLang's boot-to-boot spread from the class's round spread (store.baseline.session_floor)."""
    import json
    import statistics

    from specwatch.judge import compare as compare_mod
    from specwatch.store.baseline import BaselineStore
    from specwatch.store.classspread import session_floor

    rows, files, left = [], [], []
    for run_dir, against in ((PERF, "baselines recorded beside another lane"), (PERF2, "the first run's, alone"),
                             (PERF3, "the same, with the boot-to-boot floor (commit 2a1ca87)")):
        rel = f"{run_dir}/sgl-perf.txt"
        text = parse.read(rel)
        run = parse.pytest_run(text)
        failed = [t for t, o in parse.outcomes(text).items() if o in ("FAILED", "ERROR")]
        rows.append([run_dir, against, run.text if run else "did not finish", ", ".join(
            t.split("::")[1] for t in failed) or "none"])
        files.append(rel)
        if run_dir == PERF3 and (failed or run is None):
            left.append(rel)
    results = json.loads(parse.read(f"{PERF2}/sgl-perf.json"))["results"]
    found = {r["key"]: r["samples"] for r in results}
    store = BaselineStore(parse.DATA.parent / "sglang" / "baselines")
    base = store.load("h200x1", "sgl-eagle3")
    judged = []
    for key in ("sgl-eagle3/single-stream/decode_tok_s", "sgl-eagle3/single-stream/output_tok_s",
                "sgl-eagle3/single-stream/cycle_ratio"):
        server, workload, metric = key.split("/", 2)
        entry = base.get(workload, metric) if base else None
        if entry is None:
            left.append(key)
            continue
        floor = session_floor(store, "h200x1", server, workload, metric, "sglang")
        cmp, _ = compare_mod.drift(found[key], entry.samples, higher_is_better=metric.endswith("tok_s"),
                                   requested=0.05, sessions=[s["samples"] for s in entry.sessions],
                                   class_spread=floor, n_resamples=2000)
        judged.append([key, f"{cmp.change * 100:+.1f}%", f"±{cmp.tolerance * 100:.0f}%", cmp.verdict.value])
        if cmp.is_regression:
            left.append(key)
    twins = []
    for run_dir in (PERF, PERF2, PERF3):
        med = {r["key"]: statistics.median(r["samples"]) for r in json.loads(parse.read(f"{run_dir}/sgl-perf.json"))[
            "results"] if r["key"].endswith("single-stream/decode_tok_s")}
        twins.append(f"{med['sgl-eagle3/single-stream/decode_tok_s']:.0f} and "
                     f"{med['sgl-eagle3-untuned/single-stream/decode_tok_s']:.0f}")
    detail = table(["run", "against", "outcome", "failed"], rows)
    detail += ("\n\nThe first run's one failure was the cycle-cost gate of `sgl-eagle3-untuned` against a plain step "
               "recorded beside another lane (2.11 ms there, 1.37 ms alone): every verdict against such a reference "
               "now names what shared the host (run/reference.py `shared_note`), and the validation baselines became "
               "that run's, measured alone.\n\nThe second run's three failures are all `sgl-eagle3` against its "
               "one-session baseline: -39.6 % decode tok/s, the cycle +66 %. Its twin `sgl-eagle3-untuned` (the same "
               "server: its NCCL variables are never read on one rank) passed. The two identical servers read "
               f"{twins[0]} decode tok/s in the first run, {twins[1]} in the second and {twins[2]} in the third: "
               "boot-to-boot luck of this "
               "launch-bound 8-layer model, not a change. Judged again now, the one-session baseline takes real "
               "SGLang's boot-to-boot spread from the class's round spread (the ab rounds and these twins, "
               "docs/validation/sglang/baselines/h200x1/round-spread.json; tests/unit/test_boot_floor.py), and the "
               "slowed server of sglang-drift-x1 (-68 %) still fails:\n\n")
    detail += table(["key", "change", "tolerance", "judged again now"], judged)
    detail += ("\n\nThe third run, on a fresh machine with that rule, passed every gate or skipped it with its reason "
               "(the speculation gate: unsure in its one round; the tuned/untuned gate: NCCL unread at TP=1).")
    return Finding(NOT_MET if left else HOLDS, "; ".join(f"{r[0]}: {r[2]}" for r in rows) + "; the second judged "
                   "again now: " + ", ".join(f"{r[0].split('/')[-1]} {r[3]}" for r in judged), files, detail)


@claim("sglang-real-faults", "the case study's failures on real SGLang 0.5.16 + EAGLE-3, each caught with its cause",
       "every fault injected from outside the server's code is caught and named", "29",
       again=("sglang-faults-x1", "sglang-drift-x1"))
def sglang_real_faults() -> Finding:
    rows, ok, files = [], True, []
    for what, rel, test in REAL_FAULTS:
        outcome = parse.outcomes(parse.read(rel)).get(test, "not run")
        ok &= outcome == "PASSED"
        rows.append([what, f"`{test.split('::')[1]}`", outcome])
        files.append(rel)
    slowed = f"{DRIFT}/sgl-slowed.txt"
    cells = parse.row(parse.read(slowed), "sgl-eagle3/single-stream/decode_tok_s") or ["?"] * 9
    ok &= cells[-1] == "REGRESSION"
    rows.append(["the server slowed from outside (a GPU sleep after every graph replay), drift gate",
                 "`test_no_drift_against_baseline`", f"{cells[-1]} ({cells[5]})"])
    files.append(slowed)
    return Finding(HOLDS if ok else NOT_MET, f"{sum(r[2].startswith(('PASSED', 'REGRESSION')) for r in rows)} of "
                   f"{len(rows)} caught", sorted(set(files)), table(["fault", "test", "outcome"], rows))


@claim("sglang-real-break-even", "EAGLE-3 against plain decoding on real SGLang (a launch-bound 8-layer model)",
       "the speculation gate's break-even predicts the measured ratio", "29", again=("sglang-x1",))
def sglang_real_break_even() -> Finding:
    rel = f"{X1}/sgl-perf.txt"
    lines = [ln.strip().removeprefix("E").strip() for ln in parse.read(rel).splitlines()
             if "break-even accept length:" in ln or "cycle time (busy time only)" in ln or ln.strip().startswith(
                 "E       AssertionError: fail: not sgl-eagle3")]
    m = re.search(r"predicts ([\d.]+)x decode throughput, this run measured ([\d.]+)x", " ".join(lines))
    measured = f"predicted {m[1]}x, measured {m[2]}x" if m else "not found"
    return Finding(MEASURED, measured + " (accept length 2.00 below the break-even 2.38: speculation loses here, "
                   "the case study's failure mode)", [rel], quote(lines[:4]))


@claim("sglang-real-ab", "specwatch ab of two real SGLang servers (H200), alone on the GPU",
       "a slowed head is never cleared beyond what its rounds can see, and A/A is never a regression", "29",
       again=("sglang-ab-x1", "sglang-aa-x1"))
def sglang_real_ab() -> Finding:
    """The verdicts the device printed, and the same rounds judged again by today's rule (each run left out of the
    round history it is judged with): the A/A's false regression came from the reference server's round spread."""
    from specwatch.revisions import rounds as ab_rounds
    from specwatch.revisions.plan import plan_key
    from specwatch.store.roundspread import RoundSpread

    full = RoundSpread.for_class(parse.DATA.parents[2] / "baselines", "h200x1")
    rows, ok, files = [], True, []
    for rel, what, max_rounds in ((f"{AB}/sgl-ab-slow.txt", "slowed from outside (2M GPU cycles a replay)", 3),
                                  (f"{AA}/sgl-ab-same.txt", "A/A: the healthy server against itself", 2)):
        text = parse.read(rel)
        medians = {(int(m[1]), m[2]): float(m[3]) for m in re.finditer(
            r"^\[ab\] round (\d+) (base|head): \S+/decode_tok_s ([\d.]+) tok/s", text, re.M)}
        ratios = [medians[(r, "head")] / medians[(r, "base")] for r in sorted({r for r, _ in medians})]
        said = re.findall(r"^\[ab\] (REGRESSION|SLOWER|UNSURE|NO REGRESSION)\b", text, re.M)
        others = RoundSpread(full.path, "h200x1", [r for r in full.runs if rel.split("/")[-1] not in r.label])
        design = ab_rounds.RoundSettings.make(2, max_rounds, None).design
        plan = plan_key("sgl-eagle3/single-stream/decode_tok_s", others, design, None, "sglang")
        _, now, _, _ = ab_rounds.judge_key(ratios, True, plan, design)
        measured = 1 - math.prod(ratios) ** (1 / len(ratios))
        if "slowed" in what:  # cleared only at a tolerance, and a power, beyond the slowdown it measured
            ok &= now != ab_rounds.NO_REGRESSION or (plan.tolerance > measured and (plan.detectable or 0) > measured)
        else:
            ok &= now != ab_rounds.REGRESSION
        boots = ", ".join(f"{medians[k]:.0f}" for k in sorted(medians))
        rows.append([what, " ".join(f"{(r - 1) * 100:+.1f}%" for r in ratios), boots, said[-1] if said else "none",
                     f"{now.replace('_', ' ')} (tolerance {plan.tolerance:.0%}, spread {plan.prior.spread:.1%} on "
                     f"{plan.prior.df} df)"])
        files.append(rel)
    detail = table(["run", "per round", "boots (decode tok/s)", "the device said", "judged again now"], rows)
    detail += ("\n\nThe boots of one healthy EAGLE-3 server read 408-692 decode tok/s on this launch-bound 8-layer "
               "model: its boot-to-boot luck is many times the reference server's (4.5 % on the same class, 18 runs). "
               "At the device, ab borrowed the reference server's spread (the class's only history) and called the "
               "A/A a regression (-16.6 %, exit 1). Now a key borrows only its own engine's runs "
               "(store/roundspread.py; tests/unit/test_round_spread_engine.py). The class's SGLang history now also "
               "holds the 0.5.16/0.5.17 rounds and the twin boots of the perf runs: 26 % per round. At that spread "
               "2-3 rounds settle only at a tolerance near 50 %, and ab says so in its plan line ('a slowdown of X % "
               "or more would have been caught 19 times in 20'): a 24 % slowdown of this model is below what two "
               "rounds of real SGLang's boots can see.")
    text = parse.read(f"{VERSIONS}/sgl-ab-versions.txt")
    medians = {(int(m[1]), m[2]): float(m[3]) for m in re.finditer(
        r"^\[ab\] round (\d+) (base|head): \S+/decode_tok_s ([\d.]+) tok/s", text, re.M)}
    whole = [r for r in sorted({r for r, _ in medians}) if (r, "base") in medians and (r, "head") in medians]
    detail += ("\n\n0.5.16 (base) against 0.5.17 (head, the same kit with sglang 0.5.17 and flashinfer 0.6.15.post1): "
               "two calls, each cut by its 10-minute limit before a verdict (3 rounds of two ~80 s boots, the first "
               "0.5.17 boot 161 s with cold JIT caches). Whole rounds: " + ", ".join(
                   f"round {r}: base {medians[(r, 'base')]:.0f}, head {medians[(r, 'head')]:.0f} decode tok/s "
                   f"({(medians[(r, 'head')] / medians[(r, 'base')] - 1) * 100:+.1f}%)" for r in whole)
               + ". ab left the key open after round 2 (tolerance 24 % at the spread then recorded): at this "
               "model's boot-to-boot luck, whether 0.5.17 slowed EAGLE-3 is not answered by two rounds.")
    files.append(f"{VERSIONS}/sgl-ab-versions.txt")
    return Finding(HOLDS if ok else NOT_MET, "; ".join(f"{r[0]}: device {r[3]}, now {r[4]}" for r in rows), files,
                   detail, replayed=True)
