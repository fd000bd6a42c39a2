"""Charts of the chapter "Softmax and layer normalisation", drawn from its
GPU records at build time (see code/cudabook/plots.py)."""

from cudabook import plots

DTYPES = {"f32": "float32", "bf16": "bf16"}
#: Bars of each panel: (facts key with {dt}, label, colour index or None for PyTorch).
SOFTMAX = (("safe_{dt}", "softmax_safe (3 reads)", 1), ("online_{dt}", "softmax_online (2 reads)", 2),
           ("online_chunk_{dt}", "softmax_online_chunk (2 reads)", 4),
           ("block_{dt}", "softmax_block (1 read)", 0), ("torch_{dt}", "torch.softmax", None))
LAYERNORM = (("welford_{dt}", "book's, Welford", 3), ("fwd_{dt}", "book's, two-pass", 0),
             ("torch_fwd_{dt}", "F.layer_norm", None))


def _colour(i):
    return plots.COLOURS[i] if i is not None else "#616161"


def _panel(ax, facts: dict, bars, title: str) -> None:
    """One panel: each bar's share of copy, float32 bars first, then bf16."""
    labels, values, colours = [], [], []
    for dt, dname in DTYPES.items():
        for key, label, c in bars:
            v = facts.get(f"{key.format(dt=dt)}_of_copy")
            if v is not None:
                labels.append(f"{label}, {dname}")
                values.append(100 * v)
                colours.append(_colour(c))
    plots.labelled_bars(ax, labels, values, colours, [f"{v:.0f}%" for v in values], gap=1, height=0.65)
    ax.set_title(title)


def kernels_chart(chapter: str) -> bytes | None:
    """Share of the copy bandwidth (the row read once and written once) of
    each softmax kernel and torch.softmax, and of the LayerNorm forward and
    F.layer_norm, in float32 and bf16, at 32768 x 4096."""
    sm = plots.find_facts(chapter, "block_f32_of_copy", "softmax")
    ln = plots.find_facts(chapter, "fwd_f32_of_copy", "layernorm")
    if sm is None or ln is None:
        return plots.pending(chapter, "softmax" if sm is None else "layernorm")
    (_, rec, f), (_, lrec, g) = sm, ln
    plt = plots.pyplot()
    fig, axes = plt.subplots(2, 1, figsize=(7.5, 9.0), gridspec_kw={"height_ratios": [10, 6]})
    _panel(axes[0], f, SOFTMAX, f"softmax: {rec.gpu}, {rec.date[:10]}")
    _panel(axes[1], g, LAYERNORM, f"LayerNorm forward: {lrec.gpu}, {lrec.date[:10]}")
    for ax in axes:
        ax.set_xlim(0, 115)
        ax.axvline(100, **plots.COPY_STYLE)
    axes[1].set_xlabel("% of the copy bandwidth of the same run, 32768 × 4096\n"
                       "(counting one read and one write of the matrix)")
    fig.tight_layout()
    return plots.svg(fig)


CHARTS = {"kernels.svg": kernels_chart}
