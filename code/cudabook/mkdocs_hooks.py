"""MkDocs hooks that turn chapters/ and the GPU records into the book.

- Chapters live in chapters/<chapter>/ (named like their code folders in
  code/); `on_files` adds them to the site under chapters/.
- After the first code block on a page that includes a listing (through a
  pymdownx.snippets line `--8<-- "code/<chapter>/<name>.cu:section"`), a
  badge shows that listing's GPU record: GPU, architecture, CUDA, date, and
  the headline result. A listing without a current, passing record gets a
  warning badge and a build warning, which `mkdocs build --strict` turns
  into a failure.
- Charts in plots.CHARTS (e.g. chapters/<chapter>/bandwidth.svg) are drawn
  from the records at build time.
- `[[rec:<chapter>/<name>:<field>]]` in prose is replaced by a value from
  the record (see `field`), so no measured number is ever typed by hand;
  `[[rec:...:facts.<key>|%]]` or `|.2f` formats a number.
- `<!-- cudabook:output <chapter>/<name> <run> -->` is replaced by the text
  the listing printed in that recorded run (`bench`, `run`, `n=33`, ...), or
  for a deliberately broken listing, `sanitizer`: what compute-sanitizer said.
- `<!-- cudabook:include-raw FILE -->` inserts a repository file such as
  CONTRIBUTING.md, so it is written once and shown on the site too.
- `<!-- cudabook:badge <chapter>/<name> -->` shows one listing's badge anywhere.
- `<!-- cudabook:doctor -->` shows the doctor output recorded on the GPU (results/doctor.json).
- `<!-- cudabook:records-table -->` becomes the table of every listing and
  its record (docs/verification.md).

Set CUDABOOK_ALLOW_STALE=1 to preview a changed listing locally before it
has been run on a GPU: the badge still says so, but the build does not fail.
"""

from __future__ import annotations

import logging
import os
import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File

from cudabook import plots, records

log = logging.getLogger("mkdocs.plugins.cudabook")

CHAPTERS_DIR = "chapters"
VERIFICATION_PAGE = "verification.md"
INCLUDE = re.compile(r'--8<--\s+"code/([\w-]+)/([\w-]+)\.(?:cu|py)(?::[\w-]+)?"')
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})")
ANNOTATION = re.compile(r"^\d+\.\s")
FIELD = re.compile(r"\[\[rec:([\w-]+/[\w-]+):([\w.]+)(?:\|([^\]]+))?\]\]")
OUTPUT = re.compile(r"^([ \t]*)<!-- cudabook:output ([\w-]+/[\w-]+) (\S+) -->$", re.M)


def _allow_stale() -> bool:
    return os.environ.get("CUDABOOK_ALLOW_STALE") == "1"


def _problem(msg: str) -> None:
    (log.info if _allow_stale() else log.warning)(msg)


def on_files(files, config):
    root = Path(config["config_file_path"]).resolve().parent
    chapters = root / CHAPTERS_DIR
    # Hooks run after plugins, so hand notebooks to mkdocs-jupyter ourselves.
    jupyter = config["plugins"].get("mkdocs-jupyter")
    for path in sorted(chapters.rglob("*")):
        if path.is_file() and not path.name.startswith("."):
            rel = path.relative_to(root).as_posix()
            f = File(rel, str(root), config["site_dir"], config["use_directory_urls"])
            if jupyter is not None and jupyter.should_include(f):
                from mkdocs_jupyter.plugin import NotebookFile

                f = NotebookFile(f, **config)
            files.append(f)
    for ch in records.chapters(root):
        for name, draw in plots.CHARTS.items():
            svg = draw(ch)
            if svg is not None:
                files.append(File.generated(config, f"{CHAPTERS_DIR}/{ch}/{name}", content=svg))
    return files


def on_serve(server, config, builder):
    root = Path(config["config_file_path"]).resolve().parent
    for d in (CHAPTERS_DIR, "code", "results"):
        if (root / d).exists():
            server.watch(str(root / d))
    return server


def _listing(listing_id: str) -> records.Listing:
    chapter, name = listing_id.split("/")
    return records.Listing(chapter, name)


def _anchor(listing_id: str) -> str:
    return "rec-" + listing_id.replace("/", "-")


def _link(page, anchor: str) -> str:
    here = posixpath.dirname(page.file.src_uri)
    return posixpath.relpath(VERIFICATION_PAGE, here or ".") + "#" + anchor


def badge(listing: records.Listing, page) -> str:
    state, rec = records.status(listing)
    href = _link(page, _anchor(listing.id))
    if state == "current":
        text = ("✓ " if rec.get("broken") else "✓ Run on ") + records.badge_text(rec)
        cls = "cb-current"
    else:
        why = {"missing": "has never been run on a GPU",
               "stale": "changed since its last GPU run",
               "failed": "failed its last GPU run"}[state]
        text = f"⚠ {listing.id} {why}: not verified"
        cls = "cb-stale"
        _problem(f"{page.file.src_uri}: listing {listing.id} {why}. Re-verify {records.reverify_command(listing)}")
    # A Markdown link inside md_in_html, so MkDocs resolves it like any other.
    return f'<p class="cb-record {cls}" markdown>[{text}]({href})</p>'


def add_badges(markdown: str, page) -> str:
    """Append a badge after the first block that includes each listing."""
    out, seen = [], set()
    lines = markdown.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        m = FENCE.match(line)
        if not m:
            i += 1
            continue
        indent, fence = m.group(1), m.group(2)
        block_ids = []
        i += 1
        while i < len(lines):
            out.append(lines[i])
            inc = INCLUDE.search(lines[i])
            if inc:
                block_ids.append(f"{inc.group(1)}/{inc.group(2)}")
            if lines[i].strip() == fence:
                break
            i += 1
        i += 1
        # Keep a code block's annotation list (1. 2. ...) right after it.
        j = i
        while j < len(lines) and not lines[j].strip():
            j += 1
        if block_ids and j < len(lines) and ANNOTATION.match(lines[j]):
            while j < len(lines) and (ANNOTATION.match(lines[j]) or lines[j].startswith("    ")
                                      or (not lines[j].strip() and j + 1 < len(lines)
                                          and (ANNOTATION.match(lines[j + 1]) or lines[j + 1].startswith("    ")))):
                j += 1
            out += lines[i:j]
            i = j
        for lid in dict.fromkeys(block_ids):
            if lid not in seen:
                seen.add(lid)
                out += ["", indent + badge(_listing(lid), page), ""]
    return "\n".join(out)


def field(listing_id: str, name: str, page, spec: str | None = None) -> str:
    """One value from a listing's record, formatted for prose. `spec` formats
    a number: "%" as a percentage, else a format spec such as ".2f"."""
    listing = _listing(listing_id)
    state, rec = records.status(listing)
    if rec is None:
        _problem(f"{page.file.src_uri}: [[rec:{listing_id}:{name}]] but {listing_id} has no record")
        return "(no record)"
    if state != "current":
        _problem(f"{page.file.src_uri}: [[rec:{listing_id}:{name}]] comes from a {state} record")
    env = rec.get("environment", {})
    benches = (rec.get("benchmark") or {}).get("benchmarks") or [{}]
    b = benches[0]
    base = b.get("baseline", {})
    values = {
        "gpu": env.get("gpu"), "cuda": env.get("cuda"), "driver": env.get("driver"),
        "date": (rec.get("date") or "")[:10], "sm": "sm_" + env.get("compute_capability", "").replace(".", ""),
        "pycuda": env.get("pycuda"), "python": env.get("python"), "torch": env.get("torch"),
        "rate": b.get("bytes_per_s") and records.rate_text(b["bytes_per_s"]),
        "copy": b.get("ceiling_bytes_per_s") and records.rate_text(b["ceiling_bytes_per_s"]),
        "fraction": b.get("fraction_of_ceiling") and f"{100 * b['fraction_of_ceiling']:.0f}%",
        "time": b.get("timing") and f"{1000 * b['timing']['median_ms']:.0f} µs",
        "baseline": base.get("name"),
        "baseline_rate": base.get("bytes_per_s") and records.rate_text(base["bytes_per_s"]),
        "baseline_ratio": base.get("ratio") and f"{base['ratio']:.2f}",
        "worst_rel_err": rec.get("worst_rel_err") is not None and f"{rec['worst_rel_err']:.1e}",
        "n": (rec.get("benchmark") or {}).get("n") and f"{rec['benchmark']['n']:,}",
    }
    if name.startswith("facts."):
        v = records.facts(rec).get(name[6:])
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if spec == "%":
                v = f"{100 * v:.0f}%"
            elif spec:
                v = format(v, spec)
            else:
                v = f"{v:,.0f}" if isinstance(v, float) else f"{v:,}"
    else:
        v = values.get(name, None) if name in values else KeyError
    if v is KeyError or v is None or v is False:
        log.warning(f"{page.file.src_uri}: [[rec:{listing_id}:{name}]]: no such value in the record")
        return "(unknown)"
    return str(v)


def _output(listing_id: str, run: str, page) -> str:
    listing = _listing(listing_id)
    state, rec = records.status(listing)
    text = None
    if rec is not None:
        if run == "bench":
            text = (rec.get("benchmark") or {}).get("stdout")
        elif run == "sanitizer":
            text = _short_backtraces(rec.get("broken_report"))
        else:
            text = next((r.get("stdout") for r in rec.get("runs", []) if r.get("key") == run), None)
    if text is None:
        _problem(f"{page.file.src_uri}: no recorded output '{run}' for {listing_id}")
        return "```text\n(no recorded output)\n```"
    if state != "current":
        _problem(f"{page.file.src_uri}: output of {listing_id} comes from a {state} record")
    env = rec["environment"]
    title = f"Output recorded on {env.get('gpu')}, {rec['date'][:10]}"
    return f'```text title="{title}"\n{text.rstrip()}\n```'


def _short_backtraces(report: str | None, width: int = 110) -> str | None:
    """compute-sanitizer's report with each host backtrace cut to the frames
    in Python source files (or its first frame, when it has none), each line
    at most `width` characters: the other frames are PyCUDA's and Python's
    internals. The record keeps the whole report."""
    if report is None:
        return None
    out, frames = [], []

    def flush():
        kept = [f for f in frames if ".py:" in f] or frames[:1]
        out.extend(f if len(f) <= width else f[: width - 3] + "..." for f in kept)
        if len(frames) > len(kept):
            out.append(f"=========         ... {len(frames) - len(kept)} more host frame(s)")
        frames.clear()

    for line in report.splitlines():
        if "Host Frame:" in line:
            frames.append(line)
            continue
        flush()
        out.append(line)
    flush()
    return "\n".join(out)


def _indent(text: str, prefix: str) -> str:
    """Indent every line, so an output block can sit inside an admonition or a list."""
    return "\n".join(prefix + ln if ln else ln for ln in text.splitlines())


def records_table(page) -> str:
    rows = ["| Listing | Status | Run on | Worst rel. error | Sanitizers | Result |",
            "|---|---|---|---|---|---|"]
    for listing in records.discover():
        state, rec = records.status(listing)
        mark = {"current": "✓ current", "stale": "⚠ stale", "failed": "✗ failed",
                "missing": "⚠ never run"}[state]
        name = f'<span id="{_anchor(listing.id)}"></span>{listing.chapter}/<br>**{listing.name}**'
        if rec is None:
            rows.append(f"| {name} | {mark} | | | | |")
            continue
        san = rec.get("sanitizer") or {}
        clean = sum(v["passed"] for v in san.values())
        san_txt = (f'<span title="{", ".join(sorted(san))}">{clean} of {len(san)} clean</span>'
                   if san else "no kernel")
        if rec.get("broken"):
            san_txt = f"broken on purpose: {rec['broken']} catches it"
        err = rec.get("worst_rel_err")
        when = records.badge_text(dict(rec, benchmark=None))
        rows.append("| " + " | ".join([
            name, mark, when, f"{err:.1e}" if err is not None else "—", san_txt,
            records.headline(rec) or "—",
        ]) + " |")
    return "\n".join(rows)


RAW = re.compile(r"^<!-- cudabook:include-raw ([\w./-]+) -->$", re.M)
SNIPPET_LINE = re.compile(r'^(\s*)(--8<--\s+")', re.M)


def _raw(path: str, config) -> str:
    """A repository file (e.g. CONTRIBUTING.md) as page text: snippet lines in
    it are escaped so they show as text, and links into docs/ are made
    relative to the site."""
    root = Path(config["config_file_path"]).resolve().parent
    text = (root / path).read_text()
    text = SNIPPET_LINE.sub(r"\1;\2", text)
    return text.replace("](docs/", "](")


def _doctor(page) -> str:
    import json

    p = records.ROOT / "results" / "doctor.json"
    if not p.exists():
        log.warning(f"{page.file.src_uri}: results/doctor.json is missing: run the GPU suite")
        return "```text\n(no recorded doctor run)\n```"
    rec = json.loads(p.read_text())
    return f'```text title="python -m cudabook doctor, recorded {rec["date"][:10]}"\n{rec["output"].rstrip()}\n```'


BADGE = re.compile(r"<!-- cudabook:badge ([\w-]+/[\w-]+) -->")


def on_page_markdown(markdown, page, config, files):
    markdown = BADGE.sub(lambda m: badge(_listing(m.group(1)), page), markdown)
    if "<!-- cudabook:doctor -->" in markdown:
        markdown = markdown.replace("<!-- cudabook:doctor -->", _doctor(page))
    markdown = RAW.sub(lambda m: _raw(m.group(1), config), markdown)
    markdown = OUTPUT.sub(lambda m: _indent(_output(m.group(2), m.group(3), page), m.group(1)), markdown)
    markdown = add_badges(markdown, page)
    markdown = FIELD.sub(lambda m: field(m.group(1), m.group(2), page, m.group(3)), markdown)
    if "<!-- cudabook:records-table -->" in markdown:
        markdown = markdown.replace("<!-- cudabook:records-table -->", records_table(page))
    return markdown
