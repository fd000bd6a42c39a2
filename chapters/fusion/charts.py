"""Charts of the chapter "Elementwise fusion", drawn from its GPU records at
build time (see code/cudabook/plots.py)."""

from cudabook import plots

SHAPES = {"8192x3072": "GPT-2 small MLP, 8192 × 3072", "8192x4096": "GPT-2 medium MLP, 8192 × 4096"}
BARS = (("fused", "fused kernel\n(6 B/element)", 0),
        ("unfused", "book's 3 kernels\n(14 B/element)", 1),
        ("torch", "torch eager: add,\ngelu, add (14 B/element)", None))


def times_chart(chapter: str) -> bytes | None:
    """Time of the fused kernel, the book's three unfused kernels and the
    eager PyTorch sequence at both GPT-2 shapes, each labelled with its
    time over the fused kernel's and its share of the copy bandwidth."""
    found = plots.find_facts(chapter, "8192x3072_fused_ms", "bias_gelu_residual")
    if found is None:
        return plots.pending(chapter, "bias_gelu_residual")
    lst, rec, f = found
    plt = plots.pyplot()
    fig, axes = plt.subplots(2, 1, figsize=(7.5, 5.6), sharex=True)
    top = max(f.get(f"{s}_torch_ms") or f.get(f"{s}_unfused_ms") or 0 for s in SHAPES) * 1e3
    for ax, (shape, name) in zip(axes, SHAPES.items()):
        labels, values, colours, texts = [], [], [], []
        for key, label, colour in BARS:
            ms = f.get(f"{shape}_{key}_ms")
            if ms is None:
                continue
            labels.append(label)
            values.append(ms * 1e3)
            colours.append(plots.COLOURS[colour] if colour is not None else "#616161")
            texts.append(f"{ms * 1e3:.0f} µs, {f[f'{shape}_{key}_over_fused']:.2f}×, "
                         f"{100 * f[f'{shape}_{key}_of_copy']:.0f}% of copy")
        plots.labelled_bars(ax, labels, values, colours, texts, gap=top * 0.01, height=0.6)
        ax.set_title(f"{name}, bf16")
    axes[-1].set_xlim(0, top * 2.0)
    axes[-1].set_xlabel("time per call, µs; beside each bar: its time over the fused kernel's,\n"
                        "and its share of the copy bandwidth by the bytes it moves")
    fig.suptitle(plots.title(lst, rec, "residual + gelu(x + bias)"), fontsize=12)
    fig.tight_layout()
    return plots.svg(fig)


CHARTS = {"times.svg": times_chart}
