"""Outside ``engines/``, the reference server and the profile schema, no module names an engine or its
metric prefix: engine names, process-title prefixes, launch modules and ``sglang:`` metric names come
from :mod:`specwatch.engines` (docs/architecture.md, "Adding an engine").

What counts as naming: a string literal, docstrings aside, that holds an engine's identifier as a word
(``sglang``, ``refserver``, ``vllm``, ...; case-sensitive, so prose such as "SGLang's default" in a
message is not), or a comparison of something called ``engine`` with an engine's name (``prof.engine ==
"reference"``: "reference" is also an ordinary word, so only that use of it counts).
"""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

from specwatch.engines.registry import ENGINES, signatures

SRC = Path(__file__).resolve().parents[2] / "src" / "specwatch"
#: parts and modules that may name engines: the engines themselves, the reference server, the profile schema
EXEMPT = ("engines/", "refserver/", "profiles/tables.py", "profiles/schema.py")
#: engine names that are ordinary words too: named only when compared with an ``engine``
ORDINARY = {"reference"}


def _identifiers() -> set[str]:
    """Every engine's name, process-tree name, metric prefix and the first word of each launch module,
    command and program of the servers specwatch knows (those it drives and those it recognises)."""
    words = {e.name for e in ENGINES.values()} - ORDINARY
    words |= {e.metrics.prefix.rstrip(":") for e in ENGINES.values() if e.metrics}
    for sig in signatures():
        words |= {sig.tree_name} | {m.split(".")[0] for m in sig.modules if not m.startswith("specwatch.")}
        words |= {c[0] for c in sig.commands} | set(sig.programs)
    return {w for w in words if w and w.islower()}


WORDS = re.compile(r"\b(" + "|".join(sorted(map(re.escape, _identifiers()))) + r")\b")


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings (of a module, class or function, or after a name)."""
    return {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)}


def namings(root: Path) -> list[str]:
    """``path:line: what`` for every place outside :data:`EXEMPT` that names an engine."""
    names = {e.name for e in ENGINES.values()}
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(EXEMPT):
            continue
        tree = ast.parse(path.read_text())
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
                if m := WORDS.search(node.value):
                    found.append(f"{rel}:{node.lineno}: {m.group(1)!r} in {node.value[:60]!r}")
            elif isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                named = [s.value for s in sides if isinstance(s, ast.Constant) and s.value in names]
                if named and any("engine" in ast.unparse(s) for s in sides if not isinstance(s, ast.Constant)):
                    found.append(f"{rel}:{node.lineno}: compares an engine with {named[0]!r}")
    return sorted(set(found))


def test_no_module_outside_the_engines_names_an_engine() -> None:
    assert namings(SRC) == [], "route these through specwatch.engines:\n" + "\n".join(namings(SRC))


def test_the_scan_knows_the_identifiers_of_every_engine() -> None:
    assert {"sglang", "openai", "refserver", "vllm", "trtllm-serve"} <= _identifiers()


def test_the_scan_catches_an_engine_named_outside_the_engines(tmp_path: Path) -> None:
    """The rule bites: a metric name, a title prefix and an engine comparison in a check are caught; prose in a
    docstring or a message ("SGLang's default"), and "reference" as an ordinary word, are not."""
    root = tmp_path / "specwatch"
    shutil.copytree(SRC, root, ignore=shutil.ignore_patterns("__pycache__", "data"))
    (root / "checks" / "leak.py").write_text(
        '"""Reads sglang:cuda_graph_passes_total (prose: allowed)."""\n'
        'COUNTER = "sglang:cuda_graph_passes_total"\n'
        'TITLE = "refserver::scheduler"\n'
        'def f(prof):\n'
        '    """The reference server, SGLang and vllm in a docstring."""\n'
        '    extra = {"reference": 1}\n'
        '    note = "SGLang\'s default"\n'
        '    return prof.engine == "reference" or prof.engine_kind.name != "openai"\n')
    found = [f for f in namings(root) if "leak.py" in f]
    assert found == ["checks/leak.py:2: 'sglang' in 'sglang:cuda_graph_passes_total'",
                     "checks/leak.py:3: 'refserver' in 'refserver::scheduler'",
                     "checks/leak.py:8: 'openai' in 'openai'",
                     "checks/leak.py:8: compares an engine with 'openai'",
                     "checks/leak.py:8: compares an engine with 'reference'"]
