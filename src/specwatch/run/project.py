"""The project folder: where relative baseline, report and history paths start.

pytest guesses its rootdir from the command-line arguments before plugins can parse their own
options, so ``--specwatch-profiles /elsewhere/p.toml`` (space form) makes ``/elsewhere`` the
rootdir and hides the project's ini file: stored baselines were then not found, every drift test
was skipped and the run exited 0. specwatch therefore finds the project itself: an explicit
``--specwatch-project``, else the folder of the ini file pytest read, else the nearest folder at
or above the working directory with a pytest ini file (whose ``specwatch_*`` keys it then reads).
"""

from __future__ import annotations

import configparser
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from specwatch.errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: pytest's own ini files, in its order of precedence within one folder.
INI_FILES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")


@dataclass(frozen=True)
class Project:
    """A project folder, the ini file found there (if any) and its ``specwatch_*`` keys."""

    root: Path
    inifile: Path | None = None
    ini: Mapping[str, str] = field(default_factory=dict)
    #: why pytest's rootdir was not used, when it was not (a line for the user)
    note: str = ""


def read_ini(path: Path) -> dict[str, str] | None:
    """The pytest section of an ini file as strings, or None when the file has no pytest section."""
    try:
        if path.name == "pyproject.toml":
            doc = tomllib.loads(path.read_text(encoding="utf-8"))
            tool = doc.get("tool")
            if not isinstance(tool, dict) or "pytest" not in tool:
                return None
            section = tool["pytest"]
            if isinstance(section, dict) and isinstance(section.get("ini_options"), dict):
                section = section["ini_options"]
            if not isinstance(section, dict):
                return None
            return {k: v if isinstance(v, str) else str(v) for k, v in section.items()
                    if isinstance(v, (str, int, float, bool))}
        parser = configparser.ConfigParser(interpolation=None)
        parser.read_string(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, configparser.Error):
        return None
    name = {"setup.cfg": "tool:pytest"}.get(path.name, "pytest")
    if path.name == "pytest.ini" or path.name == ".pytest.ini":
        return dict(parser["pytest"]) if parser.has_section("pytest") else {}
    return dict(parser[name]) if parser.has_section(name) else None


def find_ini(start: Path) -> tuple[Path, dict[str, str]] | None:
    """The nearest pytest ini file at or above ``start`` and its pytest section."""
    for folder in (start, *start.parents):
        for name in INI_FILES:
            candidate = folder / name
            if candidate.is_file():
                section = read_ini(candidate)
                if section is not None:
                    return candidate, section
    return None


def resolve_project(explicit: str | None, inipath: Path | None, rootpath: Path, invocation_dir: Path) -> Project:
    """The project folder for this run (see the module docstring for the order)."""
    if explicit:
        root = Path(explicit).expanduser()
        root = (root if root.is_absolute() else invocation_dir / root).resolve()
        if not root.is_dir():
            raise UsageError(f"--specwatch-project {explicit}: no such folder")
        found = find_ini(root)
        ini = found[1] if found and found[0].parent == root else {}
        return Project(root, found[0] if found and ini else None, ini)
    if inipath is not None:
        return Project(inipath.parent, inipath)
    found = find_ini(invocation_dir)
    if found is None:
        return Project(invocation_dir)
    inifile, ini = found
    note = ""
    if rootpath != inifile.parent:
        note = (f"pytest took {rootpath} as its rootdir (a path given as an option's value, space form?) and did "
                f"not read {inifile}; specwatch uses the project {inifile.parent} and its specwatch_* keys. "
                f"Write --option=PATH, or pass --rootdir={inifile.parent}, to make pytest agree")
    return Project(inifile.parent, inifile, {k: v for k, v in ini.items() if k.startswith("specwatch_")}, note)
