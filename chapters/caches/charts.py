"""Charts of the chapter "Caches and the memory staircase", drawn from its GPU
records at build time (see code/cudabook/plots.py)."""

from statistics import median

from cudabook import plots

SM_BLOCK = 256 * 1024   # L1 + shared memory per SM on Hopper (NVIDIA's Hopper whitepaper): not measured


def _size(v: float) -> str:
    for unit, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if v >= unit:
            return f"{v / unit:g} {name}"
    return f"{v:g} B"


def staircase_chart(chapter: str) -> bytes | None:
    """Latency per dependent load (pointer_chase) above bandwidth (read_staircase),
    both against the working set, with the sizes that bound each step."""
    chase = plots.find_facts(chapter, "sweep", "pointer_chase")
    reads = plots.find_facts(chapter, "sweep", "read_staircase")
    if chase is None or reads is None:
        return plots.pending(chapter, "pointer_chase" if chase is None else "read_staircase")
    _, rec, lat = chase
    _, rrec, bw = reads
    l2 = lat["l2_bytes"]
    sms = rec.environment.get("sm_count")
    lrows = sorted(lat["sweep"], key=lambda r: r["bytes"])
    brows = sorted(bw["sweep"], key=lambda r: r["bytes"])

    # The level each step stands for, read off the record by where it lies
    # against the sizes: the smallest chain (L1); chains well past one SM's
    # SRAM and well inside the L2; chains of twice the L2 or more (HBM).
    l1_lat = lrows[0]
    l2_lat = [r for r in lrows if 4 * SM_BLOCK <= r["bytes"] <= l2 / 4]
    hbm_lat = [r for r in lrows if r["bytes"] >= 2 * l2]
    ghz = l1_lat["cycles_per_load"] / l1_lat["ns_per_load"]          # the SM's clock during the chase
    l2_bw = [r["read_sum_l2_gbs"] for r in brows if l2 / 8 <= r["bytes"] <= l2 / 2]
    hbm_bw = [r["read_sum_gbs"] for r in brows if r["bytes"] >= 2 * l2]

    def in_flight(gbs: list, rows: list) -> float | None:
        """Little's law: the MB in flight a level's rate needs at its idle latency."""
        return median(gbs) * median(r["ns_per_load"] for r in rows) / 1e6 if gbs and rows else None

    plt = plots.pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.5, 8.6), sharex=True)
    ticks = [1 << k for k in range(14, 33, 2)]
    lo = min(lrows[0]["bytes"], brows[0]["bytes"]) / 1.5
    hi = max(lrows[-1]["bytes"], brows[-1]["bytes"]) * 1.5

    # Bands: what the working set fits in, by the sizes each step should fall at.
    all_sms = (sms or 0) * SM_BLOCK
    bands = {top: [(lo, SM_BLOCK, "fits one SM's\n256 KB SRAM"), (SM_BLOCK, l2, f"fits the L2\n({_size(l2)})"),
                   (l2, hi, "larger than\nthe L2")],
             bottom: [(lo, all_sms or SM_BLOCK, f"fits {sms} SMs'\nSRAM together" if sms else "fits one SM"),
                      (all_sms or SM_BLOCK, l2, "L2"), (l2, hi, "larger than\nthe L2")]}
    for ax, spans in bands.items():
        for k, (a, b, text) in enumerate(spans):
            ax.axvspan(a, b, color="#efefef" if k % 2 else "white", zorder=0)
            ax.text((a * b) ** 0.5, 0.97, text, transform=ax.get_xaxis_transform(), ha="center", va="top",
                    color="#555")

    x = [r["bytes"] for r in lrows]
    top.plot(x, [r["cycles_per_load"] for r in lrows], "o-", color=plots.COLOURS[1],
             label="pointer_chase: one load at a time")
    top.set_ylabel("cycles per load")
    top.set_ylim(0, 1.3 * max(r["cycles_per_load"] for r in lrows))
    right = top.secondary_yaxis("right", functions=(lambda c: c / ghz, lambda n: n * ghz))
    right.set_ylabel(f"ns per load (cycles ÷ {ghz:.2f} GHz)")
    top.annotate(f"L1: {l1_lat['cycles_per_load']:,.0f} cycles\n= {l1_lat['ns_per_load']:,.0f} ns",
                 (l1_lat["bytes"], l1_lat["cycles_per_load"]), xytext=(0, 10), textcoords="offset points",
                 ha="left", va="bottom")
    if l2_lat:
        top.annotate(f"L2: {median(r['cycles_per_load'] for r in l2_lat):,.0f} cycles\n"
                     f"= {median(r['ns_per_load'] for r in l2_lat):,.0f} ns",
                     (median(r["bytes"] for r in l2_lat), median(r["cycles_per_load"] for r in l2_lat)),
                     xytext=(0, 10), textcoords="offset points", ha="center", va="bottom")
    if hbm_lat:
        top.annotate(f"HBM: {median(r['cycles_per_load'] for r in hbm_lat):,.0f} cycles\n"
                     f"= {median(r['ns_per_load'] for r in hbm_lat):,.0f} ns",
                     (hbm_lat[0]["bytes"], median(r["cycles_per_load"] for r in hbm_lat)),
                     xytext=(-12, -10), textcoords="offset points", ha="left", va="top")

    bx = [r["bytes"] for r in brows]
    bottom.plot(bx, [r["read_sum_gbs"] for r in brows], "o-", color=plots.COLOURS[0],
                label="read_sum (L1 and L2)")
    bottom.plot(bx, [r["read_sum_l2_gbs"] for r in brows], "s--", color=plots.COLOURS[2],
                label="read_sum_l2 (L2 only)")
    bottom.axhline(bw["copy_gbs"], color="#777", linestyle=":", linewidth=1.2)
    bottom.annotate(f"copy: {bw['copy_gbs']:,.0f} GB/s", (hi / 1.6, bw["copy_gbs"]),
                    xytext=(0, -6), textcoords="offset points", ha="right", va="top", color="#444")
    best = max(brows, key=lambda r: r["read_sum_gbs"])
    bottom.annotate(f"L1s: {best['read_sum_gbs']:,.0f} GB/s", (best["bytes"], best["read_sum_gbs"]),
                    xytext=(8, 6), textcoords="offset points", ha="left", va="bottom")
    if l2_bw:
        first = min(r["bytes"] for r in brows if l2 / 8 <= r["bytes"] <= l2 / 2)
        bottom.annotate(f"L2: {median(l2_bw):,.0f} GB/s",
                        (1.4 * first, median(l2_bw)), xytext=(0, -10), textcoords="offset points",
                        ha="center", va="top")
    if hbm_bw:
        bottom.annotate(f"HBM: {median(hbm_bw):,.0f} GB/s",
                        (2 * l2, median(hbm_bw)), xytext=(0, 8), textcoords="offset points",
                        ha="left", va="bottom")
    bottom.set_ylabel("GB/s read")
    bottom.set_ylim(0, 1.4 * best["read_sum_gbs"])
    bottom.set_xlabel("working set")
    bottom.set_xscale("log", base=2)
    bottom.set_xticks(ticks)
    bottom.set_xticklabels([_size(t).replace(" ", "\u00a0") for t in ticks], rotation=45, ha="right")
    bottom.set_xlim(lo, hi)
    top.legend(loc="upper left", bbox_to_anchor=(0, 0.84))
    little = [f"{name}: {mb:,.1f} MB in flight" for name, mb in (("L2", in_flight(l2_bw, l2_lat)),
                                                       ("HBM", in_flight(hbm_bw, hbm_lat))) if mb]
    if little:
        top.text(0.98, 0.04, "Little's law (GB/s below × ns above):\n" + "\n".join(little), transform=top.transAxes,
                 ha="right", va="bottom", color="#444")
    bottom.legend(loc="upper left", bbox_to_anchor=(0, 0.84))
    for ax in (top, bottom):
        ax.grid(True, which="major", alpha=0.3)
    dates = sorted({rec.date[:10], rrec.date[:10]})
    top.set_title(f"The memory staircase: {rec.gpu}, {', '.join(dates)}")
    fig.tight_layout()
    return plots.svg(fig)


CHARTS = {"staircase.svg": staircase_chart}
