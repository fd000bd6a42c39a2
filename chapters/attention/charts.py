"""Charts of the chapter "Attention", drawn from its GPU records at build time
(see code/cudabook/plots.py)."""

import re

from cudabook import plots

#: The bf16 benchmark shapes of flash_bf16.py, in the chapter's order, with a title each.
BF16_SHAPES = (("s4096_d64", "S = 4096, D = 64"),
               ("s4096_d128", "S = 4096, D = 128"),
               ("s4096_d64_causal", "S = 4096, D = 64, causal"),
               ("s4096_d128_causal", "S = 4096, D = 128, causal"),
               ("s4000_d128", "S = 4000, D = 128 (not a multiple of a tile)"))
#: SDPA's timings in each panel: (facts key part, label, grey).
SDPA = (("default", "SDPA, PyTorch's choice", "#757575"),
        ("flash", "SDPA, flash backend (FA2)", "#9e9e9e"),
        ("cudnn", "SDPA, cuDNN backend", "#bdbdbd"))
#: The float32 benchmark shapes of attention_fp32.py.
FP32_SHAPES = (("s4096_d64", "S = 4096, D = 64"),
               ("s4096_d128", "S = 4096, D = 128"),
               ("s4096_d128_causal", "S = 4096, D = 128, causal"))
#: Bars of each float32 panel: (facts key prefix, label, colour index or None for PyTorch's).
FP32_BARS = (("three_kernel", "three kernels", 2), ("flash_fp32", "fused (flash_fp32)", 0),
             ("torch", "PyTorch, three ops", None), ("sdpa", "SDPA, float32", None))


def _variants(f: dict, tag: str) -> list[str]:
    """The flash_bf16 variants timed at `tag`, in the record's order."""
    pat = re.compile(rf"^(flash_d\d+_m\d+_n\d+)_{tag}_tflops$")
    return [m.group(1) for k in f if (m := pat.match(k))]


def bf16_chart(chapter: str) -> bytes | None:
    """Every variant's TFLOP/s at every benchmark shape, beside SDPA as
    PyTorch dispatches it and with its flash and cuDNN backends forced, all
    timed in the same run; a dotted line at the target, half the fastest."""
    found = plots.find_facts(chapter, "best_s4096_d128_tflops", "flash_bf16")
    if found is None:
        return plots.pending(chapter, "flash_bf16")
    lst, rec, f = found
    plt = plots.pyplot()
    top = max([v for k, v in f.items() if k.endswith("_tflops") and isinstance(v, (int, float))]
              + [1.0])
    fig, axes = plt.subplots(len(BF16_SHAPES), 1, figsize=(7.5, 15.5), sharex=True)
    for ax, (tag, title) in zip(axes, BF16_SHAPES):
        fastest = f.get(f"sdpa_{tag}_tflops")
        labels, values, colours, texts = [], [], [], []
        for k, name in enumerate(_variants(f, tag)):
            v = f[f"{name}_{tag}_tflops"]
            labels.append(name.removeprefix("flash_"))
            values.append(v)
            colours.append(plots.COLOURS[k % 3])
            texts.append(f"{v:.0f} ({100 * v / fastest:.0f}%)" if fastest else f"{v:.0f}")
        for key, label, grey in SDPA:
            v = f.get(f"sdpa_{key}_{tag}_tflops")
            if v is None:
                continue
            labels.append(label)
            values.append(v)
            colours.append(grey)
            texts.append(f"{v:.0f}")
        if not values:
            ax.set_title(f"{title}: not in this record")
            continue
        plots.labelled_bars(ax, labels, values, colours, texts, gap=top * 0.012, height=0.68,
                            fontsize=11)
        if fastest and tag.startswith("s4096") and not tag.endswith("causal"):
            ax.axvline(f.get("target", 0.5) * fastest, **plots.TARGET_STYLE,
                       label="target: half of the fastest SDPA")
        ax.set_title(title)
    axes[-1].set_xlim(0, top * 1.25)
    axes[-1].set_xlabel("TFLOP/s at B = 8, H = 16 (4·B·H·S²·D FLOPs; causal: half)")
    fig.suptitle(plots.title(lst, rec, "Attention forward, bf16"), fontsize=12)
    fig.tight_layout(rect=(0, 0.05, 1, 0.99))   # the top 1% keeps the title off the first panel's
    plots.legend_below(fig, axes[1], "in brackets: share of the fastest SDPA backend")
    return plots.svg(fig)


def fp32_chart(chapter: str) -> bytes | None:
    """The three kernels, the fused kernel, PyTorch's three operations and
    SDPA, all in float32, at each benchmark shape of the same run."""
    found = plots.find_facts(chapter, "flash_fp32_s4096_d128_tflops", "attention_fp32")
    if found is None:
        return plots.pending(chapter, "attention_fp32")
    lst, rec, f = found
    plt = plots.pyplot()
    top = max([f.get(f"{key}_{tag}_tflops") or 0 for key, _, _ in FP32_BARS for tag, _ in FP32_SHAPES]
              + [1.0])
    fig, axes = plt.subplots(len(FP32_SHAPES), 1, figsize=(7.5, 8.2), sharex=True)
    for ax, (tag, title) in zip(axes, FP32_SHAPES):
        labels, values, colours, texts = [], [], [], []
        for key, label, c in FP32_BARS:
            v = f.get(f"{key}_{tag}_tflops")
            if v is None:
                continue
            labels.append(label)
            values.append(v)
            colours.append(plots.COLOURS[c] if c is not None else "#9e9e9e")
            texts.append(f"{v:.1f}")
        plots.labelled_bars(ax, labels, values, colours, texts, gap=top * 0.012, height=0.68,
                            fontsize=11)
        gb = f.get(f"square_{tag}_gb")
        ax.set_title(f"{title}" + (f" (one S × S matrix: {gb:.1f} GB)" if gb else ""))
    axes[-1].set_xlim(0, top * 1.2)
    axes[-1].set_xlabel("TFLOP/s at B = 8, H = 16 (4·B·H·S²·D FLOPs; causal: half)")
    fig.suptitle(plots.title(lst, rec, "Attention forward, float32"), fontsize=12)
    fig.tight_layout()
    return plots.svg(fig)


CHARTS = {"fp32.svg": fp32_chart, "bf16.svg": bf16_chart}
