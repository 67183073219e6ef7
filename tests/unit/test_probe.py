"""probe: the generated sitecustomize records start/later in spawned children and chains."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from specwatch.signals.probe import probe_env, read_records, render_sitecustomize, write_probe, write_setter

_SCRIPT = textwrap.dedent(
    """
    import glob
    import multiprocessing as mp
    import os
    import time

    def child():
        os.environ["NCCL_ALGO"] = "Ring"   # set after start: only the later record can see it
        # live until the probe's later record is written (a condition, not a fixed sleep: a loaded
        # host can start the later thread late); 120 s is a hang guard only
        mine = os.path.join(os.environ["SPECWATCH_PROBE_DIR"], "%d-later-*.json" % os.getpid())
        deadline = time.monotonic() + 120
        while not glob.glob(mine) and time.monotonic() < deadline:
            time.sleep(0.05)

    if __name__ == "__main__":
        mp.set_start_method("spawn")
        p = mp.Process(target=child)
        p.start()
        p.join()
        print("parent-ok", os.environ.get("USER_SC"))
    """
)


def _run(tmp_path, pythonpath, extra_env=None, script=_SCRIPT):
    records = tmp_path / "records"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "SPECWATCH_"))}
    # later_s: the child sets NCCL_ALGO as soon as spawn has started it; the later record must come after
    # that. 2 s leaves a loaded host room to finish the spawn bootstrap (0.3 s raced it)
    env.update(probe_env(pythonpath[0], records, variables=["NCCL_*", "USER_SC", "ABSENT_VAR"], later_s=2.0))
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in pythonpath)
    env["NCCL_PROTO"] = "LL"
    env.update(extra_env or {})
    main = tmp_path / "main.py"
    main.write_text(script)
    out = subprocess.run([sys.executable, str(main)], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out, read_records(records)


def test_probe_records_spawn_child_start_and_later_and_chains(tmp_path):
    probe_dir = tmp_path / "probe"
    write_probe(probe_dir)
    user = tmp_path / "user"
    user.mkdir()
    (user / "sitecustomize.py").write_text("import os\nos.environ['USER_SC'] = 'yes'\n")
    out, recs = _run(tmp_path, [probe_dir, user])
    assert "parent-ok yes" in out.stdout  # the user's sitecustomize still ran
    parent = next(r for r in recs.values() if r.start and "main.py" in " ".join(r.start.cmdline or []))
    child = next(r for r in recs.values() if r.ppid == parent.pid and r.start
                 and "spawn_main" in " ".join(r.start.cmdline or []))
    assert parent.start.vars["NCCL_PROTO"] == "LL"
    assert parent.start.vars["ABSENT_VAR"] is None
    assert parent.start.lookup("ABSENT_VAR") == (True, None)
    assert parent.start.vars["USER_SC"] == "yes"
    assert parent.start.set_by_sitecustomize == {"USER_SC": "yes"}
    assert child.start.vars["NCCL_PROTO"] == "LL"  # inherited through spawn
    assert "NCCL_ALGO" not in child.start.vars
    assert child.later is not None
    assert child.later.vars["NCCL_ALGO"] == "Ring"
    assert child.set_after_start() == {"NCCL_ALGO": "Ring"}
    assert child.merged_vars()["NCCL_ALGO"] == "Ring"


def test_probe_without_record_dir_changes_nothing(tmp_path):
    probe_dir = tmp_path / "probe"
    write_probe(probe_dir)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECWATCH_")}
    env["PYTHONPATH"] = str(probe_dir)
    code = "import sys, threading; print(threading.active_count(), 'sitecustomize' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0
    assert out.stdout.split() == ["1", "True"]
    assert out.stderr == ""


def test_probe_never_raises_on_unwritable_dir_or_broken_user_sitecustomize(tmp_path):
    probe_dir = tmp_path / "probe"
    write_probe(probe_dir)
    user = tmp_path / "user"
    user.mkdir()
    (user / "sitecustomize.py").write_text("raise RuntimeError('user bug')\n")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(probe_dir), str(user)]),
               SPECWATCH_PROBE_DIR=str(blocker / "sub"))
    out = subprocess.run([sys.executable, "-c", "print('alive')"], env=env, capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0
    assert out.stdout.strip() == "alive"
    assert "Error in sitecustomize" in out.stderr
    assert "user bug" in out.stderr


def test_setter_sets_variables_in_every_process_and_chains(tmp_path):
    setter = tmp_path / "setter"
    write_setter(setter, {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring"})
    user = tmp_path / "user"
    user.mkdir()
    (user / "sitecustomize.py").write_text("import os\nos.environ['USER_SC'] = 'chained'\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "SPECWATCH_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(setter), str(user)])
    code = "import os; print(os.environ.get('NCCL_PROTO'), os.environ.get('NCCL_ALGO'), os.environ.get('USER_SC'))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30)
    assert out.stdout.split() == ["LL", "Ring", "chained"]
    keep = render_sitecustomize(probe=False, set_vars={"NCCL_PROTO": "LL"}, override=False)
    assert "setdefault" in keep
    assert "specwatch-generated" in keep


def test_read_records_merges_and_skips_broken(tmp_path):
    (tmp_path / "5-start-1.json").write_text(
        '{"pid": 5, "ppid": 1, "phase": "start", "time": 1.0, "argv": [], "cmdline": ["python"], '
        '"vars": {"NCCL_PROTO": null}, "patterns": ["NCCL_*"]}')
    (tmp_path / "5-later-2.json").write_text(
        '{"pid": 5, "ppid": 1, "phase": "later", "time": 4.0, "argv": [], "cmdline": ["sglang::scheduler", ""], '
        '"vars": {"NCCL_PROTO": "LL"}, "patterns": ["NCCL_*"]}')
    (tmp_path / "6-start-3.json").write_text("{not json")
    recs = read_records(tmp_path)
    assert set(recs) == {5}
    assert recs[5].title == "sglang::scheduler"
    assert recs[5].set_after_start() == {"NCCL_PROTO": "LL"}
    assert read_records(tmp_path / "absent") == {}
