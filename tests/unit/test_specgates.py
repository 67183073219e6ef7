"""The speculation-health gates on recorded measurements: per-prompt verify counts against the baseline, the
cycle's cost and break-even against theirs, the results keys they leave and the summary line."""

from __future__ import annotations

from typing import Any

import pytest

from specwatch.judge import compare, cyclecost, speculative
from specwatch.load.client import Generation
from specwatch.load.measure import Measurement, RunSample
from specwatch.load.workload import Workload
from specwatch.profiles.loading import parse_profiles
from specwatch.run import gatekeeper, specgates, specread
from specwatch.run.evidence import Reference
from specwatch.run.options import Config
from specwatch.run.session import Session
from specwatch.run.summary import results_of, summary_lines
from specwatch.signals.logscan import DecodeRecord, PrefillRecord
from specwatch.store.result import ResultSet

PROMPTS = ["the model drafts tokens", "verify them in one pass", "so that each cycle commits"]
ACCEPTS = {PROMPTS[0]: [3, 3, 2, 3, 1, 3], PROMPTS[1]: [2, 2, 2, 2, 3], PROMPTS[2]: [3, 1, 3, 3, 2]}
#: the fewest runs whose per-run break-evens (one per run pair) can reach p < 0.01
RUNS = 5
SINGLE = Workload("single-stream", runs=RUNS)


def _gen(prompt: str, accepts: list[int], cycle_s: float, spec: bool = True) -> Generation:
    ct = 1 + sum(accepts)
    meta: dict[str, Any] = {"completion_tokens": ct}
    if spec:
        meta |= {"spec_verify_ct": len(accepts), "spec_num_correct_drafts": sum(a - 1 for a in accepts)}
    return Generation(list(range(ct)), "", meta, e2e_s=0.02 + cycle_s * len(accepts), ttft_s=0.02,
                      chunk_gaps_s=[cycle_s] * len(accepts), chunk_tokens=list(accepts), first_chunk_tokens=1,
                      prompt=prompt, max_new_tokens=64)


def _lines(accept: float | None, cycle_s: float, n: int = 6, runs: int = RUNS, load: float = 1.0) -> list[Any]:
    """Each run's request: a prefill, then ``n`` Decode lines (the first one's window holds the prefill);
    ``load``: how many times slower other processes made each window but the last of every run."""
    pre = PrefillRecord(ts="2026-12-01 10:00:00", ranks={}, new_seq=1, new_tok=20, cached=0, running=0, queue=0,
                        graph_label="cpu graph", graph=False, in_tput=1000.0)
    per_batch = accept if accept is not None else 1.0
    return [rec for run in range(runs) for rec in [pre] + [
        DecodeRecord(ts="2026-12-01 10:00:01", ranks={}, running=1, graph_label="cpu graph", graph=False,
                     gen_tput=per_batch / cycle_s * (1 + k / 200) / (load if k < n - 1 else 1.0), queue=0,
                     accept_len=accept) for k in range(n)]]


def _measurement(profile: str, wl: Workload, gens: list[list[Generation]], records: list[Any],
                 cpu_per: float | None = None) -> Measurement:
    """``cpu_per``: the server's CPU seconds per cycle (per step), read for every run; None: not read."""
    runs = []
    for g in gens:
        serving = {}
        if (est := speculative.from_requests([x.meta_info for x in g])) is not None:
            serving["accept_length"] = est.value
        decode = sum(x.decode_tok_s for x in g) / len(g)
        runs.append(RunSample(output_tok_s=decode, decode_tok_s=decode, ttft_ms=20.0, mean_itl_ms=5.0, e2e_s=0.1,
                              completion_tokens=sum(x.completion_tokens for x in g), client_overhead=0.001,
                              generations=g, serving=serving,
                              server_cpu_s=None if cpu_per is None else cpu_per * sum(
                                  x.verify_ct if x.verify_ct is not None else x.completion_tokens - 1 for x in g)))
    return Measurement(profile=profile, workload=wl, runs=runs, metrics_delta=None, metrics_after=None,
                       server_info_before={}, server_info_after={}, log_records=records, wall_s=1.0)


def _spec(cycle_s: float = 0.010, accepts: dict[str, list[int]] | None = None, load: float = 1.0,
          cpu_s: float | None = None) -> dict[tuple[str, str], Measurement]:
    """A speculative server's probe and single-stream measurements."""
    accepts = accepts or ACCEPTS
    probe = [[_gen(p, accepts[p], cycle_s) for p in PROMPTS] for _ in range(2)]
    single = [[_gen(PROMPTS[0], accepts[PROMPTS[0]], cycle_s)] for _ in range(RUNS)]
    mean = sum(accepts[PROMPTS[0]]) / len(accepts[PROMPTS[0]])
    return {("spec", specread.PROBE.name): _measurement("spec", specread.PROBE, probe, []),
            ("spec", "single-stream"): _measurement("spec", SINGLE, single, _lines(mean, cycle_s, load=load), cpu_s)}


def _base(step_s: float = 0.005, load: float = 1.0, cpu_s: float | None = None) -> dict[tuple[str, str], Measurement]:
    gens = [[_gen(PROMPTS[0], [1] * 15, step_s, spec=False)] for _ in range(RUNS)]
    return {("base", "single-stream"): _measurement("base", SINGLE, gens, _lines(None, step_s, load=load), cpu_s)}


def _session(measurements: dict, recorded: ResultSet | None, machine: str | None = None, **config: Any) -> Session:
    profiles = parse_profiles({"server": [{"name": "base"}, {"name": "spec", "speculative": {"algorithm": "EAGLE3"}}],
                               "fixtures": {"baseline": "base", "spec": "spec"}, "defaults": {"tolerance": 0.2}})
    session = Session(Config(**config), progress=lambda m: None, _profiles=profiles)
    session.measurements.update(measurements)

    def reference(profile: str, workload: str, metric: str) -> Reference | str:
        got = recorded.get(f"{profile}/{workload}/{metric}") if recorded is not None else None
        if got is None:
            return f"no baseline for {profile}/{workload}/{metric}"
        return Reference(list(got.samples), "baseline test.json", [], dict(got.extra), machine=machine)

    session.reference_samples = reference  # type: ignore[method-assign]
    return session


def _recorded(spec_load: float = 1.0, base_load: float = 1.0) -> ResultSet:
    """What a healthy recording session leaves in the results (and so in the baselines); ``*_load``: how
    much slower other processes made most windows of each server."""
    first = _session({**_spec(load=spec_load), **_base(load=base_load)}, None, update_baselines=True)
    for name in ("spec", "base"):
        gatekeeper.cycle_cost_vs_baseline(first, name)
    gatekeeper.accept_length_vs_baseline(first, "spec")
    rs = results_of(first.measurements, {"machine_class": "x"}, None)
    specgates.add_row_results(rs, first.verdict_rows)
    return rs


def test_results_record_accept_length_per_prompt_and_the_cycle_cost_over_busy_time() -> None:
    rs = _recorded()
    probe = rs.get(f"spec/{specread.PROBE.name}/accept_length")
    assert probe is not None and len(probe.extra["per_prompt"]) == 3
    first = probe.extra["per_prompt"][0]
    assert first["verify_ct"] == [6, 6] and first["bounds"] == [1, 4, 7, 9, 12, 13, 16]
    single = rs.get("spec/single-stream/accept_length")
    assert single.samples == pytest.approx([1 + 9 / 6] * RUNS) and single.extra["source"].startswith("meta_info")
    cycle = rs.get("spec/single-stream/cycle_ms")
    assert cycle.extra["source"] == "busy Decode windows (25 of 30 lines)"  # each run's first one holds its prefill
    assert cycle.samples[0] == pytest.approx(10.0, rel=0.01) and cycle.extra["client_ms"] == pytest.approx(10.0)
    assert rs.get("base/single-stream/decode_step_ms").samples[0] == pytest.approx(5.0, rel=0.01)
    ratio = rs.get("spec/single-stream/cycle_ratio")
    assert ratio is not None and ratio.samples == pytest.approx([2.0] * RUNS)  # one per run pair
    assert ratio.extra["source"] == cyclecost.PAIRED_SOURCE


def test_healthy_runs_against_their_recording_raise_no_finding() -> None:
    rs = _recorded()
    session = _session({**_spec(), **_base()}, rs)
    accept = gatekeeper.accept_length_vs_baseline(session, "spec")
    assert accept.passed, accept.message
    assert "3/3 prompts took their recorded verify counts" in accept.message
    cycle = gatekeeper.cycle_cost_vs_baseline(session, "spec")
    assert cycle.passed, cycle.message
    plain = gatekeeper.cycle_cost_vs_baseline(session, "base")
    assert plain.skipped and "its own drift is the throughput drift gate's" in plain.reason
    line = next(ln for ln in summary_lines([], []) + specgates.summary_lines(session.verdict_rows)
                if ln.startswith("specwatch speculation spec:"))
    assert "accept length 2.50 from meta_info of each run, exact: pass" in line
    assert "cycle 9.85 ms from busy Decode windows (25 of 30 lines), step 4.93 ms: pass" in line
    assert "break-even 2.00 -> pays" in line
    assert not any(ln.startswith("specwatch speculation base") for ln in specgates.summary_lines(session.verdict_rows))


def test_a_recording_under_load_does_not_make_a_quiet_healthy_session_a_regression() -> None:
    """The CI failure: other processes slowed the recording's plain steps 2.5 times and its cycles twice (a
    short step loses more to them), so its medians read a break-even of 1.6 and a quiet session's 2.0 looked
    25% worse. Each run's fastest window, the one least preempted, reads 2.0 in both."""
    rs = _recorded(spec_load=2.0, base_load=2.5)
    assert rs.get("spec/single-stream/cycle_ratio").samples == pytest.approx([2.0] * RUNS)
    session = _session({**_spec(), **_base()}, rs)
    verdict = gatekeeper.cycle_cost_vs_baseline(session, "spec")
    assert verdict.passed, verdict.message
    eager = gatekeeper.cycle_cost_vs_baseline(_session({**_spec(cycle_s=0.018), **_base()}, rs), "spec")
    assert eager.failed and eager.reason.startswith("break-even (cycle / plain step) rose +80.0%"), eager.message


def test_servers_decoding_on_the_cpu_are_judged_by_their_cpu_time_which_waiting_for_a_cpu_leaves_out() -> None:
    """Other processes kept the recording's cycle windows waiting three times as long as its steps' (their
    windows read a break-even of 6.0); their CPU time per cycle and per step did not move: 2.0."""
    first = _session({**_spec(load=3.0, cpu_s=0.008), **_base(cpu_s=0.004)}, None, update_baselines=True)
    gatekeeper.cycle_cost_vs_baseline(first, "spec")
    rs = results_of(first.measurements, {"machine_class": "x"}, None)
    specgates.add_row_results(rs, first.verdict_rows)
    ratio = rs.get("spec/single-stream/cycle_ratio")
    assert ratio.samples == pytest.approx([2.0] * RUNS) and ratio.extra["source"] == cyclecost.CPU_SOURCE
    healthy = gatekeeper.cycle_cost_vs_baseline(_session({**_spec(cpu_s=0.008), **_base(cpu_s=0.004)}, rs), "spec")
    assert healthy.passed and cyclecost.CPU_SOURCE in healthy.message, healthy.message
    eager = _session({**_spec(cycle_s=0.018, cpu_s=0.0144), **_base(cpu_s=0.004)}, rs)  # +80% CPU per cycle
    verdict = gatekeeper.cycle_cost_vs_baseline(eager, "spec")
    assert verdict.failed and verdict.reason.startswith("break-even (cycle / plain step) rose +80.0%"), verdict.message


def test_a_perturbed_draft_fails_naming_the_prompts_and_where_acceptance_diverged() -> None:
    rs = _recorded()
    worse = dict(ACCEPTS)
    worse[PROMPTS[1]] = [2, 2, 1, 1, 2, 3]  # the same 11 tokens in more cycles: the draft is accepted less
    session = _session({**_spec(accepts=worse), **_base()}, rs)
    verdict = gatekeeper.accept_length_vs_baseline(session, "spec")
    assert verdict.failed
    assert verdict.reason.startswith("acceptance dropped on 1/3 greedy prompts: prompt 1 (5 -> 6)")
    assert "lossless output: the draft or its inputs changed" in verdict.reason
    assert "acceptance first diverged at output token 6 (verify cycle 3: 2 tokens then, 1 now)" in verdict.message


def test_an_eager_verify_fails_the_cycle_gate_by_its_break_even_naming_the_speculative_path() -> None:
    rs = _recorded()
    session = _session({**_spec(cycle_s=0.018), **_base()}, rs)
    verdict = gatekeeper.cycle_cost_vs_baseline(session, "spec")
    assert verdict.failed, verdict.message
    assert verdict.reason.startswith("break-even (cycle / plain step) rose +80.0% against the baseline")
    assert "the speculative path itself got slower" in verdict.reason and "verify that runs eager" in verdict.reason
    assert gatekeeper.accept_length_vs_baseline(session, "spec").passed  # acceptance did not move
    slow_machine = _session({**_spec(cycle_s=0.018), **_base(step_s=0.009)}, rs)
    assert gatekeeper.cycle_cost_vs_baseline(slow_machine, "spec").passed  # both servers slower: the break-even held


def test_recording_skips_with_rows_and_a_missing_baseline_skips_saying_so() -> None:
    first = _session({**_spec(), **_base()}, None, update_baselines=True)
    v = gatekeeper.cycle_cost_vs_baseline(first, "spec")
    assert v.skipped and "being recorded" in v.message and any(specgates.RESULT in r.extra for r in v.rows)
    fresh = _session({**_spec(), **_base()}, None)
    missing = gatekeeper.accept_length_vs_baseline(fresh, "spec")
    assert missing.skipped and "no baseline for spec/speculation-probe/accept_length" in missing.message
    assert fresh.missing_baselines
    required = _session({**_spec(), **_base()}, None, require_baseline=True)
    assert gatekeeper.cycle_cost_vs_baseline(required, "spec").failed
    assert gatekeeper.accept_length_vs_baseline(fresh, "base").skipped  # not a speculative server


def test_the_break_even_result_is_added_once() -> None:
    rs = _recorded()
    n = len(rs.results)
    session = _session({**_spec(), **_base()}, rs)
    gatekeeper.cycle_cost_vs_baseline(session, "spec")
    specgates.add_row_results(rs, session.verdict_rows)  # its key is there already: not added twice
    assert len(rs.results) == n


def test_a_server_that_reports_no_accept_length_skips_even_when_baselines_are_required() -> None:
    """An OpenAI-compatible speculative server shows no verify counts and no Decode lines: nothing to gate."""
    quiet = [[_gen(p, ACCEPTS[p], 0.01, spec=False) for p in PROMPTS] for _ in range(2)]
    single = [[_gen(PROMPTS[0], ACCEPTS[PROMPTS[0]], 0.01, spec=False)] for _ in range(RUNS)]
    session = _session({("spec", specread.PROBE.name): _measurement("spec", specread.PROBE, quiet, []),
                        ("spec", "single-stream"): _measurement("spec", SINGLE, single, [])}, None,
                       require_baseline=True)
    verdict = gatekeeper.accept_length_vs_baseline(session, "spec")
    assert verdict.skipped and "reports no accept length" in verdict.reason
    assert gatekeeper.cycle_cost_vs_baseline(session, "spec").skipped


def test_both_gates_judge_the_run_on_the_machine_its_reference_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """The accept-length and cycle-cost drifts pass the run's own machine to the drift verdict, as the
    throughput gate does, so a baseline of several machines judges it on its own when it holds enough."""
    rs = _recorded()
    asked: list[str | None] = []
    real = compare.drift

    def drift(*args: Any, **kwargs: Any) -> Any:
        asked.append(kwargs.get("machine"))
        return real(*args, **kwargs)

    monkeypatch.setattr(compare, "drift", drift)
    session = _session({**_spec(), **_base()}, rs, machine="host:m1")
    assert gatekeeper.accept_length_vs_baseline(session, "spec").passed
    assert gatekeeper.cycle_cost_vs_baseline(session, "spec").passed
    assert len(asked) >= 2 and set(asked) == {"host:m1"}


def test_the_cycle_time_the_gate_reports_beside_the_break_even_it_judges_never_reads_regression() -> None:
    """Real SGLang 0.5.23 (CPU, STANDALONE): the header said 1 regression(s), its row
    `.../cycle_ms ... +153.7% ... REGRESSION`, yet the cycle gate passed: the break-even it judges held."""
    from specwatch.report.table import summary_table

    rs = _recorded()
    slow_machine = _session({**_spec(cycle_s=0.018), **_base(step_s=0.009)}, rs)
    verdict = gatekeeper.cycle_cost_vs_baseline(slow_machine, "spec")
    assert verdict.passed, verdict.message
    cycle, ratio = verdict.rows
    assert cycle.verdict == "regression" and not cycle.gated and not cycle.is_bad  # measured worse, reported
    assert ratio.gated and not ratio.is_bad
    table = summary_table(verdict.rows)
    assert table.splitlines()[0].endswith("2 result(s), 0 regression(s)")
    assert "REGRESSION" not in table and "worse, not gated" in table
    eager = gatekeeper.cycle_cost_vs_baseline(_session({**_spec(cycle_s=0.018), **_base()}, rs), "spec")
    assert eager.failed and eager.rows[1].is_bad and not eager.rows[0].is_bad  # the judged row is the regression
    assert "2 result(s), 1 regression(s)" in summary_table(eager.rows).splitlines()[0]


def test_a_skip_says_why_on_its_first_line() -> None:
    """Issue 36: ``-rA`` showed "eagle3 accept length:" and nothing more; a skip's first line now says why."""
    from specwatch.run import specgates

    policy = specgates.Policy(alpha=0.01)
    titled = specgates._no_reference(specgates.ACCEPT_GATE, policy, "eagle3",
                                     "eagle3 accept length:\ngreedy: no baseline for eagle3\naggregate: -", [])
    assert titled.skipped
    assert titled.message.splitlines()[0] == "eagle3 accept length: not judged: greedy: no baseline for eagle3"
    plain = specgates._no_reference(specgates.CYCLE_GATE, policy, "eagle3", "break-even: no baseline\ncycle: -", [])
    assert plain.message.splitlines()[0].endswith("on eagle3: not judged: break-even: no baseline")
