"""The tests a measurement ran beside its numbers, side by side across the versions of an ``ab`` or ``ab-ladder``.

An A/B judges the numbers; the checks that ran in the same pytest run (phase graphs, accept-length sources, the
draft alive, ...) each pass or fail per boot. This module lays those outcomes out per version, so a check that
fails on some versions and not others shows, named, beside the verdicts. It reads only what each measurement's
JUnit file recorded (:attr:`specwatch.revisions.memo.RevisionRun.outcomes`); it judges nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: an outcome's first word, as :func:`specwatch.revisions.step.junit_outcomes` writes it, and how a table shows it
SHOWN = {"passed": "pass", "failed": "FAIL", "error": "ERROR", "skipped": "skip"}


def kind_of(outcome: str) -> str:
    """``passed``, ``failed``, ``error`` or ``skipped``: an outcome's first word."""
    return outcome.split(":", 1)[0]


@dataclass(frozen=True)
class CheckRow:
    """One test across the versions: each version's outcome over its boots (``None``: it did not run there)."""

    test: str
    cells: tuple[str | None, ...]

    @property
    def differs(self) -> bool:
        """The test's outcome kind differs between the versions it ran on: a finding."""
        return len({kind_of(c) for c in self.cells if c is not None}) > 1

    @property
    def failing(self) -> bool:
        return any(c is not None and kind_of(c) in ("failed", "error") for c in self.cells)


def merged(rounds: Sequence[Mapping[str, str]], test: str) -> str | None:
    """One version's outcome of ``test`` over its boots (one mapping a boot, in round order): the outcome when
    every boot that ran it agrees, else each boot's kind by round ("failed in round 2: ...; passed in round 1")."""
    seen = [(n, r[test]) for n, r in enumerate(rounds, 1) if test in r]
    if not seen:
        return None
    if len({kind_of(o) for _, o in seen}) == 1:
        return next((o for _, o in seen if ":" in o), seen[0][1])
    worst = sorted(seen, key=lambda s: ("error", "failed", "passed", "skipped").index(kind_of(s[1])))
    return "; ".join(f"{kind_of(o)} in round {n}{o[len(kind_of(o)):]}" for n, o in worst)


def rows_of(versions: Sequence[Sequence[Mapping[str, str]]]) -> list[CheckRow]:
    """Every test that ran on some version and was not skipped on all of them, in name order; ``versions`` holds,
    per version, the outcomes of each of its boots."""
    tests = sorted({t for boots in versions for r in boots for t in r})
    rows = [CheckRow(t, tuple(merged(boots, t) for boots in versions)) for t in tests]
    return [r for r in rows if any(c is not None and kind_of(c) != "skipped" for c in r.cells)]


def describe(row: CheckRow, names: Sequence[str], *, detail: bool = True) -> str:
    """'test: v1 pass | v2 FAIL (why) | v3 -', with 'differs between versions' in front when it does."""
    cells = []
    for name, cell in zip(names, row.cells, strict=True):
        if cell is None:
            cells.append(f"{name} -")
            continue
        why = cell.split(":", 1)[1].strip() if ":" in cell and detail and kind_of(cell) != "passed" else ""
        cells.append(f"{name} {SHOWN.get(kind_of(cell), cell)}" + (f" ({why})" if why else ""))
    lead = "DIFFERS between versions: " if row.differs else ""
    return f"{row.test}: {lead}{' | '.join(cells)}"


def lines(versions: Sequence[Sequence[Mapping[str, str]]], names: Sequence[str], prefix: str) -> list[str]:
    """The report's lines: a heading, then one line per test (none when no test beside the numbers ran)."""
    rows = rows_of(versions)
    if not rows:
        return []
    split = sum(r.differs for r in rows)
    head = (f"{prefix} checks beside the numbers, per version ({len(rows)} test(s) not skipped everywhere; "
            f"{split} differ between versions{': a finding each' if split else ''}):")
    return [head, *(f"{prefix}   {describe(r, names)}" for r in rows)]
