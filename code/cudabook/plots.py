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


def _pyplot():
    """matplotlib's pyplot, drawing off screen, with SVG ids that do not
    change from build to build."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": "cudabook", "font.size": 10})
    return plt


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
    return _svg(fig)


def _svg(fig) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    plt.close(fig)
    return buf.getvalue()


def crossover_chart(chapter: str) -> bytes | None:
    """CPU, GPU kernel and GPU-with-copies times against size, from a listing
    whose benchmark recorded a `sweep` (see why_gpus/gelu_cpu_vs_gpu.py)."""
    from .notebooks import chapter_listings

    found = None
    for lst in chapter_listings(chapter):
        rec = records.load_record(lst)
        facts = ((rec or {}).get("benchmark") or {}).get("facts") or {}
        if facts.get("sweep"):
            found = (lst, rec, facts)
            break
    if found is None:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": "cudabook", "font.size": 10})
    lst, rec, facts = found
    rows = facts["sweep"]
    n = [r["n"] for r in rows]
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    ax.loglog(n, [r["cpu_ms"] for r in rows], "o-", color="#1565c0", label=f"CPU, NumPy ({facts.get('cpu', 'CPU')})")
    ax.loglog(n, [r["gpu_with_copies_ms"] for r in rows], "s-", color="#ef6c00", label="GPU, including copies")
    ax.loglog(n, [r["gpu_kernel_ms"] for r in rows], "^-", color="#2e7d32", label="GPU, kernel alone")
    cross = facts.get("crossover_with_copies")
    if cross:
        ax.axvline(cross, color="#777", linestyle=":", linewidth=1.2)
        label = ("GPU + copies wins\nat every size measured" if cross == n[0]
                 else f"GPU + copies wins\nfrom n = {cross:,}")
        ax.annotate(label, (cross, min(r["gpu_kernel_ms"] for r in rows)),
                    xytext=(6, 6), textcoords="offset points", fontsize=8, color="#444")
    ax.set_xlabel("elements")
    ax.set_ylabel("time, ms (median)")
    env = rec["environment"]
    ax.set_title(f"{lst.name}: {env.get('gpu')}, {rec['date'][:10]}", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    return _svg(fig)


#: name in chapters/<chapter>/ -> function(chapter) -> SVG bytes or None
CHARTS = {"bandwidth.svg": bandwidth_chart, "crossover.svg": crossover_chart}
