"""The all-reduce probe: the environments it launches under, its verdicts, real gloo ranks on CPU."""

from __future__ import annotations

import os
import time
import uuid

import psutil
import pytest

from specwatch.checks import allreduce
from specwatch.checks.allreduce import ProbeRun, probe_env, run_probe, tuning_effects
from specwatch.cli import main
from specwatch.errors import EXIT_OK, EXIT_USAGE, InfraError, UsageError
from specwatch.judge.compare import relative_gate
from specwatch.profiles.loading import parse_profiles
from specwatch.profiles.profile import TUNED_NCCL
from specwatch.server.launch import managed_variables

TP2 = {
    "defaults": {"engine": "reference", "model": "ref-tiny", "device": "cpu", "tp": 2},
    "server": [{"name": "eagle3-untuned", "env": "untuned", "extra_env": {"NCCL_P2P_DISABLE": "1"}},
               {"name": "eagle3-tuned", "env": "tuned", "extra_env": {"NCCL_P2P_DISABLE": "1"}}],
    "fixtures": {"tuned": "eagle3-tuned", "untuned": "eagle3-untuned"},
}


def test_probe_env_is_the_servers_nccl_environment() -> None:
    ps = parse_profiles(TP2)
    tuned, untuned = allreduce.tuned_and_untuned(ps)
    managed = managed_variables(ps.servers.values())
    shell = {"NCCL_ALGO": "Tree", "HOME": "/root", "PYTHONPATH": "/x"}  # a leak from the user's shell
    t, u = probe_env(tuned, managed, shell), probe_env(untuned, managed, shell)
    assert {k: t[k] for k in TUNED_NCCL} == dict(TUNED_NCCL)
    assert not set(TUNED_NCCL) & set(u), "the untuned ranks must not see any tuned variable"
    assert t["NCCL_P2P_DISABLE"] == u["NCCL_P2P_DISABLE"] == "1" and u["HOME"] == "/root"
    assert u["PYTHONPATH"].endswith(os.pathsep + "/x") and u["PYTHONPATH"].split(os.pathsep)[0].endswith("src")


def test_tp1_or_missing_roles_are_usage_errors() -> None:
    one = {**TP2, "defaults": {**TP2["defaults"], "tp": 1}}
    with pytest.raises(UsageError, match="tensor parallel 1: there is no all-reduce to time"):
        allreduce.tuned_and_untuned(parse_profiles(one))
    with pytest.raises(UsageError, match="no tuned and untuned servers"):
        allreduce.tuned_and_untuned(parse_profiles({"server": [{"name": "a", "tp": 2}]}))
    huge = {**TP2, "defaults": {**TP2["defaults"], "tp": 100000}}  # would start 100000 processes
    with pytest.raises(UsageError, match="tensor parallel 100000: the probe starts every rank on this host, at most"):
        allreduce.tuned_and_untuned(parse_profiles(huge))


def _run(us: float, n: int = 30, spread: float = 0.01) -> ProbeRun:
    return ProbeRun({14336: [us * (1 + spread * ((i % 7) - 3) / 3) for i in range(n)]}, "nccl", True, 2)


def _launches(us: float, jitter: float, k: int = 6) -> list[ProbeRun]:
    """``k`` launches whose medians wander by about ``jitter`` around ``us``."""
    return [_run(us * (1 + jitter * ((i * 5) % k - (k - 1) / 2) / k)) for i in range(k)]


def test_eleven_percent_faster_is_a_win_and_one_and_a_half_percent_is_none() -> None:
    # device-facts, sockets: 86.2 µs untuned, 76.8 µs tuned; NVLink: 10.76 against 10.60
    (sock,) = tuning_effects(_launches(86.2, 0.02), _launches(76.8, 0.02), min_effect=0.05)
    assert sock.gate.ratio == pytest.approx(76.8 / 86.2, rel=0.01) and sock.sentence.startswith("tuning helps")
    assert sock.gate.n_a == sock.gate.n_b == 6  # launches, not samples
    assert "untuned     86.2 µs  tuned     76.8 µs  time -10.9% [" in sock.line()
    (nvl,) = tuning_effects(_launches(10.76, 0.03), _launches(10.60, 0.03), min_effect=0.05)
    assert not nvl.sentence.startswith("tuning helps"), nvl.sentence


def test_launch_to_launch_wander_is_not_an_effect() -> None:
    """Two launches a side that differ only by where they landed: pooled samples (60 a side) call
    this a 33% win at p ~ 1e-6; launch medians cannot, and say so."""
    untuned, tuned = [_run(1000.0), _run(1400.0)], [_run(700.0), _run(1100.0)]
    (e,) = tuning_effects(untuned, tuned, min_effect=0.05)
    assert e.gate.n_a == 2 and not e.sentence.startswith("tuning helps"), e.sentence
    pooled = relative_gate([x for r in tuned for x in r.samples_us[14336]],
                           [x for r in untuned for x in r.samples_us[14336]], higher_is_better=False)
    assert pooled.passed and pooled.p_pass < 1e-5  # what the launch as the unit avoids


def test_real_gloo_ranks_on_cpu() -> None:
    ps = parse_profiles(TP2)
    tuned, _ = allreduce.tuned_and_untuned(ps)
    run = run_probe(probe_env(tuned, managed_variables(ps.servers.values())), world=2, sizes=[1024, 4096],
                    device="cpu", graphed=False, calls=2, samples=3, timeout_s=120)
    assert run.backend == "gloo" and run.world == 2 and not run.graphed
    assert sorted(run.samples_us) == [1024, 4096]
    assert all(len(xs) == 3 and min(xs) > 0 for xs in run.samples_us.values())


def _marked_env() -> tuple[dict[str, str], str]:
    """A probe environment with a mark of this test's own: other tests' probes (another xdist worker's, another
    checkout's) may run at the same time, and only this test's ranks must be gone."""
    mark = uuid.uuid4().hex
    return {**probe_env(allreduce.tuned_and_untuned(parse_profiles(TP2))[0], set()), "SPECWATCH_TEST_MARK": mark}, mark


def _probe_processes(mark: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if "specwatch.checks.allreduce_ranks" not in " ".join(p.info["cmdline"] or []):
            continue
        try:
            if p.environ().get("SPECWATCH_TEST_MARK") == mark:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def test_a_probe_past_its_timeout_is_killed_with_its_ranks() -> None:
    env, mark = _marked_env()
    with pytest.raises(InfraError, match=r"did not finish in 0\.5 s; killed"):
        run_probe(env, world=2, sizes=[1024], device="cpu", graphed=False, calls=2, samples=3, timeout_s=0.5)
    deadline = time.monotonic() + 10
    while _probe_processes(mark) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _probe_processes(mark)


def test_a_hung_rank_is_reported_with_what_each_rank_printed_last() -> None:
    """Issue 19: a hang used to say only "killed". Now each rank's last lines are in the message:
    rank 1 never joins, rank 0 waits in init_process_group for it. The limit leaves room for two ranks to import
    torch on a loaded 2-core machine (12 s did not, once, beside a busy neighbour: rank 0 had printed nothing)."""
    env, mark = _marked_env()
    with pytest.raises(InfraError) as exc:
        run_probe(env, world=2, sizes=[1024], device="cpu", graphed=False, calls=2, samples=3, timeout_s=40,
                  hang_rank=1)
    text = str(exc.value)
    assert "did not finish in 40 s; killed" in text
    assert "rank 0: [rank 0] init_process_group gloo, world 2" in text
    assert "rank 1: [rank 1] hanging before init_process_group" in text
    deadline = time.monotonic() + 10
    while _probe_processes(mark) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _probe_processes(mark)


def test_a_hang_in_the_teardown_keeps_the_timings_with_a_note() -> None:
    """Issue 19, as seen on two H200s over sockets (2026-12-01): every rank timed every size, then
    the NCCL teardown never returned. The timings are whole (written before the teardown): kept,
    the ranks killed, and the run says so instead of failing."""
    env, mark = _marked_env()
    run = run_probe(env, world=2, sizes=[1024, 2048], device="cpu", graphed=False, calls=2, samples=3,
                    timeout_s=20, hang_teardown=True)
    assert sorted(run.samples_us) == [1024, 2048] and all(len(v) == 3 for v in run.samples_us.values())
    assert "hung in the teardown (destroy_process_group) after every size was timed" in run.note
    deadline = time.monotonic() + 10
    while _probe_processes(mark) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _probe_processes(mark)


def test_a_killed_caller_takes_the_probe_and_its_ranks_with_it(tmp_path) -> None:
    """kill -9 of the run while the ranks hang (rank 1 never joins, rank 0 waits for it): the
    launcher dies with its caller and each rank with its launcher; on a GPU a rank left behind
    would hold its CUDA context and NCCL communicator."""
    import signal
    import subprocess
    import sys

    script = tmp_path / "caller.py"
    script.write_text(
        "import json, sys\n"
        "from specwatch.checks.allreduce import run_probe\n"
        "run_probe(json.loads(sys.argv[1]), world=2, sizes=[1024], device='cpu', graphed=False, calls=2,\n"
        "          samples=3, timeout_s=120, hang_rank=1)\n")
    import json

    env = probe_env(allreduce.tuned_and_untuned(parse_profiles(TP2))[0], set())
    caller = subprocess.Popen([sys.executable, str(script), json.dumps(dict(env))])
    try:
        deadline = time.monotonic() + 60
        family: list[psutil.Process] = []
        while len(family) < 3 and time.monotonic() < deadline:  # the launcher and its two ranks
            family = [p for p in psutil.Process(caller.pid).children(recursive=True)
                      if "multiprocessing" in " ".join(p.cmdline()) or "allreduce_ranks" in " ".join(p.cmdline())]
            time.sleep(0.2)
        assert len(family) >= 3, f"the probe never started its ranks: {[p.cmdline() for p in family]}"
        os.kill(caller.pid, signal.SIGKILL)
        caller.wait()
        _, alive = psutil.wait_procs(family, timeout=15)
        assert not alive, f"left running after kill -9 of the caller: {[p.cmdline() for p in alive]}"
    finally:
        if caller.poll() is None:
            caller.kill()


def test_a_failing_probe_says_why() -> None:
    env = probe_env(allreduce.tuned_and_untuned(parse_profiles(TP2))[0], set())
    with pytest.raises(InfraError, match=r"the all-reduce probe failed \(exit [1-9]") as exc:
        run_probe(env, world=2, sizes=[1024], device="cpu", graphed=True, calls=2, samples=3, timeout_s=120)
    assert "rank 0: [rank 0] init_process_group gloo" in str(exc.value)  # each rank's own lines, then why


def test_cli_prints_the_table(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    prof = tmp_path / "tp2.toml"
    prof.write_text('version = 1\n[defaults]\nengine = "reference"\nmodel = "ref-tiny"\ndevice = "cpu"\ntp = 2\n'
                    '[[server]]\nname = "u"\nenv = "untuned"\n[[server]]\nname = "t"\nenv = "tuned"\n'
                    '[fixtures]\ntuned = "t"\nuntuned = "u"\n')
    args = ["allreduce", str(prof), "--rounds", "2", "--samples", "3", "--calls", "2", "--sizes", "1024"]
    assert main(args) == EXIT_OK
    out = capsys.readouterr().out
    assert "all-reduce probe, round 2/2: u (2 ranks, cpu, eager)" in out
    assert "all-reduce, 2 ranks over gloo, eager, 2 launches a side (the unit: each one's median of 3 samples of " \
           "2 calls); t against u:" in out
    assert "    1024 B  untuned" in out and "; " in out.splitlines()[-1]
    assert main(["allreduce", str(prof), "--sizes", "1k"]) == EXIT_USAGE
    assert main(["allreduce", str(prof), "--rounds", "1"]) == EXIT_USAGE
    assert main(["allreduce", str(prof), "--graphed", "yes", "--device", "cpu"]) == EXIT_USAGE
    assert "--graphed yes needs --device cuda" in capsys.readouterr().err
