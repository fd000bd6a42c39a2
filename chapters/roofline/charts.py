"""Charts of the chapter "Profile before you optimise: Nsight and the
roofline", drawn from the GPU records at build time (see
code/cudabook/plots.py)."""

from cudabook import listings, plots, record

#: Kernels of earlier chapters whose FLOPs per byte are a property of the
#: algorithm: (listing, benchmark, FLOPs per element, bytes per element, label).
#: The bytes are those each benchmark counts; the FLOPs are counted from the
#: code (GELU: its 8 multiplications and additions, and tanh counted as one).
PLACED = [
    ("first_kernel/add_vectorized", "add_vectorized", 1, 12, "c = a + b (add_vectorized)"),
    ("first_kernel/ex4_saxpy", "saxpy", 2, 12, "y = a·x + y (ex4_saxpy)"),
    ("reductions/scan", "scan_lookback", 1, 8, "prefix sum (scan_lookback)"),
    ("threads_warps/warp_sum", "warp_sum", 1, 4, "sum (warp_sum)"),
    ("reductions/sum_ladder", "sum_vectorized", 1, 4, "sum (sum_vectorized)"),
    ("why_gpus/gelu_cpu_vs_gpu", "gelu kernel", 9, 8, "GELU (gelu_cpu_vs_gpu)"),
    ("why_gpus/ex4_gelu_vectorized", "gelu_vectorized", 9, 8, "GELU (ex4_gelu_vectorized)"),
]
MATMUL = 8192   # peak_flops.py's matrix size: 2 N^3 FLOPs, 3 N^2 elements read or written at least once
MARKERS = "s^vD<>ph*"
#: The H200's HBM3e bandwidth by NVIDIA's datasheet (H200 Tensor Core GPU
#: datasheet, SXM: 4.8 TB/s): a peak of the interface, drawn only on a
#: chart whose record ran on an H200.
H200_HBM3E_BYTES_PER_S = 4.8e12


def read_stream_bytes_per_s() -> float | None:
    """The read-only stream's rate: `read_sum` over the largest buffer of
    the caches chapter's staircase (every pass from HBM), or None."""
    rec = record.load(listings.find("caches/read_staircase"))
    sweep = rec.facts().get("sweep") if rec else None
    if not sweep:
        return None
    return max(sweep, key=lambda r: r["bytes"])["read_sum_gbs"] * 1e9


def bf16_rate() -> float | None:
    """torch.matmul in bf16 at 8192^3 (peak_flops.py's run): the tensor-core roof."""
    rec = record.load(listings.find("roofline/peak_flops"))
    return rec.facts().get("matmul_bf16_flops") if rec else None


def _placed() -> list[tuple[str, float, float]]:
    """(label, FLOPs per byte, measured FLOP/s) of each earlier kernel that has a record."""
    out = []
    for lid, bench, flops, nbytes, label in PLACED:
        rec = record.load(listings.find(lid))
        b = next((b for b in rec.benchmarks if b.name == bench), None) if rec else None
        if b is not None:
            out.append((label, flops / nbytes, b.bytes_per_s * flops / nbytes))
    rec = record.load(listings.find("roofline/peak_flops"))
    f = rec.facts() if rec else {}
    for key, size, label in (("matmul_fp32_flops", 4, "torch.matmul, fp32 (peak_flops)"),
                             ("matmul_bf16_flops", 2, "torch.matmul, bf16 (peak_flops)")):
        if f.get(key):
            out.append((label, 2 * MATMUL**3 / (3 * MATMUL**2 * size), f[key]))
    return out


def roofline_chart(chapter: str) -> bytes | None:
    """The roofs measured by intensity_sweep (copy bandwidth and the FP32 FMA
    rate, one run), the sweep's own points, and earlier kernels placed by
    their counted intensity and recorded rate; beside them the bf16
    tensor-core roof (peak_flops's torch.matmul), the read-only stream's
    roof (the caches chapter's staircase) and, on an H200, the datasheet's
    HBM3e bandwidth."""
    found = plots.find_facts(chapter, "sweep", "intensity_sweep")
    if found is None:
        return plots.pending(chapter, "intensity_sweep")
    lst, rec, f = found
    plt = plots.pyplot()
    bw, peak = f["copy_gbs"] * 1e9, f["fp32_tflops"] * 1e12
    ridge = peak / bw
    placed = _placed()
    lo = min([r["flops_per_byte"] for r in f["sweep"]] + [i for _, i, _ in placed]) / 2
    hi = max([r["flops_per_byte"] for r in f["sweep"]] + [i for _, i, _ in placed]) * 2
    fig, ax = plt.subplots(figsize=(7.5, 7.9))
    ax.loglog([lo, ridge, hi], [lo * bw / 1e12, peak / 1e12, peak / 1e12], "-", color="#c62828", linewidth=2.2,
              label=f"roofs: copy {f['copy_gbs']:,.0f} GB/s, FP32 {f['fp32_tflops']:.1f} TFLOP/s")
    ax.axvline(ridge, color="#777", linestyle=":", linewidth=1.2)
    ax.annotate(f"ridge point\n{ridge:.1f} FLOP/B", (ridge, lo * bw / 1e12 * 4), xytext=(6, 0),
                textcoords="offset points", color="#444")
    top = peak
    tc = bf16_rate()
    if tc:                                   # the tensor cores' roof, over the same copy bandwidth
        tc_ridge = tc / bw
        hi = max(hi, tc_ridge * 4)
        top = max(top, tc)
        ax.loglog([ridge, tc_ridge, hi], [peak / 1e12, tc / 1e12, tc / 1e12], "--", color="#6a1b9a",
                  linewidth=1.8, label=f"bf16 tensor cores: torch.matmul {tc / 1e12:,.0f} TFLOP/s")
        ax.axvline(tc_ridge, color="#6a1b9a", linestyle=":", linewidth=1.0)
        ax.annotate(f"bf16 ridge point\n{tc_ridge:,.0f} FLOP/B", (tc_ridge, lo * bw / 1e12 * 4), xytext=(6, 0),
                    textcoords="offset points", color="#6a1b9a")
    reads = read_stream_bytes_per_s()
    if reads:                                # kernels that only read: no turns of the bus
        ax.loglog([lo, ridge * 0.8], [lo * reads / 1e12, ridge * 0.8 * reads / 1e12], "-.", color="#2e7d32",
                  linewidth=1.5, label=f"reads only: {reads / 1e9:,.0f} GB/s (caches chapter)")
    if "H200" in rec.gpu:
        ax.loglog([lo, ridge * 0.8], [lo * H200_HBM3E_BYTES_PER_S / 1e12, ridge * 0.8 * H200_HBM3E_BYTES_PER_S / 1e12],
                  ":", color="#555", linewidth=1.5, label="HBM3e, datasheet: 4,800 GB/s")
    rows = f["sweep"]
    ax.loglog([r["flops_per_byte"] for r in rows], [r["gflops"] / 1e3 for r in rows], "o-",
              color=plots.COLOURS[0], markersize=5, linewidth=1.2, alpha=0.8,
              label="y = x after F FMAs (intensity_sweep)")
    for i, (label, intensity, rate) in enumerate(placed):
        ax.loglog([intensity], [rate / 1e12], MARKERS[i % len(MARKERS)], markersize=8, linestyle="none",
                  color=plots.COLOURS[(i + 1) % len(plots.COLOURS)], markeredgecolor="black",
                  markeredgewidth=0.6, zorder=5, label=label)
        if "bf16" in label:
            ax.annotate("tensor cores", (intensity, rate / 1e12), xytext=(0, -12), textcoords="offset points",
                        ha="center", va="top", color="#444")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo * bw / 1e12 / 2, max(top, max(r for _, _, r in placed)) / 1e12 * 3)
    plots.plain_log_ticks(ax.xaxis)
    plots.plain_log_ticks(ax.yaxis)
    ax.set_xlabel("arithmetic intensity, FLOPs per byte (counted from the algorithm)")
    ax.set_ylabel("TFLOP/s (measured)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncols=2, fontsize=11, frameon=False)
    ax.set_title(plots.title(lst, rec, "Roofline"))
    fig.tight_layout()
    return plots.svg(fig)


CHARTS = {"roofline.svg": roofline_chart}
