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
#: SDPA's timings in each panel: (facts key part, label, grey). "default" is
#: SDPA as a user calls it, timed in alternation with the best variant: the
#: target's baseline.
SDPA = (("default", "SDPA as called", "#757575"),
        ("flash", "SDPA, flash forced (FA2)", "#9e9e9e"),
        ("cudnn", "SDPA, cuDNN forced", "#bdbdbd"))
#: The backend PyTorch's dispatcher picked for SDPA as called (facts
#: sdpa_<tag>_choice, an SDPBackend name), as the chart names it.
CHOICES = {"CUDNN_ATTENTION": "cuDNN", "FLASH_ATTENTION": "flash",
           "EFFICIENT_ATTENTION": "memory-efficient", "MATH": "math"}
#: The float32 benchmark shapes of attention_fp32.py.
FP32_SHAPES = (("s4096_d64", "S = 4096, D = 64"),
               ("s4096_d128", "S = 4096, D = 128"),
               ("s4096_d128_causal", "S = 4096, D = 128, causal"))
#: Bars of each float32 panel: (facts key prefix, label, colour index or a
#: grey for PyTorch's), as attention_fp32.py's TORCH_WAYS names PyTorch's.
#: SDPA's memory-efficient backend, the one PyTorch picks for float32, runs
#: on the tensor cores (CUTLASS's 3xTF32); its math backend, with TF32 off,
#: is the pure-FP32 reference (a record from before it was timed has no bar).
FP32_BARS = (("three_kernel", "three kernels", 2), ("flash_fp32", "fused (flash_fp32)", 0),
             ("torch", "PyTorch three ops,\nTF32 off", "#9e9e9e"),
             ("sdpa_math", "SDPA math backend,\nTF32 off", "#9e9e9e"),
             ("sdpa", "SDPA memory-efficient\n(3xTF32 on tensor cores)", "#bdbdbd"))


def _variants(f: dict, tag: str) -> list[str]:
    """The flash_bf16 variants timed at `tag`, in the record's order."""
    pat = re.compile(rf"^(flash_d\d+_m\d+_n\d+)_{tag}_tflops$")
    return [m.group(1) for k in f if (m := pat.match(k))]


def _as_called(f: dict, tag: str) -> str:
    """The label of SDPA as a user calls it, with the backend PyTorch's
    dispatcher picked where the record says."""
    picked = CHOICES.get(f.get(f"sdpa_{tag}_choice"))
    return f"SDPA as called ({picked})" if picked else "SDPA as called"


def bf16_chart(chapter: str) -> bytes | None:
    """Every variant's TFLOP/s at every benchmark shape, beside SDPA as a
    user calls it (PyTorch picks the backend) and with its flash and cuDNN
    backends forced, all timed in the same run. In brackets, each variant's
    share of SDPA as called (for the best variant, the median of the
    alternated rounds' ratios, which the target is judged on); a dotted
    line at the target, half of SDPA as called. A bar whose timing the
    record lacks is left out."""
    found = plots.find_facts(chapter, "best_s4096_d128_tflops", "flash_bf16")
    if found is None:
        return plots.pending(chapter, "flash_bf16")
    lst, rec, f = found
    plt = plots.pyplot()
    target = f.get("target", 0.5)
    panels = []                 # (tag, title, labels, values, colours, texts, target line or None)
    for tag, title in BF16_SHAPES:
        called = f.get(f"sdpa_default_{tag}_tflops")
        best = f.get(f"best_{tag}")
        labels, values, colours, texts = [], [], [], []
        for k, name in enumerate(_variants(f, tag)):
            v = f[f"{name}_{tag}_tflops"]
            labels.append(name.removeprefix("flash_"))
            values.append(v)
            colours.append(plots.COLOURS[k % 3])
            share = f.get(f"best_{tag}_of_sdpa_default") if name == best else None
            if share is None and called:
                share = v / called
            texts.append(f"{v:.0f} ({100 * share:.0f}%)" if share is not None else f"{v:.0f}")
        for key, label, grey in SDPA:
            v = f.get(f"sdpa_{key}_{tag}_tflops")
            if v is None:
                continue
            labels.append(_as_called(f, tag) if key == "default" else label)
            values.append(v)
            colours.append(grey)
            texts.append(f"{v:.0f}")
        line = (target * called if called and tag.startswith("s4096") and not tag.endswith("causal")
                else None)
        panels.append((tag, title, labels, values, colours, texts, line))
    top = max([v for p in panels for v in p[3]] + [p[6] for p in panels if p[6]] + [1.0])
    fig, axes = plt.subplots(len(BF16_SHAPES), 1, figsize=(7.5, 15.5), sharex=True)
    for ax, (tag, title, labels, values, colours, texts, line) in zip(axes, panels):
        if not values:
            ax.set_title(f"{title}: not in this record")
            continue
        plots.labelled_bars(ax, labels, values, colours, texts, gap=top * 0.012, height=0.68,
                            fontsize=11)
        if line:
            ax.axvline(line, **plots.TARGET_STYLE, label="target: half of SDPA as called")
        ax.set_title(title)
    axes[-1].set_xlim(0, top * 1.25)
    axes[-1].set_xlabel("TFLOP/s at B = 8, H = 16 (4·B·H·S²·D FLOPs; causal: half)")
    fig.suptitle(plots.title(lst, rec, "Attention forward, bf16"), fontsize=12)
    fig.tight_layout(rect=(0, 0.05, 1, 0.99))   # the top 1% keeps the title off the first panel's
    plots.legend_below(fig, axes[1], "in brackets: share of SDPA as called")
    return plots.svg(fig)


def fp32_chart(chapter: str) -> bytes | None:
    """The three kernels, the fused kernel, PyTorch's three operations and
    SDPA's math backend (TF32 off) and memory-efficient backend (3xTF32 on
    the tensor cores), all on float32 data, at each benchmark shape of the
    same run. A bar whose timing the record lacks is left out."""
    found = plots.find_facts(chapter, "flash_fp32_s4096_d128_tflops", "attention_fp32")
    if found is None:
        return plots.pending(chapter, "attention_fp32")
    lst, rec, f = found
    plt = plots.pyplot()
    top = max([f.get(f"{key}_{tag}_tflops") or 0 for key, _, _ in FP32_BARS for tag, _ in FP32_SHAPES]
              + [1.0])
    fig, axes = plt.subplots(len(FP32_SHAPES), 1, figsize=(7.5, 11.0), sharex=True)
    for ax, (tag, title) in zip(axes, FP32_SHAPES):
        labels, values, colours, texts = [], [], [], []
        for key, label, c in FP32_BARS:
            v = f.get(f"{key}_{tag}_tflops")
            if v is None:
                continue
            labels.append(label)
            values.append(v)
            colours.append(plots.COLOURS[c] if isinstance(c, int) else c)
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
