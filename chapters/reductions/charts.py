"""Charts of the chapter "Reductions and scans", drawn from its GPU records
at build time (see code/cudabook/plots.py)."""

from cudabook import listings, plots, record

COPY = "#c62828"        # the copy bandwidth, as in the shared bandwidth chart
#: Each target its own line: against the copy (red, like the copy it is a
#: share of) and against the library call (purple), so the two never read
#: as one.
TARGET_STYLE = {"copy": {"color": COPY, "linestyle": ":", "linewidth": 2.0},
                "baseline": {"color": "#6a1b9a", "linestyle": "-.", "linewidth": 1.8}}


def _benchmarked(listing_id: str):
    """(listing, record) if the listing has a record with benchmarks, else None."""
    lst = listings.find(listing_id)
    rec = record.load(lst)
    return (lst, rec) if rec is not None and rec.benchmarks else None


def _panel(ax, rec, extra=None) -> None:
    """One bar per benchmark of `rec`, then the library call the best one was
    timed against (grey), and `extra` (label, GB/s, share of its own run's
    copy) if given; the copy bandwidth of the run as a dashed line, and the
    best one's targets each with a line of its own. A linear axis: a bar's
    length is its rate, so the slow rungs are slivers, with their figures
    beside them."""
    bs = rec.benchmarks
    best = max(bs, key=lambda b: b.bytes_per_s)
    copy = best.ceiling_bytes_per_s / 1e9
    rows = [(b.name, b.bytes_per_s / 1e9, b.fraction_of_ceiling, plots.COLOURS[0]) for b in bs]
    if best.baseline is not None:
        rows.append((best.baseline.name, best.baseline.bytes_per_s / 1e9,
                     best.baseline.bytes_per_s / best.ceiling_bytes_per_s, "#9e9e9e"))
    if extra is not None:
        rows.append((*extra, plots.COLOURS[1]))
    y = list(range(len(rows)))
    ax.barh(y, [r[1] for r in rows], height=0.6, color=[r[3] for r in rows])
    ax.axvline(copy, color=COPY, linestyle="--", linewidth=1.5, label=f"copy, same run ({copy:,.0f} GB/s)")
    if best.targets is not None and best.baseline is not None:
        for k, want in best.targets.wanted.items():
            x = want * (copy if k == "copy" else best.baseline.bytes_per_s / 1e9)
            what = "copy" if k == "copy" else best.baseline.name
            ax.axvline(x, **TARGET_STYLE[k], label=f"target: {want:g}× {what}")
    for i, (_, v, share, _) in enumerate(rows):
        text = f"{v:,.0f} GB/s ({100 * share:.0f}%)" if v >= 10 else f"{v:,.1f} GB/s"
        ax.text(v + copy * 0.015, i, text, va="center", fontsize=11)
    ax.set_yticks(y, [r[0] for r in rows])
    ax.invert_yaxis()
    ax.set_xlim(0, copy * 1.6)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16 if len(rows) > 4 else -0.34), ncols=2,
              frameon=False)
    ax.grid(True, axis="x", which="major", alpha=0.3)


def ladder_chart(chapter: str) -> bytes | None:
    """The sum ladder (GB/s read, with Part I's warp_sum) and the
    two whole-array scans (GB/s read and written), each against the copy
    bandwidth and the torch call of the same run, and the chapter's targets."""
    sums = _benchmarked(f"{chapter}/sum_ladder")
    scans = _benchmarked(f"{chapter}/scan")
    if sums is None:
        return plots.pending(chapter, "sum_ladder")
    if scans is None:
        return plots.pending(chapter, "scan")
    part1 = _benchmarked("threads_warps/warp_sum")
    extra = None
    if part1 is not None:
        b = part1[1].benchmarks[0]
        extra = (f"Part I's warp_sum\n(n = {part1[1].bench.n:,})", b.bytes_per_s / 1e9, b.fraction_of_ceiling)
    plt = plots.pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.5, 9.6), gridspec_kw={"height_ratios": [7, 3.6]})
    _panel(top, sums[1], extra=extra)
    top.set_title(f"Sum of n = {sums[1].bench.n:,} floats, GB/s read\n"
                  f"{sums[1].gpu}, {sums[1].date[:10]}")
    _panel(bottom, scans[1])
    bottom.set_title(f"Inclusive scan of n = {scans[1].bench.n:,} floats, GB/s read + written\n"
                     f"{scans[1].gpu}, {scans[1].date[:10]}")
    top.set_xlabel("GB/s; in brackets, % of the copy bandwidth")
    bottom.set_xlabel("GB/s; in brackets, % of the copy bandwidth")
    fig.tight_layout()
    return plots.svg(fig)


CHARTS = {"ladder.svg": ladder_chart}
