"""``specwatch baseline update --from-history``: a machine class's baselines rebuilt from the runs of
all its hosts, in either history store, each run one recording session."""

from __future__ import annotations

from pathlib import Path

import pytest

from specwatch.cli import main
from specwatch.errors import EXIT_OK, EXIT_USAGE
from specwatch.store.baseline import load_baseline
from specwatch.store.history import open_history
from specwatch.store.result import Result, ResultSet

#: the fixtures history_target, pg_url and postgres_server (a real PostgreSQL server)
pytest_plugins = ("pgfixture",)


def _run(i: int, host: str, level: float, *, machine_class: str = "h200x1", partial: str = "",
         profiles: tuple[str, ...] = ("eagle3-tuned", "baseline-tuned")) -> ResultSet:
    rs = ResultSet(machine={"machine_class": machine_class, "host_id": host, "gpu_model": "H200"},
                   commit=f"commit{i}", created=f"2026-11-{i + 1:02d}T08:00:00+00:00")
    for prof in profiles:
        for metric, unit, higher, value in (("output_tok_s", "tok/s", True, level),
                                            ("ttft_ms", "ms", False, 30.0 + i)):
            rs.add(Result.make(prof, "single-stream", metric, unit=unit, higher_is_better=higher,
                               samples=[value + 0.1 * j for j in range(4)],
                               extra={"partial": partial} if partial else {}))
    return rs


@pytest.fixture
def fleet(history_target: str) -> str:
    """Six complete runs of h200x1 on three hosts, one interrupted run, and one of another class."""
    with open_history(history_target) as h:
        for i in range(6):
            h.append(_run(i, f"host{i % 3}", 90.0 + i))
        h.append(_run(6, "host0", 10.0, partial="interrupted"))
        h.append(_run(7, "hostx", 500.0, machine_class="h200x2-nvlink"))
    return history_target


def _update(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = main(["baseline", "update", *map(str, argv)])
    out, err = capsys.readouterr()
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 1, err
    return code, out, err


def test_every_run_of_the_class_becomes_one_session(fleet: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    bdir = tmp_path / "baselines"
    code, out, _ = _update(capsys, "--from-history", fleet, "--machine-class", "h200x1", "--baseline-dir", bdir)
    assert code == EXIT_OK, out
    assert sorted(p.name for p in (bdir / "h200x1").iterdir()) == ["baseline-tuned.json", "eagle3-tuned.json"]
    assert not (bdir / "h200x2-nvlink").exists()  # another class's runs are not this one's
    assert out.count("(6 session(s) from 3 machine(s))") == 2
    base = load_baseline(bdir / "h200x1" / "eagle3-tuned.json")
    tok = base.metrics["single-stream/output_tok_s"]
    assert [s["commit"] for s in tok.sessions] == [f"commit{i}" for i in range(6)]  # the interrupted run is out
    assert [s["host"] for s in tok.sessions] == ["host0", "host1", "host2"] * 2
    assert [s["recorded"] for s in tok.sessions][-1] == "2026-11-06T08:00:00+00:00"
    assert tok.samples == pytest.approx([90.0 + i + 0.1 * j for i in range(6) for j in range(4)])
    assert tok.summary.n == 24 and tok.higher_is_better
    assert base.metrics["single-stream/ttft_ms"].unit == "ms"
    assert (base.commit, base.recorded, base.machine_class) == ("commit5", "2026-11-06T08:00:00+00:00", "h200x1")
    assert base.machine["host_id"] == "host2" and base.machine["gpu_model"] == "H200"
    # the baseline is one that specwatch reads and judges against: per machine once it has sessions there
    samples, sessions, note = tok.reference_for("host1", 2)
    assert len(sessions) == 2 and "recorded on this machine" in note
    assert samples == pytest.approx([91.0 + 0.1 * j for j in range(4)] + [94.0 + 0.1 * j for j in range(4)])
    assert main(["baseline", "show", "--baseline-dir", str(bdir)]) == EXIT_OK
    assert "sessions=6 machines=3" in capsys.readouterr().out


def test_one_profile_the_last_runs_and_chosen_metrics(fleet: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    bdir = tmp_path / "b"
    code, out, _ = _update(capsys, "--from-history", fleet, "--machine-class", "h200x1", "--profile", "eagle3-tuned",
                           "--last", 2, "--metric", "output_tok_s", "--baseline-dir", bdir)
    assert code == EXIT_OK, out
    assert [p.name for p in (bdir / "h200x1").iterdir()] == ["eagle3-tuned.json"]
    base = load_baseline(bdir / "h200x1" / "eagle3-tuned.json")
    assert list(base.metrics) == ["single-stream/output_tok_s"]
    assert [s["commit"] for s in base.metrics["single-stream/output_tok_s"].sessions] == ["commit4", "commit5"]


@pytest.mark.parametrize(("argv", "message"), [
    (["--machine-class", "h200x1", "{results}"], "not both"),
    ([], "--machine-class is required"),
    (["--machine-class", "h200x1", "--keep-sessions", "3"], "use --last N"),
    (["--machine-class", "h200x1", "--profile", "nope"], "no complete run of profile nope on machine class h200x1"),
    (["--machine-class", "h200x1", "--metric", "nope"], "no complete run on machine class h200x1 with samples"),
    (["--machine-class", "a100"], "has no runs of machine class a100"),
    (["--machine-class", "../x"], "cannot name a baseline file"),
])
def test_bad_requests_are_one_line_and_write_nothing(fleet: str, tmp_path: Path, argv: list[str], message: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    results = _run(0, "h", 1.0).save(tmp_path / "r.json")
    bdir = tmp_path / "b"
    code, _, err = _update(capsys, "--from-history", fleet, "--baseline-dir", bdir,
                           *[a.format(results=results) for a in argv])
    assert code == EXIT_USAGE and message in err, err
    assert not bdir.exists() or not any(bdir.rglob("*.json"))


def test_history_flags_without_from_history_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = _run(0, "h", 1.0).save(tmp_path / "r.json")
    code, _, err = _update(capsys, results, "--last", 2, "--baseline-dir", tmp_path / "b")
    assert code == EXIT_USAGE and "go with --from-history" in err
    code, _, err = _update(capsys, "--baseline-dir", tmp_path / "b")
    assert code == EXIT_USAGE and "give a results file, or --from-history" in err
