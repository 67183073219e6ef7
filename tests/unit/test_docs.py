"""The user docs hold together: every relative link and #anchor resolves, the README's example profile loads
with the real loader, the flags the pages name exist, and the generated reference tables are current.

(No docs site is built: these checks are what a site's link checker would do.)
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from specwatch.profiles.loading import load_profiles
from specwatch.run.options import OPTIONS

ROOT = Path(__file__).resolve().parents[2]
FLAGS_FILE = ROOT / "fixtures" / "sglang" / "flags-0.5.23.txt"
#: the recorded evidence under docs/validation/data is quoted, not linked documentation
PAGES = sorted([ROOT / "README.md", *(p for p in (ROOT / "docs").rglob("*.md") if "data" not in
                                      p.relative_to(ROOT / "docs").parts)])
FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def _prose(text: str) -> list[str]:
    """The lines outside fenced code blocks, with inline code spans blanked out."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else re.sub(r"`[^`]*`", "``", line))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: markup dropped, lower case, punctuation removed, spaces to hyphens."""
    text = re.sub(r"<[^>]+>", "", heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor a page defines: its headings' slugs (GitHub numbers repeats -1, -2) and explicit ids."""
    text = page.read_text()
    found: set[str] = set(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", text))
    seen: dict[str, int] = {}
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and (m := re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)):
            base = slug(m[1])
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(page: Path) -> list[tuple[int, str]]:
    return [(i, m[1]) for i, line in enumerate(_prose(page.read_text()), 1) for m in LINK.finditer(line)]


def test_the_pages_are_found() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in PAGES}
    assert {"README.md", "docs/reference/README.md", "docs/validation/README.md", "docs/robustness.md"} <= names
    assert not any("/data/" in n for n in names)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    broken = []
    for line, target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"line {line}: {target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"line {line}: {target}: no anchor #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}:\n" + "\n".join(broken)


def test_the_anchor_rule_is_githubs() -> None:
    assert slug("Reading a failure") == "reading-a-failure"
    assert slug("CI with `specwatch ab`") == "ci-with-specwatch-ab"
    assert slug("9. Session 5 (2026-11-30): the correctness suite at TP=2, a bf16 near-tie") == \
        "9-session-5-2026-11-30-the-correctness-suite-at-tp2-a-bf16-near-tie"
    assert slug("`[[server]]` and `[defaults]`") == "server-and-defaults"


def _readme_profile() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Point it at your SGLang host", 1)[1].split("\n## ", 1)[0]
    m = re.search(r"```toml\n(.*?)```", section, re.S)
    assert m, "the README's 'Point it at your SGLang host' has no ```toml block"
    return m[1]


def test_the_readmes_example_profile_loads_and_builds_sglang_0_5_23_command_lines(tmp_path: Path) -> None:
    """The profile a new user copies from the README: the real loader accepts it, it names a baseline and a
    speculative server, and every flag of their command lines is one SGLang 0.5.23 accepts."""
    path = tmp_path / "my-host.toml"
    path.write_text(_readme_profile())
    ps = load_profiles(path)
    assert {"baseline", "spec"} <= set(ps.roles), ps.roles
    spec, base = ps.get(ps.roles["spec"]), ps.get(ps.roles["baseline"])
    assert spec.engine == base.engine == "sglang" and spec.model == base.model
    assert spec.speculative is not None and spec.speculative.algorithm.upper() == "EAGLE3"
    assert spec.speculative.draft_model and base.speculative is None
    sglang_flags = {line.strip() for line in FLAGS_FILE.read_text().splitlines() if line.startswith("--")}
    for prof in (base, spec):
        argv = prof.command("0.0.0.0", 30000)
        assert argv[:2] == ["sglang", "serve"], argv
        unknown = [a for a in argv if a.startswith("--") and a not in sglang_flags]
        assert not unknown, f"{prof.name}: flags SGLang 0.5.23 does not accept: {unknown}"
    assert ps.gates.spec_margin == pytest.approx(0.05)
    # a relative gate judges rounds (fresh boots); one round with no recorded spread decides nothing
    assert ps.gates.alternate_rounds >= 2
    readme = (ROOT / "README.md").read_text()
    assert f"--specwatch-profiles={path.name}" in readme  # the commands use the file the README writes


def test_every_specwatch_flag_the_user_pages_name_exists() -> None:
    known = {opt.flag for opt in OPTIONS} | {a for opt in OPTIONS for a in opt.aliases}
    pages = [ROOT / "README.md", *sorted((ROOT / "docs" / "reference").glob("[!_]*.md"))]
    unknown = {}
    for page in pages:
        for flag in set(re.findall(r"--specwatch-[a-z-]+[a-z]", page.read_text())):
            if flag not in known:
                unknown.setdefault(flag, []).append(page.name)
    assert not unknown, unknown


def test_the_generated_reference_tables_are_current() -> None:
    spec = importlib.util.spec_from_file_location("docs_reference_generate",
                                                  ROOT / "docs" / "reference" / "generate.py")
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    for page in generate.REGIONS:
        text = (ROOT / "docs" / "reference" / page).read_text()
        assert generate.render(page, text) == text, f"docs/reference/{page}: run python docs/reference/generate.py"
    options = (ROOT / "docs" / "reference" / "options.md").read_text()
    assert all(opt.flag in options for opt in OPTIONS)
