"""The walls of docs/architecture.md, enforced: which part may import which, no import cycles, no
private name used across modules, no tester module over the size limit, and a light plugin.

Each subpackage of ``src/specwatch`` is a part; the top-level modules (``errors``, ``paths``, the
package's ``__version__``) are open to all. ``ALLOWED`` lists, per part, the other parts it may
import (function-level imports included; ``if TYPE_CHECKING:`` blocks excluded, they never run).
The cycle check counts every import, ``if TYPE_CHECKING:`` and function-level ones included: a
circle hidden from the interpreter is still one module depending on another.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "specwatch"
#: part -> the other parts it may import. The pure parts import nothing else (judge, engines) or only
#: engines' data (signals).
ALLOWED: dict[str, set[str]] = {
    "judge": set(),
    "engines": set(),  # what each engine is, from outside: data and command lines, nothing of the tester
    "signals": {"engines"},
    "profiles": {"engines"},
    "store": {"judge", "signals", "engines"},
    "report": {"judge", "store", "engines"},
    "server": {"profiles", "signals", "engines"},
    "load": {"server", "signals", "judge", "profiles", "engines"},
    "checks": {"judge", "signals", "profiles", "server", "load", "store", "engines"},
    "run": {"judge", "signals", "profiles", "server", "load", "store", "report", "checks", "engines"},
    "revisions": {"judge", "store", "report", "server", "profiles", "engines"},
    "cli": {"judge", "signals", "profiles", "server", "load", "store", "report", "checks", "revisions", "run",
            "engines"},
    "refserver": set(),  # the reference server: a separate program that imports nothing of the tester
}
MAX_LINES = 500


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, package: str, *, typing: bool = False) -> set[str]:
    """Every specwatch module or name ``path`` imports, outside ``if TYPE_CHECKING:`` blocks unless ``typing``."""
    tree = ast.parse(path.read_text())
    skip = set() if typing else {id(n) for node in ast.walk(tree)
                                 if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                                 for n in ast.walk(node)}
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                pkg = _module_name(path, SRC).split(".")
                pkg = pkg if path.name == "__init__.py" else pkg[:-1]
                base = ".".join(pkg[: len(pkg) - node.level + 1] + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
    return {n for n in names if n == package or n.startswith(package + ".")}


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def violations(root: Path) -> list[str]:
    """Imports in the package at ``root`` that cross a wall of ``ALLOWED``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        me = _module_name(path, root)
        mine = _part(me)
        if mine not in ALLOWED:  # a top-level module: errors, paths, __init__
            continue
        for name in sorted(_imports(path, root.name)):
            other = _part(name)
            if other in ALLOWED and other != mine and other not in ALLOWED[mine]:
                found.append(f"{path.relative_to(root.parent)}: {mine} may not import {name}")
    return found


def cycles(root: Path) -> list[list[str]]:
    """Import cycles among the modules of the package at ``root`` (strongly connected components), counting
    ``if TYPE_CHECKING:`` and function-level imports."""
    modules = {_module_name(p, root): p for p in root.rglob("*.py")}
    graph = {m: {n for n in _imports(p, root.name, typing=True) if n in modules and n != m}
             for m, p in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_every_part_imports_only_what_its_wall_allows() -> None:
    assert not violations(SRC), "\n".join(violations(SRC))


def test_every_part_is_declared() -> None:
    parts = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert parts == set(ALLOWED), f"declare the walls of {parts ^ set(ALLOWED)} in ALLOWED"


def test_the_wall_check_catches_a_violating_import(tmp_path: Path) -> None:
    """The rules bite: judging that imports the run, or the tester importing the reference server."""
    root = tmp_path / "specwatch"
    shutil.copytree(SRC, root, ignore=shutil.ignore_patterns("__pycache__", "data"))
    (root / "judge" / "leak.py").write_text("from specwatch.run.session import Session\n")
    (root / "store" / "leak.py").write_text("def f():\n    import specwatch.refserver.engine\n")
    (root / "judge" / "typed.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from specwatch.run.session import Session\n")
    found = [v for v in violations(root) if "leak.py" in v or "typed.py" in v]
    assert found == ["specwatch/judge/leak.py: judge may not import specwatch.run.session",
                     "specwatch/judge/leak.py: judge may not import specwatch.run.session.Session",
                     "specwatch/store/leak.py: store may not import specwatch.refserver.engine"]


def test_the_engines_import_nothing_of_the_tester_and_judging_does_not_import_them(tmp_path: Path) -> None:
    """engines/ is data and command lines (a profile only typed); judge takes metric names as arguments."""
    root = tmp_path / "specwatch"
    shutil.copytree(SRC, root, ignore=shutil.ignore_patterns("__pycache__", "data"))
    (root / "engines" / "leak.py").write_text("from specwatch.signals import logscan\n")
    (root / "engines" / "typed.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from specwatch.profiles import profile\n")
    (root / "judge" / "leak.py").write_text("def f():\n    from specwatch.engines.registry import NATIVE\n")
    found = [v for v in violations(root) if "leak.py" in v or "typed.py" in v]
    assert found == ["specwatch/engines/leak.py: engines may not import specwatch.signals",
                     "specwatch/engines/leak.py: engines may not import specwatch.signals.logscan",
                     "specwatch/judge/leak.py: judge may not import specwatch.engines.registry",
                     "specwatch/judge/leak.py: judge may not import specwatch.engines.registry.NATIVE"]


def test_there_is_no_import_cycle() -> None:
    assert cycles(SRC) == []


def test_the_cycle_check_finds_one(tmp_path: Path) -> None:
    root = tmp_path / "specwatch"
    (root / "run").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "run" / "__init__.py").write_text("")
    (root / "run" / "a.py").write_text("from specwatch.run import b\n")
    (root / "run" / "b.py").write_text("def f():\n    from specwatch.run.a import x\n")
    assert cycles(root) == [["specwatch.run.a", "specwatch.run.b"]]


def test_the_cycle_check_counts_type_checking_imports(tmp_path: Path) -> None:
    """An annotation-only import back (the Session's type in a gate) closes a circle too."""
    root = tmp_path / "specwatch"
    (root / "run").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "run" / "__init__.py").write_text("")
    (root / "run" / "session.py").write_text("def f():\n    from specwatch.run import gates\n")
    (root / "run" / "gates.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from specwatch.run.session import Session\n")
    assert cycles(root) == [["specwatch.run.gates", "specwatch.run.session"]]


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defined(tree: ast.AST) -> set[str]:
    """The names a module defines: functions, classes, variables, attributes it assigns, arguments, imports."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.split(".")[-1])
    return names


def private_uses(root: Path) -> list[str]:
    """Private names (``_x``) of one module of the package at ``root`` used in another: imported from a
    module of the package (``from specwatch.judge.stats import _x``), or read off an object by a module
    that defines no such name while another module does (``session._warned`` outside the Session's
    module). ``self._x`` and ``cls._x`` are a class's own; a private name no module of the package defines
    (``os._exit``, a namedtuple's ``_replace``) is not the package's."""
    trees = {p: ast.parse(p.read_text()) for p in sorted(root.rglob("*.py")) if "refserver" not in p.parts}
    defined = {p: _defined(t) for p, t in trees.items()}
    found = []
    for path, tree in trees.items():
        others = {n for q, names in defined.items() if q != path for n in names if _private(n)}
        for node in ast.walk(tree):
            where = f"{path.relative_to(root.parent)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] == root.name):
                found += [f"{where}: imports {a.name} from {node.module or '.'}"
                          for a in node.names if _private(a.name)]
            elif (isinstance(node, ast.Attribute) and _private(node.attr) and node.attr in others
                  and node.attr not in defined[path]
                  and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
                found.append(f"{where}: reads {ast.unparse(node)}")
    return found


def test_no_private_name_is_used_across_modules() -> None:
    assert not private_uses(SRC), "\n".join(private_uses(SRC))


def test_the_private_check_catches_an_import_and_a_read(tmp_path: Path) -> None:
    """The rules bite: a gate that reads the Session's private warnings, a judge that imports a private helper."""
    root = tmp_path / "specwatch"
    shutil.copytree(SRC, root, ignore=shutil.ignore_patterns("__pycache__", "data"))
    (root / "run" / "leak.py").write_text("def warned(session):\n    return session._warned\n")
    (root / "judge" / "leak.py").write_text("from specwatch.judge.stats import _EXP_MAX\n")
    assert [v for v in private_uses(root) if "leak.py" in v] == [
        "specwatch/judge/leak.py:1: imports _EXP_MAX from specwatch.judge.stats",
        "specwatch/run/leak.py:2: reads session._warned"]


def test_no_tester_module_is_over_the_size_limit() -> None:
    big = {str(p.relative_to(SRC)): n for p in SRC.rglob("*.py")
           if "refserver" not in p.parts and (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not big, f"split these modules (over {MAX_LINES} lines): {big}"


@pytest.mark.parametrize("module", ["specwatch.run.plugin"])
def test_plugin_import_pulls_in_nothing_heavy(module: str) -> None:
    code = (f"import sys, {module}; heavy = [m for m in ('torch', 'numpy', 'scipy', 'aiohttp') "
            "if m in sys.modules]; print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"importing {module} imported {out.stdout.strip()}"


def test_every_part_names_its_modules_in_all() -> None:
    """Each part's ``__all__`` is its public map: every module of the part, nothing that is not one."""
    for part in sorted(ALLOWED):
        if part in ("refserver", "cli"):
            continue  # a separate program; cli's public API is main()
        init = SRC / part / "__init__.py"
        tree = ast.parse(init.read_text())
        names = next((ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                      and any(getattr(t, "id", None) == "__all__" for t in n.targets)), None)
        modules = sorted(p.stem for p in (SRC / part).glob("*.py") if p.stem not in ("__init__", "__main__"))
        assert names is not None and sorted(names) == modules, f"{part}/__init__.py __all__ should be {modules}"
