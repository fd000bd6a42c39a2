"""The built site in a real browser (Debian's Chromium, driven by Playwright),
served from localhost with no network: what a reader sees.

Needs /usr/bin/chromium (`apt-get install chromium`; .ci/run installs it).
Without it these tests are skipped, except under CI=true, where that is a
failure. Screenshots go to $CUDABOOK_SCREENSHOTS when it is set.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest
from conftest import ROOT

from cudabook import records

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

if CHROMIUM is None:
    if os.environ.get("CI") == "true":
        pytest.fail("Chromium is missing on CI: .ci/run should have installed it", pytrace=False)
    pytest.skip("Chromium not installed (apt-get install chromium)", allow_module_level=True)
playwright_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
                       capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(out))
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


class Reader:
    """A page plus everything that went wrong while it was open."""

    def __init__(self, browser, site, **ctx):
        self.context = browser.new_context(**ctx)
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
        self.page.goto(self.site + path, wait_until="networkidle")
        return self.page

    def shot(self, name: str):
        d = os.environ.get("CUDABOOK_SCREENSHOTS")
        if d:
            Path(d).mkdir(parents=True, exist_ok=True)
            self.page.screenshot(path=str(Path(d) / f"{name}.png"), full_page=False)

    def close(self):
        assert self.errors == [], f"console errors: {self.errors}"
        assert self.outside == [], f"the site asked the network for: {self.outside}"
        self.context.close()


@pytest.fixture
def reader(browser, site):
    r = Reader(browser, site, viewport={"width": 1280, "height": 900})
    yield r
    r.close()


def test_landing_page(reader):
    page = reader.open("/")
    assert page.title().startswith("cudabook")
    assert "An executable textbook on CUDA" in page.inner_text("article")
    reader.shot("landing")


def test_chapter_shows_listing_badge_math_and_figures(reader):
    page = reader.open("/chapters/first_kernel/")
    listings = [lst for lst in records.discover() if lst.chapter == "first_kernel"]
    assert page.locator(".cb-record.cb-current").count() == len(listings)
    assert "NVIDIA H200" in page.locator(".cb-record.cb-current").first.inner_text()
    code = page.locator("div.highlight", has_text="add_one_per_thread(const float").first
    assert code.is_visible()
    assert page.locator(".katex").count() >= 3, "math did not render"
    page.locator(".cb-record a").first.click()
    page.wait_for_load_state("networkidle")
    assert "/verification/#rec-first_kernel-device_query" in page.url
    assert page.locator("#rec-first_kernel-device_query").count() == 1
    page.go_back()
    for img in page.locator("article img").all():
        assert img.evaluate("i => i.complete && i.naturalWidth > 0"), img.get_attribute("src")
    reader.shot("chapter")


def test_copy_button_copies_the_listing(browser, site):
    r = Reader(browser, site, viewport={"width": 1280, "height": 900},
               permissions=["clipboard-read", "clipboard-write"])
    page = r.open("/chapters/first_kernel/")
    block = page.locator("div.highlight", has_text="add_one_per_thread(const float").first
    block.hover()
    block.locator("button.md-code__button[data-md-type=copy], button.md-clipboard").first.click()
    copied = page.evaluate("navigator.clipboard.readText()")
    assert 'extern "C" __global__ void add_one_per_thread' in copied
    assert "--8<--" not in copied and "(1)!" not in copied
    r.close()


def test_search_finds_warp(reader):
    page = reader.open("/")
    page.locator(".md-search__input").click()
    page.keyboard.type("warp", delay=30)
    # The chapter that shows the warp size of a real GPU must be among the hits.
    hit = page.locator("a.md-search-result__link[href*='/chapters/first_kernel/']").first
    hit.wait_for(timeout=15000)
    reader.shot("search")
    hit.click()
    page.wait_for_load_state("networkidle")
    assert "/chapters/first_kernel/" in page.url


def test_dark_mode_toggles(reader):
    page = reader.open("/chapters/first_kernel/")
    before = page.get_attribute("body", "data-md-color-scheme")
    page.locator("label.md-header__button[for^='__palette']:visible").first.click()
    page.wait_for_timeout(300)
    after = page.get_attribute("body", "data-md-color-scheme")
    assert {before, after} == {"default", "slate"}
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


def test_diagrams_and_notebook_render(reader):
    page = reader.open("/verification/")
    # Material draws diagrams into a closed shadow root: check that the
    # diagram's host took up real space on the page.
    host = page.locator("div.mermaid").first
    page.wait_for_function("() => document.querySelector('div.mermaid').getBoundingClientRect().height > 100",
                           timeout=15000)
    assert host.bounding_box()["width"] > 300
    assert "rec-first_kernel-add_vectorized" in page.content()
    page = reader.open("/chapters/first_kernel/first_kernel/")
    assert "Open in Colab" in page.content()
    assert "NVIDIA H200" in page.inner_text("body")
    reader.shot("notebook")


def test_exercise_solutions_open_and_show_their_code(reader):
    """Each solution sits in a collapsed block that opens on a click and
    holds the solution's code, its badge and its recorded output."""
    page = reader.open("/chapters/threads_warps/")
    solutions = page.locator("details.success")
    assert solutions.count() >= 3
    first = solutions.first
    assert not first.locator("div.highlight").first.is_visible()
    first.locator("summary").click()
    assert first.locator("div.highlight").first.is_visible()
    assert first.locator(".cb-record.cb-current").count() >= 1
    for img in page.locator("article img").all():
        img.scroll_into_view_if_needed()
        assert img.evaluate("i => i.complete && i.naturalWidth > 0"), img.get_attribute("src")
    reader.shot("solution-open")


def test_broken_listing_shows_the_sanitizer_report(reader):
    page = reader.open("/chapters/kernels_go_wrong/")
    text = page.inner_text("article")
    assert "Invalid __global__ read" in text
    assert "RACECHECK SUMMARY" in text
    assert "Uninitialized __global__ memory read" in text
    assert page.locator(".cb-record", has_text="broken on purpose").count() == 3
    page.get_by_text("Invalid __global__ read").first.scroll_into_view_if_needed()
    reader.shot("sanitizer-report")
