"""Charts of the chapter "Tensor cores", drawn from its GPU records at build
time (see code/cudabook/plots.py)."""

from cudabook import plots

SHAPES = ("8192", "4096")        # tc_gemm's benchmark shapes, M = N = K
LABELS = {"tc_wmma": "1  wmma", "tc_wmma_smem": "2  wmma_smem", "tc_mma": "3  mma",
          "tc_mma_pipelined": "4  mma_pipelined"}
#: Chapter 11's best FP32 rung, timed at 4096^3 in its own run.
FP32_CHAPTER, FP32_LISTING = "matmul_fp32", "sgemm"
FP32_RATE = "double_buffer_4096x4096x4096_tflops"


def _fp32() -> dict | None:
    """The FP32 best rung's TFLOP/s at 4096^3 and the FMA chains' rate of
    the same run, from chapter 11's record, or None without one."""
    found = plots.find_facts(FP32_CHAPTER, FP32_RATE, FP32_LISTING)
    if found is None:
        return None
    _, rec, f = found
    return {"rung": f[FP32_RATE], "peak": f.get("fma_peak_tflops"), "gpu": rec.gpu}


def ladder_chart(chapter: str) -> bytes | None:
    """TFLOP/s of each rung at 8192^3 and 4096^3, beside cuBLAS bf16
    (torch.matmul) of the same run and the target line (half of cuBLAS, at
    8192^3); for scale, chapter 11's best FP32 rung and its FMA roof (another
    run) at 4096^3."""
    found = plots.find_facts(chapter, "8192_rows", "tc_gemm")
    if found is None:
        return plots.pending(chapter, "tc_gemm")
    lst, rec, f = found
    fp32 = _fp32()
    plt = plots.pyplot()
    fig, axes = plt.subplots(2, 1, figsize=(7.5, 8.2), sharex=True)
    top = max(f.get(f"cublas_{s}_tflops") or 0 for s in SHAPES)
    for ax, shape in zip(axes, SHAPES):
        rows = f.get(f"{shape}_rows") or []
        cublas = f.get(f"cublas_{shape}_tflops")
        best = f.get(f"best_{shape}")
        labels, values, colours, same_run = [], [], [], []
        for r in rows:
            labels.append(LABELS.get(r["rung"], r["rung"]))
            values.append(r["flops"] / 1e12)
            colours.append(plots.COLOURS[0] if r["rung"] == best else plots.COLOURS[1])
            same_run.append(True)
        if cublas:
            labels.append("cuBLAS bf16\n(torch.matmul)")
            values.append(cublas)
            colours.append("#616161")
            same_run.append(True)
        if fp32 and shape == "4096":
            labels.append("best FP32 rung\n(ch. 11, other run)")
            values.append(fp32["rung"])
            colours.append(plots.COLOURS[2])
            same_run.append(False)          # no share of a cuBLAS timed in another run
        texts = [f"{v:,.0f}" + (f" ({100 * v / cublas:.0f}%)" if cublas and same else "")
                 for v, same in zip(values, same_run)]
        plots.labelled_bars(ax, labels, values, colours, texts, gap=top * 0.01, height=0.65)
        if cublas and shape == "8192":          # the target is set at 8192^3 only
            target = f.get("target", 0.5)
            ax.axvline(target * cublas, **plots.TARGET_STYLE,
                       label=f"target: {100 * target:.0f}% of cuBLAS bf16 at 8192³")
        if fp32 and fp32.get("peak") and shape == "4096":
            ax.axvline(fp32["peak"], color="#ef6c00", linestyle="--", linewidth=1.5,
                       label=f"FP32 FMA roof ({fp32['peak']:.0f} TFLOP/s, ch. 11's run)")
        ax.set_title(f"{shape} × {shape} × {shape}, bf16 in, fp32 out")
    axes[-1].set_xlim(0, top * 1.25)
    axes[-1].set_xlabel("TFLOP/s (2·M·N·K FLOPs per second); in brackets, share of cuBLAS bf16")
    fig.suptitle(plots.title(lst, rec, "tensor-core ladder"), fontsize=12)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    handles, names = [], []
    for ax in axes:
        h, n = ax.get_legend_handles_labels()
        handles += h
        names += n
    fig.legend(handles, names, loc="lower center", ncols=1, fontsize=11, frameon=False)
    return plots.svg(fig)


def hopper_chart(chapter: str) -> bytes | None:
    """wgmma_gemm beside rung 4 and cuBLAS bf16 (torch.matmul), all from
    wgmma_gemm's run, at 8192^3 and 4096^3, with its target (80% of cuBLAS
    at 8192^3)."""
    found = plots.find_facts(chapter, "wgmma_gemm_8192_tflops", "wgmma_gemm")
    if found is None:
        return plots.pending(chapter, "wgmma_gemm")
    lst, rec, f = found
    bars = (("tc_mma_pipelined", "4  mma_pipelined\n(fp32 out)", plots.COLOURS[1]),
            ("wgmma_gemm", "wgmma_gemm", plots.COLOURS[0]),
            ("cublas", "cuBLAS bf16\n(torch.matmul)", "#616161"))
    plt = plots.pyplot()
    fig, axes = plt.subplots(2, 1, figsize=(7.5, 5.6), sharex=True)
    top = max(f.get(f"{key}_{s}_tflops") or 0 for key, _, _ in bars for s in SHAPES)
    for ax, shape in zip(axes, SHAPES):
        cublas = f.get(f"cublas_{shape}_tflops")
        present = [(label, f[f"{key}_{shape}_tflops"], colour) for key, label, colour in bars
                   if f.get(f"{key}_{shape}_tflops") is not None]
        labels = [p[0] for p in present]
        values = [p[1] for p in present]
        texts = [f"{v:,.0f}" + (f" ({100 * v / cublas:.0f}%)" if cublas else "") for v in values]
        plots.labelled_bars(ax, labels, values, [p[2] for p in present], texts,
                            gap=top * 0.01, height=0.6)
        if cublas and shape == "8192" and f.get("target"):
            ax.axvline(f["target"] * cublas, **plots.TARGET_STYLE,
                       label=f"target: {100 * f['target']:.0f}% of cuBLAS bf16 at 8192³")
        ax.set_title(f"{shape} × {shape} × {shape}, bf16 in")
    axes[-1].set_xlim(0, top * 1.3)
    axes[-1].set_xlabel("TFLOP/s (2·M·N·K FLOPs per second)")
    fig.suptitle(plots.title(lst, rec, "Hopper: TMA and wgmma"), fontsize=12)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    plots.legend_below(fig, axes[0], "in brackets: share of cuBLAS bf16, timed in the same run")
    return plots.svg(fig)


CHARTS = {"ladder.svg": ladder_chart, "hopper.svg": hopper_chart}
