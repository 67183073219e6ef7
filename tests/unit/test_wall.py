"""The wall of design.md: no tester module imports the reference server; plugin.py stays light."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "specwatch"


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            mod = ("." * node.level) + (node.module or "")
            names.add(mod)
            names.update(f"{mod}.{a.name}" for a in node.names)
    return names


def test_no_tester_module_imports_the_reference_server() -> None:
    offenders = {}
    for path in SRC.glob("*.py"):
        bad = {n for n in _imports(path) if "refserver" in n}
        if bad:
            offenders[path.name] = bad
    assert not offenders, f"tester modules import the reference server: {offenders}"


def test_plugin_import_pulls_in_nothing_heavy() -> None:
    code = ("import sys, specwatch.run.plugin; heavy = [m for m in ('torch', 'numpy', 'scipy', 'aiohttp') "
            "if m in sys.modules]; print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"importing specwatch.run.plugin imported {out.stdout.strip()}"
