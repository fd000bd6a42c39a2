"""Charts of the chapter "A transformer block, end to end", drawn from its GPU
records at build time (see code/cudabook/plots.py)."""

from cudabook import plots

#: The block's eight launches, in order, with the label each gets on a chart.
STEPS = (("ln_1", "ln_1\nLayerNorm"),
         ("c_attn", "c_attn\n+ bias, to heads"),
         ("attention", "attention\ncausal"),
         ("merge_heads", "merge_heads\nlayout"),
         ("c_proj", "c_proj\n+ bias + x"),
         ("ln_2", "ln_2\nLayerNorm"),
         ("c_fc", "c_fc\n+ bias, GELU"),
         ("c_proj2", "c_proj2\n+ bias + a"))
#: The whole block, timed in one go: (facts key, label, colour, facts key of
#: ours' ratio to it or None). PyTorch's block three ways, as gpt2_block.py
#: times it: its eager forward replayed as one CUDA graph (the target's
#: baseline), the same as Python issues it (host-bound), and torch.compile;
#: each ratio is the median of the rounds in which ours alternated with it.
WHOLE = (("ours_ms", "ours, 8 launches", plots.COLOURS[0], None),
         ("ours_mma_ms", "ours, rung 4's\nproducts", plots.COLOURS[1], None),
         ("graph_ms", "PyTorch eager,\none CUDA graph", "#757575", "of_graph"),
         ("eager_ms", "PyTorch eager,\nissued by Python", "#9e9e9e", "of_eager"),
         ("compile_ms", "torch.compile", "#cfcfcf", "of_compile"))
#: ex3_long_sequences' sequence lengths (8,192 tokens at each).
LENGTHS = (256, 1024, 4096)
GREY = "#9e9e9e"
ATTENTION = plots.COLOURS[2]


def _us(ms: float) -> str:
    return f"{1000 * ms:,.0f} µs" if ms >= 0.0095 else f"{1000 * ms:.1f} µs"


def steps_chart(chapter: str) -> bytes | None:
    """Above, the whole block: ours (eight launches), PyTorch's eager block
    replayed as one CUDA graph and as Python issues it, and torch.compile,
    timed in the same run (a bar the record lacks is left out). Below,
    where the time goes: each of our launches timed alone beside the
    PyTorch ops that do the same step on the same inputs."""
    found = plots.find_facts(chapter, "step_c_fc_ms", "gpt2_block")
    if found is None:
        return plots.pending(chapter, "gpt2_block")
    lst, rec, f = found
    plt = plots.pyplot()
    from matplotlib.patches import Patch
    fig, (top, ax) = plt.subplots(2, 1, figsize=(7.5, 12.6), height_ratios=(4.5, 9.0))

    labels, values, colours, texts = [], [], [], []
    ours_ms = f.get("ours_ms")
    for key, label, colour, of in WHOLE:
        v = f.get(key)
        if v is None:
            continue
        labels.append(label)
        values.append(1000 * v)
        colours.append(colour)
        ratio = ""
        if of is not None:       # the rounds' median where recorded (its time over ours), else the medians'
            over = 1 / f[of] if f.get(of) else (ours_ms / v if ours_ms else None)
            ratio = f" (ours takes {over:.2f}× this)" if over is not None else ""
        texts.append(_us(v) + ratio)
    wmax = max(values + [1.0])
    plots.labelled_bars(top, labels, values, colours, texts, gap=wmax * 0.012, height=0.62, fontsize=11)
    top.set_xlim(0, wmax * 1.6)
    top.set_xlabel("µs for the whole block (median)")
    top.set_title("The whole block")

    ours = [f.get(f"step_{name}_ms") for name, _ in STEPS]
    theirs = [f.get(f"torch_step_{name}_ms") for name, _ in STEPS]
    smax = 1000 * max([v for v in ours + theirs if v is not None] + [0.001])
    y = range(len(STEPS))
    h = 0.38
    for i, (o, t) in enumerate(zip(ours, theirs)):
        for v, dy, colour in ((o, -h / 2, plots.COLOURS[0]), (t, h / 2, GREY)):
            if v is None:
                continue
            ax.barh(i + dy, 1000 * v, height=h, color=colour)
            ax.text(1000 * v + smax * 0.012, i + dy, _us(v), va="center", fontsize=11, bbox=plots.LABEL_BOX)
    ax.set_yticks(list(y), [label for _, label in STEPS])
    ax.invert_yaxis()
    ax.set_xlim(0, smax * 1.25)
    ax.set_xlabel("µs for the step, timed alone (median)")
    ax.set_title("Where the time goes, step by step")
    fig.suptitle(plots.title(lst, rec, "GPT-2 small block, B = 8, T = 1024, bf16"), fontsize=12)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.legend(handles=[Patch(color=plots.COLOURS[0], label="ours: the book's kernels"),
                        Patch(color=GREY, label="PyTorch's ops for the same step")],
               loc="lower center", ncols=2, fontsize=11, frameon=False)
    return plots.svg(fig)


def lengths_chart(chapter: str) -> bytes | None:
    """ex3_long_sequences: at 8,192 tokens and T = 256, 1024, 4096, the sum
    of the eight steps timed alone, ours and PyTorch's, split into the
    attention step and the other seven."""
    found = plots.find_facts(chapter, "t1024_attention_share", "ex3_long_sequences")
    if found is None:
        return plots.pending(chapter, "ex3_long_sequences")
    lst, rec, f = found
    plt = plots.pyplot()
    from matplotlib.patches import Patch
    rows = []                   # (label, attention µs, rest µs, colour of the rest)
    for t in LENGTHS:
        tag = f"t{t}_"
        att, total = f.get(f"{tag}step_attention_ms"), f.get(f"{tag}steps_sum_ms")
        if att is not None and total is not None:
            rows.append((f"T = {t:,}\nours", 1000 * att, 1000 * (total - att), plots.COLOURS[0]))
        theirs = [v for k, v in f.items() if k.startswith(f"{tag}torch_step_") and k.endswith("_ms")]
        tatt = f.get(f"{tag}torch_step_attention_ms")
        if theirs and tatt is not None:
            rows.append((f"T = {t:,}\nPyTorch", 1000 * tatt, 1000 * (sum(theirs) - tatt), GREY))
    height = 1.9 + 0.85 * max(len(rows), 1)
    fig, ax = plt.subplots(figsize=(7.5, height))
    top = max([a + r for _, a, r, _ in rows] + [1.0])
    for i, (label, att, rest, colour) in enumerate(rows):
        ax.barh(i, att, height=0.62, color=ATTENTION)
        ax.barh(i, rest, left=att, height=0.62, color=colour)
        ax.text(att + rest + top * 0.012, i, f"{att + rest:,.0f} µs, attention {100 * att / (att + rest):.0f}%",
                va="center", fontsize=11, bbox=plots.LABEL_BOX)
    ax.set_yticks(range(len(rows)), [label for label, *_ in rows])
    ax.invert_yaxis()
    ax.set_xlim(0, top * 1.55)
    ax.set_xlabel("µs: the eight steps, each timed alone, added up")
    ax.set_title(plots.title(lst, rec, "8,192 tokens a batch, GPT-2 small"), fontsize=12)
    fig.tight_layout(rect=(0, 0.7 / height, 1, 1))
    fig.legend(handles=[Patch(color=ATTENTION, label="the attention step"),
                        Patch(color=plots.COLOURS[0], label="our other seven steps"),
                        Patch(color=GREY, label="PyTorch's other seven steps")],
               loc="lower center", ncols=2, fontsize=11, frameon=False)
    return plots.svg(fig)


CHARTS = {"steps.svg": steps_chart, "lengths.svg": lengths_chart}
