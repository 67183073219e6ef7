"""``specwatch report --html``: a static site whose every page is well-formed HTML, whose links all
resolve to written files, and whose pages show the series, change points, verdicts, commits,
machines and engines, every text escaped; and the report of the committed GPU data builds."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from specwatch.cli import main
from specwatch.errors import EXIT_OK, EXIT_USAGE
from specwatch.report.html import page_names
from specwatch.store.history import open_history
from specwatch.store.result import Result, ResultSet

#: the fixtures history_target, pg_url and postgres_server (a real PostgreSQL server)
pytest_plugins = ("pgfixture",)
ROOT = Path(__file__).resolve().parents[2]
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
EVIL = "<script>alert('x')</script>&"
STEP = [89.0, 89.3, 88.8, 89.1, 82.1, 82.2, 83.0, 82.4, 82.3, 82.7, 82.5, 82.1]


class Page(HTMLParser):
    """A strict reading of one page: every element closed in order, the tags, links, ids and text."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.problems: list[str] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.ids: list[str] = []
        self.head_titles = 0
        self.text: list[str] = []
        self.doctype = ""
        self.feed(text)
        self.close()
        if self.stack:
            self.problems.append(f"never closed: {self.stack}")

    def handle_decl(self, decl: str) -> None:
        self.doctype = decl

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self.head_titles += tag == "title" and self.stack == ["html", "head"]
        if "id" in dict(attrs):
            self.ids.append(str(dict(attrs)["id"]))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))  # <circle .../> and the like: opened and closed at once

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.problems.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        if data.strip():
            self.text.append(data.strip())

    def all(self, tag: str, **attrs: str) -> list[dict[str, str | None]]:
        return [a for t, a in self.tags if t == tag and all(a.get(k) == v for k, v in attrs.items())]


def _read(path: Path) -> Page:
    page = Page(path.read_text(encoding="utf-8"))
    assert not page.problems, f"{path}: {page.problems}"
    assert page.doctype.lower() == "doctype html", path
    assert [t for t, _ in page.tags[:3]] == ["html", "head", "meta"], path
    assert page.head_titles == 1 and len(page.all("body")) == 1 and len(page.all("head")) == 1, path
    assert len(page.ids) == len(set(page.ids)), f"{path}: duplicate ids"
    return page


def _check_site(index: Path) -> dict[Path, Page]:
    """Every page of the site well-formed, every local link resolving to a written file (and anchor)."""
    pages = {index.resolve(): _read(index)}
    for p in sorted((index.parent / "keys").glob("*.html")):
        pages[p.resolve()] = _read(p)
    for path, page in pages.items():
        for a in page.all("a"):
            href = str(a.get("href") or "")
            parts = urlsplit(href)
            assert not parts.scheme and not parts.netloc, f"{path}: external link {href}"
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            assert target in pages, f"{path}: link {href} to a file not written"
            if parts.fragment:
                assert parts.fragment in pages[target].ids, f"{path}: {href} names no element"
    return pages


def _history(target: str) -> None:
    """A step down at run 5 on h200x1 (host0, then host1 from run 8), an interrupted run last, a hostile key,
    and another class."""
    with open_history(target) as h:
        for i, v in enumerate([*STEP, 40.0]):
            rs = ResultSet(machine={"machine_class": "h200x1", "host_id": f"host{i // 7}", "engine": "sglang",
                                    "engine_version": "0.5.23", "gpu_model": "NVIDIA H200", "gpu_count": 1},
                           commit=f"{i:04d}deadbeef", created=f"2026-11-{i + 1:02d}T00:00:00+00:00")
            extra = {"partial": "interrupted"} if i == 12 else {}
            rs.add(Result.make("eagle3-tuned", "single-stream", "output_tok_s", unit="tok/s", higher_is_better=True,
                               samples=[v - 0.2, v, v + 0.1, v + 0.2], extra=extra))
            rs.add(Result.make(EVIL, "single-stream", "output_tok_s", unit=EVIL, higher_is_better=True,
                               samples=[10.0, 10.1], extra=extra))
            h.append(rs)
        h.append(ResultSet([Result.make("eagle3-tuned", "single-stream", "output_tok_s", unit="tok/s",
                                        higher_is_better=True, samples=[50.0, 51.0, 52.0])],
                           machine={"machine_class": "h200x2-nvlink"}, commit="other", created="2026-11-20T00:00:00Z"))


def test_the_site_is_well_formed_linked_and_shows_the_history(history_target: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    _history(history_target)
    out = tmp_path / "site"
    assert main(["report", "--html", str(out), "--history", history_target]) == EXIT_OK
    assert "wrote" in capsys.readouterr().out
    pages = _check_site(out / "index.html")
    key = "eagle3-tuned/single-stream/output_tok_s"
    names = page_names([key, f"{EVIL}/single-stream/output_tok_s"])
    assert {p.name for p in pages} == {"index.html", *(Path(n).name for n in names.values())}

    index = pages[(out / "index.html").resolve()]
    links = [a["href"] for a in index.all("a")]
    assert links.count(f"{names[key]}#mc-0") == 1 and links.count(f"{names[key]}#mc-1") == 1  # two classes
    assert "-7.5% at 0004deadbeef" in index.text  # the last change, at the first run after the step

    page = pages[(out / names[key]).resolve()]
    # the classes, linked at the top, then a section each
    assert [t for t in page.text if t in ("h200x1", "h200x2-nvlink")] == ["h200x1", "h200x2-nvlink"] * 2
    changes = page.all("line", **{"class": "change"})
    assert len(changes) == 1  # one step, marked once, between the 4th and 5th run's points
    runs = page.all("circle", **{"class": "run"})
    assert len(runs) == 13 + 1  # every run's median, both classes
    xs = [float(str(c["cx"])) for c in runs[:13]]
    assert xs[3] < float(str(changes[0]["x1"])) < xs[4]
    assert [c["fill"] for c in runs[:13]].count("#fff") == 1  # the interrupted run, hollow
    assert page.all("path", **{"class": "samples"}) and len(page.all("line", **{"class": "segment"})) >= 2
    for text in ("0004deadbeef", "host0", "host1", "sglang 0.5.23", "1 × NVIDIA H200", "first", "partial"):
        assert text in page.text, text
    assert page.text.count("regression") >= 2  # the change point's meaning and run 5's verdict

    evil = pages[(out / names[f"{EVIL}/single-stream/output_tok_s"]).resolve()]
    assert "script" not in {t for p in pages.values() for t, _ in p.tags}  # no page runs the key's text
    assert any(EVIL in t for t in evil.text) and any(EVIL in t for t in index.text)  # shown, as text


def test_the_verdicts_and_change_point_table_say_what_happened(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    _history(str(db))
    assert main(["report", "--html", str(tmp_path / "site"), "--history", str(db), "--machine-class", "h200x1"]) == 0
    page = (tmp_path / "site" / page_names(["eagle3-tuned/single-stream/output_tok_s"])[
        "eagle3-tuned/single-stream/output_tok_s"]).read_text()
    rows = re.findall(r"<tr>(.*?)</tr>", page.split("<h3>Runs</h3>")[1])
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", r) for r in rows]
    verdict = {c[2]: c[-1] for c in cells if c}  # (the header row has no td)
    assert verdict["0000deadbeef"] == "first"
    assert verdict["0004deadbeef"] == "regression"  # 89 -> 82 against the four runs before
    assert verdict["0005deadbeef"] != "regression"  # 82 against 89, 89, 89, 82: a spread, not a verdict
    assert verdict["0012deadbeef"] == "partial"
    table = page.split("<h3>Change points</h3>")[1].split("</table>")[0]
    assert "0004deadbeef" in table and "-7.5%" in table and 'class="regression">regression' in table
    assert "h200x2-nvlink" not in page  # --machine-class: only that class


def test_an_empty_history_and_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "h.sqlite"
    open_history(db).close()
    assert main(["report", "--html", str(tmp_path / "site"), "--history", str(db)]) == EXIT_OK
    assert "holds no runs" in " ".join(_check_site(tmp_path / "site" / "index.html")[
        (tmp_path / "site" / "index.html").resolve()].text)
    capsys.readouterr()
    afile = tmp_path / "file.txt"
    afile.write_text("x")
    for argv, text in ((["--html", str(afile), "--history", str(db)], "is a file, not a folder"),
                       (["--html", str(tmp_path / "s2"), "--history", str(tmp_path / "none.sqlite")],
                        "history file not found"),
                       (["--html", str(tmp_path / "s3"), "--history", str(db), "--window", "0"], "at least 1")):
        assert main(["report", *argv]) == EXIT_USAGE
        err = capsys.readouterr().err
        assert text in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "s2").exists()


def test_page_names_are_distinct_files() -> None:
    names = page_names(["a/b/c", "a b/b/c", "a_b/b/c", "A_B/b/c"])
    assert len(set(names.values())) == 4 and all(re.fullmatch(r"keys/[A-Za-z0-9._+-]+\.html", n)
                                                   for n in names.values())


def test_the_report_of_the_committed_gpu_data_builds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The README's commands: every committed GPU results file into a history, then the site."""
    data = ROOT / "docs" / "validation" / "data"
    files = sorted(data.glob("session*/results-*.json")) + sorted(data.glob("session3/pytest-call*/[!b]*.json"))
    assert len(files) >= 30
    db = tmp_path / "gpu.sqlite"
    assert main(["history", "import", "--history", str(db), *map(str, files)]) == EXIT_OK
    assert main(["report", "--html", str(tmp_path / "html"), "--history", str(db)]) == EXIT_OK
    capsys.readouterr()
    pages = _check_site(tmp_path / "html" / "index.html")
    with open_history(db, readonly=True) as h:
        keys = h.keys()
        assert h.run_count() == len(files)
        classes = set(h.machine_classes())
    assert len(pages) == 1 + len(keys) and {"h200x1", "h200x2-nvlink"} <= classes
    index = pages[(tmp_path / "html" / "index.html").resolve()]
    assert set(keys) <= set(index.text)
    assert sum(len(p.all("circle", **{"class": "run"})) for p in pages.values()) == sum(
        len(h_pts) for h_pts in _series_lengths(db))


def _series_lengths(db: Path) -> list[list[int]]:
    with open_history(db, readonly=True) as h:
        return [[p.run_id for p in h.series(k)] for k in h.keys()]  # noqa: SIM118 (a history, not a dict)


def test_a_fleet_history_is_judged_per_machine(tmp_path: Path) -> None:
    """Two hosts 6% apart, runs alternating: a run 5% below its own host's runs is a regression (judged as
    one on that host), and runs at each host's own level are not, though the two levels are 6% apart."""
    db = tmp_path / "h.sqlite"
    levels = [("hostA", 100.0), ("hostB", 106.0)] * 5 + [("hostA", 95.0), ("hostB", 106.1), ("hostA", 100.1)]
    with open_history(str(db)) as h:
        for i, (host, v) in enumerate(levels):
            rs = ResultSet(machine={"machine_class": "h200x1", "host_id": host}, commit=f"{i:04d}cafe",
                           created=f"2026-11-{i + 1:02d}T00:00:00+00:00")
            wobble = 0.1 * ((i * 7) % 5 - 2)  # a boot-to-boot spread of about 0.15%
            rs.add(Result.make("eagle3-tuned", "single-stream", "output_tok_s", unit="tok/s", higher_is_better=True,
                               samples=[v + wobble - 0.2, v + wobble, v + wobble + 0.1, v + wobble + 0.2]))
            h.append(rs)
    assert main(["report", "--html", str(tmp_path / "site"), "--history", str(db)]) == EXIT_OK
    key = "eagle3-tuned/single-stream/output_tok_s"
    page = (tmp_path / "site" / page_names([key])[key]).read_text()
    rows = re.findall(r"<tr>(.*?)</tr>", page.split("<h3>Runs</h3>")[1])
    verdict = {c[2]: c[-1] for c in (re.findall(r"<td[^>]*>(.*?)</td>", r) for r in rows) if c}
    assert verdict["0010cafe"] == "regression"  # 95 against hostA's 100
    assert verdict["0011cafe"] != "regression" and verdict["0012cafe"] != "regression"  # each at its host's level
    assert [v for k, v in verdict.items() if k < "0010cafe"].count("regression") == 0
    assert "sessions of 2 machine(s) predict" in page  # each verdict says it was judged with the machine term
