"""A histogram of bytes: atomics in global memory, privatised in shared memory, a copy a warp.

Draft for issue #38 (privatisation, in Reductions and scans), not yet a
listing, and not yet run on a GPU: run it from the repository root with
PYTHONPATH=code. 256 counters, one per byte value; each kernel reads the
bytes 16 at a time in a grid-stride loop over one wave of blocks.

Run:    PYTHONPATH=code python3 docs/assets/experiments/part2_draft/histogram.py [--n N] [--seed S] [--bench]
Checks: every kernel at n = 1, 31, 32, 33, 1,000,003 bytes (and the
        benchmark's 2^28 under --bench), uniform random bytes and the
        book's own text repeated (skewed: spaces and 'e' dominate): all 256
        counts equal to NumPy's bincount, exactly (counts are integers).
Bench:  at 2^28 bytes, uniform and text: each kernel's GB/s (the bytes read
        once) against the copy bandwidth of the same run, hist_warps in
        alternation with torch.bincount (on uint8 widened to int64 first,
        as bincount requires, the widening timed with it: what a user pays)
        and torch.histc (float32 input, likewise).
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "code"))
import cudabook as cb  # noqa: E402
from cudabook import evidence  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
THREADS, BINS = 256, 256
KINDS = ("global", "shared", "warps")
BENCH_N = 1 << 28
ROOT = Path(__file__).resolve().parents[4]


def load_kernels():
    module = cb.compile(KERNEL_FILE)
    k = {kind: module.get_function(f"hist_{kind}").prepare("PqP") for kind in KINDS}
    k["tail"] = module.get_function("hist_tail").prepare("PqqP")
    return k


# --8<-- [start:launch]
def histogram(kernels, kind: str, data, counts, sm_count: int) -> None:
    """counts = the number of each byte value in data (counts zeroed here).
    data: 1-D uint8 GPUArray on a 16-byte boundary; counts: 256 uint32."""
    import pycuda.driver as cuda

    if kind not in KINDS:
        raise ValueError(f"kind: expected one of {KINDS}, got {kind!r}")
    cb.check_array("data", data, dtype=np.uint8, ndim=1, on_device=True, alignment=16)
    n = cb.check_size("data.size", data.size)
    cb.check_array("counts", counts, dtype=np.uint32, shape=(BINS,), on_device=True)
    cuda.memset_d32(counts.gpudata, 0, BINS)
    n16 = n // 16
    if n16:
        blocks = min(8 * sm_count, cb.ceil_div(n16, THREADS))
        kernels[kind].prepared_call((blocks, 1, 1), (THREADS, 1, 1), data.gpudata, np.int64(n16), counts.gpudata)
    if n % 16:
        kernels["tail"].prepared_call((1, 1, 1), (16, 1, 1), data.gpudata, np.int64(16 * n16), np.int64(n),
                                      counts.gpudata)
# --8<-- [end:launch]


def book_text() -> np.ndarray:
    """The chapters' Markdown as bytes: a skewed input, as text is."""
    pages = sorted((ROOT / "chapters").glob("*/index.md"))
    return np.frombuffer(b"\n".join(p.read_bytes() for p in pages), dtype=np.uint8)


def inputs(n, kind, rng):
    if kind == "uniform":
        return rng.integers(0, 256, n, dtype=np.uint8)
    text = book_text()
    return np.resize(text, n)                        # the text, repeated to n bytes


def check(kernels, n, rng, sm_count):
    from pycuda import gpuarray

    counts = gpuarray.empty(BINS, np.uint32)
    out = {}
    for what in ("uniform", "text"):
        x = inputs(n, what, rng)
        want = np.bincount(x, minlength=BINS).astype(np.uint64)
        g = gpuarray.to_gpu(x)
        for kind in KINDS:
            histogram(kernels, kind, g, counts, sm_count)
            got = counts.get().astype(np.uint64)
            ok = np.array_equal(got, want)
            bad = int(np.sum(got != want))
            cb.report_check(cb.expect(f"{kind} n={n:,} {what}: all 256 counts", ok,
                                      "exact" if ok else f"{bad} counts differ, e.g. bin {int(np.argmax(got != want))}"))
        out[what] = g
    return out, counts


def bench(kernels, seed, sm_count):
    import torch

    rng = np.random.default_rng(seed)
    data, counts = check(kernels, BENCH_N, rng, sm_count)
    ceiling = ("device-to-device copy", cb.ceiling())
    for what, g in data.items():
        t = torch.from_numpy(g.get()).cuda()
        for kind in KINDS:
            base = None
            if kind == "warps":
                base = ("torch.bincount(x.long(), minlength=256)", lambda t=t: torch.bincount(t.long(), minlength=256))
            evidence.benchmark(f"histogram {kind} {what}", lambda kind=kind, g=g: histogram(kernels, kind, g, counts,
                                                                                           sm_count),
                               bytes_moved=BENCH_N, ceiling=ceiling, baseline=base)
        evidence.benchmark(f"histogram warps {what} vs histc", lambda g=g: histogram(kernels, "warps", g, counts,
                                                                                   sm_count),
                           bytes_moved=BENCH_N, ceiling=ceiling,
                           baseline=("torch.histc(x.float(), 256, 0, 255)",
                                     lambda t=t: torch.histc(t.float(), bins=256, min=0, max=255)))


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, n=1_000_003, bench_n=0)
    info = cb.init()
    kernels = load_kernels()
    rng = np.random.default_rng(args.seed)
    for n in sorted({1, 31, 32, 33, args.n}):
        check(kernels, n, rng, info.sm_count)
    if args.bench:
        bench(kernels, args.seed, info.sm_count)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
