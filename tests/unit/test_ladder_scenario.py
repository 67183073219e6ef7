"""docs/validation/harness.py's sglang-8b-ladder-{1..4}-x1: the four device calls of ab-ladder over SGLang 0.5.12 to
0.5.16. No call may boot a release before a call has carried it, a call carries at most two overlays (64 MiB a
call with the tree), and the four calls must run one ladder (the same memo folder: the same profiles' text, the same
order and measuring arguments), so that the last call's verdicts cover every boot the earlier calls made."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from specwatch.revisions import ladder

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "validation"))
import harness  # noqa: E402  (docs/validation is not a package)

CALLS = sorted(harness.SGL_LADDER_CALLS)


def _ladder_step(call: int, server: str, tmp_path: Path) -> tuple[list[str], list[str], dict[str, str]]:
    """(the ladder step's argv, every step's name, the profile variants it writes) of call ``call``."""
    settings = dict(harness.SETTINGS, sgl_release_server=server)
    plan = harness.plan_for(f"sglang-8b-ladder-{call}-x1", settings, harness.DATA / f"zz-test-ladder-{call}")
    steps = [s for stage in plan.stages for lane in stage for s in lane]
    (step,) = [s for s in steps if s.name.startswith("sgl8b-ladder-")]
    return step.argv, [s.name for s in steps], plan.variants


def _order() -> list[str]:
    """The releases in the order the ladder boots them, both rounds."""
    chain = harness.SGL_LADDER
    return [chain[i] for n in (1, 2) for i in ladder.walk(range(len(chain)), n, "last")]


def test_no_call_boots_a_release_before_it_was_carried() -> None:
    installed = {harness.SGL_KIT_RELEASE}
    done = 0
    for call in CALLS:
        carried, stop = harness.SGL_LADDER_CALLS[call]
        assert len(carried) <= 2  # two overlays of 24-26 MiB beside the 7.5 MiB tree fill a call's 64 MiB
        installed |= set(carried)
        upto = len(_order()) if stop is None else stop
        assert upto > done  # every call boots something
        assert set(_order()[:upto]) <= installed, (call, set(_order()[:upto]) - installed)
        done = upto
    assert installed == set(harness.SGL_LADDER) and done == 10  # 5 boots a round, 2 rounds


@pytest.mark.parametrize("server", ["eagle3", "plain"])
def test_the_four_calls_run_one_ladder(server: str, tmp_path: Path) -> None:
    """Each call's ladder step differs only in --stop-after, and its profiles' text is the same in every call
    (the memo folder is keyed by it; the plain variants are written into each call's own run folder)."""
    seen = []
    for call in CALLS:
        argv, names, variants = _ladder_step(call, server, tmp_path)
        stop = harness.SGL_LADDER_CALLS[call][1]
        assert ("--stop-after" in argv) == (stop is not None)
        # call 1 starts the ladder (or continues a call 1 cut short); a later call must find it, or stop at once
        resume = "--resume" if call == 1 else "--resume-only"
        assert resume in argv
        argv = [a for a in argv if a != resume]
        if stop is not None:
            at = argv.index("--stop-after")
            assert argv[at + 1] == str(stop)
            argv = argv[:at] + argv[at + 2:]
        at = argv.index("--json")  # the verdict file goes into each call's own run folder (the last call writes it)
        assert argv[at + 1].endswith(f"zz-test-ladder-{call}/sgl8b-ladder-{server}.json")
        argv = argv[:at] + argv[at + 2:]
        profiles = [argv[i + 1] for i, a in enumerate(argv) if a == "--profile"]
        assert len(profiles) == len(harness.SGL_LADDER)
        texts = [variants.get(p) or (ROOT / p).read_text() for p in profiles]
        rest = [a for a in argv if a not in profiles]
        seen.append((texts, rest))
        carried = harness.SGL_LADDER_CALLS[call][0]
        assert all(f"sglang-overlay-{r}" in names for r in carried)  # what a call carries it installs
        assert names.index(f"sgl8b-ladder-{server}-{call}") < min(
            (names.index(n) for n in names if n.startswith("sglang-versions-")), default=len(names))
    assert all(s == seen[0] for s in seen)


@pytest.mark.parametrize("call", CALLS)
def test_every_call_keeps_the_ladders_memo_in_its_run_folder(call: int, tmp_path: Path) -> None:
    """The memo (each boot's entry with its test outcomes, results file and log) is copied into the run folder right
    after the ladder step, so the archive of every call holds what the ladder measured so far."""
    plan = harness.plan_for(f"sglang-8b-ladder-{call}-x1", dict(harness.SETTINGS), harness.DATA / "zz-test-memo")
    steps = [s for stage in plan.stages for lane in stage for s in lane]
    names = [s.name for s in steps]
    at = next(i for i, n in enumerate(names) if n.startswith("sgl8b-ladder-"))
    assert names[at + 1] == "ladder-memo" and isinstance(steps[at + 1], harness.Call)
    memo = tmp_path / "memo-src"
    (memo / "sub").mkdir(parents=True)
    (memo / "a.entry.json").write_text("{}")
    (memo / "sub" / "b.log").write_text("log")
    assert harness._copy_tree(memo, tmp_path / "run" / "memo") == "2 files in memo/"
    with pytest.raises(OSError, match="no memo at"):
        harness._copy_tree(tmp_path / "none", tmp_path / "run" / "memo2")


def test_a_shorter_chain_boots_only_its_releases_and_installs_only_their_overlays(tmp_path: Path) -> None:
    """--set sgl_ladder_from=0.5.14: the ladder over 0.5.14 < 0.5.15.post1 < 0.5.16 (the pairs around 0.5.15.post1), one
    round over in calls 1 and 2 (3 boots); call 3 installs no overlay it was not carried (0.5.13, 0.5.12)."""
    settings = dict(harness.SETTINGS, sgl_ladder_from="0.5.14")
    for call in CALLS:
        plan = harness.plan_for(f"sglang-8b-ladder-{call}-x1", settings, harness.DATA / f"zz-test-short-{call}")
        steps = [s for stage in plan.stages for lane in stage for s in lane]
        (step,) = [s for s in steps if s.name.startswith("sgl8b-ladder-")]
        profiles = [step.argv[i + 1] for i, a in enumerate(step.argv) if a == "--profile"]
        assert [Path(p).stem.rsplit("-", 1)[-1] for p in profiles] == ["0.5.14", "0.5.15.post1", "base"]
        overlays = {s.name.removeprefix("sglang-overlay-") for s in steps if s.name.startswith("sglang-overlay-")}
        assert overlays == (set() if call == 1 else {"0.5.14", "0.5.15.post1"}), (call, overlays)
    with pytest.raises(SystemExit, match="sgl_ladder_from must be one of"):
        harness.plan_for("sglang-8b-ladder-1-x1", dict(harness.SETTINGS, sgl_ladder_from="0.5.15.post1"),
                         harness.DATA / "zz-test-short-bad")


@pytest.mark.parametrize("scenario", ["sglang-8b-cache-life-x1", "sglang-8b-sweep-x1", "sglang-8b-context-x1"])
def test_an_unknown_draft_is_refused_in_one_line(scenario: str) -> None:
    with pytest.raises(SystemExit, match="sweep_draft must be one of exact, vary, q0, ctx, got 'bogus'"):
        harness.plan_for(scenario, dict(harness.SETTINGS, sweep_draft="bogus"), harness.DATA / "zz-test-bad-draft")


def test_the_sweep_takes_its_levels_and_output_lengths_and_refuses_bad_ones_in_one_line() -> None:
    """sweep_levels and sweep_output_len reach the profile the sweep runs; a bad value stops the plan before any
    device time, in one line."""
    settings = dict(harness.SETTINGS, sweep_draft="vary", sweep_levels="16,48", sweep_graphs="off",
                    sweep_output_len="128")
    plan = harness.plan_for("sglang-8b-sweep-x1", settings, harness.DATA / "zz-test-sweep-levels")
    (profile,) = [text for rel, text in plan.variants.items() if rel.endswith("8b-sweep-vary.toml")]
    assert "concurrency = [16, 48]" in profile and "output_len = 128\n" in profile
    names = [s.name for stage in plan.stages for lane in stage for s in lane]
    assert "sgl8b-sweep-vary" in names and not any(n.startswith("sgl8b-graphs") for n in names)
    for key, bad in (("sweep_levels", "16,many"), ("sweep_levels", "0,4"), ("sweep_levels", "16,16"),
                     ("sweep_graphs", "maybe"), ("sweep_output_len", "{ dist = 'zipf' }"), ("sweep_output_len", "-3")):
        with pytest.raises(SystemExit, match=f"harness: {key} must be") as exc:
            harness.plan_for("sglang-8b-sweep-x1", dict(settings, **{key: bad}), harness.DATA / "zz-test-bad-sweep")
        assert "\n" not in str(exc.value)
