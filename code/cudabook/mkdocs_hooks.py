"""MkDocs hooks that turn chapters/ and the GPU records into the book.

- Chapters live in chapters/<chapter>/ (named like their code folders in
  code/); `on_files` adds them to the site under chapters/.
- After the code block on a page that first includes a listing's kernel
  (`--8<-- "code/<chapter>/<name>.cu:section"`; for a listing without a
  kernel, its first block of any kind), a badge shows that listing's GPU
  record: GPU, architecture, CUDA, date, and the headline result, with a
  second, red badge for any speed target the record shows was missed. A
  listing without a current, complete and consistent record gets a warning
  badge and a build warning, which `mkdocs build --strict` turns into a
  failure.
- Charts (plots.py's shared ones, and each chapter's own in
  chapters/<chapter>/charts.py) are drawn from the records at build time as
  chapters/<chapter>/<name>.svg.
- `[[rec:<chapter>/<name>:<field>]]` in prose is replaced by a value from
  the record (see `field`), so no measured number is ever typed by hand;
  `[[rec:...:facts.<key>|%]]`, `|billion`, `|TFLOP/s` (a FLOP/s value)
  or `|.2f` formats a number,
  `|met` a yes/no fact as "met" or "missed" (e.g. facts.target_met);
  `[[rec:<chapter>/<name>:bench[<benchmark name>].rate]]` (or `.time`,
  `.fraction`, `.baseline_ratio`, `.spread`, `.sm_clock`, ...) picks one
  benchmark of a ladder (`_values` lists them all).
- `[[if rec:<chapter>/<name>:<condition>]]...[[else]]...[[end]]` keeps the
  text the record's condition picks (`CHOICE`): a conclusion the listing
  recorded as a fact chooses its own sentence.
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

from cudabook import listings, plots, project, record, suite
from cudabook.listings import Listing

log = logging.getLogger("mkdocs.plugins.cudabook")

CHAPTERS_DIR = "chapters"
VERIFICATION_PAGE = "verification.md"
INCLUDE = re.compile(r'--8<--\s+"code/([\w-]+)/([\w-]+)\.(cu|py)(?::([\w-]+))?"')   # chapter, name, kind, section
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})")
FENCED_BLOCK = re.compile(r"^(\s*)(`{3,}|~{3,}).*?^\1\2\s*$", re.M | re.S)   # a whole fenced block
INLINE_CODE = re.compile(r"`[^`\n]*`")
ANNOTATION = re.compile(r"^\d+\.\s")
FIELD = re.compile(r"\[\[rec:([\w-]+/[\w-]+):((?:(?:bench|check)\[[^\]|]+\]\.)?[\w.-]+)(?:\|([^\]]+))?\]\]")
BENCH_FIELD = re.compile(r"bench\[([^\]|]+)\]\.(\w+)$")
CHECK_FIELD = re.compile(r"check\[([^\]|]+)\]\.(norm_rel_err|worst_ratio|k|n|outside)$")
CHECK_FORMATS = {"norm_rel_err": ".1e", "worst_ratio": ".2g", "k": ",.0f"}   # unless the field gives one
OUTPUT = re.compile(r"^([ \t]*)<!-- cudabook:output ([\w-]+/[\w-]+) (\S+) -->$", re.M)


_STATUS: dict = {}


def _status(listing: Listing):
    """record.status, once per listing per build (nothing changes during one)."""
    if listing.id not in _STATUS:
        _STATUS[listing.id] = record.status(listing)
    return _STATUS[listing.id]


def on_pre_build(config):
    _STATUS.clear()


def on_config(config):
    """The site's addresses, from pyproject.toml (cudabook/project.py):
    site_url gives the sitemap and canonical links, repo_url the header's
    link to the repository, and each page's edit and view-source buttons
    (set in on_page_context) open the file the page is made from."""
    root = Path(config["config_file_path"]).resolve().parent
    config["site_url"] = config["site_url"] or project.site(root)
    config["repo_url"] = config["repo_url"] or project.repository(root)
    config["repo_name"] = project.slug(root)
    return config


def source_path(page, config) -> str | None:
    """The repository file a page is made from, for its edit button: a
    chapter's index.md, a page of docs/, or the file a page only includes
    whole (docs/contributing.md shows CONTRIBUTING.md). None for a notebook:
    notebooks are generated from the listings and executed on the GPU
    (edit the listing or the chapter instead)."""
    src = page.file.src_uri
    if src.endswith(".ipynb"):
        return None
    if src.startswith(CHAPTERS_DIR + "/"):
        return src
    text = Path(page.file.abs_src_path).read_text() if page.file.abs_src_path else ""
    whole = RAW.fullmatch(text.strip())
    return whole.group(1) if whole else f"{Path(config['docs_dir']).name}/{src}"


def on_page_context(context, page, config, nav):
    path = source_path(page, config)
    root = Path(config["config_file_path"]).resolve().parent
    page.edit_url = project.edit_url(path, root) if path else None
    return context


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
        if not path.is_file() or path.name.startswith(".") or path.suffix in (".py", ".pyc"):
            continue  # a chapter's charts.py draws charts; it is not a page or an asset
        rel = path.relative_to(root).as_posix()
        f = File(rel, str(root), config["site_dir"], config["use_directory_urls"])
        if jupyter is not None and jupyter.should_include(f):
            from mkdocs_jupyter.plugin import NotebookFile

            f = NotebookFile(f, **config)
        files.append(f)
    for ch in listings.chapters(root):
        for name, draw in plots.chapter_charts(ch, root).items():
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


def _listing(listing_id: str) -> Listing:
    return listings.find(listing_id)


def _anchor(listing_id: str) -> str:
    return "rec-" + listing_id.replace("/", "-")


def _link(page, anchor: str) -> str:
    here = posixpath.dirname(page.file.src_uri)
    return posixpath.relpath(VERIFICATION_PAGE, here or ".") + "#" + anchor


WHY = {"missing": "has never been run on a GPU", "stale": "changed since its last GPU run",
       "failed": "failed its last GPU run", "unreadable": "has a record that is not in the record format",
       "inconsistent": "has a record whose figures do not agree with each other"}


def badge(listing: Listing, page, with_misses: bool = True) -> str:
    """The listing's record badge, then (with_misses) a badge for each speed
    target its record shows was missed."""
    state, rec = _status(listing)
    href = _link(page, _anchor(listing.id))
    if state == "current":
        text = ("✓ " if rec.broken else "✓ Run on ") + record.badge_text(rec)
        cls = "cb-current"
    else:
        text = f"⚠ {listing.id} {WHY[state]}: not verified"
        cls = "cb-stale"
        _problem(f"{page.file.src_uri}: listing {listing.id} {WHY[state]}. "
                 f"Re-verify {record.reverify_command(listing)}")
    # A Markdown link inside md_in_html, so MkDocs resolves it like any other.
    out = f'<p class="cb-record {cls}" markdown>[{text}]({href})</p>'
    if with_misses and rec is not None and state == "current":
        out += missed_badges(listing, page, rec.benchmarks)
    return out


def missed_badges(listing: Listing, page, benchmarks) -> str:
    """A badge for each speed target that one of `benchmarks` missed."""
    href = _link(page, _anchor(listing.id))
    return "".join(f'\n<p class="cb-record cb-missed" markdown>[✗ {missed}]({href})</p>'
                   for missed in record.missed_targets(_status(listing)[1], benchmarks))


def _badge_spots(markdown: str) -> dict[str, int]:
    """For each listing a page includes, the index of the code block its badge
    follows: the first block that includes its kernel (.cu), so a speed badge
    sits under the code it times, else the first block that includes it."""
    first: dict[str, int] = {}
    kernel: dict[str, int] = {}
    for k, block in enumerate(_blocks(markdown.split("\n"))):
        for inc in INCLUDE.finditer(block):
            lid = f"{inc.group(1)}/{inc.group(2)}"
            first.setdefault(lid, k)
            if inc.group(3) == "cu":
                kernel.setdefault(lid, k)
    return {lid: kernel.get(lid, k) for lid, k in first.items()}


def _kernel_sections(markdown: str) -> dict[str, dict[str, int]]:
    """For each listing, the named sections of its kernel file the page
    shows, each with the first code block that shows it."""
    out: dict[str, dict[str, int]] = {}
    for k, block in enumerate(_blocks(markdown.split("\n"))):
        for inc in INCLUDE.finditer(block):
            if inc.group(3) == "cu" and inc.group(4):
                out.setdefault(f"{inc.group(1)}/{inc.group(2)}", {}).setdefault(inc.group(4), k)
    return out


def badge_placement(markdown: str) -> tuple[dict[str, int], dict[int, list[tuple[str, list]]]]:
    """Where each listing's badge goes, and where its benchmarks' missed
    targets are shown: ({listing: block}, {block: [(listing, benchmarks)]}).

    A badge shows the figure of the code it sits under. Where a page shows
    a ladder's kernels section by section (`transpose.cu:naive` ...
    `transpose.cu:wide`), the badge follows the section that its headline
    benchmark names (record.names_section), not the first rung, and each
    benchmark's missed targets follow the section it names. Everything else
    stays with the badge (_badge_spots)."""
    spots = _badge_spots(markdown)
    sections = _kernel_sections(markdown)
    misses: dict[int, list[tuple[str, list]]] = {}
    for lid in spots:
        state, rec = _status(_listing(lid))
        if state != "current" or rec is None:
            continue
        ladder = sections.get(lid, {}) if len(sections.get(lid, {})) > 1 else {}

        def block_of(b, default):
            # The longest section it names: 'mma_pipelined 8192x8192x8192'
            # names `mma_pipelined`, not `mma`, which it also contains as a word.
            named = [sec for sec in ladder if record.names_section(b.name, sec)]
            return ladder[max(named, key=len)] if named else default

        head = record.headline_benchmark(rec)
        if head is not None:
            spots[lid] = block_of(head, spots[lid])
        by_block: dict[int, list] = {}
        for b in rec.benchmarks:
            by_block.setdefault(block_of(b, spots[lid]), []).append(b)
        for k, bs in by_block.items():
            misses.setdefault(k, []).append((lid, bs))
    return spots, misses


def _blocks(lines: list[str]) -> list[str]:
    """The text of each fenced code block, in order."""
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, body = m.group(2), []
        i += 1
        while i < len(lines) and lines[i].strip() != fence:
            body.append(lines[i])
            i += 1
        out.append("\n".join(body))
        i += 1
    return out


def add_badges(markdown: str, page) -> str:
    """Append each listing's badge, and its missed targets, after the blocks
    `badge_placement` chooses (after a block's annotation list, if it has
    one)."""
    spots, misses_at = badge_placement(markdown)
    out = []
    lines = markdown.split("\n")
    i, k = 0, -1
    while i < len(lines):
        line = lines[i]
        out.append(line)
        m = FENCE.match(line)
        if not m:
            i += 1
            continue
        indent, fence = m.group(1), m.group(2)
        k += 1
        i += 1
        while i < len(lines):
            out.append(lines[i])
            if lines[i].strip() == fence:
                break
            i += 1
        i += 1
        here = [badge(_listing(lid), page, with_misses=False) for lid, spot in spots.items() if spot == k]
        here += [missed_badges(_listing(lid), page, bs).strip("\n") for lid, bs in misses_at.get(k, [])]
        here = [b for b in here if b]
        # Keep a code block's annotation list (1. 2. ...) right after it.
        j = i
        while j < len(lines) and not lines[j].strip():
            j += 1
        if here and j < len(lines) and ANNOTATION.match(lines[j]):
            while j < len(lines) and (ANNOTATION.match(lines[j]) or lines[j].startswith("    ")
                                      or (not lines[j].strip() and j + 1 < len(lines)
                                          and (ANNOTATION.match(lines[j + 1]) or lines[j + 1].startswith("    ")))):
                j += 1
            out += lines[i:j]
            i = j
        if here:
            out += ["", indent + "\n".join(here).replace("\n", "\n" + indent), ""]
    return "\n".join(out)


def _values(rec: record.Record, b=None) -> dict:
    """The named values [[rec:<listing>:<name>]] can show (besides facts.<key>).
    The benchmark fields (rate, time, ...) are those of `b`, else of the
    record's first benchmark. A typed entry (evidence.Measurement) also
    gives its ratio's spread (`ratio_p20`, `ratio_p80`, `spread`: "0.58
    (0.57-0.61)"), its FLOP rate and ceiling in its own unit, the kernels
    the baseline ran and their summed GPU time (`baseline_kernel_time`,
    beside `baseline_time` as the call was timed), and the SM clock it ran
    at."""
    env = rec.environment
    b = b or (rec.benchmarks[0] if rec.benchmarks else None)
    base = b.baseline if b else None
    worst = rec.worst_ratio
    typed = isinstance(b, record.Measurement)
    out = {
        "gpu": rec.gpu, "cuda": env.get("cuda"), "driver": env.get("driver"), "date": rec.date[:10],
        "sm": "sm_" + str(env.get("compute_capability", "")).replace(".", ""),
        "pycuda": env.get("pycuda"), "python": env.get("python"), "torch": env.get("torch"),
        "nvcc": env.get("nvcc"), "host_cpu": env.get("host_cpu"), "host_cores": env.get("host_cores"),
        "host_physical_cores": env.get("host_physical_cores"), "host_simd": env.get("host_simd"),
        "sm_count": env.get("sm_count"),
        "rate": b and record.benchmark_rate_text(b),
        "copy": b and (b.ceiling_bytes_per_s is not None) and record.rate_text(b.ceiling_bytes_per_s),
        "fraction": b and f"{100 * b.fraction_of_ceiling:.0f}%",
        "time": b and record.time_text(b.timing.median_ms),
        "reps": b and f"{b.timing.reps:,}",
        "bytes": b and b.bytes_moved is not None and f"{b.bytes_moved / 1e9:.1f} GB",
        "baseline": base and base.name,
        "baseline_rate": base and (record.unit_rate_text(base.flops_per_s if b.ceiling_unit == "flops"
                                                         else base.bytes_per_s, b.ceiling_unit)
                                   if typed else record.rate_text(base.bytes_per_s)),
        "baseline_ratio": base and f"{base.ratio:.2f}",
        "worst_ratio": worst is not None and f"{worst:.2f}",
        "n": rec.bench and rec.bench.n and f"{rec.bench.n:,}",
    }
    if typed:
        state = b.gpu_state
        out.update({
            "ceiling": b.ceiling,
            "ceiling_rate": record.unit_rate_text(b.ceiling_per_s, b.ceiling_unit),
            "flops": b.flops is not None and f"{b.flops / 1e9:,.1f} GFLOP",
            "ratio_p20": base and f"{base.ratio_p20:.2f}",
            "ratio_p80": base and f"{base.ratio_p80:.2f}",
            "spread": base and f"{base.ratio:.2f} (p20 {base.ratio_p20:.2f}, p80 {base.ratio_p80:.2f})",
            "rounds": base and f"{base.rounds}",
            "baseline_kernels": base and base.side.kernels and ", ".join(base.side.kernels),
            "baseline_time": base and record.time_text(base.timing.median_ms),
            "baseline_kernel_time": base and base.side.kernel_ms is not None and record.time_text(base.side.kernel_ms),
            "baseline_how": base and base.side.how,
            "sm_clock": state and f"{state['before']['sm_clock_mhz']}-{state['after']['sm_clock_mhz']} MHz",
            "throttled": state is not None and ("throttled" if state.get("throttled") else "not throttled"),
        })
    return out


def _number(v, spec: str | None, where: str):
    """A fact's or a check's value as prose shows it: "%" a percentage,
    "billion", "met" for a yes/no, else a Python format spec (".2f"); with
    no spec, an integer with thousands separators. None where the spec
    does not apply (a build warning names it)."""
    if isinstance(v, bool) and spec == "met":
        return "met" if v else "missed"
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return v
    if spec == "%":
        return f"{100 * v:.0f}%"
    if spec == "billion":
        return f"{v / 1e9:.2f} billion"
    if spec == "TFLOP/s":                              # a rate in FLOP/s, as prose says it
        return f"{v / 1e12:,.0f} TFLOP/s" if v >= 1e14 else f"{v / 1e12:,.1f} TFLOP/s"
    if spec:
        try:
            return format(v, spec)
        except ValueError as e:
            log.warning(f"{where}: the format {spec!r} does not apply ({e}); use %, billion, TFLOP/s, met "
                        f"or a Python format spec such as .2f")
            return None
    return f"{v:,.0f}" if isinstance(v, float) else f"{v:,}"


_MISSING = object()


def _fact(facts: dict, path: str):
    """A fact by its key, or by a dotted path into a nested fact
    (rel_err.pairwise), where a whole number picks an item of a list
    (sweep.-1.numpy_ms: the last row's); _MISSING when the record has
    neither."""
    if path in facts:
        return facts[path]
    value = facts
    for key in path.split("."):
        if isinstance(value, list) and key.lstrip("-").isdigit() and -len(value) <= int(key) < len(value):
            value = value[int(key)]
        elif isinstance(value, dict) and key in value:
            value = value[key]
        else:
            return _MISSING
    return value


def _benchmark_named(rec: record.Record, name: str):
    """The record's first benchmark of that name, or None."""
    return next((b for b in rec.benchmarks if b.name == name), None)


def field(listing_id: str, name: str, page, spec: str | None = None) -> str:
    """One value from a listing's record, formatted for prose. `spec` formats
    a number: "%" as a percentage, else a format spec such as ".2f".
    `check[<name>].norm_rel_err` (or worst_ratio, k, n, outside) is a value
    of the first check of that name (formatted by CHECK_FORMATS)."""
    listing = _listing(listing_id)
    state, rec = _status(listing)
    where = f"{page.file.src_uri}: [[rec:{listing_id}:{name}{'|' + spec if spec else ''}]]"
    if rec is None:
        _problem(f"{page.file.src_uri}: [[rec:{listing_id}:{name}]] but {listing_id} has no record")
        return "(no record)"
    if state != "current":
        _problem(f"{page.file.src_uri}: [[rec:{listing_id}:{name}]] comes from a record that is {state}")
    if name.startswith("facts."):
        found = _fact(rec.facts(), name[6:])
        v = _number(None if found is _MISSING else found, spec, where)
        if v is None and found is not _MISSING:         # a format that does not apply
            return "(unknown)"
    elif m := CHECK_FIELD.match(name):
        named = [c for c in rec.checks() if c.name == m.group(1)]
        if not named:
            _problem(f"{page.file.src_uri}: [[rec:{listing_id}:{name}]]: {listing_id}'s record has "
                     f"no check named {m.group(1)!r}")
            return "(unknown)"
        v = _number(getattr(named[0], m.group(2)), spec or CHECK_FORMATS.get(m.group(2)), where)
        if v is None:
            return "(unknown)"
    elif m := BENCH_FIELD.match(name):
        b = _benchmark_named(rec, m.group(1))
        if b is None:
            _problem(f"{page.file.src_uri}: [[rec:{listing_id}:{name}]]: {listing_id}'s record has "
                     f"no benchmark named {m.group(1)!r} (it has: "
                     f"{', '.join(repr(b.name) for b in rec.benchmarks)})")
            return "(unknown)"
        values = _values(rec, b)
        v = values.get(m.group(2), KeyError)
    else:
        values = _values(rec)
        v = values.get(name, KeyError) if name in values else KeyError
    if v is KeyError or v is None or v is False:
        log.warning(f"{page.file.src_uri}: [[rec:{listing_id}:{name}]]: no such value in the record")
        return "(unknown)"
    return str(v)


def _output(listing_id: str, run: str, page) -> str:
    listing = _listing(listing_id)
    state, rec = _status(listing)
    text = None
    if rec is not None:
        if run == "sanitizer":
            text = _short_backtraces(rec.broken.report if rec.broken else None)
        else:
            r = rec.run(run)
            text = r.stdout if r else None
    if text is None:
        _problem(f"{page.file.src_uri}: no recorded output '{run}' for {listing_id}")
        return "```text\n(no recorded output)\n```"
    if state != "current":
        _problem(f"{page.file.src_uri}: output of {listing_id} comes from a record that is {state}")
    title = f"Output recorded on {rec.gpu}, {rec.date[:10]}"
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


def _sanitizer_text(listing: Listing, rec: record.Record) -> str:
    if rec.broken:
        return f"broken on purpose: {rec.broken.tool} must report “{rec.broken.error}”"
    if not rec.sanitizer:
        return "no kernel"
    clean = sum(s.passed for s in rec.sanitizer.values())
    return f'<span title="{", ".join(sorted(rec.sanitizer))}">{clean} of {len(rec.sanitizer)} clean</span>'


def _nav_chapters() -> list[str]:
    """Chapter folders in the order mkdocs.yml's nav lists them."""
    nav = (listings.ROOT / "mkdocs.yml").read_text()
    return [m for m in re.findall(r"chapters/([\w-]+)/index\.md", nav)]


def records_table(page) -> str:
    """The verification page's table: one short row per listing. Where the
    records were made (GPU, architecture, CUDA) is said once above it, and
    per row only when a record differs from that."""
    from cudabook.notebooks import chapter_title

    order = {ch: i for i, ch in enumerate(_nav_chapters())}
    found = sorted(listings.discover(), key=lambda lst: (order.get(lst.chapter, len(order)), lst.name))
    rows_in = [(lst, *_status(lst)) for lst in found]
    made = sorted({record.where_text(rec) for _, _, rec in rows_in if rec})
    common = made[0] if len(made) == 1 else None
    head = (f"Every record below was made on **{common}**." if common else
            f"The records below were made on {len(made)} GPUs or days; each row says which.")
    head += (" *Checked*: the sizes each listing ran at (its `--bench` size among them where that"
             " run stands in for the largest size), and its worst element over all of"
             " them as a share of that element's bound (1.00 is on the bound).")
    rows = ["| Listing | Status | Checked | Sanitizers | Result |", "|---|---|---|---|---|"]
    chapter = None
    for listing, state, rec in rows_in:
        if listing.chapter != chapter:
            chapter = listing.chapter
            rows.append(f"| **{chapter_title(chapter)}** | | | | |")
        mark = {"current": "✓ current", "stale": "⚠ stale", "failed": "✗ failed",
                "missing": "⚠ never run", "unreadable": "⚠ unreadable",
                "inconsistent": "⚠ inconsistent"}[state]
        name = f'<span id="{_anchor(listing.id)}"></span>`{listing.name}`'
        if rec is None:
            rows.append(f"| {name} | {mark} | | | |")
            continue
        if not common:
            mark += f"<br>{record.where_text(rec)}"
        # A --bench run that stands in for the large size checked a size too.
        large = suite.bench_is_large(rec.description.get("bench_n"))   # set only for a sized --bench
        sizes = [r for r in rec.runs if r.key.startswith("n=") or (large and r.key == "bench")]
        checked = f"{len(sizes)} sizes" if sizes else ("1 run" if rec.run("run") else "—")
        if rec.worst_ratio is not None:
            checked += f" · {rec.worst_ratio:.2f}"
        result = record.headline(rec) or "—"
        missed = record.missed_targets(rec)
        if missed:
            result += "<br>" + "<br>".join(f'<span class="cb-missed-text">✗ {m}</span>' for m in missed)
        rows.append("| " + " | ".join([name, mark, checked, _sanitizer_text(listing, rec), result]) + " |")
    return head + "\n\n" + "\n".join(rows)


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

    p = listings.ROOT / "results" / "doctor.json"
    if not p.exists():
        log.warning(f"{page.file.src_uri}: results/doctor.json is missing: run the GPU suite")
        return "```text\n(no recorded doctor run)\n```"
    rec = json.loads(p.read_text())
    return f'```text title="python -m cudabook doctor, recorded {rec["date"][:10]}"\n{rec["output"].rstrip()}\n```'


BADGE = re.compile(r"<!-- cudabook:badge ([\w-]+/[\w-]+) -->")


def malformed_fields(markdown: str) -> list[str]:
    """The [[rec:...]] in prose that FIELD cannot read (a missing chapter, a
    stray character): the build would show them as typed. Code (fenced or
    inline), where the syntax is shown rather than used, does not count."""
    prose = INLINE_CODE.sub("", FENCED_BLOCK.sub("", markdown))
    return [m.group(0) for m in re.finditer(r"\[\[rec:[^\]]*\]\]", prose) if not FIELD.fullmatch(m.group(0))]


NOTEBOOK_SEARCH_BOOST = 0.2   # a notebook's page weighs a fifth of a chapter's in search
HEADING = re.compile(r'<h([1-6]) id="([^"]+)"[^>]*>(.*?)</h\1>', re.S)


def on_page_content(html, page, config, files):
    """A notebook page's table of contents, from the headings its HTML has,
    and its place in search.

    mkdocs-jupyter builds the contents from a Markdown copy of the notebook,
    where a heading that is all code (a listing's name in backticks) comes out
    with no name and an id (`_1`) that no heading on the page has: a
    column of blank links to nowhere. The rendered headings carry the right
    ids and text, so the contents are taken from them."""
    if not page.file.src_uri.endswith(".ipynb"):
        return html
    from mkdocs.structure.toc import get_toc

    # Search: a notebook repeats its chapter's code, so a query such as "bank
    # conflict" found a wall of it first. Its input cells stay out of the
    # index, and its page ranks below the chapters.
    html = html.replace('class="jp-InputArea jp-Cell-inputArea"',
                        'class="jp-InputArea jp-Cell-inputArea" data-search-exclude')
    page.meta["search"] = {"boost": NOTEBOOK_SEARCH_BOOST}

    tokens: list[dict] = []
    for level, ident, inner in HEADING.findall(html):
        name = re.sub(r"<[^>]+>", "", re.sub(r'<a class="anchor-link".*?</a>', "", inner)).strip()
        token = {"level": int(level), "id": ident, "name": name, "children": []}
        parent = tokens
        while parent and parent[-1]["level"] < token["level"]:
            parent = parent[-1]["children"]
        parent.append(token)
    page.toc = get_toc(tokens)
    return html


class _NotebookCacheNote(logging.Filter):
    """mkdocs-jupyter logs "Cache miss, writing: chapters/X/X.ipynb", which
    reads as if it rewrote the notebook; it writes its rendering of the
    notebook to its page cache (.cache/mkdocs-jupyter, git-ignored). Say so."""

    SAY = {"Cache miss, writing:": "Rendered %s and kept the page in .cache/mkdocs-jupyter "
                                   "(the notebook itself is not changed)",
           "Cache hit:": "Took the page of %s from .cache/mkdocs-jupyter"}

    def filter(self, rec: logging.LogRecord) -> bool:
        for start, say in self.SAY.items():
            if isinstance(rec.msg, str) and rec.msg.startswith(start):
                rec.msg = say
        return True


logging.getLogger("mkdocs.plugins.mkdocs_jupyter").addFilter(_NotebookCacheNote())


#: A sentence the record chooses (issue #45, item 8): the listing records
#: its conclusion as a fact, and the prose says what that fact says.
#:   [[if rec:fusion/bias_gelu_residual:facts.target_met]]It met ...[[else]]It missed ...[[end]]
#:   [[if rec:a/b:facts.gain > 1.01]]...[[elif rec:a/b:facts.gain < 0.99]]...[[else]]...[[end]]
#: A condition is a yes/no fact, or a number compared (<, <=, >, >=, ==, !=)
#: with a number or another numeric field of the same record (facts.<key>,
#: facts.<key>.<subkey> into a nested fact, facts.a/facts.b their ratio,
#: bench[<name>].<figure> of a typed entry: ratio, ratio_p20, ratio_p80,
#: fraction); several joined by ' and ' must all hold. `[[else]]` is optional. A condition that cannot be decided
#: (no such fact, not a yes/no) is a build problem, never a silent choice.
CHOICE = re.compile(r"\[\[if rec:([\w-]+/[\w-]+):((?:(?!\]\]).)+)\]\](.*?)\[\[end\]\]", re.S)
#: The branches after the first: [[elif rec:<listing>:<condition>]], and
#: [[else]] (or [[else fail]]: no sentence fits a record that reaches it).
BRANCH = re.compile(r"\[\[(?:elif rec:([\w-]+/[\w-]+):((?:(?!\]\]).)+)|(else fail|else))\]\]")
COMPARISON = re.compile(r"^\s*(\S+)\s*(<=|>=|==|!=|<|>)\s*(\S+)\s*$")
_OPS = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
        ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}


class Undecided(ValueError):
    """A condition the record cannot decide."""


def _ratio_slash(text: str) -> int | None:
    """Where the '/' of a ratio a/b is: the first outside square brackets."""
    depth = 0
    for i, c in enumerate(text):
        depth += (c == "[") - (c == "]")
        if c == "/" and depth == 0:
            return i
    return None


def _operand(rec: record.Record, text: str):
    """A number, or a field's value: facts.<key>, or bench[<name>].<figure>;
    or the ratio of two of these, written a/b (no spaces; a '/' inside a
    benchmark's [name] is part of the name)."""
    cut = _ratio_slash(text)
    if cut is not None:
        top, bottom = text[:cut], text[cut + 1:]
        a, b = _operand(rec, top), _operand(rec, bottom)
        for side, v in ((top, a), (bottom, b)):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise Undecided(f"{side} is {v!r}, not a number to divide")
        if b == 0:
            raise Undecided(f"{bottom} is 0: {text} has no value")
        return a / b
    try:
        return float(text)
    except ValueError:
        pass
    if text.startswith("facts."):
        value = _fact(rec.facts(), text[6:])          # facts.rel_err.pairwise: into a nested fact
        if value is _MISSING:
            raise Undecided(f"{rec.listing}'s record has no fact {text[6:]!r}")
        return value
    m = BENCH_FIELD.match(text)
    if m:
        b = _benchmark_named(rec, m.group(1))
        if b is None:
            raise Undecided(f"{rec.listing}'s record has no benchmark named {m.group(1)!r}")
        figure = m.group(2)
        if figure == "fraction":
            return b.fraction_of_ceiling
        if figure in ("ratio", "ratio_p20", "ratio_p80") and hasattr(b.baseline, figure):
            return getattr(b.baseline, figure)
        raise Undecided(f"bench[{m.group(1)}].{figure}: not a figure a condition can use "
                        "(fraction, ratio, ratio_p20, ratio_p80)")
    raise Undecided(f"{text!r} is neither a number nor facts.<key> nor bench[<name>].<figure>")


def decide(rec: record.Record, condition: str) -> bool:
    """Whether `condition` holds in `rec` (see CHOICE); Undecided if it
    cannot be told. Conditions joined by ' and ' must all hold."""
    if " and " in condition:
        return all([decide(rec, part) for part in condition.split(" and ")])   # each decided, so each checked
    m = COMPARISON.match(condition)
    if m is None:
        v = _operand(rec, condition.strip())
        if not isinstance(v, bool):
            raise Undecided(f"{condition.strip()} is {v!r}, not yes or no: compare it (e.g. '>= 0.9')")
        return v
    a, b = _operand(rec, m.group(1)), _operand(rec, m.group(3))
    for side, v in ((m.group(1), a), (m.group(3), b)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v is None:
            raise Undecided(f"{side} is {v!r}, not a number")
    return _OPS[m.group(2)](a, b)


def choose(markdown: str, page) -> str:
    """Each [[if rec:...]]...[[elif rec:...]]...[[else]]...[[end]] replaced
    by the text of the first branch whose condition the record bears out
    (the [[else]] text, or nothing, if none does). Every condition of a
    chain is decided, so a condition that names a missing fact fails the
    build even when an earlier one holds. [[else fail]] marks a chain whose
    sentences must cover every record: a record that reaches it is a build
    problem, and the chain needs a sentence for what that record shows."""
    def one(m: re.Match) -> str:
        where = f"{page.file.src_uri}: [[if rec:{m.group(1)}:{m.group(2)}]]"
        branches, rest, cond = [], m.group(3), (m.group(1), m.group(2))
        otherwise, fail = "", False
        while True:
            b = BRANCH.search(rest)
            text = rest[:b.start()] if b else rest
            if cond is None:                      # the text after [[else]]
                otherwise = text
                if b:
                    log.warning(f"{where}: [[else]] must be the last branch before [[end]]")
                break
            branches.append((cond, text))
            if not b:
                break
            cond = (b.group(1), b.group(2)) if b.group(1) else None
            fail = fail or b.group(3) == "else fail"
            rest = rest[b.end():]
        chosen = None
        for (lid, condition), text in branches:
            state, rec = _status(_listing(lid))
            if rec is None:
                _problem(f"{where}: {lid} has no record")
                return "(no record)"
            if state != "current":
                _problem(f"{where}: {lid}'s record is {state}")
            try:
                holds = decide(rec, condition)
            except Undecided as e:
                log.warning(f"{where}: {e}")
                return "(undecided)"
            if holds and chosen is None:
                chosen = text
        if chosen is None and fail:
            log.warning(f"{where}: no sentence of this chain holds for the record: write one for what it shows")
            return "(no sentence fits the record)"
        return otherwise if chosen is None else chosen
    return CHOICE.sub(one, markdown)


def on_page_markdown(markdown, page, config, files):
    markdown = BADGE.sub(lambda m: badge(_listing(m.group(1)), page), markdown)
    if "<!-- cudabook:doctor -->" in markdown:
        markdown = markdown.replace("<!-- cudabook:doctor -->", _doctor(page))
    markdown = RAW.sub(lambda m: _raw(m.group(1), config), markdown)
    markdown = OUTPUT.sub(lambda m: _indent(_output(m.group(2), m.group(3), page), m.group(1)), markdown)
    markdown = add_badges(markdown, page)
    markdown = choose(markdown, page)
    markdown = FIELD.sub(lambda m: field(m.group(1), m.group(2), page, m.group(3)), markdown)
    for left in malformed_fields(markdown):
        log.warning(f"{page.file.src_uri}: {left} is not [[rec:<chapter>/<listing>:<value>]] "
                    f"or [[rec:...|<format>]]")
    if "<!-- cudabook:records-table -->" in markdown:
        markdown = markdown.replace("<!-- cudabook:records-table -->", records_table(page))
    return markdown
