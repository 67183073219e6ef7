"""``specwatch inspect`` on saved captures: verdicts, the set-after-start inference, bad captures, redaction."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specwatch.checks import environment
from specwatch.checks.envcheck import ENGINE_SET_NCCL, VIEW_CHILD, VIEW_SIBLING, check_environment
from specwatch.checks.envtree import describe_set_after_start, find_set_after_start
from specwatch.checks.inspect import inspect_capture, launch_profile, profile_notes
from specwatch.cli import main
from specwatch.profiles.loading import load_profiles
from specwatch.profiles.profile import TUNED_NCCL, ServerProfile
from specwatch.signals.procenv import EnvRead, ProcInfo
from specwatch.store.capture import (
    MANIFEST,
    REDACTED,
    CapturedProcess,
    CaptureError,
    Redactor,
    read_capture,
    write_capture,
)

DATA = Path(__file__).parent / "data" / "captures"
HEALTHY = DATA / "sglang-eagle3-tuned"
LEAK = DATA / "sglang-eagle3-untuned-leak"
WORKERS = {24434: "sglang::scheduler_TP0", 24435: "sglang::scheduler_TP1", 24436: "sglang::detokenizer"}


def _by_name(verdicts):
    return {v.name: v for v in verdicts}


# --------------------------------------------------------------------------------------------
# The two example captures


def test_healthy_capture_passes_every_check() -> None:
    cap = read_capture(HEALTHY)
    assert {p.environ.status for p in cap.processes if p.pid in (31434, 31435, 31436)} == {"retitled"}
    v = _by_name(inspect_capture(cap))
    assert [x.status.value for x in v.values()] == ["pass", "pass", "pass"], [x.message for x in v.values()]
    # the blank workers were judged from the probe records and NCCL's lines, never from their /proc
    report = v["environment"].details
    for pid in (31434, 31435, 31436):
        for var in TUNED_NCCL:
            ok = next(f for f in report.findings if f.pid == pid and f.variable == var and f.status == "ok")
            assert ok.view in ("probe later", "NCCL applied"), ok
    assert "cuda_graph_passes_total" in v["verify graphs"].reason
    assert "2 sources agree" in v["accept length"].reason


def test_leaked_sitecustomize_is_found_through_the_tree_although_every_worker_is_blank() -> None:
    cap = read_capture(LEAK)
    assert all(p.environ.status == "retitled" for p in cap.processes if p.pid in WORKERS)
    prof = launch_profile(cap)
    assert prof is not None and prof.env == "untuned" and not prof.env_vars  # launched without tuning
    v = _by_name(inspect_capture(cap))
    env = v["environment"]
    assert env.failed
    report = env.details
    # the main process: absent from its start environment, carried by its resource tracker started after it
    for var in TUNED_NCCL:
        f = next(f for f in report.failures if f.pid == 24410 and f.variable == var)
        assert (f.status, f.view, f.found) == ("leak", VIEW_CHILD, TUNED_NCCL[var])
    # the blank workers: named from their earlier sibling
    for pid in WORKERS:
        assert {f.variable for f in report.failures if f.pid == pid and f.view == VIEW_SIBLING} == set(TUNED_NCCL)
    assert "set inside python -m sglang.launch_server" in env.reason and "(pid 24410) after it started" in env.reason
    assert "sitecustomize.py or a patch" in env.reason and "(pid 24433)" in env.reason
    for pid, title in WORKERS.items():
        assert f"{title} (pid {pid})" in env.reason
    graphs = v["verify graphs"]
    assert graphs.failed and "56" in graphs.reason and "48" in graphs.reason
    assert v["accept length"].passed


def test_the_leak_stands_when_judged_against_the_untuned_profile_and_the_healthy_one_leaks_there_too() -> None:
    untuned = load_profiles(None).get("eagle3-untuned")
    assert _by_name(inspect_capture(read_capture(LEAK), untuned))["environment"].failed
    healthy = _by_name(inspect_capture(read_capture(HEALTHY), untuned))["environment"]
    assert healthy.failed and "leaked into" in healthy.reason
    tuned = load_profiles(None).get("eagle3-tuned")
    # judged as tuned, the leak server's main carries the variables (set after start); its blank workers
    # have no view and an inference never passes them: not a pass, not a fail
    as_tuned = _by_name(inspect_capture(read_capture(LEAK), tuned))["environment"]
    assert as_tuned.skipped and "likely ok" in as_tuned.reason
    assert as_tuned.details.verdict_for(24410, "NCCL_PROTO") == "ok"


def test_profile_notes_name_what_differs_from_the_captured_server(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    toml = tmp_path / "p.toml"
    toml.write_text('version = 1\n[[server]]\nname = "mine"\nengine = "sglang"\nmodel = "/models/tinyllama"\n'
                    'tp = 2\nenv = "tuned"\nspeculative = { algorithm = "EAGLE3", num_steps = 2 }\n'
                    '[[server]]\nname = "auto"\nengine = "sglang"\nmodel = "/m"\ntp = 2\n'
                    'speculative = { algorithm = "EAGLE3" }\n')
    cap = read_capture(HEALTHY)
    notes = profile_notes(cap, load_profiles(toml).get("mine"))
    assert notes == ["profile mine says speculative_num_steps 2, the captured /server_info says 3",
                     "profile mine says speculative_num_draft_tokens 3, the captured /server_info says 4"]
    assert profile_notes(cap, load_profiles(toml).get("auto")) == []  # left to the engine: nothing to compare
    assert profile_notes(cap, None) == []
    # judged against a profile that leaves num_steps to the engine: the capture's /server_info says it
    assert _by_name(inspect_capture(cap, load_profiles(toml).get("auto")))["accept length"].passed
    assert main(["inspect", str(HEALTHY), "--profile", str(toml), "--server", "mine"]) == 0
    assert "note: profile mine says speculative_num_steps 2" in capsys.readouterr().out
    assert main(["inspect", str(HEALTHY), "--profile", str(toml)]) == 2
    assert "has 2 servers: name one with --server (auto, mine)" in capsys.readouterr().err


def test_cli_prints_one_verdict_line_per_check_and_exits_by_the_worst(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(HEALTHY)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"inspect {HEALTHY}: sglang 0.5.23 EAGLE3")
    assert [line.split()[:3] for line in out[1:]] == [["environment:", "pass", "tuned"],
                                                      ["verify", "graphs:", "pass"], ["accept", "length:", "pass"]]
    assert main(["inspect", str(LEAK)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 4
    assert out[1].startswith("environment:   fail  NCCL_ALGO") and out[2].startswith("verify graphs: fail")
    assert main(["inspect", str(LEAK), "-v"]) == 1
    assert "views per process:" in capsys.readouterr().out


def test_without_profile_an_unreadable_main_is_a_skip_not_a_guess(tmp_path: Path) -> None:
    folder = _copy(LEAK, tmp_path)
    data = json.loads((folder / MANIFEST).read_text())
    data["processes"][0]["environ"] = {"status": "denied", "nbytes": 0, "env": {}}
    (folder / MANIFEST).write_text(json.dumps(data))
    env = _by_name(inspect_capture(read_capture(folder)))["environment"]
    assert env.skipped and "--profile" in env.reason


# --------------------------------------------------------------------------------------------
# The inference itself (envcheck)


def _tree(main_env: dict[str, str], helper_env: dict[str, str] | None) -> list[ProcInfo]:
    procs = [ProcInfo(10, 1, "python", ["python", "-m", "sglang.launch_server"], EnvRead("ok", main_env)),
             ProcInfo(12, 10, "sglang::scheduler", ["sglang::scheduler", ""], EnvRead("retitled", {}, 900)),
             ProcInfo(13, 10, "sglang::detokenizer", ["sglang::detokenizer", ""], EnvRead("retitled", {}, 900))]
    if helper_env is not None:
        procs.append(ProcInfo(11, 10, "python", ["python", "-c", "from multiprocessing.resource_tracker import main"],
                              EnvRead("ok", helper_env)))
    return procs


STARTS = {10: 0.0, 11: 2.0, 12: 2.1, 13: 2.2}


def test_set_after_start_names_parent_child_and_variables_and_skips_engine_set_ones() -> None:
    procs = _tree({"PATH": "/bin"}, {"PATH": "/bin", **TUNED_NCCL, "NCCL_CUMEM_ENABLE": "0", "NCCL_FOO": "1"})
    [sa] = find_set_after_start(procs, TUNED_NCCL, engine_set=ENGINE_SET_NCCL)
    assert (sa.pid, sa.child_pid) == (10, 11)
    assert sa.variables == {**TUNED_NCCL, "NCCL_FOO": "1"}  # NCCL_CUMEM_ENABLE: SGLang sets it itself
    assert "its /proc start environment lacks" in sa.describe()
    # two children that show it: one sentence for the parent, naming both
    two = [*procs, ProcInfo(15, 10, "python", ["python", "-c", "other"], EnvRead("ok", {"NCCL_PROTO": "LL"}))]
    [text] = describe_set_after_start(find_set_after_start(two, TUNED_NCCL)).values()
    assert "but its children python -c from multiprocessing.resource_tracker import main (pid 11), " \
           "python -c other (pid 15), started after it, carry them" in text
    # the same values at start: nothing was set after start
    assert find_set_after_start(_tree(dict(TUNED_NCCL), dict(TUNED_NCCL)), TUNED_NCCL) == []
    # the helper is not in the tree: no evidence, no claim
    assert find_set_after_start(_tree({"PATH": "/bin"}, None), TUNED_NCCL) == []
    # a helper below a blank worker: set in the main process or in the worker, the check cannot tell which
    helper = ProcInfo(14, 12, "python", ["python", "-c", "pass"], EnvRead("ok", {"PATH": "/bin", "NCCL_PROTO": "LL"}))
    deep = [*_tree({"PATH": "/bin"}, None), helper]
    [sa] = find_set_after_start(deep, TUNED_NCCL)
    assert (sa.pid, sa.child_pid, sa.via) == (10, 14, (12,))
    assert "or inside pid 12 below it" in sa.describe() and "its descendant" in sa.describe()
    rep = check_environment(deep, TUNED_NCCL, "untuned")
    assert rep.verdict_for(10, "NCCL_PROTO") == "ok"  # not pinned on the main process
    # but the blank worker's own child shows the worker's environment: a view for a blank process
    leak = next(f for f in rep.failures if f.pid == 12)
    assert (leak.variable, leak.status, leak.view) == ("NCCL_PROTO", "leak", VIEW_CHILD)
    assert "a child it started carries it" in leak.detail and "set after it started" not in leak.detail


def test_not_launched_nccl_variable_set_after_start_is_a_warning() -> None:
    procs = _tree({"PATH": "/bin"}, {"PATH": "/bin", **TUNED_NCCL, "NCCL_FOO": "1"})
    rep = check_environment(procs, TUNED_NCCL, "tuned", starts=STARTS)
    assert [(f.pid, f.variable) for f in rep.findings if f.status == "unexpected"] == [(10, "NCCL_FOO")]


def test_sibling_inference_never_passes_a_process() -> None:
    """A parent may filter one child's environment (the refserver's --ref-fault-drop-env): an earlier
    sibling that carries the right value makes a blank worker "likely ok", never ok."""
    procs = _tree(dict(TUNED_NCCL), dict(TUNED_NCCL))
    rep = check_environment(procs, TUNED_NCCL, "tuned", starts=STARTS)
    assert rep.verdict == "unknown"
    f = next(f for f in rep.findings if f.pid == 12 and f.variable == "NCCL_PROTO")
    assert f.status == "unknown" and "likely ok" in f.detail and "pid 11" in f.detail
    wrong = check_environment(_tree(dict(TUNED_NCCL), {**TUNED_NCCL, "NCCL_PROTO": "Simple"}), TUNED_NCCL,
                              starts=STARTS)
    assert wrong.verdict_for(12, "NCCL_PROTO") == "mismatch"
    # a sibling started after the worker says nothing about it; nor does a tree without start times
    late = check_environment(procs, TUNED_NCCL, "untuned", starts={**STARTS, 11: 9.0})
    assert late.verdict_for(12, "NCCL_PROTO") == "unknown"
    assert check_environment(procs, TUNED_NCCL, "untuned").verdict_for(12, "NCCL_PROTO") == "unknown"


def test_environment_cause_names_where_an_untuned_leak_came_from() -> None:
    procs = _tree({"PATH": "/bin"}, {"PATH": "/bin", **TUNED_NCCL})
    verdict = environment.evaluate(load_profiles(None).get("eagle3-untuned"), procs, starts=STARTS)
    assert verdict.failed
    assert "cause: set inside python -m sglang.launch_server (pid 10) after it started" in verdict.message
    assert {f.pid for f in verdict.details.failures} == {10, 12, 13}


# --------------------------------------------------------------------------------------------
# Bad captures: one line naming the file, exit 2


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    return dst


def _edit(folder: Path, change) -> None:
    data = json.loads((folder / MANIFEST).read_text())
    change(data)
    (folder / MANIFEST).write_text(json.dumps(data))


@pytest.mark.parametrize(("breakage", "file", "says"), [
    (lambda d: shutil.rmtree(d), "", "no such capture folder"),
    (lambda d: (d / MANIFEST).unlink(), MANIFEST, "missing: not a specwatch capture folder"),
    (lambda d: (d / MANIFEST).write_text("{\"format\": "), MANIFEST, "not valid JSON (line 1 column"),
    (lambda d: _edit(d, lambda m: m.update(format="other")), MANIFEST, "not a specwatch capture manifest"),
    (lambda d: _edit(d, lambda m: m.update(version=2)), MANIFEST, "format version 2 is newer"),
    (lambda d: _edit(d, lambda m: m["processes"][1].update(pid="x")), MANIFEST,
     'processes[1].pid: expected a whole number >= 0, got "x"'),
    (lambda d: _edit(d, lambda m: m["processes"][2]["environ"].update(status="blank")), MANIFEST,
     "processes[2].environ.status: expected one of"),
    (lambda d: _edit(d, lambda m: m["processes"].append(m["processes"][0])), MANIFEST, "pid 24410 appears twice"),
    (lambda d: _edit(d, lambda m: m["files"].update(log="../elsewhere.log")), MANIFEST, "files.log: expected a file"),
    (lambda d: (d / "metrics.txt").unlink(), "metrics.txt", "missing (capture.json files.metrics names it)"),
    (lambda d: (d / "metrics.txt").write_text('sglang:x{a="1" 2\n'), "metrics.txt", "not Prometheus text"),
    (lambda d: (d / "server_info.json").write_text("<html>"), "server_info.json", "not valid JSON"),
    (lambda d: (d / "server_info.json").write_text("[1]"), "server_info.json", "expected a JSON object"),
])
def test_broken_capture_is_one_line_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    breakage, file: str, says: str) -> None:
    folder = _copy(LEAK, tmp_path)
    breakage(folder)
    assert main(["inspect", str(folder)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip()
    assert "\n" not in err and err.startswith(f"specwatch: {folder / file if file else folder}: "), err
    assert says in err, err
    with pytest.raises(CaptureError):
        read_capture(folder)


# --------------------------------------------------------------------------------------------
# Writing and redaction


def test_redactor_hides_secrets_and_keeps_look_alikes() -> None:
    r = Redactor.with_patterns(["MY_*"])
    env = r.environ({"HF_TOKEN": "hf_abc", "AWS_SECRET_ACCESS_KEY": "s", "DB_PASSWORD": "p", "MY_THING": "m",
                     "NCCL_PROTO": "LL", "PATH": "/bin"})
    assert env == {"HF_TOKEN": REDACTED, "AWS_SECRET_ACCESS_KEY": REDACTED, "DB_PASSWORD": REDACTED,
                   "MY_THING": REDACTED, "NCCL_PROTO": "LL", "PATH": "/bin"}
    argv = r.cmdline(["python", "-m", "sglang.launch_server", "--api-key", "sk-1", "--admin-api-key=sk-2",
                      "--max-total-tokens", "4096", "--tokenizer-path", "/m", "--ssl-keyfile", "/k.pem"])
    assert argv == ["python", "-m", "sglang.launch_server", "--api-key", REDACTED, f"--admin-api-key={REDACTED}",
                    "--max-total-tokens", "4096", "--tokenizer-path", "/m", "--ssl-keyfile", "/k.pem"]
    info = r.server_info({"api_key": "sk-1", "ssl_keyfile_password": "pw", "max_total_tokens": 4096,
                          "admin_api_key": None, "internal_states": [{"hf_token": "t"}]})
    assert info == {"api_key": REDACTED, "ssl_keyfile_password": REDACTED, "max_total_tokens": 4096,
                    "admin_api_key": None, "internal_states": [{"hf_token": REDACTED}]}
    line = "[t] server_args={'api_key': 'sk-1', 'tokenizer_path': '/m', 'watermark_key': '<redacted>'}"
    assert r.log_line(line) == f"[t] server_args={{'api_key': '{REDACTED}', 'tokenizer_path': '/m', " \
                               f"'watermark_key': '{REDACTED}'}}"
    assert r.summary()["redacted"]["environ"] == ["AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "HF_TOKEN", "MY_THING"]
    only_mine = Redactor.with_patterns(["MY_*"], defaults=False)
    assert only_mine.environ({"HF_TOKEN": "x", "MY_A": "y"}) == {"HF_TOKEN": "x", "MY_A": REDACTED}


def test_write_then_read_round_trip_redacts_before_writing(tmp_path: Path) -> None:
    log = tmp_path / "in.log"
    log.write_text("[2026-11-29 18:54:43] server_args={'api_key': 'sk-live-1', 'port': 30123}\nplain line\n")
    procs = [CapturedProcess(10, 1, "python", ["python", "-m", "sglang.launch_server", "--api-key", "sk-live-2"],
                             EnvRead("ok", {"HF_TOKEN": "hf_live", "NCCL_PROTO": "LL"}, 40), 100.5),
             CapturedProcess(11, 10, "sglang::scheduler", ["sglang::scheduler", "", ""], EnvRead("retitled", {}, 900),
                             101.25)]
    records = tmp_path / "records"
    records.mkdir()
    (records / "10-start-1.json").write_text(json.dumps({"pid": 10, "ppid": 1, "phase": "start", "time": 1.0,
                                                         "vars": {"NCCL_PROTO": "LL"}, "patterns": ["NCCL_*"]}))
    out = tmp_path / "cap"
    write_capture(out, created="2026-11-30T23:00:00Z", host="h", url="http://127.0.0.1:1", main_pid=10,
                  processes=procs, redactor=Redactor.with_patterns(), log_source=log,
                  metrics_text="# TYPE x counter\nx_total 3\n", server_info={"api_key": "sk-live-3", "version": "1"},
                  probe_records=[records / "10-start-1.json"], missing={"thing": "why"}, version="0.1.0")
    everything = "".join(p.read_text() for p in out.rglob("*") if p.is_file())
    assert "sk-live" not in everything and "hf_live" not in everything
    cap = read_capture(out)
    assert [(p.pid, p.ppid, p.environ.status, p.start_time) for p in cap.processes] == [
        (10, 1, "ok", 100.5), (11, 10, "retitled", 101.25)]
    assert cap.processes[0].environ.env == {"HF_TOKEN": REDACTED, "NCCL_PROTO": "LL"}
    assert cap.starts() == {10: 100.5, 11: 101.25}
    assert cap.server_info == {"api_key": REDACTED, "version": "1"}
    assert cap.metrics().value("x_total") == 3
    assert cap.log_lines()[1] == "plain line"
    assert set(cap.probe_records()) == {10}
    assert cap.missing == {"thing": "why"}
    assert cap.redaction["redacted"] == {"cmdline": ["--api-key"], "environ": ["HF_TOKEN"], "log": ["api_key"],
                                         "server_info": ["api_key"]}
    roles = {p.pid: p.role.role for p in cap.proc_infos()}
    assert roles == {10: "main", 11: "scheduler"}
    manifest = json.loads((out / MANIFEST).read_text())
    assert (manifest["format"], manifest["version"]) == ("specwatch-capture", 1)
    assert manifest["processes"][1]["title"] == "sglang::scheduler"


def test_capture_refuses_to_overwrite_and_needs_a_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / MANIFEST).write_text("{}")
    assert main(["capture", str(tmp_path), "--pid", "1"]) == 2
    assert "exists (pass --force to overwrite)" in capsys.readouterr().err
    assert main(["capture", str(tmp_path / "new")]) == 2
    assert "say which server: --url URL, --pid PID, or both" in capsys.readouterr().err
    assert main(["capture", str(tmp_path / "new"), "--url", "ftp://x", "--pid", "1"]) == 2
    assert "is not an http:// URL" in capsys.readouterr().err
    assert main(["capture", str(tmp_path / "new"), "--pid", str(2**22 + 12345)]) == 2
    assert "does not exist or cannot be read" in capsys.readouterr().err
    assert not (tmp_path / "new" / MANIFEST).exists()


def test_the_captured_main_process_is_checked_whatever_its_engine(tmp_path: Path) -> None:
    procs = [CapturedProcess(7, 1, "vllm", ["/venv/bin/vllm", "serve", "m"], EnvRead("ok", {"PATH": "/bin"}), 1.0),
             CapturedProcess(8, 7, "python", ["python", "-c", "helper"],
                             EnvRead("ok", {"PATH": "/bin", "NCCL_ALGO": "Ring"}), 2.0)]
    write_capture(tmp_path, created="c", host="h", url="http://127.0.0.1:8000", main_pid=7, processes=procs,
                  redactor=Redactor.with_patterns())
    cap = read_capture(tmp_path)
    assert {p.pid: p.role.role for p in cap.proc_infos()} == {7: "main", 8: "other"}
    v = _by_name(inspect_capture(cap))
    assert v["environment"].failed and "NCCL_ALGO leaked into vllm serve m (pid 7)" in v["environment"].reason
    assert v["verify graphs"].skipped and "no /server_info in the capture (not captured)" in v["verify graphs"].reason


def test_an_openai_profile_skips_the_sglang_only_checks_as_the_live_run_does(tmp_path: Path) -> None:
    procs = [CapturedProcess(7, 1, "vllm", ["/venv/bin/vllm", "serve", "m"], EnvRead("ok", {"PATH": "/bin"}), 1.0)]
    write_capture(tmp_path, created="c", host="h", url="http://127.0.0.1:8000", main_pid=7, processes=procs,
                  redactor=Redactor.with_patterns())
    profile = ServerProfile(name="vllm", engine="openai")
    verdicts = inspect_capture(read_capture(tmp_path), profile)
    assert [v.name for v in verdicts] == ["environment", "verify graphs", "accept length"]
    assert all(v.skipped and "SGLang-only check" in v.reason and "engine = 'openai'" in v.reason for v in verdicts)
