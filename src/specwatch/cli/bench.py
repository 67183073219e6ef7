"""``specwatch bench-prompts`` and ``specwatch compare-bench``: specwatch's numbers beside SGLang's own serving
benchmark (``python -m sglang.bench_serving``) on the same server and the same workload.

``bench-prompts`` writes the requests of one run of a profile set's concurrency levels as a JSONL file both tools
send as they are, and prints the benchmark's command line for each level; ``compare-bench`` puts a results file's
sweep levels beside the benchmark's result lines, metric by metric (:mod:`specwatch.judge.crosscheck`).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specwatch.cli.args import fraction
from specwatch.errors import EXIT_OK, EXIT_REGRESSION, UsageError

if TYPE_CHECKING:
    from specwatch.load.workload import Workload
    from specwatch.report.sidebyside import SideRow
    from specwatch.store.benchfile import BenchRun
    from specwatch.store.result import ResultSet

#: the specwatch side's name in the table and messages, and the other's
OURS, THEIRS = "specwatch", "bench_serving"


def _levels(source: str, table: dict[str, Any], chosen: Sequence[str]) -> list[tuple[str, Workload]]:
    """The concurrency levels asked (``chosen``, else the set's sweep) with their workloads."""
    from specwatch.load.workload import level_names, resolve

    names = list(chosen) or [n for n in level_names(table) if n.startswith("concurrency-")]
    if not names:
        raise UsageError(f"{source}: [workload] sets no concurrency levels, and compare-bench compares sweep levels: "
                         "add concurrency = [1, 4] (or name one with --workload concurrency-N)")
    out = []
    for name in names:
        wl = resolve(name, table)
        if not wl.level or wl.request_rate is not None:
            raise UsageError(f"--workload {name}: a concurrency level (concurrency-N) only; a request-rate level's "
                             "arrival times are specwatch's own, which the benchmark does not replay")
        out.append((name, wl))
    return out


def _cmd_bench_prompts(args: argparse.Namespace) -> int:
    from specwatch.engines.sglang import bench_serving_command
    from specwatch.load.dataset import shared_line
    from specwatch.profiles.loading import load_profiles
    from specwatch.store.atomic import write_text_atomic

    ps = load_profiles(args.profiles)
    prof = ps.get(args.server) if args.server else ps.for_role("spec") or next(iter(ps.servers.values()))
    if prof.load_api != "generate":
        raise UsageError(f"{prof.name}: its load goes to {prof.load_api}; the benchmark's runs written here send "
                         "/generate, as a server of load_api = \"generate\" is measured")
    by_size: dict[int, list[tuple[str, Workload]]] = {}
    for name, wl in _levels(ps.source, ps.workload, args.workload):
        by_size.setdefault(wl.run_size, []).append((name, wl))
    out = Path(args.out)
    lines = []
    for size, levels in sorted(by_size.items()):
        path = out if len(by_size) == 1 else out.with_name(f"{out.stem}-{size}{out.suffix}")
        requests = levels[0][1].requests()[:size]  # every run sends the same prompts: one run's
        lengths = {r.max_new_tokens for r in requests}
        if len(lengths) != 1:
            raise UsageError(f"{ps.source}: [workload] output_len draws {len(lengths)} lengths; the benchmark's "
                             "custom dataset asks one length of every request (--sharegpt-output-len): set a "
                             "fixed output_len or max_new_tokens")
        try:
            write_text_atomic(path, "".join(json.dumps(shared_line(r.text), ensure_ascii=False) + "\n"
                                            for r in requests))
        except OSError as exc:
            raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from exc
        length = lengths.pop()
        lines.append(f"wrote {path}: {size} prompts, the requests of one run of {', '.join(n for n, _ in levels)} "
                     f"({length} tokens each)")
        for name, wl in levels:
            cmd = bench_serving_command("python", args.url, str(path), requests=size, output_len=length,
                                        concurrency=wl.concurrency, output_file=args.output_file)
            lines.append(f"  {name}: {' '.join(cmd)}")
    print("\n".join(lines))
    print(f"run each line 3 times (their spread is the benchmark's side of the verdict); specwatch's side "
          f"against the same server: pytest -m perf tests/perf/test_sweep.py --specwatch-profiles={args.profiles} "
          f"--specwatch-server-url={args.url} --specwatch-results=RESULTS.json; then specwatch compare-bench "
          f"RESULTS.json {args.output_file}")
    return EXIT_OK


def _workload_of(run: BenchRun) -> str | None:
    """The specwatch level a benchmark run matches: ``concurrency-N`` for a closed loop of N in flight (all of its
    requests at once when it set no cap); None for an open loop (its own arrival times)."""
    from specwatch.load.workload import level_name

    if run.request_rate != math.inf:
        return None
    return level_name("concurrency", run.max_concurrency or run.completed)


def _profile(rs: ResultSet, workloads: Sequence[str], chosen: str | None, path: str) -> str:
    """The profile whose level results the benchmark's runs are compared with."""
    having = sorted({r.profile for r in rs.results if r.workload in workloads and r.metric == "output_throughput"})
    if chosen:
        if chosen not in having:
            raise UsageError(f"{path}: profile {chosen!r} has no results of {', '.join(workloads)}"
                             f"{'; these have: ' + ', '.join(having) if having else ''}")
        return chosen
    if not having:
        held = sorted({r.workload for r in rs.results})
        raise UsageError(f"{path} has no results of {', '.join(workloads)} (the benchmark's runs): it holds "
                         f"{', '.join(held) or 'none'}; measure those levels ([workload] concurrency = [...], "
                         "tests/perf/test_sweep.py)")
    if len(having) > 1:
        raise UsageError(f"{path}: several profiles have results of {', '.join(workloads)}: {', '.join(having)}; "
                         "name one with --profile")
    return having[0]


def _workload_notes(name: str, extra: dict[str, Any], runs: Sequence[BenchRun]) -> list[str]:
    """Where the two sides' workloads differ, one warning each (a difference may then be the workload's)."""
    from specwatch.served import Served

    notes = []
    length = extra.get("output_len", extra.get("max_new_tokens"))
    for asked in sorted({r.output_len for r in runs}, key=str):
        if asked is None:
            notes.append(f"{name}: the benchmark's requests had no one output length (its dataset's own, or a range): "
                         f"specwatch's asked {length}")
        elif asked != length:
            notes.append(f"{name}: output length differs: specwatch {length}, the benchmark {asked} tokens")
    size = extra.get("run_requests")
    if size is not None and any(r.completed != size for r in runs):
        notes.append(f"{name}: a specwatch run sent {size} requests, a benchmark run "
                     f"{'/'.join(str(n) for n in sorted({r.completed for r in runs}))}: runs of other sizes spread "
                     "otherwise")
    if any(r.dataset.startswith("random") for r in runs):
        notes.append(f"{name}: the benchmark sent random tokens, specwatch its prompts (specwatch bench-prompts "
                     "writes one file both send)")
    try:
        model = Served.parse(str(extra.get("served", ""))).model
    except ValueError:
        model = ""
    others = sorted({r.model_path for r in runs if r.model_path and model and r.model_path != model})
    if others:
        notes.append(f"{name}: another model? specwatch served {model}, the benchmark's server {', '.join(others)}")
    return notes


def _cmd_compare_bench(args: argparse.Namespace) -> int:
    from specwatch.judge.crosscheck import AGREE, CANNOT_TELL, agreement, overall
    from specwatch.judge.levels import LEVEL_METRICS
    from specwatch.report.sidebyside import SideRow, side_by_side
    from specwatch.store.benchfile import read_bench_runs
    from specwatch.store.result import ResultSet, make_key

    runs = read_bench_runs(args.bench)
    rs = ResultSet.load(args.results)
    groups: dict[str, list[BenchRun]] = {}
    notes = []
    for run in runs:
        name = _workload_of(run)
        if name is None:
            notes.append(f"{args.bench}:{run.line}: an open loop ({run.request_rate:g} requests/s): specwatch's "
                         "request-rate levels send at their own arrival times; not compared")
        else:
            groups.setdefault(name, []).append(run)
    if not groups:
        raise UsageError(f"{args.bench}: no run of a closed loop (--max-concurrency, or every request at once) to "
                         "compare with specwatch's concurrency levels")
    profile = _profile(rs, list(groups), args.profile, args.results)
    rows: list[SideRow] = []
    for name in sorted(groups, key=lambda n: int(n.split("-", 1)[1])):
        head = rs.get(make_key(profile, name, "output_throughput"))
        if head is None:
            notes.append(f"{name}: {len(groups[name])} benchmark run(s), but {args.results} has no {profile}/{name}: "
                         "not compared")
            continue
        notes += _workload_notes(name, head.extra, groups[name])
        for metric, (unit, _) in LEVEL_METRICS.items():
            found = rs.get(make_key(profile, name, metric))
            rows.append(SideRow(name, unit, agreement(metric, found.samples if found else [],
                                                      [r.value(metric) for r in groups[name]], alpha=args.alpha,
                                                      floor=args.tolerance, ours_name=OURS, theirs_name=THEIRS)))
    backends = sorted({r.backend for r in runs})
    print(f"specwatch compare-bench: {args.results} ({profile}) beside {args.bench} ({THEIRS} "
          f"{', '.join(backends)}); means over runs, allowance at alpha {args.alpha:g}, at least "
          f"±{args.tolerance * 100:g}%")
    for note in notes:
        print(f"note: {note}")
    print(side_by_side(rows, OURS, THEIRS))
    verdict = overall([r.found for r in rows])
    print(f"verdict: {verdict}" + (": no metric could be judged" if verdict == CANNOT_TELL else
                                   ": none differs" if verdict == AGREE else ""))
    return EXIT_OK if verdict == AGREE else EXIT_REGRESSION  # a difference, or nothing judged: no agreement shown


def register(sub: Any) -> None:
    """Add this module's subcommands to the ``specwatch`` parser."""
    from specwatch.cli.args import existing_file
    from specwatch.judge.crosscheck import ALPHA, FLOOR

    p = sub.add_parser("bench-prompts", help="write one run's prompts of a profile set's concurrency levels as a "
                       "file that SGLang's bench_serving sends too, and print its command for each level")
    p.add_argument("out", help="the JSONL file to write (one per run size when the levels' sizes differ)")
    p.add_argument("--profiles", required=True, type=existing_file, help="the profile file measured")
    p.add_argument("--server", help="the server profile (default: the set's speculative one, else its first)")
    p.add_argument("--workload", action="append", default=[], metavar="concurrency-N",
                   help="a level (repeatable; default: the set's [workload] concurrency levels)")
    p.add_argument("--url", default="URL", help="the server's URL, for the printed commands")
    p.add_argument("--output-file", default="bench.jsonl", help="the benchmark's result file in the printed commands")
    p.set_defaults(func=_cmd_bench_prompts)

    p = sub.add_parser("compare-bench", help="specwatch's sweep-level results beside SGLang's bench_serving result "
                       "lines, metric by metric: agree, differ or cannot tell; exit 1 when a metric differs")
    p.add_argument("results", type=existing_file,
                   help="a results file with concurrency levels (tests/perf/test_sweep.py)")
    p.add_argument("bench", type=existing_file, help="bench_serving's --output-file (one JSON line a run)")
    p.add_argument("--profile", help="the server profile of the results file (default: the one with those levels)")
    p.add_argument("--alpha", type=fraction, default=ALPHA,
                   help=f"significance level of the allowance, in (0, 1) (default {ALPHA})")
    p.add_argument("--tolerance", type=fraction, default=FLOOR,
                   help=f"the smallest relative difference that counts, in (0, 1) (default {FLOOR})")
    p.set_defaults(func=_cmd_compare_bench)
