"""Charts of the chapter "Global memory and coalescing", drawn from its GPU
records at build time (see code/cudabook/plots.py).

Every value drawn comes from a record: the measured bandwidths, the copy
bandwidth of the same run, the sector counts and device-memory bytes that
Nsight Compute counted, and the ceilings the listings printed beside them.
"""

from cudabook import plots


def stride_chart(chapter: str) -> bytes | None:
    """strided_copy's stride sweep (offset 0). Above: useful GB/s of our
    copy and of torch copying the same view, against the copy bandwidth and
    two ceilings: the one the sectors a warp touches predict, and the one
    the bytes device memory really read give. Below: those two byte counts
    per element, which part company after a stride of 8."""
    found = plots.find_facts(chapter, "sweep", "strided_copy")
    if found is None:
        return plots.pending(chapter, "strided_copy")
    lst, rec, f = found
    plt = plots.pyplot()
    rows = [r for r in f["sweep"] if r["offset"] == 0]
    s = [r["stride"] for r in rows]
    copy = f["copy_gbs"]
    counted = all("sectors_per_request" in r for r in rows)
    fig, axes = plt.subplots(2 if counted else 1, 1, figsize=(7.5, 7.6 if counted else 4.6), sharex=True,
                             gridspec_kw={"height_ratios": [1.35, 1]} if counted else None, squeeze=False)
    top = axes[0][0]
    top.axhline(copy, **plots.COPY_STYLE, label=f"copy, same run ({copy:,.0f})")
    top.plot(s, [r["predicted_fraction"] * copy for r in rows], "_", color="#444", markersize=22,
             markeredgewidth=2.2, label="ceiling from sectors touched")
    if counted:
        # 8 useful bytes (4 read, 4 written) for every (bytes read + 4 written) moved
        top.plot(s, [8 / (r["dram_read_bytes_per_element"] + 4) * copy for r in rows], "v", color=plots.COLOURS[4],
                 markersize=8, fillstyle="none", markeredgewidth=1.6, label="ceiling from HBM bytes")
    top.plot(s, [r["gbs"] for r in rows], "o-", color=plots.COLOURS[0], linewidth=2, label="our copy")
    if all("torch_gbs" in r for r in rows):
        top.plot(s, [r["torch_gbs"] for r in rows], "D--", color=plots.COLOURS[3], markersize=5,
                 label="torch, same view")
    top.set_ylabel("useful GB/s")
    top.set_ylim(0, copy * 1.45)               # room above the copy line for the legend
    top.set_yticks(range(0, int(copy) + 1, 1000))
    top.grid(True, alpha=0.3)
    top.legend(loc="upper center", ncols=2, fontsize=11)
    top.set_title(plots.title(lst, rec, "y[i] = x[i * stride]"))
    bottom = axes[-1][0]
    if counted:
        bottom.plot(s, [r["sectors_per_request"] for r in rows], "s-", color=plots.COLOURS[2],
                    label="sectors touched: 32 B × sectors/request ÷ 32 lanes")
        bottom.plot(s, [r["dram_read_bytes_per_element"] for r in rows], "v--", color=plots.COLOURS[4],
                    label="read from HBM (Nsight Compute)")
        bottom.set_yscale("log", base=2)
        ticks = [4, 8, 16, 32, 64]
        bottom.set_yticks(ticks, [str(t) for t in ticks])
        bottom.minorticks_off()
        bottom.set_ylim(3, 90)
        bottom.set_ylabel("bytes read per element")
        bottom.grid(True, alpha=0.3)
        bottom.legend(loc="lower right", fontsize=11)
    bottom.set_xscale("log", base=2)
    bottom.set_xticks(s, [str(v) for v in s])
    bottom.minorticks_off()
    bottom.set_xlabel("stride (floats between neighbouring lanes' reads)")
    fig.tight_layout()
    return plots.svg(fig)


def _bars(title: str, entries: list[dict], copy: float, xlabel: str):
    """Horizontal bars of useful GB/s, one per entry {"label", "gbs",
    "colour", "ceiling" (GB/s or None)}, against the copy bandwidth."""
    plt = plots.pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 1.8 + 0.55 * len(entries)))
    y = list(range(len(entries)))
    ax.barh(y, [e["gbs"] for e in entries], height=0.62, color=[e["colour"] for e in entries])
    ceilings = [(i, e["ceiling"]) for i, e in enumerate(entries) if e.get("ceiling") is not None]
    if ceilings:
        ax.plot([c for _, c in ceilings], [i for i, _ in ceilings], "|", color="#222", markersize=24,
                markeredgewidth=2.4, label="ceiling the layout predicts")
    ax.axvline(copy, **plots.COPY_STYLE, label=f"copy bandwidth, same run ({copy:,.0f} GB/s)")
    for i, e in enumerate(entries):
        ax.text(max(e["gbs"], e.get("ceiling") or 0) + copy * 0.02, i, f"{e['gbs']:,.0f} ({100 * e['gbs'] / copy:.0f}%)", va="center",
                fontsize=11, bbox={"facecolor": "white", "edgecolor": "none", "pad": 1})
    ax.set_yticks(y, [e["label"] for e in entries])
    ax.invert_yaxis()
    ax.set_xlim(0, copy * 1.42)
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.legend(loc="upper center", bbox_to_anchor=(0.45, -0.15),
              ncols=2, fontsize=11, frameon=False)
    fig.tight_layout()
    return plots.svg(fig)


def aos_soa_chart(chapter: str) -> bytes | None:
    """aos_soa: useful GB/s of each kernel and of PyTorch on the AoS tensor,
    with the ceiling the layout predicts and the copy bandwidth."""
    found = plots.find_facts(chapter, "rows", "aos_soa")
    if found is None:
        return plots.pending(chapter, "aos_soa")
    lst, rec, f = found
    copy = f["copy_gbs"]
    entries = []
    for job in ("score", "area"):
        for r in f["rows"]:
            if r["kernel"].startswith(job):
                entries.append({"label": r["kernel"], "gbs": r["gbs"], "ceiling": r["predicted_fraction"] * copy,
                                "colour": plots.COLOURS[0] if "soa" in r["kernel"] else plots.COLOURS[2]})
        if job in f.get("torch", {}):
            entries.append({"label": f"torch, {job}", "gbs": f["torch"][job]["gbs"], "colour": "#9e9e9e"})
    return _bars(plots.title(lst, rec, "boxes, AoS and SoA"), entries, copy,
                 "useful GB/s (bytes the job needs, per second)")


def rows_columns_chart(chapter: str) -> bytes | None:
    """rows_columns: useful GB/s of each kernel and of its torch baseline,
    against the copy bandwidth."""
    found = plots.find_facts(chapter, "rows", "rows_columns")
    if found is None:
        return plots.pending(chapter, "rows_columns")
    lst, rec, f = found
    entries = []
    for r in f["rows"]:
        along = r["kernel"] in ("scale_x_cols", "column_sums")        # lanes on neighbouring floats
        entries.append({"label": r["kernel"], "gbs": r["gbs"],
                        "colour": plots.COLOURS[0] if along else plots.COLOURS[2]})
        if "baseline" in r:
            entries.append({"label": r["baseline"] if r["baseline"].startswith("torch") else f"torch: {r['baseline']}", "gbs": r["baseline_gbs"], "colour": "#9e9e9e"})
    return _bars(plots.title(lst, rec, "rows and columns"), entries,
                 f["copy_gbs"], "useful GB/s (bytes the job needs, per second)")


CHARTS = {"stride.svg": stride_chart, "aos_soa.svg": aos_soa_chart, "rows_columns.svg": rows_columns_chart}
