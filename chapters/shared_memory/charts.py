"""Charts of the chapter "Shared memory and bank conflicts", drawn from its
GPU records at build time (see code/cudabook/plots.py)."""

from cudabook import plots

RUNGS = ("naive", "tiled", "padded", "swizzled", "wide")
SHAPES = ("8192x8192", "4097x3001")


def _record(chapter: str, name: str):
    """(listing, record) of the chapter's listing `name`, or None."""
    return next(((lst, rec) for lst, rec in plots.chapter_records(chapter) if lst.name == name), None)


def ladder_chart(chapter: str) -> bytes | None:
    """Each rung of the transpose ladder at both shapes, in GB/s, beside
    x.t().contiguous() and a driver copy of the same bytes, with the copy
    bandwidth of the run and the two targets of the best rung."""
    found = _record(chapter, "transpose")
    if found is None or not found[1].benchmarks:
        return plots.pending(chapter, "transpose")
    lst, rec = found
    by_name = {b.name: b for b in rec.benchmarks}
    plt = plots.pyplot()
    fig, axes = plt.subplots(2, 1, figsize=(7.5, 8.4), sharex=True)
    copy = rec.benchmarks[0].ceiling_bytes_per_s / 1e9
    for ax, shape in zip(axes, SHAPES):
        best = by_name[f"wide {shape}"]
        torch = best.baseline.bytes_per_s / 1e9 if best.baseline else None
        labels, values, colours = [], [], []
        for rung in RUNGS:
            labels.append(rung)
            values.append(by_name[f"{rung} {shape}"].bytes_per_s / 1e9)
            colours.append(plots.COLOURS[0] if rung == "wide" else plots.COLOURS[1])
        if torch is not None:
            labels.append("x.t()\n.contiguous()")
            values.append(torch)
            colours.append("#9e9e9e")
        same = by_name.get(f"memcpy_dtod, same bytes {shape}")
        if same is not None:
            labels.append("memcpy,\nsame bytes")
            values.append(same.bytes_per_s / 1e9)
            colours.append("#616161")
        plots.labelled_bars(ax, labels, values, colours,
                            [f"{v:,.0f} ({100 * v / copy:.0f}%)" for v in values],
                            gap=copy * 0.01, height=0.65)
        ax.axvline(copy, **plots.COPY_STYLE, label=f"copy of 1 GiB ({copy:,.0f} GB/s)")
        ax.axvline(0.85 * copy, color="#c62828", linestyle=":", linewidth=1.5, label="target: 85% of copy")
        if torch is not None:
            ax.axvline(3 * torch, color="#6a1b9a", linestyle="-.", linewidth=1.5,
                       label="target: 3 × x.t().contiguous()")
        ax.set_title(f"{shape.replace('x', ' × ')} floats")
    axes[-1].set_xlim(0, copy * 1.3)
    axes[-1].set_xlabel("GB/s (bytes read + written per second)")
    fig.suptitle(plots.title(lst, rec, "transpose ladder"), fontsize=12)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncols=2, fontsize=11, frameon=False)
    return plots.svg(fig)


def conflicts_chart(chapter: str) -> bytes | None:
    """Time per warp read against the conflict degree gcd(s, 32), from
    bank_conflicts' recorded sweep, beside the line time = degree x the
    time at stride 1."""
    found = plots.find_facts(chapter, "rows", "bank_conflicts")
    if found is None:
        return plots.pending(chapter, "bank_conflicts")
    lst, rec, f = found
    plt = plots.pyplot()
    rows = f["rows"]
    base = rows[0]["ns_per_read_per_sm"]
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    degrees = sorted({r["degree"] for r in rows})
    ax.plot(degrees, [d * base for d in degrees], "--", color="#9e9e9e", linewidth=1.4,
            label="degree × time at stride 1")
    ax.plot([r["degree"] for r in rows], [r["ns_per_read_per_sm"] for r in rows], "o",
            color=plots.COLOURS[0], markersize=8, label="measured")
    for d in degrees:                       # strides 1 and 33 share degree 1: one label
        at = [r for r in rows if r["degree"] == d]
        ax.annotate("s = " + " and ".join(str(r["stride"]) for r in at),
                    (d, max(r["ns_per_read_per_sm"] for r in at)), xytext=(10, -4),
                    textcoords="offset points", fontsize=11, va="top")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xticks(degrees, [str(d) for d in degrees])
    ticks = [base * 2**k for k in range(6)]
    ax.set_yticks(ticks, [f"{t:.2g}" for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("conflict degree gcd(s, 32): words the busiest bank serves")
    ax.set_ylabel("ns per warp read, per SM")
    ax.set_title(plots.title(lst, rec, "reads at a stride of s words"))
    ax.legend(loc="upper left")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return plots.svg(fig)


CHARTS = {"ladder.svg": ladder_chart, "conflicts.svg": conflicts_chart}
