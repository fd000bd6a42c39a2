"""Charts of the chapter "Global memory and coalescing", drawn from its GPU
records at build time (see code/cudabook/plots.py)."""

from cudabook import plots


def stride_chart(chapter: str) -> bytes | None:
    """Useful bandwidth and sectors per request against the stride (offset
    0), from strided_copy's recorded sweep."""
    found = plots.find_facts(chapter, "sweep", "strided_copy")
    if found is None:
        return plots.pending(chapter, "strided_copy")
    lst, rec, f = found
    plt = plots.pyplot()
    rows = [r for r in f["sweep"] if r["offset"] == 0]
    s = [r["stride"] for r in rows]
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    ax.plot(s, [r["gbs"] for r in rows], "o-", color=plots.COLOURS[0], label="our copy, useful GB/s")
    if all("torch_gbs" in r for r in rows):
        ax.plot(s, [r["torch_gbs"] for r in rows], "D--", color=plots.COLOURS[3],
                label="torch, same strided view")
    ax.axhline(f["copy_gbs"], color="#777", linestyle=":", linewidth=1.2)
    ax.annotate("device-to-device copy", (s[-1], f["copy_gbs"]), xytext=(-4, 4),
                textcoords="offset points", ha="right", color="#444")
    ax.set_xscale("log", base=2)
    ax.set_xticks(s)
    ax.set_xticklabels([str(v) for v in s])
    ax.set_xlabel("stride (floats between neighbouring lanes' reads)")
    ax.set_ylabel("useful GB/s")
    ax.set_ylim(bottom=0)
    right = ax.twinx()
    right.plot(s, [r["sectors_per_request"] for r in rows], "s:", color=plots.COLOURS[2],
               label="sectors per request (Nsight Compute)")
    right.set_ylabel("32-byte sectors per warp's load")
    right.set_ylim(0, 36)
    lines = ax.get_legend_handles_labels()
    more = right.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], loc="upper right")
    ax.set_title(plots.title(lst, rec, "y[i] = x[i * stride]"))
    ax.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    return plots.svg(fig)


CHARTS = {"stride.svg": stride_chart}
