"""The book itself: chapters include every listing by named section, every
include resolves, no chapter pastes listing code, notebooks are in sync with
their listings, and the site builds with --strict."""

from __future__ import annotations

import json
import logging
import posixpath
import re
import subprocess
import sys
from html import unescape
from types import SimpleNamespace

import pytest
from conftest import DESCRIPTIONS, LISTINGS, ROOT

from cudabook import listings, mkdocs_hooks, notebooks, project, record

CHAPTER_PAGES = sorted((ROOT / "chapters").glob("*/index.md"))
INCLUDE = re.compile(r'^\s*--8<--\s+"([^"]+)"\s*$', re.M)
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*(\w*)[^\n]*\n(.*?)^\1\2\s*$", re.M | re.S)


def _includes() -> list[tuple[str, str]]:
    out = []
    for page in CHAPTER_PAGES:
        out += [(page.relative_to(ROOT).as_posix(), inc) for inc in INCLUDE.findall(page.read_text())]
    return out


def test_every_chapter_folder_has_a_code_folder_and_back():
    pages = {p.parent.name for p in CHAPTER_PAGES}
    assert pages, "no chapters found"
    assert set(listings.chapters()) <= pages, "a code/<chapter> folder has no chapters/<chapter>/index.md"


def test_every_chapter_is_in_the_nav():
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in CHAPTER_PAGES:
        assert page.relative_to(ROOT).as_posix() in nav, f"{page} is not in mkdocs.yml's nav"


@pytest.mark.parametrize("listing", LISTINGS, ids=lambda lst: lst.id)
def test_every_listing_is_included_by_a_chapter(listing):
    wanted = {listing.rel(f) for f in listing.files}
    used = {inc.split(":")[0] for _, inc in _includes()}
    exercise = listing.exercise is not None
    shown, kind, section = ((listing.rel(listing.cu), "cuda", "solution" if exercise else "kernel")
                            if listing.cu is not None
                            else (listing.rel(listing.py), "python", "solution" if exercise else "<section>"))
    block = f'```{kind} title="{shown}"\n--8<-- "{shown}:{section}"\n```'
    if exercise:                                 # under its exercise, collapsed
        block = '??? success "Solution"\n' + "\n".join("    " + ln for ln in block.splitlines())
    assert wanted & used, (
        f"no chapter includes {listing.id}: add to chapters/{listing.chapter}/index.md\n{block}\n"
        f"(a section is marked in the file by --8<-- [start:<name>] and [end:<name>] comments)")


@pytest.mark.parametrize("page,include", _includes(), ids=lambda x: str(x))
def test_every_include_resolves_to_a_file_and_section(page, include):
    path, _, section = include.partition(":")
    f = ROOT / path
    assert f.is_file(), f"{page}: {path} does not exist"
    if section:
        text = f.read_text()
        starts = re.findall(r"--8<-- \[start:([\w-]+)\]", text)
        ends = re.findall(r"--8<-- \[end:([\w-]+)\]", text)
        if section in starts and section in ends:
            return
        unmatched = sorted(set(starts) ^ set(ends))
        pytest.fail(f"{page}: {path} has no section '{section}'"
                    + (f" ({'start' if section in starts else 'end'} marker only)" if section in starts + ends else "")
                    + f"; its sections: {', '.join(sorted(set(starts) & set(ends))) or 'none'}"
                    + (f"; markers without their pair: {', '.join(unmatched)}" if unmatched else ""), pytrace=False)


@pytest.mark.parametrize("page", CHAPTER_PAGES, ids=lambda p: p.parent.name)
def test_chapters_include_code_rather_than_paste_it(page):
    """Code blocks in chapters hold only snippet includes; only output
    (text/console) and diagram (mermaid) blocks may be written inline."""
    for m in FENCE.finditer(page.read_text()):
        lang, body = m.group(3), m.group(4)
        if lang in ("text", "console", "mermaid"):
            continue
        lines = [ln for ln in body.splitlines() if ln.strip()]
        assert lines and all(INCLUDE.match(ln) for ln in lines), \
            f"{page.name}: a ```{lang} block holds pasted code; include it from code/ instead:\n{body[:300]}"


def _page(src_uri: str):
    """What mkdocs_hooks reads of an mkdocs page: its file's src_uri."""
    return SimpleNamespace(file=SimpleNamespace(src_uri=src_uri))


EXERCISES = [lst for lst in LISTINGS if lst.exercise is not None]


def _containers(lines: list[str], i: int) -> list[str]:
    """The lines that contain line i, innermost first: each earlier line
    indented less than everything after it (an admonition, a list item),
    stripped."""
    outer, depth = [], len(lines[i]) - len(lines[i].lstrip())
    for j in range(i - 1, -1, -1):
        here = len(lines[j]) - len(lines[j].lstrip())
        if lines[j].strip() and here < depth:
            outer.append(lines[j].strip())
            depth = here
    return outer


def test_containers_see_an_admonition_inside_a_list_item():
    md = ("## Exercises\n\n1.  Scale a vector.\n\n    ??? success \"Solution\"\n        Why.\n\n"
          '        ```cuda title="x"\n        --8<-- "code/a/ex1_b.cu:solution"\n        ```\n')
    lines = md.splitlines()
    i = next(k for k, ln in enumerate(lines) if "--8<--" in ln)
    assert _containers(lines, i) == ['??? success "Solution"', "1.  Scale a vector."]
    assert _containers(["x", "--8<-- \"code/a/b.cu:k\""], 1) == []


def test_malformed_rec_references_are_found_outside_code():
    md = ("Ran at [[rec:ex4_saxpy:rate]] and [[rec:first_kernel/ex4_saxpy:rate]];\n"
          "write `[[rec:<chapter>/<name>:rate]]`.\n\n```text\n[[rec:<chapter>/<name>:n]]\n```\n")
    assert mkdocs_hooks.malformed_fields(md) == ["[[rec:ex4_saxpy:rate]]"]


@pytest.mark.parametrize("listing", EXERCISES, ids=lambda lst: lst.id)
def test_exercise_solutions_are_shown_collapsed(listing):
    """A solution listing is included inside a `??? success` admonition of
    its chapter (CONTRIBUTING.md, 'Exercise solutions'), so that a reader
    tries the exercise before seeing the answer."""
    page = ROOT / "chapters" / listing.chapter / "index.md"
    lines = page.read_text().splitlines()
    wanted = {listing.rel(f) for f in listing.files}
    for i, line in enumerate(lines):
        m = INCLUDE.match(line)
        if not m or m.group(1).split(":")[0] not in wanted:
            continue
        outer = _containers(lines, i)
        if any(o.startswith("??? success") for o in outer):
            continue
        under = next((o for o in outer if not o.startswith(("```", "~~~"))), "the page itself")
        pytest.fail(f"chapters/{listing.chapter}/index.md: {listing.id} is an exercise solution, shown "
                    f"outside a collapsed admonition (under {under[:60]!r}); indent its include under "
                    f'??? success "Solution" (CONTRIBUTING.md, \'Exercise solutions\')', pytrace=False)


@pytest.mark.parametrize("page", CHAPTER_PAGES, ids=lambda p: p.parent.name)
def test_every_rec_reference_names_a_value(page, caplog):
    """Each [[rec:<listing>:<value>]] in a chapter names a listing and a value
    its record has: the build would print "(unknown)" in the prose. (A
    listing without a record is the freshness check's to report.)"""
    where = _page(page.relative_to(ROOT).as_posix())
    caplog.set_level(logging.INFO, logger=mkdocs_hooks.log.name)   # CUDABOOK_ALLOW_STALE logs at info
    known = {lst.id for lst in LISTINGS}
    text = page.read_text()
    bad = [f"{left}: not [[rec:<chapter>/<listing>:<value>]] or [[rec:...|<format>]]"
           for left in mkdocs_hooks.malformed_fields(text)]
    for m in mkdocs_hooks.FIELD.finditer(text):
        listing_id, name, spec = m.groups()
        if listing_id not in known:
            bad.append(f"{m.group(0)}: there is no listing {listing_id}")
            continue
        caplog.clear()
        value = mkdocs_hooks.field(listing_id, name, where, spec)
        if value == "(unknown)":
            said = "; ".join(r.getMessage().split("]]: ", 1)[-1] for r in caplog.records) or "unknown"
            bad.append(f"{m.group(0)}: {said}")
    assert not bad, f"{where.file.src_uri}:\n  " + "\n  ".join(bad)


def test_fence_scanner_finds_blocks():
    md = 'x\n```python title="a"\n--8<-- "code/a/b.py:main"\n```\n\n```cuda\nint x;\n```\n'
    blocks = [(m.group(3), m.group(4)) for m in FENCE.finditer(md)]
    assert blocks == [("python", '--8<-- "code/a/b.py:main"\n'), ("cuda", "int x;\n")]


def _gpu_of_records() -> str:
    """The GPU the committed records name (the site shows it)."""
    return record.load(listings.find("first_kernel/device_query")).gpu


@pytest.mark.parametrize("chapter", listings.chapters())
def test_notebook_in_sync_with_listings(chapter):
    why = notebooks.out_of_date(chapter, describe=lambda lst: DESCRIPTIONS[lst.id])
    assert why is None, (f"{why}: re-run the GPU suite, which executes the notebooks of the "
                         "chapters that need it (REQUIRE_GPU=1 python -m cudabook verify --stale)")
    stored = json.loads(notebooks.path(chapter).read_text())
    code = [c for c in stored["cells"] if c["cell_type"] == "code"]
    assert [c["execution_count"] for c in code] == list(range(1, len(code) + 1)), "not every cell ran"
    for cell in code[1:]:  # the first cell only sets up sys.path and prints nothing
        assert cell["outputs"], f"no output stored for:\n{''.join(cell['source'])}"
        assert not any(o["output_type"] == "error" for o in cell["outputs"])
    assert _gpu_of_records() in "".join(code[-1]["outputs"][0]["data"]["text/plain"]), "the last cell names the GPU"
    text = json.dumps(stored)
    assert "(1)!" not in text, "a code-annotation marker leaked into the notebook"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The whole site, built once with every warning an error."""
    out = tmp_path_factory.mktemp("site")
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
                       capture_output=True, text=True, cwd=ROOT, timeout=600)
    if r.returncode != 0:          # what mkdocs warned of first, then its whole log
        warned = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.startswith(("WARNING", "ERROR"))]
        pytest.fail("mkdocs build --strict failed:\n" + "\n".join(warned)
                    + "\n\n--- the whole log ---\n" + r.stdout + r.stderr, pytrace=False)
    return out


def _pages(site) -> dict[str, str]:
    return {html.relative_to(site).as_posix(): html.read_text() for html in sorted(site.rglob("*.html"))}


def test_site_builds_strict(site):
    """What readers get: the whole site, with every warning an error."""
    page = (site / "chapters" / "first_kernel" / "index.html").read_text()
    assert page.count('class="cb-record cb-current"') == len([lst for lst in LISTINGS if lst.chapter == "first_kernel"])
    assert "cb-stale" not in page
    assert "[[rec:" not in page and "cudabook:output" not in page
    assert "add_one_per_thread" in page and "__global__" in page
    for name, text in _pages(site).items():
        # A link to a page's Markdown that MkDocs did not turn into the page's
        # address (a link off the site, such as an edit button, may end in .md).
        assert not re.search(r'href="(?!https?://)[^"#]*\.md(#[^"]*)?"', text), f"unresolved .md link in {name}"
    table = (site / "verification" / "index.html").read_text()
    for listing in LISTINGS:
        assert f"rec-{listing.chapter}-{listing.name}" in table
    notebook = (site / "chapters" / "first_kernel" / "first_kernel" / "index.html").read_text()
    assert "colab.research.google.com" in notebook and _gpu_of_records() in notebook
    assert (site / "chapters" / "first_kernel" / "bandwidth.svg").exists()
    running = (site / "running" / "index.html").read_text()
    assert "[ok] tiny kernel" in running


def same_page_links(html: str) -> list[str]:
    """The fragments that links on this page point to on this page."""
    return [unescape(m) for m in re.findall(r'href="#([^"]+)"', html)]


def dead_same_page_links(html: str) -> list[str]:
    ids = {unescape(m) for m in re.findall(r'\sid="([^"]+)"', html)}
    return sorted({frag for frag in same_page_links(html) if frag not in ids and frag != "__skip"})


def test_dead_same_page_links_are_found():
    page = '<h2 id="a">A</h2><a href="#a">A</a><a href="#_1">?</a><a href="#x%20y">?</a>'
    assert dead_same_page_links(page) == ["_1", "x%20y"]


def test_every_chart_drawn_is_shown(site):
    """No chart is drawn that no page shows (Part II used to get a
    bandwidth.svg of its first benchmark in every chapter, unused)."""
    shown = set()
    for name, text in _pages(site).items():
        here = posixpath.dirname(name)
        shown |= {posixpath.normpath(posixpath.join(here, src)) for src in re.findall(r'src="([^"]+\.svg)"', text)}
    drawn = {p.relative_to(site).as_posix() for p in (site / "chapters").glob("*/*.svg")}
    assert drawn, "no chart was drawn"
    assert not drawn - shown, f"charts drawn that no page shows: {sorted(drawn - shown)}"


def test_every_same_page_link_has_its_anchor(site):
    """A table of contents entry, a footnote, a permalink, a link in the
    prose: every #fragment a page links to is an id on that page."""
    dead = {name: d for name, text in _pages(site).items() if (d := dead_same_page_links(text))}
    assert not dead, "links to anchors the page does not have:\n" + "\n".join(
        f"  {name}: {', '.join('#' + f for f in d[:8])}{' ...' if len(d) > 8 else ''}" for name, d in dead.items())


def table_of_contents(html: str) -> list[str]:
    """The entries of the page's table of contents (Material's secondary
    navigation), as the reader sees their text."""
    start = html.find('class="md-nav md-nav--secondary"')
    if start < 0:
        return []
    nav = html[start:html.find("</nav>", start)]
    return [unescape(re.sub(r"<[^>]+>", "", m)).strip()
            for m in re.findall(r'<a href="#[^"]*" class="md-nav__link">(.*?)</a>', nav, re.S)]


def test_every_table_of_contents_reads_as_text(site):
    """No blank entry, and no math left as source (TeX in a heading is not
    rendered in the contents: keep headings free of it)."""
    bad = {}
    for name, text in _pages(site).items():
        entries = table_of_contents(text)
        wrong = [e or "(blank)" for e in entries if not e or re.search(r"\\[(\[]|\$", e)]
        if wrong:
            bad[name] = wrong
    assert not bad, "tables of contents with blank or TeX entries:\n" + "\n".join(
        f"  {name}: {w}" for name, w in bad.items())
    notebook = table_of_contents((site / "chapters" / "why_gpus" / "why_gpus" / "index.html").read_text())
    assert "gelu_cpu_vs_gpu" in notebook, notebook


def test_a_ladders_badge_follows_the_code_it_measured():
    """A badge shows the figure of the code it sits under: the transpose's
    headline (the wide rung, with its targets) sits under `transpose.cu:wide`,
    not under the first rung, and so do the wide rung's missed targets."""
    md = (ROOT / "chapters" / "shared_memory" / "index.md").read_text()
    blocks = mkdocs_hooks._blocks(md.split("\n"))
    wide = next(k for k, b in enumerate(blocks) if "transpose.cu:wide" in b)
    spots, misses = mkdocs_hooks.badge_placement(md)
    assert spots["shared_memory/transpose"] == wide
    rec = record.load(listings.find("shared_memory/transpose"))
    head = record.headline_benchmark(rec)
    assert head.name.startswith("wide ")
    missed = [b.name for k, group in misses.items() for lid, bs in group
              if lid == "shared_memory/transpose" for b in bs if record.missed_targets(rec, [b])]
    assert all(n.startswith("wide ") for n in missed)
    assert all(k == wide for k, group in misses.items() for lid, bs in group
               if lid == "shared_memory/transpose" and any(record.missed_targets(rec, [b]) for b in bs))


def test_times_print_in_the_unit_that_fits():
    """'The sum took 471205 µs' becomes 'The sum took 471 ms'."""
    assert record.time_text(471.2045) == "471 ms"
    assert record.time_text(2.0148) == "2.01 ms"
    assert record.time_text(0.2355) == "236 µs"
    assert record.time_text(0.0434) == "43.4 µs"
    assert record.time_text(0.00825) == "8.25 µs"
    assert record.time_text(35.9) == "35.9 ms"
    assert record.time_text(1_204_500.0) == "1,204.50 s"
    assert record.time_text(0.9997) == "1.00 ms"


def test_benchmarks_name_sections_as_whole_words():
    assert record.names_section("naive 8192x8192", "naive")
    assert record.names_section("sum_atomic", "atomic")
    assert record.names_section("layernorm forward, Welford f32", "welford")
    assert record.names_section("scan_three_pass", "three_pass")
    assert not record.names_section("sum_tree", "tr")
    assert not record.names_section("memcpy_dtod, same bytes 8192x8192", "wide")


def test_a_missed_target_does_not_wear_the_colour_of_a_stale_listing():
    css = (ROOT / "docs" / "assets" / "stylesheets" / "cudabook.css").read_text()

    def colours(selector: str) -> set[str]:
        rules = re.findall(rf"(?:^|\n){re.escape(selector)} \{{([^}}]*)\}}", css)
        rules += re.findall(rf'\[data-md-color-scheme="slate"\] {re.escape(selector)} \{{([^}}]*)\}}', css)
        assert rules, f"no rule for {selector}"
        return {c.lower() for r in rules for c in re.findall(r"#[0-9a-fA-F]{6}", r)}

    stale, missed = colours(".cb-stale"), colours(".cb-missed")
    assert missed and not stale & missed, f"shared colours: {stale & missed}"


def test_the_readme_gives_the_books_addresses():
    """The README names the hosted book and the repository as
    pyproject.toml's [project.urls] do (the one place they are written)."""
    text = (ROOT / "README.md").read_text()
    assert f"<{project.site()}>" in text and f"<{project.repository()}>" in text


def _parts() -> list[list[str]]:
    """The chapters of each Part, in mkdocs.yml's nav order."""
    parts, current = [], None
    for line in (ROOT / "mkdocs.yml").read_text().splitlines():
        if re.match(r"\s+- Part [IVX]+\.", line):
            current = []
            parts.append(current)
        elif re.match(r"\s+- \S", line) and not line.startswith(" " * 6):
            current = None
        m = re.search(r"chapters/(\w+)/index\.md", line)
        if m and current is not None:
            current.append(m.group(1))
    return parts


def test_the_readme_counts_each_parts_listings():
    """'Where it stands' gives each Part's number of listings; they are
    the numbers the code has."""
    text = (ROOT / "README.md").read_text()
    stands = text[text.index("**Where it stands.**"):]
    stands = stands[:stands.index("\n\n")]
    said = [int(n) for n in re.findall(r"(\d+)\s+listings", stands)]
    counts = [sum(1 for lst in LISTINGS if lst.chapter in part) for part in _parts()]
    assert said == counts[:len(said)] and len(said) == len(counts), \
        f"README says {said} listings for Parts {list(range(1, len(counts) + 1))}; the code has {counts}"


def test_the_site_has_an_address_and_edit_buttons(site):
    """site_url (a sitemap and canonical links) and repo_url come from
    pyproject.toml; a chapter's edit button opens its Markdown, a page that
    shows a repository file whole opens that file, and a notebook (made by
    the suite) has none."""
    assert project.site() in (site / "sitemap.xml").read_text()
    chapter = (site / "chapters" / "why_gpus" / "index.html").read_text()
    assert f'<link rel="canonical" href="{project.site()}chapters/why_gpus/">' in chapter
    assert f'href="{project.edit_url("chapters/why_gpus/index.md")}"' in chapter
    assert f'href="{project.repository()}"' in chapter
    assert 'data-md-component="source"' not in chapter, "the repository link would call GitHub's API"
    contributing = (site / "contributing" / "index.html").read_text()
    assert f'href="{project.edit_url("CONTRIBUTING.md")}"' in contributing
    running = (site / "running" / "index.html").read_text()
    assert f'href="{project.edit_url("docs/running.md")}"' in running
    notebook = (site / "chapters" / "why_gpus" / "why_gpus" / "index.html").read_text()
    assert 'rel="edit"' not in notebook
    for name, text in _pages(site).items():
        for url in re.findall(r'href="([^"]*/edit/[^"]*)"', text):
            path = url.removeprefix(f"{project.repository()}/edit/{project.BRANCH}/")
            assert (ROOT / path).is_file(), f"{name}: its edit button opens {path}, which does not exist"


def test_running_page_clones_the_repository():
    """docs/running.md's Colab commands fetch the book from where its
    notebooks do (pyproject.toml's Repository)."""
    text = (ROOT / "docs" / "running.md").read_text()
    assert f"git clone --depth 1 {project.repository()} /content/cudabook" in text


def test_colab_links_point_at_the_repository():
    url = notebooks.colab_url("first_kernel")
    slug = project.repository().removeprefix("https://github.com/")
    assert url == f"https://colab.research.google.com/github/{slug}/blob/main/chapters/first_kernel/first_kernel.ipynb"


def test_every_glossary_term_is_linked_from_a_chapter():
    """The glossary defines the book's hardware terms; each chapter links a
    term where it first uses it, so every entry has at least one link."""
    anchors = re.findall(r"\{ #([\w-]+) \}", (ROOT / "docs" / "glossary.md").read_text())
    assert anchors, "no glossary entries found"
    text = "".join(p.read_text() for p in CHAPTER_PAGES)
    unlinked = [a for a in anchors if f"glossary.md#{a})" not in text]
    assert not unlinked, f"glossary entries no chapter links to: {unlinked}"


# --- measured numbers come from records -----------------------------------------
# A speed, a time, a speed-up or a share of a ceiling in the prose must be a
# [[rec:...]] substitution. A number that is not a measurement (a datasheet
# figure, an assumption in a worked example) is marked as given:
# <span class="cb-given">600 ns</span>. Code, output blocks, math and links
# are not prose.
_NUM = r"(?<![\w.,])\d[\d,]*(?:\.\d+)?"
MEASURED = re.compile(_NUM + r"\s*(?:GB/s|TB/s|MB/s|ms|µs|us|ns)\b"
                      + "|" + _NUM + r"\s?[×x](?![\w])(?!\s*[\d⟨(])"
                      + "|" + _NUM + r"\s*%\s+of\s+(?:the\s+)?(?:copy|peak|nominal|ceiling|link|HBM|bandwidth|torch|its)")
_NOT_PROSE = [re.compile(p, re.S) for p in (
    r"<!--.*?-->", mkdocs_hooks.INLINE_CODE.pattern, r"\\\(.*?\\\)", r"\\\[.*?\\\]", r"\$[^$\n]+\$",
    r'<span class="cb-given">.*?</span>', r"\]\([^)]*\)")]


def typed_measurements(markdown: str) -> list[str]:
    text = mkdocs_hooks.FENCED_BLOCK.sub("", markdown)
    text = re.sub(r"\[\[rec:[^\]]+\]\]", "⟨rec⟩", text)
    for p in _NOT_PROSE:
        text = p.sub(" ", text)
    return [m.group(0) for m in MEASURED.finditer(text)]


def test_typed_measurement_check_catches_typed_numbers():
    sample = ("It reached 4.38 TB/s, a slowdown of 1.97×, 55% of copy, took 5 ms and 120 µs, 2x faster. "
              "Not these: 3 × 2 × 132, 2 × [[rec:a/b:c]] MHz, [[rec:a/b:rate]] GB/s, PCIe x16, "
              '<span class="cb-given">600 ns</span>, `5 ms`.')
    assert typed_measurements(sample) == ["4.38 TB/s", "1.97×", "55% of copy", "5 ms", "120 µs", "2x"]


@pytest.mark.parametrize("page", CHAPTER_PAGES + sorted((ROOT / "docs").glob("*.md")),
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_measured_numbers_come_from_records(page):
    found = typed_measurements(page.read_text())
    assert not found, (f"{page.relative_to(ROOT)} states measurements typed by hand: {found}. Substitute "
                       "them from a record ([[rec:<chapter>/<listing>:<field>]]), or mark a number that is "
                       'not a measurement as <span class="cb-given">...</span> and say where it comes from.')


def _facts(listing_id: str) -> dict:
    """A listing's recorded facts (what the prose and the charts read)."""
    rec = record.load(listings.find(listing_id))
    assert rec is not None, f"{listing_id} has no record"
    return rec.facts()


def _facts_and_chapter_text(listing_id: str) -> tuple[dict, str]:
    """A listing's recorded facts and its chapter's text, its whitespace
    collapsed."""
    chapter = listing_id.split("/")[0]
    return _facts(listing_id), " ".join((ROOT / "chapters" / chapter / "index.md").read_text().split())


def _says_exactly_what_holds(text: str, sentences: dict[str, bool], chapter: str, figures: str) -> None:
    """Each sentence stands in the chapter's text exactly when the record
    bears it out (`sentences`: sentence -> whether it holds); `figures` puts
    the record's numbers in the failure message."""
    for said, true in sentences.items():
        assert (said in text) == true, (
            f"chapters/{chapter}/index.md should {'' if true else 'not '}say {said!r}: the record has {figures}")


def _stalls(sweep: list[dict]) -> list[int]:
    """The sizes at which PyTorch took longer on many threads than on one:
    a wait for a late thread, not work."""
    return [r["n"] for r in sweep if r["torch_cpu_ms"] > 1.2 * r["torch_cpu_1_ms"]]


def _slow_threads(sweep: list[dict]) -> list[int]:
    """The sizes at which PyTorch's many threads were not even twice as fast
    as its one (stalled, or nearly)."""
    return [r["n"] for r in sweep if 2 * r["torch_cpu_ms"] > r["torch_cpu_1_ms"]]


def _sizes_in_words(sizes: list[int]) -> str:
    """'16,411, 262,147 and 1,048,583' (as the prose writes a list of sizes)."""
    words = [f"{n:,}" for n in sizes]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def test_why_gpus_exercise_1_says_where_the_pageable_copies_won():
    """Exercise 1's solution says the GPU with pageable copies beat neither
    NumPy nor PyTorch on one thread, and beat PyTorch's threads only where
    they stalled, at the sizes it names. A record where that does not hold
    fails here until the solution says what it shows."""
    facts, text = _facts_and_chapter_text("why_gpus/ex1_add_one_crossover")
    sweep = facts["sweep"]
    won = {cpu: [r["n"] for r in sweep if r["gpu_with_copies_ms"] < r[f"{cpu}_ms"]]
           for cpu in ("numpy", "torch_cpu_1", "torch_cpu")}
    assert not won["numpy"] and not won["torch_cpu_1"], (
        f"the GPU with pageable copies beat one core at {won}: rewrite exercise 1's solution")
    assert set(won["torch_cpu"]) <= set(_stalls(sweep)), (
        f"the GPU with pageable copies beat PyTorch's threads at {won['torch_cpu']}, where they did "
        f"not stall ({_stalls(sweep)}): rewrite exercise 1's solution")
    said = (f"only where they stalled, at\n    {_sizes_in_words(won['torch_cpu'])} elements"
            if won["torch_cpu"] else "never beat PyTorch's threads")
    assert said.replace("\n    ", " ") in " ".join(text.split()), (
        f"exercise 1's solution should say {said!r}: the record has {won}")


def test_why_gpus_prose_names_the_sizes_where_pytorch_stalled():
    """'Why GPUs' names the sizes at which PyTorch on many threads took
    longer than on one, and says the pageable copies beat those threads only
    there (the [[if]] chain says the pinned ones won at the largest sizes).
    Those sizes come from the record, so a new record that moves them fails
    here until the paragraph follows."""
    facts, text = _facts_and_chapter_text("why_gpus/gelu_cpu_vs_gpu")
    sweep, flat = facts["sweep"], " ".join(text.split())
    stalls = _stalls(sweep)
    copies_won = [r["n"] for r in sweep if r["gpu_with_copies_ms"] < r["torch_cpu_ms"]]
    words = {1: "one size", 2: "two sizes", 3: "three sizes", 4: "four sizes", 5: "five sizes"}
    slow = _slow_threads(sweep)
    assert set(copies_won) <= set(slow), (
        f"the GPU with pageable copies beat PyTorch's threads at {copies_won}, not only where they were "
        f"less than twice as fast as one thread ({slow}): rewrite 'PyTorch's threads sometimes stall' "
        "in chapters/why_gpus/index.md")
    if copies_won:
        wanted = (f"beat PyTorch's threads at {words.get(len(copies_won), f'{len(copies_won)} sizes')}, "
                  f"{_sizes_in_words(copies_won)} elements")
        assert wanted in flat, f"the chapter should say {wanted!r}"
    if stalls:
        wanted = f"At {words.get(len(stalls), f'{len(stalls)} sizes')} of this record, {_sizes_in_words(stalls)} elements"
        assert wanted in flat, f"PyTorch stalled at {stalls} in the record; the chapter should say {wanted!r}"
        first = sweep.index(next(r for r in sweep if r["n"] == stalls[0]))
        assert f"facts.sweep.{first}.torch_cpu_ms" in text, "the stall quoted must be the first one"
    else:
        assert "this record has no such stall" in flat.lower(), (
            "PyTorch did not stall in the record; the chapter should say 'This record has no such stall'")


def test_why_gpus_exercise_2_prediction_holds():
    """Exercise 2's solution says the pinned path's time at the largest size
    came within a few percent of the bytes over the meter's pinned rates
    plus the kernel: hold it to 10%."""
    facts, text = _facts_and_chapter_text("why_gpus/gelu_cpu_vs_gpu")
    meter = _facts("ram_vram/bandwidth_meter")
    last = facts["sweep"][-1]
    mb = 4 * last["n"] / 1e9                  # GB each way
    predicted = 1e3 * (mb / meter["h2d_pinned_gbs"] + mb / meter["d2h_pinned_gbs"]) + last["gpu_kernel_ms"]
    said = "within a few percent of that sum"
    assert said in " ".join(text.split())
    assert abs(last["gpu_with_pinned_copies_ms"] / predicted - 1) < 0.1, (
        f"predicted {predicted:.2f} ms, measured {last['gpu_with_pinned_copies_ms']:.2f} ms: "
        f"exercise 2's solution should not say {said!r}")


def test_matmul_tc_puts_this_record_against_the_earlier_ones():
    """Chapter 12 puts the record's result against the nine records before
    it (commits 037c547 to 13a2e6a): our best rung at 296 to 376 TFLOP/s
    at 8192 and 285 to 348 at 4096, cuBLAS at 680 to 764. Its sentences on
    this record must hold for the record on the page; a new record that
    stops bearing them out fails here until the paragraph follows."""
    facts, text = _facts_and_chapter_text("matmul_tc/tc_gemm")
    ours, cublas = facts["tc_mma_pipelined_8192_tflops"], facts["cublas_8192_tflops"]
    at4096 = facts["tc_mma_pipelined_4096_tflops"]
    # rung 4's design ceiling worked out in the chapter: two thirds of 989 TFLOPS, about 660 TFLOP/s
    said = "even a polished version of it could not catch cuBLAS"
    assert said in text and cublas > 660, f"cuBLAS at {cublas:.0f} TFLOP/s: the chapter says {said!r}"
    wg = _facts("matmul_tc/wgmma_gemm")
    smaller = wg["wgmma_gemm_4096_of_cublas"] > wg["wgmma_gemm_8192_of_cublas"]
    _says_exactly_what_holds(text, {
        "in this one it was larger too": not smaller,
    }, "matmul_tc", f"wgmma_gemm at {wg['wgmma_gemm_4096_of_cublas']:.3f} of cuBLAS at 4096 and "
                    f"{wg['wgmma_gemm_8192_of_cublas']:.3f} at 8192, cuBLAS {wg['cublas_8192_tflops']:.0f} TFLOP/s")
    _says_exactly_what_holds(text, {
        "This one missed it with our rung inside its earlier range": not facts["target_met"] and 296 <= ours <= 376,
        "and cuBLAS faster than in any of them": cublas > 770.3,   # commit 1ca6b1a's, the highest before
        "at 4096 it ran at its usual rate": 284.5 < at4096 < 1.02 * 347.8,
    }, "matmul_tc", f"our rung at {ours:.1f} TFLOP/s at 8192 and {at4096:.1f} at 4096, cuBLAS at {cublas:.1f}, "
                    f"target {'met' if facts['target_met'] else 'missed'}")


def test_global_memory_exercise_1_ranks_the_offset_of_four_as_the_record_does():
    """Global memory's exercise 1 says what the offset of four float2s cost
    beside the offsets of one and two: the words must match the record."""
    facts, text = _facts_and_chapter_text("global_memory/ex1_float2_sectors")
    gbs = {r["offset"]: r["gbs"] for r in facts["rows"] if r["stride"] == 1}
    level = {k: abs(gbs[4] - gbs[k]) < 0.01 * gbs[k] for k in (1, 2)}
    _says_exactly_what_holds(text, {
        "it cost less than the offsets of one and two.": gbs[4] > max(gbs[1], gbs[2]),
        "it cost about as much as the offset of two, and more than the offset of one.":
            level[2] and gbs[4] < gbs[1],
        "it cost about as much as the offset of one, and less than the offset of two.":
            level[1] and not level[2] and gbs[4] > gbs[2],
    }, "global_memory", f"GB/s by offset {gbs}")


def test_caches_says_how_close_the_two_kernels_read_from_hbm():
    """Caches says that from 80 MiB on the two kernels read within about 3%
    of each other, and at the same rate (within 1%) from 128 MiB on: every
    size of the record from there on must bear that out."""
    facts, text = _facts_and_chapter_text("caches/read_staircase")
    said = "From 80 MiB on, the two kernels read within about 3% of each other, and from 128 MiB on at the same rate"
    assert said in " ".join(text.split()), f"chapters/caches/index.md no longer says {said!r}; update this test"
    for start, most in ((80, 0.035), (128, 0.01)):
        rows = [r for r in facts["sweep"] if r["bytes"] >= start << 20]
        gaps = [abs(1 - r["read_sum_l2_gbs"] / r["read_sum_gbs"]) for r in rows]
        assert rows and all(g < most for g in gaps), f"from {start} MiB the kernels differ by {gaps}: {said!r}"


def test_transformer_compares_its_three_runs_as_the_records_do():
    """The transformer chapter says both blocks took about the same time in
    the three runs that time them at B = 8, which of PyTorch's blocks was
    the faster, how the eager block's time at B = 1 compares with its
    steps' and with B = 8's, and how ours compared with it at each length
    of exercise 3. Records where one of these stops holding fail here
    until the text follows."""
    block, one = _facts("transformer/gpt2_block"), _facts("transformer/ex2_batch_one")
    long, text = _facts_and_chapter_text("transformer/ex3_long_sequences")
    runs = {who: [block[f"{who}_ms"], one[f"b8_{who}_ms"], long[f"t1024_{who}_ms"]] for who in ("ours", "eager")}

    def level(ts):                       # within 5% of one another
        return max(ts) < 1.05 * min(ts)

    ours, eager = level(runs["ours"]), level(runs["eager"])
    eager_two = not eager and any(level([a, b]) for i, a in enumerate(runs["eager"]) for b in runs["eager"][i + 1:])
    main, others = runs["eager"][0], runs["eager"][1:]
    one_longer = ours and others[0] > 1.05 * main and level([main, others[1]])   # exercise 2's, not 3's
    three_longer = ours and others[1] > 1.05 * main and level([main, others[0]])  # exercise 3's, not 2's
    graphs = [block["graph_ms"], one["b8_graph_ms"], long["t1024_graph_ms"]]
    main_longer = ours and level(graphs) and main > 1.05 * max(others) and level(others)   # the chapter's own
    steps8 = sum(v for k, v in block.items() if k.startswith("torch_step_") and k.endswith("_ms"))

    def long_steps(t):                   # PyTorch's eight steps, timed alone in exercise 3's run at T = t
        return sum(v for k, v in long.items() if k.startswith(f"t{t}_torch_step_") and k.endswith("_ms"))

    share1024 = long_steps(1024) / long["t1024_eager_ms"]
    mma = [block["ours_mma_ms"], one["b8_ours_mma_ms"], long["t1024_ours_mma_ms"]]   # rung 4's products
    # The measurement the project set the target against, on an H200: the eager block took 0.416 ms.
    above = sum(t > 0.416 for t in runs["eager"])
    assert ours and (eager or eager_two), (
        f"the three runs at B = 8 took {runs} ms: no sentence of chapters/transformer/index.md says so; "
        "write one, and add it here")
    _says_exactly_what_holds(text, {
        "Both blocks took about the same time in all three runs.": ours and eager,
        "Our block took about the same time in all three runs; PyTorch's eager block did in two of them.":
            ours and eager_two,
        "Both blocks took about the same time in every run.": ours and eager,
        "Ours took about the same time in every run; the eager block did in two of the three.": ours and eager_two,
        "within this record, at \\(B = 8\\), neither block's did.": ours and eager,
        "and within this record it did; ours did not.": ours and not eager,
        ("In exercise 2's run the same block at the same shape took longer, while ours, timed in the same "
         "process, did not."): one_longer,
        # At B = 1 the eager block waits on its host; most earlier records had it at 0.183 to 0.208 ms.
        "close to its time in most earlier records.": one_longer and one["b1_eager_ms"] < 1.2 * 0.208,
        ("In exercise 3's run the same block at the same shape took longer, while ours, timed in the same "
         "process, did not."): three_longer,
        ("in that run PyTorch's eager block, not ours, took longer than in the other two, most likely "
         "because its host fell behind the GPU."): three_longer,
        "add up to about three quarters of the block's time.": three_longer and 0.7 < share1024 < 0.8,
        "At 256 and 4,096 tokens, moments before and after in that process, the eager block took no longer "
        "than its eight steps.": three_longer and all(long[f"t{t}_eager_ms"] <= long_steps(t) for t in (256, 4096)),
        "longer than in any run of this record.": above == 0,
        "finds no sign that it did, in any of the three runs": eager,
        "finds a sign that it did in one of the three runs that time the block at \\(B = 8\\), exercise 3's":
            three_longer and 0.7 < share1024 < 0.8,
        "finds a sign that it did in one of the three runs that time the block at \\(B = 8\\), the chapter's own":
            main_longer,
        ("In the chapter's run the same block as Python issued it took longer than in the other two, while "
         "its graph replay and ours did not."): main_longer,
        "in the chapter's run PyTorch's eager block took longer than in the other two": main_longer,
        "With rung 4's products the block would have missed the target in all three runs":
            all(g / m < 0.6 for g, m in zip(graphs, mma)),
        ("With rung 4's products the block would have missed the target in the chapter's run and in "
         "exercise 2's, and met it only in exercise 3's, where the eager block was slow"):
            [e / m >= 0.6 for e, m in zip(runs["eager"], mma)] == [False, False, True],
        "longer than in two runs of this record, and less than in exercise 3's.":
            above == 1 and runs["eager"][2] > 0.416,
        "add up to about what its block took there.": abs(steps8 - main) < 0.1 * main,
        "So the target was met in every run of the record.":
            min(block["of_graph"], one["b8_of_graph"], long["t1024_of_graph"]) >= 0.6,
    }, "transformer", f"the three runs at B = 8 in ms {runs}, PyTorch's steps in the first {steps8:.3f} ms")
    times = f"eager {block['eager_ms']:.3f}, ours {block['ours_ms']:.3f}, compiled {block['compile_ms']:.3f} ms"
    compiled = {  # what the chapter may say of the compiled block, and whether the record bears it out
        "The compiled block, timed only in the chapter's run, took longer than the eager one there, "
        "and longer than ours.":
            block["eager_ms"] < block["compile_ms"] and 1.1 * block["ours_ms"] <= block["compile_ms"],
        "The compiled block, timed only in the chapter's run, took longer than the eager one there, "
        "and a little longer than ours.":
            block["eager_ms"] < block["ours_ms"] < block["compile_ms"] < 1.1 * block["ours_ms"],
        "The compiled block, timed only in the chapter's run, was the faster of PyTorch's two there, "
        "and faster than ours.":
            block["compile_ms"] < min(block["eager_ms"], block["ours_ms"]),
        "The compiled block, timed only in the chapter's run, took longer than the eager one there, "
        "and less time than ours.":
            block["eager_ms"] < block["compile_ms"] < block["ours_ms"],
    }
    assert any(compiled.values()), (
        f"{times}: no sentence of chapters/transformer/index.md says this; write one, and add it here")
    _says_exactly_what_holds(text, compiled, "transformer", times)
    steps = sum(v for k, v in one.items() if k.startswith("b1_torch_step_") and k.endswith("_ms"))
    share = steps / one["b1_eager_ms"]
    _says_exactly_what_holds(text, {
        "The steps add up to less than half of the block's time.": share < 0.45,
        "The steps add up to about half of the block's time.": 0.45 <= share <= 0.6,
    }, "transformer", f"at B = 1 the eager block at {one['b1_eager_ms']:.3f} ms, its steps at {steps:.3f} ms")
    ours_steps = one["b1_steps_sum_ms"] / steps
    c_fc = one["b1_step_c_fc_ms"] / (one["b1_torch_step_c_fc_ms"])
    closest = min(("c_attn", "c_fc", "c_proj", "c_proj2"),
                  key=lambda k: one[f"b1_step_{k}_ms"] / one[f"b1_torch_step_{k}_ms"])
    for words, true in (("it still took far more than an eighth of that time",
                         one["b1_eager_ms"] > 3 * one["b8_eager_ms"] / 8),
                        ("And our steps add up to about twice PyTorch's.", 1.8 < ours_steps < 2.2),
                        ("`c_fc` came closest, about two fifths slower than PyTorch's product and GELU",
                         closest == "c_fc" and 1.3 < c_fc < 1.5)):
        assert words in text and true, (
            f"at B = 1 the eager block took {one['b1_eager_ms']:.3f} ms, its steps {steps:.3f} ms, and at "
            f"B = 8 {one['b8_eager_ms']:.3f} ms: the chapter says {words!r}")
    gap = {t: 1 / long[f"t{t}_of_eager"] for t in (256, 1024, 4096)}     # ours' time over the eager block's
    half = {t: 1.35 < g < 1.65 for t, g in gap.items()}
    host1024 = long["t1024_eager_ms"] > long_steps(1024) and gap[1024] < 1.35
    _says_exactly_what_holds(text, {
        "At all three lengths our block took about one and a half times PyTorch's time.": all(half.values()),
        ("At 1,024 the gap was smaller in this run, and not because of ours: there the eager block took "
         "longer than its eight steps timed alone"): host1024,
    }, "transformer", f"ours took {', '.join(f'{g:.2f}' for g in gap.values())} times the eager block's time "
                      f"at T = 256, 1024, 4096; at 1024 the eager block {long['t1024_eager_ms']:.3f} ms, "
                      f"its steps {long_steps(1024):.3f} ms")


def test_a_format_that_does_not_apply_is_named_not_raised(caplog):
    page = _page("chapters/first_kernel/index.md")
    value = mkdocs_hooks.field("first_kernel/device_query", "facts.sm_count", page, ".2ff")
    assert value == "(unknown)"
    assert "[[rec:first_kernel/device_query:facts.sm_count|.2ff]]" in caplog.text and "format" in caplog.text


def test_a_chart_whose_titles_touch_is_refused():
    """plots.svg refuses a chart whose figure title sits on a panel's title
    (the attention chapter's bf16 chart did), so the build fails on it."""
    from cudabook import plots

    plt = plots.pyplot()

    def chart(top):            # the bf16 chart's shape: five tall panels
        fig, axes = plt.subplots(5, 1, figsize=(7.5, 15.5), sharex=True)
        for ax in axes:
            ax.set_title("S = 4096, D = 64")
            ax.barh(["ours", "SDPA"], [1, 2])
        fig.suptitle("Attention forward, bf16: a GPU, a date", fontsize=12)
        fig.tight_layout(rect=(0, 0, 1, top))
        return fig

    with pytest.raises(plots.ChartLayoutError, match="too close"):
        plots.svg(chart(1.0))
    assert plots.svg(chart(0.99)).startswith(b"<?xml")


def test_a_checks_values_can_be_shown():
    """[[rec:...:check[<name>].norm_rel_err]] shows a check's norm-wise
    error from the record (the tensor-core chapter quotes how it grows
    with K), formatted .1e unless a format is given."""
    page = _page("chapters/matmul_tc/index.md")
    rec = record.load(listings.find("matmul_tc/tc_gemm"))
    first = next(c for c in rec.checks() if c.name == "mma 4096x4096x4096")
    assert mkdocs_hooks.field("matmul_tc/tc_gemm", "check[mma 4096x4096x4096].norm_rel_err", page) == \
        format(first.norm_rel_err, ".1e")
    assert mkdocs_hooks.field("matmul_tc/tc_gemm", "check[mma 4096x4096x4096].k", page) == \
        f"{first.k:,.0f}"
    assert mkdocs_hooks.FIELD.fullmatch("[[rec:matmul_tc/tc_gemm:check[mma 1024x1024x1024].norm_rel_err|.2e]]")
    assert mkdocs_hooks.field("matmul_tc/tc_gemm", "check[no such check].k", page) == "(unknown)"


def test_attention_exercise_2_compares_two_runs_with_the_two_orders():
    """Exercise 2 says two runs of the same kernel (flash_bf16's, and its
    own, longest first) differed by more than its two orders did: the
    records must bear that out."""
    flash, text = _facts_and_chapter_text("attention/flash_bf16")
    order = _facts("attention/ex2_block_order")
    a, b = flash["flash_d128_m2_n64_s4096_d128_causal_ms"], order["long_first_s4096_ms"]
    runs = max(a, b) / min(a, b)
    orders = max(order["gain_s4096"], 1 / order["gain_s4096"])
    said = "two runs of the same kernel differed by more than the two orders did here."
    assert said in text and runs > orders, f"runs {a:.3f} and {b:.3f} ms, orders {order['gain_s4096']:.3f}: {said!r}"
