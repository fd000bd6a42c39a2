"""Charts drawn from the GPU records when the book is built, never by hand.

What every chapter shares lives here: matplotlib set up for the site, the
records of a chapter, and the bandwidth chart (every benchmarked listing of
a chapter against the copy ceiling measured in the same run). A chart that
belongs to one chapter lives with it, in `chapters/<chapter>/charts.py`,
whose CHARTS maps a file name to a function(chapter) -> SVG bytes or None.
The site hook writes each result as chapters/<chapter>/<name>; None means
"no record has this chart's data yet", which a page that shows the chart
turns into a build failure.
"""

from __future__ import annotations

import importlib.util
import io
import os
from pathlib import Path

from . import record
from .listings import ROOT, Listing

#: Colours the charts share (colour-blind-safe, readable on white).
COLOURS = ["#2e7d32", "#1565c0", "#ef6c00", "#6a1b9a", "#c62828", "#00838f"]
#: The copy bandwidth measured in the same run, the ceiling every chart draws.
COPY_STYLE = {"color": "#c62828", "linestyle": "--", "linewidth": 1.5}
#: A target set as a share of a baseline timed in the same run (dotted).
TARGET_STYLE = {"color": "#c62828", "linestyle": ":", "linewidth": 1.6}


def pyplot():
    """matplotlib's pyplot, drawing off screen, with SVG ids that do not
    change from build to build and text large enough for a phone."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": "cudabook", "font.size": 12, "axes.titlesize": 12,
                         "legend.fontsize": 11, "xtick.labelsize": 11, "ytick.labelsize": 11,
                         "svg.fonttype": "none"})
    return plt


def plain_log_ticks(axis) -> None:
    """Label a log axis 0.01, 1, 100, 10k, 1M instead of 10 to a power: a
    superscript is drawn smaller than the label's font, too small on a phone."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    def text(v, _pos):
        if v <= 0:
            return ""
        for unit, name in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
            if v >= unit:
                return f"{v / unit:g}{name}"
        return f"{v:g}"

    axis.set_major_locator(LogLocator(base=10))
    axis.set_major_formatter(FuncFormatter(text))
    axis.set_minor_formatter(FuncFormatter(lambda v, p: ""))


#: The white box behind a label written over a chart's lines.
LABEL_BOX = {"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 1}


def labelled_bars(ax, labels, values, colours, texts, *, gap: float, height: float,
                  fontsize: float | None = None) -> None:
    """Horizontal bars, first at the top, each with its text just past its
    end (`gap` further, in data units) on a white box: the ladder charts'
    layout."""
    y = list(range(len(values)))
    ax.barh(y, values, height=height, color=colours)
    extra = {} if fontsize is None else {"fontsize": fontsize}
    for i, (v, text) in enumerate(zip(values, texts)):
        ax.text(v + gap, i, text, va="center", bbox=LABEL_BOX, **extra)
    ax.set_yticks(y, labels)
    ax.invert_yaxis()


def legend_below(fig, ax, note: str) -> None:
    """The figure's legend, centred under its panels: the labelled lines of
    `ax`, then `note` on a line of its own (what a bar's bracketed figure
    means)."""
    import matplotlib.pyplot as plt

    handles, names = ax.get_legend_handles_labels()
    handles.append(plt.Line2D([], [], linestyle="none"))
    names.append(note)
    fig.legend(handles, names, loc="lower center", ncols=1, fontsize=11, frameon=False)


class ChartLayoutError(ValueError):
    """A chart's titles touch: the reader would see them run together."""


#: The least space between two titles, in points (half a line at 12 pt).
TITLE_GAP_PT = 6


def overlapping_titles(fig) -> list[tuple[str, str]]:
    """Pairs of titles (the figure's, each panel's) whose drawn boxes come
    closer than TITLE_GAP_PT, as laid out for saving."""
    fig.draw_without_rendering()               # lay the figure out; savefig draws it once after
    renderer = fig.canvas.get_renderer()
    pad = TITLE_GAP_PT / 72 * fig.dpi / 2
    texts = [t for t in [fig._suptitle] + [ax.title for ax in fig.axes] if t is not None and t.get_text()]
    boxes = [(t.get_text(), t.get_window_extent(renderer).padded(pad)) for t in texts]
    return [(a, b) for i, (a, ba) in enumerate(boxes) for b, bb in boxes[i + 1:] if ba.overlaps(bb)]


def svg(fig) -> bytes:
    """The figure as SVG; a ChartLayoutError if two of its titles touch."""
    import matplotlib.pyplot as plt

    clash = overlapping_titles(fig)
    if clash:
        plt.close(fig)
        raise ChartLayoutError("titles too close: " + "; ".join(f"{a!r} and {b!r}" for a, b in clash))
    buf = io.BytesIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    plt.close(fig)
    return buf.getvalue()


def chapter_records(chapter: str) -> list[tuple[Listing, record.Record]]:
    """The chapter's listings that have a record, in the chapter's order."""
    from .notebooks import chapter_listings

    out = []
    for lst in chapter_listings(chapter):
        rec = record.load(lst)
        if rec is not None:
            out.append((lst, rec))
    return out


def find_facts(chapter: str, key: str, name: str | None = None):
    """(listing, record, facts) for the first listing of `chapter` (or the
    one called `name`) whose record has facts[key], else None."""
    for lst, rec in chapter_records(chapter):
        if name is not None and lst.name != name:
            continue
        f = rec.facts()
        if f.get(key) is not None:
            return lst, rec, f
    return None


def title(lst: Listing, rec: record.Record, what: str = "") -> str:
    return f"{what or lst.name}: {rec.gpu}, {rec.date[:10]}"


def pending(chapter: str, name: str) -> bytes | None:
    """A placeholder for a chart whose listing has no record yet, only in a
    CUDABOOK_ALLOW_STALE=1 preview build; otherwise None, so a real build
    still fails on the missing chart."""
    if os.environ.get("CUDABOOK_ALLOW_STALE") != "1":
        return None
    return ('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 600 80"><rect width="600" height="80" '
            'fill="white" stroke="#9e9e9e" stroke-dasharray="6 4"/><text x="300" y="46" text-anchor="middle" '
            f'font-family="sans-serif" font-size="16" fill="#777">chart pending: {chapter}/{name} has no GPU '
            'record yet</text></svg>').encode()


def bandwidth_chart(chapter: str) -> bytes | None:
    """Every benchmarked listing of the chapter: its first benchmark's GB/s,
    its library baseline's, and the copy ceiling of the same run."""
    rows = [(lst, rec, rec.benchmarks[0]) for lst, rec in chapter_records(chapter) if rec.benchmarks]
    if not rows:
        return None
    plt = pyplot()
    names = [lst.name for lst, _, _ in rows]
    ours = [b.bytes_per_s / 1e9 for _, _, b in rows]
    base = [b.baseline.bytes_per_s / 1e9 if b.baseline else 0 for _, _, b in rows]
    ceiling = max(b.ceiling_bytes_per_s for _, _, b in rows) / 1e9
    rec = rows[-1][1]
    dates = sorted({r.date[:10] for _, r, _ in rows})

    fig, ax = plt.subplots(figsize=(7.5, 1.0 + 0.85 * len(rows)))
    y = range(len(rows))
    ax.barh([i + 0.2 for i in y], ours, height=0.38, color=COLOURS[0], label="this listing")
    if any(base):
        bname = next(b.baseline.name for _, _, b in rows if b.baseline)
        ax.barh([i - 0.2 for i in y], base, height=0.38, color="#9e9e9e", label=bname)
    ax.axvline(ceiling, **COPY_STYLE, label=f"copy ({ceiling:,.0f} GB/s)")
    for i, v in enumerate(ours):
        ax.text(v + ceiling * 0.01, i + 0.2, f"{v:,.0f} ({100 * v / ceiling:.0f}%)", va="center")
    ax.set_yticks(list(y), names)
    ax.invert_yaxis()
    ax.set_xlim(0, ceiling * 1.45)
    ax.set_xlabel("GB/s (bytes read + written per second)")
    ax.set_title(f"{rec.gpu}, CUDA {rec.environment.get('cuda')}, {', '.join(dates)}")
    ax.legend(loc="lower right")
    fig.tight_layout()
    return svg(fig)


#: Charts every chapter may have.
SHARED = {"bandwidth.svg": bandwidth_chart}


def chapter_charts(chapter: str, root: Path = ROOT) -> dict:
    """The chapter's own charts (chapters/<chapter>/charts.py), and those
    shared charts its page shows: a shared chart no page names is not drawn
    (it showed one benchmark of a ladder under a legend of another)."""
    page = root / "chapters" / chapter / "index.md"
    text = page.read_text() if page.is_file() else ""
    charts = {name: draw for name, draw in SHARED.items() if f"({name})" in text}
    own = root / "chapters" / chapter / "charts.py"
    if own.is_file():
        spec = importlib.util.spec_from_file_location(f"cudabook_charts_{chapter}", own)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        charts.update(mod.CHARTS)
    return charts
