"""Charts of the chapter "Why GPUs", drawn from its GPU records at build time
(see code/cudabook/plots.py)."""

from cudabook import plots


def crossover_chart(chapter: str) -> bytes | None:
    """Time against size for each CPU version, the GPU kernel alone and the
    GPU including pageable and pinned copies, from gelu_cpu_vs_gpu's
    recorded sweep."""
    found = plots.find_facts(chapter, "sweep", "gelu_cpu_vs_gpu")
    if found is None:
        return plots.pending(chapter, "gelu_cpu_vs_gpu")
    lst, rec, f = found
    plt = plots.pyplot()
    rows = f["sweep"]
    n = [r["n"] for r in rows]
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    styles = {"numpy": ("o-", plots.COLOURS[1]), "torch_cpu_1": ("d--", plots.COLOURS[5]),
              "torch_cpu": ("D-", plots.COLOURS[3])}
    for key, label in f["cpu_labels"].items():
        marker, colour = styles.get(key, ("o-", "#555"))
        ax.loglog(n, [r[f"{key}_ms"] for r in rows], marker, color=colour, label=f"CPU: {label}")
    ax.loglog(n, [r["gpu_with_copies_ms"] for r in rows], "s-", color=plots.COLOURS[2],
              label="GPU, with both copies (pageable)")
    if "gpu_with_pinned_copies_ms" in rows[0]:
        ax.loglog(n, [r["gpu_with_pinned_copies_ms"] for r in rows], "s--", color=plots.COLOURS[4],
                  label="GPU, with both copies (pinned)")
    ax.loglog(n, [r["gpu_kernel_ms"] for r in rows], "^-", color=plots.COLOURS[0], label="GPU, kernel alone")
    cross = f.get("crossover_with_copies_vs_numpy")
    if isinstance(cross, int):
        ax.axvline(cross, color="#777", linestyle=":", linewidth=1.2)
        ax.annotate(f"GPU + pageable copies\nbeats NumPy from {cross:,}", (cross, max(r["numpy_ms"] for r in rows) / 3),
                    xytext=(6, 0), textcoords="offset points", color="#444")
    plots.plain_log_ticks(ax.xaxis)
    plots.plain_log_ticks(ax.yaxis)
    ax.set_xlabel("elements")
    ax.set_ylabel("time, ms (median)")
    ax.set_title(plots.title(lst, rec, "GELU"))
    ax.legend(loc="upper left")
    ax.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    return plots.svg(fig)


CHARTS = {"crossover.svg": crossover_chart}
