"""Charts of the chapter "Convolution", drawn from its GPU records at build
time (see code/cudabook/plots.py)."""

from cudabook import plots

#: The benchmark layers of conv2d.py, in the chapter's order, with a title each.
LAYERS = (("3x3", "3 × 3, 256 → 256 channels, 56 × 56 (the target's layer)"),
          ("1x1_squeeze", "1 × 1 squeeze, 256 → 64 channels, 56 × 56"),
          ("1x1_expand", "1 × 1 expand, 64 → 256 channels, 56 × 56"),
          ("stem", "stem: 7 × 7 stride 2, 3 → 64 channels, 224 × 224"))
#: Bars of each panel: (facts key prefix, label, colour index or None for cuDNN).
BARS = (("direct", "direct", 3), ("im2col", "im2col + GEMM", 1), ("implicit", "implicit GEMM", 0),
        ("cudnn_nchw", "cuDNN, NCHW", None), ("cudnn_nhwc", "cuDNN, NHWC", None))


def layers_chart(chapter: str) -> bytes | None:
    """Each rung's TFLOP/s on each benchmark layer beside cuDNN in both of
    PyTorch's layouts, timed in the same run, with the FP32 FMA chains'
    rate of that run."""
    found = plots.find_facts(chapter, "fma_peak_tflops", "conv2d")
    if found is None:
        return plots.pending(chapter, "conv2d")
    lst, rec, f = found
    plt = plots.pyplot()
    peak = f["fma_peak_tflops"]
    fig, axes = plt.subplots(len(LAYERS), 1, figsize=(7.5, 12.4), sharex=True)
    for ax, (layer, title) in zip(axes, LAYERS):
        cudnn = f.get(f"cudnn_{layer}_tflops")          # the faster of the two layouts
        labels, values, colours, texts = [], [], [], []
        for key, label, c in BARS:
            v = f.get(f"{key}_{layer}_tflops")
            if v is None:
                continue
            labels.append(label)
            values.append(v)
            colours.append(plots.COLOURS[c] if c is not None else "#9e9e9e")
            share = f" ({100 * v / cudnn:.0f}%)" if cudnn and c is not None else ""
            texts.append(f"{v:.1f}{share}")
        plots.labelled_bars(ax, labels, values, colours, texts, gap=peak * 0.012, height=0.68,
                            fontsize=11)
        ax.axvline(peak, **plots.COPY_STYLE,
                   label=f"FP32 FMA chains, same run ({peak:.1f} TFLOP/s)")
        ax.set_title(title)
    axes[-1].set_xlim(0, peak * 1.22)
    axes[-1].set_xlabel("TFLOP/s (2·N·P·Q·K·R·S·C FLOPs per layer), batch of 32")
    fig.suptitle(plots.title(lst, rec, "Convolution, float32"), fontsize=12)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    plots.legend_below(fig, axes[0], "in brackets: share of cuDNN's rate in its faster layout")
    return plots.svg(fig)


CHARTS = {"layers.svg": layers_chart}
