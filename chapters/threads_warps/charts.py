"""Charts of the chapter "Threads, warps and SMs", drawn from its GPU records
at build time (see code/cudabook/plots.py)."""

import numpy as np

from cudabook import plots

SHOWN_SMS = 8   # the timeline panel shows this many SMs: enough to see the pattern, few enough to read


def _placement_chart(chapter: str, name: str) -> bytes | None:
    """Above: how many blocks ran on the whole GPU at each moment, against
    how many fit at once. Below: the blocks of the first few SMs, one bar per
    block from its start to its end, coloured by the wave it ran in."""
    found = plots.find_facts(chapter, "start_us", name)
    if found is None:
        return plots.pending(chapter, name)
    lst, rec, f = found
    plt = plots.pyplot()
    from matplotlib.patches import Patch

    start, end = np.asarray(f["start_us"]), np.asarray(f["end_us"])
    smid, wave = np.asarray(f["smid"]), np.asarray(f["wave"])
    capacity = f["sm_count"] * f["max_resident_per_sm"]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.5, 6.2), sharex=True,
                                      gridspec_kw={"height_ratios": [1, 1.3]})
    times = np.concatenate([start, end])
    steps = np.concatenate([np.ones(start.size), -np.ones(end.size)])
    order = np.lexsort((steps, times))
    running = np.cumsum(steps[order])
    top.step(times[order], running, where="post", color=plots.COLOURS[1], linewidth=1.6,
             label="blocks running")
    top.axhline(capacity, color="#c62828", linestyle="--", linewidth=1.2,
                label=f"fit at once: {f['sm_count']} SMs × {f['max_resident_per_sm']}")
    top.set_ylabel("blocks running")
    top.set_ylim(0, capacity * 1.35)
    top.legend(loc="upper right")
    top.set_title(f"{lst.name}: {f['blocks']} blocks of {f['threads_per_block']} threads; "
                  f"{rec.gpu}, {rec.date[:10]}")
    sms = sorted(set(smid.tolist()))[:SHOWN_SMS]
    lanes = max(1, int(f.get("max_resident_per_sm", 1)))
    for row, sm in enumerate(sms):
        free: dict = {}
        for s, e, w in sorted(zip(start[smid == sm], end[smid == sm], wave[smid == sm])):
            slot = next((k for k in range(lanes) if free.get(k, -1e18) <= s), 0)
            free[slot] = e
            bottom.barh(row + (slot + 0.5) / lanes - 0.5, e - s, left=s, height=0.85 / lanes,
                        color=plots.COLOURS[w % len(plots.COLOURS)], alpha=0.85, linewidth=0)
    waves = int(wave.max()) + 1
    bottom.legend(handles=[Patch(color=plots.COLOURS[w % len(plots.COLOURS)], alpha=0.85, label=f"wave {w + 1}")
                           for w in range(waves)], loc="lower right", ncols=min(waves, 3))
    bottom.set_yticks(range(len(sms)), [f"SM {s}" for s in sms])
    bottom.set_ylim(len(sms) + 1.6, -0.7)          # SM 0 on top, room for the legend below the rows
    bottom.set_xlabel("time since the first block started, µs")
    fig.tight_layout()
    return plots.svg(fig)


def waves_chart(chapter: str) -> bytes | None:
    return _placement_chart(chapter, "block_placement")


def tail_chart(chapter: str) -> bytes | None:
    return _placement_chart(chapter, "ex1_tail_effect")


def _sweep_chart(chapter: str, needs: tuple, value, ylabel: str, what: str, xmax: float, extra=None):
    """One point per configuration of the occupancy sweep (every block
    resident: one full wave), value(row) against resident warps per SM, one
    marker per block size; extra(ax, rows, rec) adds what a chart needs
    besides. Pending until the record's table has every key in `needs`."""
    found = plots.find_facts(chapter, "table", "occupancy_sweep")
    if found is None or not all(all(k in r for k in needs) for r in found[2]["table"]):
        return plots.pending(chapter, "occupancy_sweep")
    lst, rec, f = found
    plt = plots.pyplot()
    rows = f["table"]
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    markers = "osD^v<>"
    for i, block in enumerate(sorted({r["block"] for r in rows})):
        pts = sorted((r for r in rows if r["block"] == block), key=lambda r: r["warps_per_sm"])
        ax.plot([r["warps_per_sm"] for r in pts], [value(r) for r in pts], markers[i % len(markers)],
                color=plots.COLOURS[i % len(plots.COLOURS)], markersize=7, label=f"{block} threads")
    if extra is not None:
        extra(ax, rows, rec)
    ax.set_xlim(0, xmax)
    ax.set_xticks([0, 8, 16, 24, 32, 40, 48, 56, 64])
    ax.set_xlabel("resident warps per SM (64 = 100% occupancy)")
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", ncols=2)
    ax.set_title(plots.title(lst, rec, what))
    fig.tight_layout()
    return plots.svg(fig)


def occupancy_chart(chapter: str) -> bytes | None:
    """Achieved GB/s against resident warps per SM, with the copy of the run."""
    def copy_line(ax, rows, rec):
        if rec.benchmarks:
            ceiling = rec.benchmarks[0].ceiling_bytes_per_s / 1e9
            ax.axhline(ceiling, color="#c62828", linestyle="--", linewidth=1.2,
                       label=f"copy ({ceiling:,.0f} GB/s)")

    return _sweep_chart(chapter, ("gbs",), lambda r: r["gbs"], "GB/s", "y = a·x + b, one wave", 66, copy_line)


def loaded_latency(row: dict) -> float:
    """Little's law read backwards for one configuration of the sweep: the
    bytes its loads keep in flight on the whole GPU over the rate they are
    read at (half the GB/s, which counts each element read and written),
    in nanoseconds: how long a load took, on average, under that load."""
    sm_count = row["grid"] / row["blocks_per_sm"]       # one full wave
    return row["bytes_in_flight_per_sm"] * sm_count / (row["gbs"] / 2)   # bytes / (GB/s) = ns


def latency_chart(chapter: str) -> bytes | None:
    """The latency each configuration's loads saw, from Little's law,
    against resident warps per SM, the fewest and the most warps labelled."""
    def label_ends(ax, rows, rec):
        for r in (min(rows, key=lambda r: r["warps_per_sm"]), max(rows, key=lambda r: r["warps_per_sm"])):
            ax.annotate(f"{loaded_latency(r):,.0f} ns", (r["warps_per_sm"], loaded_latency(r)),
                        textcoords="offset points", xytext=(8, -18), fontsize=11)

    return _sweep_chart(chapter, ("gbs", "bytes_in_flight_per_sm"), loaded_latency,
                        "latency of a load, ns\n(bytes in flight ÷ bytes read per ns)",
                        "loads' latency under load, by Little's law", 70, label_ends)


def block_rate_chart(chapter: str) -> bytes | None:
    """Time of the one-element-per-thread kernel against block size, beside
    its two floors, the empty grid's time and the memory's, and a third:
    its bytes at the rate the occupancy sweep measured for one 4-byte load
    per thread in one full wave (100% occupancy)."""
    found = plots.find_facts(chapter, "table", "block_rate")
    if found is None:
        return plots.pending(chapter, "block_rate")
    lst, rec, f = found
    plt = plots.pyplot()
    rows = f["table"]
    b = [r["block"] for r in rows]
    fig, ax = plt.subplots(figsize=(7.5, 4.4))
    ax.plot(b, [r["kernel_ms"] for r in rows], "o-", color=plots.COLOURS[0], label="y = a·x + b, one element per thread")
    ax.plot(b, [r["empty_ms"] for r in rows], "s--", color=plots.COLOURS[2], label="the same grid of empty blocks")
    ax.axhline(f["memory_ms"], color="#c62828", linestyle=":", linewidth=1.5,
               label=f"memory floor (8n bytes at {f['copy_gbs']:,.0f} GB/s)")
    sweep = plots.find_facts(chapter, "best_gbs", "occupancy_sweep")
    if sweep is not None:
        gbs = sweep[2]["best_gbs"]
        ax.axhline(8 * f["bench_n"] / (gbs * 1e9) * 1e3, color=plots.COLOURS[1], linestyle="-.", linewidth=1.5,
                   label=f"8n bytes at {gbs:,.0f} GB/s: one load a thread,\none full wave (the occupancy sweep)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    plots.plain_log_ticks(ax.yaxis)
    ax.set_xticks(b, [str(x) for x in b])
    ax.minorticks_off()
    ax.set_xlabel("threads per block")
    ax.set_ylabel("time, ms (median)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper right")
    ax.set_title(plots.title(lst, rec, f"n = {f['bench_n']:,}"))
    fig.tight_layout()
    return plots.svg(fig)


CHARTS = {"waves.svg": waves_chart, "tail.svg": tail_chart, "occupancy.svg": occupancy_chart,
          "latency.svg": latency_chart, "block-rate.svg": block_rate_chart}
