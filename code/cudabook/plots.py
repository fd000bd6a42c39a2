"""Charts drawn from the GPU records when the book is built, never by hand.

`bandwidth_chart(chapter)` draws every benchmarked listing of a chapter:
its bandwidth, the library baseline's, and the copy ceiling measured in the
same run, with the GPU and date in the title. The site hook writes it as
chapters/<chapter>/bandwidth.svg.
"""

from __future__ import annotations

import io

from . import records


def _benchmarks(chapter: str) -> list[tuple[records.Listing, dict, dict]]:
    from .notebooks import chapter_listings

    out = []
    for lst in chapter_listings(chapter):
        rec = records.load_record(lst)
        benches = ((rec or {}).get("benchmark") or {}).get("benchmarks") or []
        if benches:
            out.append((lst, rec, benches[0]))
    return out


def bandwidth_chart(chapter: str) -> bytes | None:
    """SVG bytes, or None if no listing of the chapter has a benchmark."""
    rows = _benchmarks(chapter)
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": "cudabook", "font.size": 10})
    names = [lst.name for lst, _, _ in rows]
    ours = [b["bytes_per_s"] / 1e9 for _, _, b in rows]
    base = [b.get("baseline", {}).get("bytes_per_s", 0) / 1e9 for _, _, b in rows]
    ceiling = max(b["ceiling_bytes_per_s"] for _, _, b in rows) / 1e9
    env = rows[-1][1]["environment"]
    dates = sorted({rec["date"][:10] for _, rec, _ in rows})

    fig, ax = plt.subplots(figsize=(7.5, 0.75 + 0.75 * len(rows)))
    y = range(len(rows))
    ax.barh([i + 0.2 for i in y], ours, height=0.38, color="#3d8b40", label="this listing")
    if any(base):
        bname = next(b["baseline"]["name"] for _, _, b in rows if "baseline" in b)
        ax.barh([i - 0.2 for i in y], base, height=0.38, color="#9e9e9e", label=bname)
    ax.axvline(ceiling, color="#c62828", linestyle="--", linewidth=1.5,
               label=f"device-to-device copy ({ceiling:,.0f} GB/s)")
    for i, v in enumerate(ours):
        ax.text(v + ceiling * 0.01, i + 0.2, f"{v:,.0f} GB/s ({100 * v / ceiling:.0f}%)", va="center", fontsize=8)
    ax.set_yticks(list(y), names)
    ax.invert_yaxis()
    ax.set_xlim(0, ceiling * 1.3)
    ax.set_xlabel("bandwidth, GB/s (bytes read + written per second)")
    ax.set_title(f"{env.get('gpu')}, CUDA {env.get('cuda')}, {', '.join(dates)}", fontsize=10)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    plt.close(fig)
    return buf.getvalue()


#: name in chapters/<chapter>/ -> function(chapter) -> SVG bytes or None
CHARTS = {"bandwidth.svg": bandwidth_chart}
