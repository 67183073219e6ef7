"""What a measurement served: the one typed form of the identity a prior and a floor belong to.

A boot of a server serves a :class:`Setup` (engine, model, tensor parallelism, speculative settings), whatever
its profile is called; a measurement of it serves that setup at a workload's size: a :class:`Served`. A round
spread (``round-spread.json`` ``runs[].served``), a results file's and a baseline's ``extra.served`` and every
``served`` argument are a :class:`Served`, written and read here alone.

The string form is versioned. Version 1, the form every file holds, carries no tag::

    sglang model=/m/target tp=1 spec=EAGLE3//m/eagle3/2/1/3 | single-stream c1 256 tok

A later version would begin ``served/N ``; :meth:`Served.parse` reads version 1 and refuses any other, and a
setup without its workload (what a profile alone knows) is refused loudly, never matched as an empty identity.
Open to every part, like :mod:`specwatch.errors`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: the version of the string form :meth:`Served.text` writes
VERSION = 1
_TAG = re.compile(r"^served/(\d+) ")
_SETUP = re.compile(r"^(?P<engine>\S+) model=(?P<model>.*) tp=(?P<tp>\d+)(?: spec=(?P<spec>\S.*))?$")
_WORKLOAD = re.compile(r"^(?P<workload>\S+) c(?P<concurrency>\d+) (?P<max_new_tokens>\d+) tok$")


@dataclass(frozen=True)
class Spec:
    """The speculative settings of a setup: algorithm, draft model ('' when built in), steps, top-k and draft tokens
    (None: left to the engine, written ``None``)."""

    algorithm: str
    draft: str
    num_steps: int | None
    topk: int | None
    draft_tokens: int | None

    def text(self) -> str:
        """``EAGLE3//m/eagle3/2/1/3`` (an unnamed draft is ``-``)."""
        return f"{self.algorithm}/{self.draft or '-'}/{self.num_steps}/{self.topk}/{self.draft_tokens}"

    @classmethod
    def parse(cls, text: str) -> Spec:
        """The inverse of :meth:`text` (the draft may hold slashes: the last three fields are numbers)."""
        head, *numbers = text.rsplit("/", 3)
        algorithm, _, draft = head.partition("/")
        if (len(numbers) != 3 or not all(n.isdigit() or n == "None" for n in numbers) or not algorithm
                or not _):
            raise ValueError(f"speculative settings {text!r}: expected ALGORITHM/DRAFT/STEPS/TOPK/DRAFT_TOKENS")
        steps, topk, tokens = (None if n == "None" else int(n) for n in numbers)
        return cls(algorithm, "" if draft == "-" else draft, steps, topk, tokens)


@dataclass(frozen=True)
class Setup:
    """What a boot of a server serves, whatever its profile's name: two profiles of one setup (twins that differ
    only in their environment) share their boot-to-boot spread; another setup never borrows it."""

    engine: str
    model: str
    tp: int
    spec: Spec | None = None

    def text(self) -> str:
        """``sglang model=/m/target tp=1 spec=EAGLE3//m/eagle3/2/1/3``."""
        return f"{self.engine} model={self.model} tp={self.tp}" + (f" spec={self.spec.text()}" if self.spec else "")

    def __str__(self) -> str:
        return self.text()

    @classmethod
    def parse(cls, text: str) -> Setup:
        """The inverse of :meth:`text`; ValueError on any other form."""
        found = _SETUP.match(text)
        if found is None:
            raise ValueError(f"served setup {text!r}: expected 'ENGINE model=MODEL tp=N[ spec=...]'")
        spec = found["spec"]
        return cls(found["engine"], found["model"], int(found["tp"]), Spec.parse(spec) if spec else None)

    def at(self, workload: str, concurrency: int, max_new_tokens: int) -> Served:
        """This setup at a workload's size."""
        return Served(self, workload, concurrency, max_new_tokens)


@dataclass(frozen=True)
class Served:
    """What a measurement served: a :class:`Setup` at a workload's name, concurrency and output length."""

    setup: Setup
    workload: str
    concurrency: int
    max_new_tokens: int

    def text(self) -> str:
        """The string form of :data:`VERSION` (version 1: no tag), as files hold it."""
        return f"{self.setup.text()} | {self.workload} c{self.concurrency} {self.max_new_tokens} tok"

    def __str__(self) -> str:
        return self.text()

    @property
    def model(self) -> str:
        return self.setup.model

    @classmethod
    def parse(cls, text: str) -> Served:
        """The identity a string of any version this module knows holds; ValueError, saying why, for a setup
        without its workload (a profile's :class:`Setup` alone), another version or any other text."""
        tag = _TAG.match(text)
        if tag is not None:
            raise ValueError(f"served identity {text!r}: string form version {tag[1]}; this specwatch reads "
                             f"version {VERSION}")
        setup, sep, size = text.rpartition(" | ")
        if not sep:
            raise ValueError(f"served identity {text!r} has no workload (' | WORKLOAD cN M tok'): a server's setup "
                             "alone matches no prior")
        found = _WORKLOAD.match(size)
        if found is None:
            raise ValueError(f"served identity {text!r}: the workload part must read 'WORKLOAD cN M tok'")
        return cls(Setup.parse(setup), found["workload"], int(found["concurrency"]), int(found["max_new_tokens"]))

    @classmethod
    def of(cls, value: Served | str | None) -> Served | None:
        """``value`` as a Served: one as it is, a string form parsed (ValueError when it is none), and None for
        None or "" (not known: files recorded before the identity was kept). Anything else is a TypeError: a
        :class:`Setup` is no identity."""
        if value is None or value == "":
            return None
        if isinstance(value, Served):
            return value
        if isinstance(value, str):
            return cls.parse(value)
        raise TypeError(f"a served identity is a Served or its string form, not {type(value).__name__} ({value!r})")

    @classmethod
    def read(cls, value: object) -> Served | None:
        """What a file's ``served`` field holds, or None where it holds none or a form this version cannot read
        (no prior is matched with it: the file's other fields stay usable)."""
        try:
            return cls.of(value if isinstance(value, str) else None)
        except ValueError:
            return None


__all__ = ["VERSION", "Served", "Setup", "Spec"]
