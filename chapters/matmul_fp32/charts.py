"""Charts of the chapter "Matrix multiplication on CUDA cores (FP32)", drawn
from its GPU records at build time (see code/cudabook/plots.py)."""

from cudabook import plots

RUNGS = ("naive", "coalesced", "smem", "1d", "2d", "vec", "warptile", "double_buffer")
SHAPES = ("4096x4096x4096", "4097x3001x1023")


def ladder_chart(chapter: str) -> bytes | None:
    """Each rung of the SGEMM ladder at both benchmark shapes, in TFLOP/s,
    beside cuBLAS SGEMM timed in the same run, with 80% of cuBLAS (the
    target, set for 4096^3) and the FP32 FMA chains' rate of the same run."""
    found = plots.find_facts(chapter, "fma_peak_tflops", "sgemm")
    if found is None:
        return plots.pending(chapter, "sgemm")
    lst, rec, f = found
    plt = plots.pyplot()
    peak = f["fma_peak_tflops"]
    target = f.get("target", 0.8)
    fig, axes = plt.subplots(2, 1, figsize=(7.5, 9.6), sharex=True)
    for ax, shape in zip(axes, SHAPES):
        cublas = f.get(f"cublas_{shape}_tflops")
        best = f.get(f"best_{shape}")
        labels, values, colours = [], [], []
        for rung in RUNGS:
            v = f.get(f"{rung}_{shape}_tflops")
            if v is None:
                continue
            labels.append(rung.replace("_", " "))
            values.append(v)
            colours.append(plots.COLOURS[0] if rung == best else plots.COLOURS[1])
        if cublas is not None:
            labels.append("cuBLAS")
            values.append(cublas)
            colours.append("#9e9e9e")
        texts = [f"{v:.1f}" + (f" ({100 * v / cublas:.1f}%)" if cublas and label != "cuBLAS" else "")
                 for label, v in zip(labels, values)]
        plots.labelled_bars(ax, labels, values, colours, texts, gap=peak * 0.012, height=0.68,
                            fontsize=11)
        if cublas is not None:
            ax.axvline(target * cublas, color="#6a1b9a", linestyle=":", linewidth=1.8,
                       label=f"{100 * target:.0f}% of cuBLAS (the target, set at 4096³)")
        ax.axvline(peak, **plots.COPY_STYLE, label=f"FP32 FMA chains, same run ({peak:.1f} TFLOP/s)")
        m, n, k = shape.split("x")
        ax.set_title(f"M × N × K = {m} × {n} × {k}")
    axes[-1].set_xlim(0, peak * 1.22)
    axes[-1].set_xlabel("TFLOP/s (2·M·N·K FLOPs per product)")
    fig.suptitle(plots.title(lst, rec, "SGEMM ladder"), fontsize=12)
    fig.tight_layout(rect=(0, 0.075, 1, 1))
    plots.legend_below(fig, axes[0], "in brackets: the rung's rate as a share of cuBLAS's")
    return plots.svg(fig)


CHARTS = {"ladder.svg": ladder_chart}
