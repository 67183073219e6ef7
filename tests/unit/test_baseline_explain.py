"""``specwatch baseline explain KEY``: the chain that made a key's drift tolerance, with the gate's numbers.

The data are the shipped baselines (``baselines/``): h200x1/large-eagle3-tuned.json holds 45 sessions of ref-large
decode tok/s from three H200 leases, its class's machine-term.json and round-spread.json beside it; the
real-SGLang baselines of docs/validation/data/2026-12-03-sglang-x1/ (one session each, recorded with a served
identity) take the floor of the validation store's round spread.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specwatch.cli import main
from specwatch.load.measure import Measurement, RunSample
from specwatch.load.workload import Workload
from specwatch.run import gates
from specwatch.run.evidence import Policy
from specwatch.run.options import Config
from specwatch.run.reference import reference_samples
from specwatch.served import VERSION, Served, Setup, Spec
from specwatch.store.baseline import BaselineStore
from specwatch.store.driftinput import for_key
from specwatch.store.roundspread import RoundRun, RoundSpread

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "baselines"
KEY = "large-eagle3-tuned/single-stream/decode_tok_s"


class _Run:
    """RunFacts of a run of the reference engine on h200x1 whose machine the baseline never saw."""

    def __init__(self, baseline_dir: Path) -> None:
        self.config = Config(baseline_dir=str(baseline_dir))
        self.said: list[str] = []

    def machine_class(self) -> str:
        return "h200x1"

    def fingerprint(self) -> dict:
        return {"host_id": "a-new-lease"}

    def commit(self) -> str | None:
        return None

    def warn_once(self, text: str) -> None:
        self.said.append(text)

    def engine_of(self, server: str) -> str:
        return "reference"


def _measurement(samples: list[float]) -> Measurement:
    runs = [RunSample(output_tok_s=x, decode_tok_s=x, ttft_ms=5.0, mean_itl_ms=1.0, e2e_s=1.0, completion_tokens=128,
                      client_overhead=0.001) for x in samples]
    return Measurement(profile="large-eagle3-tuned",
                       workload=Workload("single-stream", runs=len(runs), max_new_tokens=128),
                       runs=runs, metrics_delta=None, metrics_after=None, server_info_before={},
                       server_info_after={}, log_records=[], wall_s=1.0)


def _explained(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["baseline", "explain", *argv])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_explain_on_the_shipped_baseline_gives_the_drift_gates_tolerance(capsys: pytest.CaptureFixture[str]) -> None:
    """The gate's verdict on a run 20% slower than the last recorded session, and explain on the same baseline, the
    same machine and as many runs: one tolerance, and the chain in the order it is applied."""
    ref = reference_samples(_Run(SHIPPED), "large-eagle3-tuned", "single-stream", "decode_tok_s")
    assert not isinstance(ref, str) and ref.inputs is not None and ref.machine == "host:a-new-lease"
    slowed = [x * 0.8 for x in ref.sessions[-1]]
    policy = Policy(alpha=0.01, tolerance=0.05, explain=True)
    verdict = gates.drift(_measurement(slowed), ref, policy, profile="large-eagle3-tuned", metric="decode_tok_s")
    assert verdict.failed and verdict.rows[0].tolerance is not None
    gate_tol = verdict.rows[0].tolerance

    code, out = _explained(capsys, KEY, "--baseline-dir", str(SHIPPED), "--machine-class", "h200x1",
                           "--machine", "host:a-new-lease", "--runs", str(len(slowed)))
    assert code == 0
    lines = out.splitlines()
    assert [line[:2] for line in lines if line[:1].isdigit()] == ["1 ", "2 ", "3 ", "4 ", "5 "]
    assert "45 judged of 45 recorded, on 3 machine(s)" in out
    assert "the hardware's 1.86% on 4.7 effective df" in out and "judged as one on a new machine" in out
    assert "prior: round spread 1.3% over 39 df of decode_tok_s rounds" in out and "set aside" in out
    shown = float(re.search(r"^5 tolerance: ([\d.]+)%", out, re.M).group(1)) / 100  # type: ignore[union-attr]
    assert shown == pytest.approx(gate_tol, abs=5e-5)
    assert ref.inputs.basis(0.05, 0.01, len(slowed)).tolerance == gate_tol  # the same function, the same inputs
    # the failing test's message under -v carries the same chain
    assert "how the tolerance was made (specwatch baseline explain):" in verdict.message
    assert f"5 tolerance: {gate_tol:.2%}" in verdict.message
    quiet = gates.drift(_measurement(slowed), ref, Policy(alpha=0.01, tolerance=0.05), profile="large-eagle3-tuned",
                        metric="decode_tok_s")
    assert quiet.failed and "how the tolerance was made" not in quiet.message


def test_explain_names_the_prior_a_one_session_floor_came_from(capsys: pytest.CaptureFixture[str]) -> None:
    """The real-SGLang sgl-eagle3 baseline of 2026-12-03 holds one session and records no served identity: its floor
    is the boot-to-boot spread of the validation store's rounds of its key, and explain says so, with the df."""
    store = ROOT / "docs" / "validation" / "sglang" / "baselines"
    code, out = _explained(capsys, "sgl-eagle3/single-stream/decode_tok_s", "--baseline-dir", str(store))
    assert code == 0
    found = for_key(BaselineStore(store), "h200x1", "sgl-eagle3", "single-stream", "decode_tok_s", engine="sglang")
    assert not isinstance(found, str)
    inputs = found[1]
    assert inputs.floor_kind == "boot" and inputs.prior.used and inputs.prior.df > 0
    assert inputs.served is None and inputs.floor is not None and len(inputs.sessions) == 1
    assert "served: none recorded, matched by key" in out and "used: its spread over sqrt(2) is one boot's" in out
    assert f"4 floor: {inputs.floor[0]:.2%} from the boot-to-boot spread of earlier A/B rounds" in out
    assert f"over {inputs.prior.df} df" in out


@pytest.mark.parametrize(("argv", "said"), [
    (["nope/single-stream/decode_tok_s"], "no baseline of profile 'nope'"),
    (["large-eagle3-tuned/single-stream/nope"], "has no single-stream/nope"),
    (["not-a-key"], "is no result key"),
    (["eagle3-tuned/single-stream/decode_tok_s"], "give --machine-class"),
])
def test_an_unknown_key_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str], said: str) -> None:
    code, out = _explained(capsys, *argv, "--baseline-dir", str(SHIPPED))
    assert code == 2 and said in out and len(out.strip().splitlines()) == 1


def test_an_empty_baseline_dir_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out = _explained(capsys, KEY, "--baseline-dir", str(tmp_path))
    assert code == 2 and "no baselines under" in out and len(out.strip().splitlines()) == 1


REAL = ("sglang model=/tmp/sgl/models8b/target tp=1 spec=EAGLE3//tmp/sgl/models8b/eagle3/2/1/3 | "
        "single-stream c1 256 tok")


def test_the_served_identity_round_trips_and_reads_the_strings_files_hold() -> None:
    """The string of docs/validation/sglang/baselines/h200x1/round-spread.json (version 1, no tag) parses into its
    fields and is written back unchanged; a profile's setup alone, a later version or another type is refused."""
    served = Served.parse(REAL)
    assert served == Setup("sglang", "/tmp/sgl/models8b/target", 1,
                           Spec("EAGLE3", "/tmp/sgl/models8b/eagle3", 2, 1, 3)).at("single-stream", 1, 256)
    assert served.text() == REAL and str(served) == REAL and VERSION == 1
    unset = Setup("reference", "ref-tiny", 2, Spec("EAGLE", "", None, None, None)).at("speculation-probe", 4, 64)
    assert unset.text() == "reference model=ref-tiny tp=2 spec=EAGLE/-/None/None/None | speculation-probe c4 64 tok"
    assert Served.parse(unset.text()) == unset
    assert Served.of("") is None and Served.of(None) is None and Served.of(served) is served
    with pytest.raises(ValueError, match="has no workload"):
        Served.of(served.setup.text())  # what a profile alone knows matches no prior, loudly
    with pytest.raises(ValueError, match="version 2"):
        Served.parse(f"served/2 {REAL}")
    with pytest.raises(TypeError, match="Setup"):
        Served.of(served.setup)  # type: ignore[arg-type]


def test_a_prior_is_matched_by_the_typed_identity_and_a_setup_alone_is_refused(tmp_path: Path) -> None:
    """Old files' strings and the typed identity match the same runs; a setup without its workload is an error,
    where it used to match nothing silently."""
    key = "sgl8b-eagle3/single-stream/decode_tok_s"
    RoundSpread.append(tmp_path, "h200x1", [("decode_tok_s", [1.0, 1.01, 0.99], "a run", key, REAL)], engine="sglang")
    spread = RoundSpread.for_class(tmp_path, "h200x1")
    assert spread.runs[0].served == Served.parse(REAL)
    twin = "sgl8b-eagle3-untuned/single-stream/decode_tok_s"
    by_text, by_type = spread.prior_for(twin, "sglang", REAL), spread.prior_for(twin, "sglang", Served.parse(REAL))
    assert by_text == by_type and by_type[0] is not None
    with pytest.raises(ValueError, match="has no workload"):
        spread.prior_for(twin, "sglang", Served.parse(REAL).setup.text())
    assert (tmp_path / "h200x1" / "round-spread.json").read_text().count(f'"served": "{REAL}"') == 1
    assert RoundRun("decode_tok_s", (1.0, 1.1), "", "", key, "sglang", REAL).served == Served.parse(REAL)
