"""The built site in a real browser (Debian's Chromium, driven by Playwright),
served from localhost with no network: what a reader sees.

Needs /usr/bin/chromium (`apt-get install chromium`; .ci/run installs it).
Without it these tests are skipped, except under CI=true, where that is a
failure. Screenshots go to $CUDABOOK_SCREENSHOTS when it is set.

Every test waits for the state it asserts (Playwright's auto-waiting
`expect`, `wait_for_function`, `wait_for_url`), never for a fixed time, so a
busy machine makes the tests slower, not red. Every function that a wait
polls checks that its elements exist before it measures them.
"""

from __future__ import annotations

import functools
import http.server
import json
import math
import os
import re
import shutil
import subprocess
import sys
import threading
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import urlparse

import pytest
from conftest import LISTINGS, ROOT

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

if CHROMIUM is None:
    if os.environ.get("CI") == "true":
        pytest.fail("Chromium is missing on CI: .ci/run should have installed it", pytrace=False)
    pytest.skip("Chromium not installed (apt-get install chromium)", allow_module_level=True)
playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect

WAIT_MS = 30_000          # the longest any state may take to appear, on a loaded machine
expect.set_options(timeout=WAIT_MS)
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
CHAPTERS = sorted(p.parent.name for p in (ROOT / "chapters").glob("*/index.md"))
MIN_LABEL_PX = 11         # the smallest text a figure may show, in CSS px
MIN_CODE_PX = 11


def recorded_gpu() -> str:
    """The GPU that produced the records, as the records name it."""
    rec = json.loads((ROOT / "results" / "first_kernel" / "device_query.json").read_text())
    return rec["environment"]["gpu"]


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    # The build sees this process's environment, so a preview run with
    # CUDABOOK_ALLOW_STALE=1 already set (listings changed since their GPU
    # records) builds too; the tests never set it themselves.
    out = tmp_path_factory.mktemp("site")
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
                       capture_output=True, text=True, cwd=ROOT, timeout=600, env=dict(os.environ), check=False)
    if r.returncode != 0:
        warned = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.startswith(("WARNING", "ERROR"))]
        pytest.fail("the site does not build with --strict, so no browser test can run. mkdocs said:\n"
                    + "\n".join(warned or (r.stdout + r.stderr).splitlines()[-20:])
                    + "\n\nA listing with no current GPU record fails the build (CONTRIBUTING.md, step 4); "
                    "CUDABOOK_ALLOW_STALE=1 python -m pytest runs these tests on a preview build.",
                    pytrace=False)
    handler = functools.partial(QuietHandler, directory=str(out))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        yield b
        b.close()


# A page has settled once every piece of math has been typeset by KaTeX and
# its fonts are loaded.
SETTLED = """async () => {
  await document.fonts.ready;
  return [...document.querySelectorAll('.arithmatex')].every(e => e.querySelector('.katex') !== null);
}"""


SHOWN = """() => {
  const title = document.querySelector('.md-header__title');
  const header = document.querySelector('.md-header');
  const h1 = document.querySelector('article h1');
  if (title && header && h1) {
    const below = h1.getBoundingClientRect().bottom - header.getBoundingClientRect().bottom;
    const swapped = title.classList.contains('md-header__title--active');
    if (Math.abs(below) > 24 && swapped !== (below < 0)) return false;
  }
  return document.getAnimations().every(a =>
    a.playState !== 'running' || !a.effect || a.effect.getTiming().iterations === Infinity);
}"""


class Reader:
    """A page plus everything that went wrong while it was open."""

    def __init__(self, browser, site, **ctx):
        self.context = browser.new_context(**ctx)
        self.context.set_default_timeout(WAIT_MS)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.outside: list[str] = []
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        host = urlparse(site).netloc

        def route(r):
            if urlparse(r.request.url).netloc not in (host, ""):
                self.outside.append(r.request.url)
                return r.abort()
            return r.continue_()

        self.page.route("**/*", route)
        self.site = site

    def open(self, path: str):
        """Go to a page and wait until it has settled: loaded, its math
        typeset (which changes the layout) and its fonts ready."""
        self.page.goto(self.site + path, wait_until="networkidle")
        self.page.wait_for_function(SETTLED)
        return self.page

    def shot(self, name: str):
        """A screenshot of the viewport once it shows a settled state: the
        header shows the page's title if and only if the page's headline has
        scrolled away under it (Material swaps them on scroll), and every
        transition (that swap, the colour scheme) has finished; endless
        animations (the pulse of a code annotation's marker) are left be."""
        d = os.environ.get("CUDABOOK_SCREENSHOTS")
        if d:
            self.page.wait_for_function(SHOWN)
            Path(d).mkdir(parents=True, exist_ok=True)
            self.page.screenshot(path=str(Path(d) / f"{name}.png"), full_page=False)

    def close(self):
        assert self.errors == [], f"console errors: {self.errors}"
        assert self.outside == [], f"the site asked the network for: {self.outside}"
        self.context.close()


@pytest.fixture
def reader(browser, site):
    r = Reader(browser, site, viewport=DESKTOP)
    yield r
    r.close()


# Every image in the article has loaded (guarded: true only once there are
# images and each one is decoded).
IMAGES_LOADED = """() => {
  const imgs = [...document.querySelectorAll('article img')];
  return imgs.length > 0 && imgs.every(i => i.complete && i.naturalWidth > 0);
}"""


def open_all_details(page):
    """Open every collapsed block (exercise solutions), so that what is
    inside gets laid out, and wait until it is."""
    page.evaluate("() => document.querySelectorAll('article details').forEach(d => { d.open = true; })")
    page.wait_for_function("() => [...document.querySelectorAll('article details')].every(d => d.open)")


def test_landing_page(reader):
    page = reader.open("/")
    assert page.title().startswith("cudabook")
    expect(page.locator("article")).to_contain_text("An executable textbook on CUDA")
    reader.shot("landing")


def test_chapter_shows_listing_badge_math_and_figures(reader):
    page = reader.open("/chapters/first_kernel/")
    listings = [lst for lst in LISTINGS if lst.chapter == "first_kernel"]
    expect(page.locator(".cb-record.cb-current")).to_have_count(len(listings))
    expect(page.locator(".cb-record.cb-current").first).to_contain_text(recorded_gpu())
    code = page.locator("div.highlight", has_text="add_one_per_thread(const float").first
    expect(code).to_be_visible()
    assert page.locator(".katex").count() >= 3, "math did not render"
    page.wait_for_function(IMAGES_LOADED)
    # the kernel's listing at the top of the window, its badge below it
    code.evaluate("e => window.scrollTo(0, e.getBoundingClientRect().top + window.scrollY - 120)")
    page.wait_for_function("() => window.scrollY > 0")
    reader.shot("chapter")

    # The badge links to the listing's row on the verification page. Material's
    # navigation.tracking rewrites the URL's #hash to the nearest heading as
    # soon as the page scrolls, so the test checks the link itself, then that
    # the click lands on that page with the row in view, not page.url.
    badge = page.locator(".cb-record a").first
    expect(badge).to_have_attribute("href", re.compile(r"(^|/)verification/#rec-first_kernel-device_query$"))
    badge.click()
    page.wait_for_url(lambda url: urlparse(url).path.endswith("/verification/"))
    row = page.locator("#rec-first_kernel-device_query")
    expect(row).to_have_count(1)
    expect(row).to_be_in_viewport()

    page.go_back()
    page.wait_for_url(lambda url: urlparse(url).path.endswith("/chapters/first_kernel/"))
    page.wait_for_function(IMAGES_LOADED)


def test_copy_button_copies_the_listing(browser, site):
    r = Reader(browser, site, viewport=DESKTOP, permissions=["clipboard-read", "clipboard-write"])
    page = r.open("/chapters/first_kernel/")
    block = page.locator("div.highlight", has_text="add_one_per_thread(const float").first
    block.hover()
    block.locator("button.md-code__button[data-md-type=copy], button.md-clipboard").first.click()
    # Writing the clipboard is asynchronous: wait until it holds the listing.
    page.wait_for_function("async () => (await navigator.clipboard.readText()).includes('add_one_per_thread')",
                           polling=100)
    copied = page.evaluate("navigator.clipboard.readText()")
    assert 'extern "C" __global__ void add_one_per_thread' in copied
    assert "--8<--" not in copied and "(1)!" not in copied
    r.close()


def test_search_finds_warp(reader):
    page = reader.open("/")
    search = page.locator(".md-search__input")
    search.click()
    search.press_sequentially("warp")  # key by key: Material searches on keyup
    # The chapter about warps must be among the first hits (Material lists
    # the best matches first and renders more as the reader scrolls; many
    # chapters mention warps). Material answers once its search worker has
    # built the index, however long that takes.
    hit = page.locator("a.md-search-result__link[href*='/chapters/threads_warps/']").first
    expect(hit).to_be_visible()
    reader.shot("search")
    hit.click()
    page.wait_for_url(lambda url: "/chapters/threads_warps/" in urlparse(url).path)


def test_search_ranks_a_chapter_above_the_notebooks(reader):
    """The best hit for a topic is the chapter that teaches it, not a
    companion notebook's copy of its code."""
    page = reader.open("/")
    search = page.locator(".md-search__input")
    search.click()
    search.press_sequentially("bank conflict")
    first = page.locator("a.md-search-result__link").first
    expect(first).to_be_visible()
    expect(first).to_have_attribute("href", re.compile(r"/chapters/shared_memory/([?#]|$)"))


def test_dark_mode_toggles(reader):
    page = reader.open("/chapters/first_kernel/")
    body = page.locator("body")
    before = body.get_attribute("data-md-color-scheme")
    assert before in ("default", "slate")
    after = "slate" if before == "default" else "default"
    bg = page.evaluate("() => getComputedStyle(document.body).backgroundColor")
    page.locator("label.md-header__button[for^='__palette']:visible").first.click()
    expect(body).to_have_attribute("data-md-color-scheme", after)
    # ... and the page has actually been repainted in the other scheme.
    page.wait_for_function("bg => getComputedStyle(document.body).backgroundColor !== bg", arg=bg)
    reader.shot("dark")


def test_mobile_width_keeps_code_readable(browser, site):
    r = Reader(browser, site, viewport={"width": 375, "height": 800}, is_mobile=True)
    page = r.open("/chapters/first_kernel/")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 376, f"the page scrolls sideways on a phone ({width}px wide)"
    pre = page.locator("div.highlight pre").first
    assert float(pre.evaluate("e => parseFloat(getComputedStyle(e).fontSize)")) >= 10
    assert pre.evaluate("e => getComputedStyle(e).overflowX") in ("auto", "scroll") or \
        pre.locator("code").evaluate("e => getComputedStyle(e).overflowX") in ("auto", "scroll")
    r.shot("mobile")
    r.close()


# Where the lines of the notebooks' output pre blocks break: [preceding
# character, next character] for each soft break (a line box that starts
# without a newline before it), found by laying out each character.
OUTPUT_BREAKS = """() => {
  const out = [];
  for (const pre of [...document.querySelectorAll('.jp-OutputArea-output pre')]) {
    const walker = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
    let prevTop = null, prevChar = null;
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const text = node.textContent;
      for (let i = 0; i < text.length; i++) {
        const r = document.createRange();
        r.setStart(node, i); r.setEnd(node, i + 1);
        const rect = [...r.getClientRects()][0];
        if (!rect || text[i] === '\\n') { if (text[i] === '\\n') prevTop = null; prevChar = text[i]; continue; }
        if (prevTop !== null && rect.top > prevTop + 1) out.push([prevChar, text[i]]);
        prevTop = rect.top; prevChar = text[i];
      }
    }
  }
  return out;
}"""


def test_notebook_output_wraps_at_spaces_on_a_phone(browser, site):
    """Recorded output in a notebook wraps between words ("3.8e-08" stays
    whole), and the page does not scroll sideways; a word longer than the
    column scrolls inside its output box."""
    r = Reader(browser, site, viewport=PHONE, is_mobile=True)
    page = r.open("/chapters/why_gpus/why_gpus/")
    expect(page.locator(".jp-OutputArea-output pre").first).to_be_visible()
    breaks = page.evaluate(OUTPUT_BREAKS)
    assert breaks, "no output line wraps at phone width: this test measures nothing"
    inside = [b for b in breaks if not (b[0].isspace() or b[1].isspace())]
    assert not inside, f"output lines break inside words: {inside[:10]}"
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"] + 1, f"the notebook page scrolls sideways on a phone ({width}px wide)"
    r.shot("notebook-phone")
    r.close()


def test_diagrams_and_notebook_render(reader):
    page = reader.open("/verification/")
    # Material draws diagrams into a closed shadow root: check that the
    # diagram's host took up real space on the page (once it exists at all).
    page.wait_for_function("""() => {
      const m = document.querySelector('div.mermaid');
      return m !== null && m.getBoundingClientRect().height > 100;
    }""")
    assert page.locator("div.mermaid").first.bounding_box()["width"] > 300
    expect(page.locator("#rec-first_kernel-add_vectorized")).to_have_count(1)
    page = reader.open("/chapters/first_kernel/first_kernel/")
    expect(page.get_by_text("Open in Colab").first).to_be_attached()
    expect(page.locator("body")).to_contain_text(recorded_gpu())
    reader.shot("notebook")


def test_exercise_solutions_open_and_show_their_code(reader):
    """Each solution sits in a collapsed block that opens on a click and
    holds the solution's code, its badge and its recorded output."""
    page = reader.open("/chapters/threads_warps/")
    solutions = page.locator("details.success")
    assert solutions.count() >= 3
    first = solutions.first
    expect(first.locator("div.highlight").first).to_be_hidden()
    first.locator("summary").click()
    expect(first.locator("div.highlight").first).to_be_visible()
    expect(first.locator(".cb-record.cb-current").first).to_be_visible()
    page.wait_for_function(IMAGES_LOADED)
    chart = first.locator("figure.cb-figure")
    (chart.first if chart.count() else first.locator("div.highlight").last).scroll_into_view_if_needed()
    reader.shot("solution-open")


def test_broken_listing_shows_the_sanitizer_report(reader):
    page = reader.open("/chapters/kernels_go_wrong/")
    article = page.locator("article")
    expect(article).to_contain_text("Invalid __global__ read")
    expect(article).to_contain_text("RACECHECK SUMMARY")
    expect(article).to_contain_text("Uninitialized __global__ memory read")
    expect(page.locator(".cb-record", has_text="broken on purpose")).to_have_count(3)
    # the badge of the first broken listing, and below it the report
    report = page.locator("div.highlight", has_text="Invalid __global__ read").first
    report.evaluate("e => window.scrollTo(0, e.getBoundingClientRect().top + window.scrollY - 240)")
    page.wait_for_function("() => window.scrollY > 0")
    reader.shot("sanitizer-report")


# ---------------------------------------------------------------------------
# Figures: every label readable at desktop and phone widths.

SKIP_TAGS = {"defs", "style", "title", "desc", "metadata", "marker", "pattern", "clipPath", "mask", "symbol"}
IDENTITY = (1.0, 0.0, 0.0, 1.0, 0.0, 0.0)


def _length(value: str, inherited: float) -> float | None:
    """A CSS font-size in SVG user units (px), or None if not understood."""
    m = re.fullmatch(r"\s*([-+]?\d*\.?\d+)\s*(px|pt|em|rem|%)?\s*(!important)?\s*", value)
    if not m:
        return None
    v, unit = float(m.group(1)), m.group(2)
    return {None: v, "px": v, "pt": v * 4 / 3, "em": v * inherited, "rem": v * 16,
            "%": v * inherited / 100}[unit]


def _declared_font_size(decls: str, inherited: float) -> float | None:
    """The font size set by CSS declarations (`font-size: 12px`, or the size
    in a shorthand such as `font: bold 10px/1.2 'DejaVu Sans'`), else None."""
    size = None
    for decl in decls.split(";"):
        if ":" not in decl:
            continue
        prop, value = (x.strip() for x in decl.split(":", 1))
        if prop == "font-size":
            size = _length(value, inherited) or size
        elif prop == "font":
            m = re.search(r"(?:^|\s)(\d*\.?\d+(?:px|pt|em|rem|%)?)(?:/\S+)?\s+\S", value)
            if m:
                size = _length(m.group(1), inherited) or size
    return size


def _mul(m, t):
    a1, b1, c1, d1, e1, f1 = m
    a2, b2, c2, d2, e2, f2 = t
    return (a1 * a2 + c1 * b2, b1 * a2 + d1 * b2, a1 * c2 + c1 * d2, b1 * c2 + d1 * d2,
            a1 * e2 + c1 * f2 + e1, b1 * e2 + d1 * f2 + f1)


def _matrix(transform: str | None):
    """The affine matrix (a, b, c, d, e, f) of an SVG transform list."""
    m = IDENTITY
    for name, args in re.findall(r"(\w+)\s*\(([^)]*)\)", transform or ""):
        v = [float(x) for x in re.split(r"[\s,]+", args.strip()) if x]
        if name == "matrix":
            t = tuple(v)
        elif name == "translate":
            t = (1, 0, 0, 1, v[0], v[1] if len(v) > 1 else 0)
        elif name == "scale":
            t = (v[0], 0, 0, v[1] if len(v) > 1 else v[0], 0, 0)
        elif name == "rotate":
            a = math.radians(v[0])
            t = (math.cos(a), math.sin(a), -math.sin(a), math.cos(a), 0, 0)
        elif name == "skewX":
            t = (1, 0, math.tan(math.radians(v[0])), 1, 0, 0)
        elif name == "skewY":
            t = (1, math.tan(math.radians(v[0])), 0, 1, 0, 0)
        else:
            continue
        m = _mul(m, t)
    return m


def _scale(m) -> float:
    """How much a matrix enlarges text: the square root of its area factor."""
    return math.sqrt(abs(m[0] * m[3] - m[1] * m[2]))


def _css_rules(root) -> list[tuple[str, str]]:
    """(selector, declarations) of every rule in the SVG's <style> elements."""
    css = " ".join("".join(el.itertext()) for el in root.iter()
                   if isinstance(el.tag, str) and el.tag.split("}")[-1] == "style")
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.DOTALL)
    return [(sel.strip(), body) for sels, body in re.findall(r"([^{}@]+)\{([^{}]*)\}", css)
            for sel in sels.split(",") if sel.strip()]


def _matches(selector: str, tag: str, el) -> bool:
    """Whether a simple selector (`*`, `text`, `.c`, `#id`, `text.c`, or the
    last part of a descendant selector) may apply to the element; erring
    towards "yes" only ever finds more sizes to check."""
    m = re.fullmatch(r"(\*|[\w-]+)?((?:[.#][\w-]+)*)", selector.split()[-1])
    if not m or m.group(1) not in (None, "*", tag):
        return False
    classes = (el.get("class") or "").split()
    return all((kind == "." and name in classes) or (kind == "#" and el.get("id") == name)
               for kind, name in re.findall(r"([.#])([\w-]+)", m.group(2)))


def svg_label_sizes(svg: bytes) -> tuple[float, float, list[tuple[float, str]]]:
    """The SVG's viewBox width and height, and (size, text) for every piece of
    text it draws, the size in viewBox units after every transform:

    - each <text> and <tspan>, its font size from the `font-size` attribute,
      CSS in <style>, `style=` (in that order of precedence, lowest first) or
      else from the nearest ancestor that sets one (16 px at the root);
    - each glyph of text that matplotlib drew as paths: a <use> inside a
      `text_N` group, 100 units to the em, scaled by the transforms down to
      it (so a superscript counts at its own, smaller, size); its text is the
      comment matplotlib writes at the head of the group.
    """
    root = ET.fromstring(svg, parser=ET.XMLParser(target=ET.TreeBuilder(insert_comments=True)))
    vb = [float(v) for v in re.split(r"[\s,]+", root.get("viewBox", "").strip()) if v]
    assert len(vb) == 4, "a figure's SVG needs a viewBox to scale with the page"
    rules = _css_rules(root)
    found: list[tuple[float, str]] = []

    def walk(el, inherited: float, matrix, label: str | None):
        tag = el.tag.split("}")[-1]
        if tag in SKIP_TAGS:
            return
        matrix = _mul(matrix, _matrix(el.get("transform")))
        size = _length(el.get("font-size"), inherited) if el.get("font-size") else None
        for sel, decls in rules:
            if _matches(sel, tag, el):
                size = _declared_font_size(decls, inherited) or size
        if el.get("style"):
            size = _declared_font_size(el.get("style"), inherited) or size
        size = size or inherited
        children = [c for c in el if isinstance(c.tag, str)]
        if tag in ("text", "tspan"):
            own = ((el.text or "") + "".join(c.tail or "" for c in el)).strip()
            if own:
                found.append((size * _scale(matrix), own if label is None else f"{own}' of '{label}"))
        if tag == "use" and label is not None:
            found.append((100 * _scale(matrix), label))
        if tag == "g" and re.fullmatch(r"text_\d+", el.get("id") or ""):
            comment = next((c for c in el if c.tag is ET.Comment), None)
            label = comment.text.strip() if comment is not None else el.get("id")
        for c in children:
            walk(c, size, matrix, label)

    walk(root, 16.0, IDENTITY, None)
    return vb[2], vb[3], found


@functools.cache
def _fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as f:
        return f.read()


FIGURES_LAID_OUT = """() => {
  const imgs = [...document.querySelectorAll('figure.cb-figure img')];
  return imgs.length > 0 && imgs.every(i => i.complete && i.naturalWidth > 0 && i.getBoundingClientRect().width > 0);
}"""


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1280px", "390px"])
def test_figure_labels_are_readable(browser, site, viewport):
    """Every label of every figure on every chapter page renders at 11 CSS px
    or more (its smallest font size in the SVG, times the image's rendered
    width over the viewBox width), and the page does not scroll sideways:
    on a phone a figure keeps a minimum width and scrolls inside its own box."""
    phone = viewport is PHONE
    r = Reader(browser, site, viewport=viewport, is_mobile=phone, has_touch=phone)
    page = r.page
    small, seen = [], 0
    for ch in CHAPTERS:
        r.open(f"/chapters/{ch}/")
        open_all_details(page)
        if page.locator("figure.cb-figure img").count() == 0:
            continue
        page.wait_for_function(FIGURES_LAID_OUT)
        width = page.evaluate("() => document.documentElement.scrollWidth")
        assert width <= viewport["width"] + 1, \
            f"/chapters/{ch}/ scrolls sideways at {viewport['width']} px ({width} px wide)"
        for img in page.locator("figure.cb-figure img").all():
            src, alt, w, h = img.evaluate(
                "i => [i.currentSrc, i.alt, i.getBoundingClientRect().width, i.getBoundingClientRect().height]")
            name = f"{ch}/{urlparse(src).path.rsplit('/', 1)[-1]}"
            assert alt.strip(), f"{name} has no alt text"
            if not src.endswith(".svg"):
                continue
            svg = _fetch(src)
            vbw, vbh, sizes = svg_label_sizes(svg)
            assert sizes, f"{name}: found no text in it; has the way its SVG draws text changed?"
            if (ROOT / "chapters" / name).exists():  # drawn by hand: says what it shows
                title = ET.fromstring(svg).find("{http://www.w3.org/2000/svg}title")
                assert title is not None and title.text.strip(), f"{name} has no <title>"
            scale = min(w / vbw, h / vbh)
            size, text = min(sizes)
            seen += 1
            if size * scale < MIN_LABEL_PX - 1e-6:
                small.append(f"{name}: '{text}' is {size:g} of {vbw:g} viewBox units, drawn {w:.0f} px wide: "
                             f"{size * scale:.1f} px (needs {MIN_LABEL_PX} px: font {MIN_LABEL_PX / scale:.1f} "
                             f"units, or the image {MIN_LABEL_PX / size * vbw:.0f} px wide)")
    assert seen >= 10, f"only {seen} figures found on the chapter pages"
    if phone:
        r.open("/chapters/why_gpus/")
        page.locator("figure.cb-figure").first.scroll_into_view_if_needed()
        r.shot("mobile-figure")
    r.close()
    assert not small, f"labels under {MIN_LABEL_PX} px at {viewport['width']} px wide:\n" + "\n".join(small)


# ---------------------------------------------------------------------------
# Recorded output and tables: nothing cut off at the column edge.

RECORDED_OUTPUT_AND_TABLES = """() => {
  const out = [];
  const hidden = e => e.scrollWidth > e.clientWidth + 1;
  for (const d of document.querySelectorAll('article div.highlight')) {
    const title = d.querySelector(':scope > .filename');
    if (!title || !title.textContent.startsWith('Output recorded on')) continue;
    const pre = d.querySelector('pre'), code = pre && pre.querySelector('code');
    if (!code) continue;
    const lines = code.textContent.split('\\n');
    const longest = lines.reduce((a, b) => b.length > a.length ? b : a, '');
    out.push({kind: 'output', hidden: hidden(pre) || hidden(code),
              px: parseFloat(getComputedStyle(code).fontSize),
              what: `${longest.length} characters: ${longest.trim().slice(0, 60)}`,
              over: Math.max(pre.scrollWidth - pre.clientWidth, code.scrollWidth - code.clientWidth)});
  }
  for (const t of document.querySelectorAll('article table')) {
    const wrap = t.closest('.md-typeset__scrollwrap');
    out.push({kind: 'table', hidden: hidden(t) || (wrap !== null && hidden(wrap)), px: null,
              what: (t.rows.length ? t.rows[0].innerText : '').replace(/\\s+/g, ' ').trim().slice(0, 60),
              over: Math.max(t.scrollWidth - t.clientWidth, wrap ? wrap.scrollWidth - wrap.clientWidth : 0)});
  }
  return out;
}"""


KIND = {"output": "a recorded output block", "table": "a table"}


def test_recorded_output_and_tables_show_every_column(reader):
    """At 1280 px, every recorded output block and every table on a chapter
    page fits its column: nothing (a GB/s or % column) hidden behind a
    scroll bar; and recorded output is set in 11 px or more."""
    page = reader.page
    problems, outputs = [], 0
    for ch in CHAPTERS:
        reader.open(f"/chapters/{ch}/")
        open_all_details(page)
        for item in page.evaluate(RECORDED_OUTPUT_AND_TABLES):
            outputs += item["kind"] == "output"
            if item["hidden"]:
                problems.append(f"{ch}: {KIND[item['kind']]} has {item['over']} px hidden ({item['what']})")
            if item["px"] is not None and item["px"] < MIN_CODE_PX:
                problems.append(f"{ch}: recorded output set in {item['px']} px ({item['what']})")
    assert outputs >= 5, f"only {outputs} recorded output blocks found on the chapter pages"
    assert not problems, "cut off at 1280 px:\n" + "\n".join(problems)
