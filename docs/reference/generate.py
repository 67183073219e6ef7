"""Writes the generated tables of the reference pages from the code that owns them.

    python docs/reference/generate.py           # rewrite the marked regions of options.md and profiles.md
    python docs/reference/generate.py --check   # exit 1 if a page is out of date (a unit test runs it)

Each region lies between ``<!-- generated: NAME -->`` and ``<!-- end generated: NAME -->``; the text around
it is written by hand. The options table comes from ``specwatch.run.options.OPTIONS`` (the one declaration of
every flag, variable and ini key), the profile tables from ``specwatch.profiles.tables`` (the schema the
loader checks files against), so a new option or field shows up here by running this script.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping
from pathlib import Path

from specwatch.profiles import tables
from specwatch.profiles.schema import Field
from specwatch.run.options import OPTIONS

HERE = Path(__file__).resolve().parent


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def options_table() -> str:
    rows = ["| flag | variable | ini key | default | meaning |", "|---|---|---|---|---|"]
    for opt in OPTIONS:
        flag = f"`{opt.flag}`" + "".join(f", `{a}`" for a in opt.aliases)
        default = "on/off switch" if opt.is_flag else ("-" if opt.default is None else f"`{opt.default}`")
        rows.append(f"| {flag} | `{opt.env}` | `{opt.ini}` | {default} | {_cell(opt.help)} |")
    return "\n".join(rows)


def _fields(fields: Mapping[str, Field]) -> str:
    rows = ["| field | accepts | meaning |", "|---|---|---|"]
    rows += [f"| `{name}` | {_cell(f.rule.expected)} | {_cell(f.doc)} |" for name, f in fields.items()]
    return "\n".join(rows)


def schema_tables() -> str:
    parts = [
        ("The file", "top-level keys and tables", tables.TOP_FIELDS),
        ("`[[server]]` and `[defaults]`", "every server field may also stand in `[defaults]` (all but `name`)",
         tables.SERVER_FIELDS),
        ("`speculative = { ... }`", "inside a server", tables.SPECULATIVE_FIELDS),
        ("`[gates]`", "the relative gates of the set", tables.GATE_FIELDS),
        ("`[workload]`", "every workload of the set; the command line still wins", tables.WORKLOAD_FIELDS),
        ("`[fixtures]`", "which server each named fixture means (default: picked by role and environment)",
         tables.FIXTURE_FIELDS),
    ]
    return "\n\n".join(f"### {title}\n\n{what}:\n\n{_fields(fields)}" for title, what, fields in parts)


REGIONS = {"options.md": {"options": options_table}, "profiles.md": {"schema": schema_tables}}


def render(page: str, text: str) -> str:
    for name, make in REGIONS[page].items():
        start, end = f"<!-- generated: {name} -->", f"<!-- end generated: {name} -->"
        pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
        if not pattern.search(text):
            raise SystemExit(f"generate.py: {page} has no region {start} ... {end}")
        block = f"{start}\n{make()}\n{end}"
        text = pattern.sub(lambda _m, block=block: block, text)
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="generate.py", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a page is out of date")
    a = ap.parse_args(argv)
    stale = []
    for page in REGIONS:
        path = HERE / page
        old = path.read_text()
        new = render(page, old)
        if new != old:
            stale.append(page)
            if not a.check:
                path.write_text(new)
                print(f"wrote {path}")
    if a.check and stale:
        print(f"out of date: {', '.join(stale)}: run python docs/reference/generate.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
