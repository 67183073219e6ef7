"""Comparing revisions of the server under test: A/B rounds, git bisect and patch bisection.

Each command's logic is a plain-keyword ``command(...)`` that returns its exit code (``ab``, ``power``,
``gitbisect``, ``patches``); its options are in :mod:`specwatch.cli.ab` and :mod:`specwatch.cli.bisect`.

- ``step``: one measurement of one checkout (setup, then a pytest run in its own process group);
- ``memo``: the memo of measured revisions (entries, results files, logs);
- ``git``: revisions, temporary worktrees, the default memo folder;
- ``rounds``: the A/B measurement, two sides in alternating rounds, and its verdict look after look;
- ``plan``: each judged key's round spread, tolerance and what the design catches 19 times in 20;
- ``ab``: ``specwatch ab``;
- ``ladder``: ``specwatch ab-ladder``, a chain of versions judged pair by pair, each booted once a round;
- ``outcomes``: the tests each boot ran beside its numbers (its JUnit file), laid out per version;
- ``power``: ``specwatch ab-power``, simulated verdicts of ``ab`` at a machine class's round spread;
- ``bisection``: what both bisections share (a step's A/B against good, the outcome, its report);
- ``gitbisect``: ``specwatch bisect``, the ``git bisect run`` driver and its step executable;
- ``patches``: ``specwatch bisect-patches``, cumulative patch prefixes;
- ``verdictfile``: the verdict of ``ab`` and ``ab-ladder`` as versioned JSON (``--json``).
"""

__all__ = [
    "ab",
    "bisection",
    "git",
    "gitbisect",
    "ladder",
    "memo",
    "outcomes",
    "patches",
    "plan",
    "power",
    "rounds",
    "step",
    "verdictfile",
]
