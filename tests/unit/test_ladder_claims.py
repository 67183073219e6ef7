"""docs/validation/claims_sglang_releases.py reads the release ladder's boots from the memo files the device wrote
(three runs: two H200s, one H100), not from a transcript: each boot's median and its spread from request to
request."""

from __future__ import annotations

import sys
from pathlib import Path

VALIDATION = Path(__file__).resolve().parents[2] / "docs" / "validation"


def _releases():
    if str(VALIDATION) not in sys.path:
        sys.path.insert(0, str(VALIDATION))
    import claims  # noqa: F401  (first: it registers its claim modules in the page's order)
    import claims_sglang_releases

    return claims_sglang_releases


def test_the_releases_with_a_host_sync_per_step_jitter_more_from_request_to_request() -> None:
    """0.5.12 and 0.5.13 (the per-step seq_lens copy and sync for triton) spread 0.2-1.1% over their 12 requests in
    all seven boots; 0.5.14 to 0.5.16 at most 0.06% in all ten."""
    rel = _releases()
    per_run = [rel.boots(folder) for folder, _, _ in rel.LADDERS]
    older = [s for by in per_run for r, each in by.items() if r in ("0.5.12", "0.5.13") for _, s in each]
    newer = [s for by in per_run for r, each in by.items() if r not in ("0.5.12", "0.5.13") for _, s in each]
    assert len(older) == 7 and len(newer) == 10
    assert min(older) > 0.002 and max(newer) < 0.0006 and min(older) > 3 * max(newer)
    last = per_run[-1]  # the second H200 run: every release, two rounds, boots in round order
    assert [round(m, 1) for m, _ in last["0.5.13"]] == [303.0, 314.1]
    assert sorted(last) == ["0.5.12", "0.5.13", "0.5.14", "0.5.15.post1", "0.5.16"]
