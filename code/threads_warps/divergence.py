"""Warp divergence: branching by thread versus branching by warp.

Two kernels do the same amount of work: every element runs ROUNDS rounds of
either a sine map or a cosine map. branch_by_thread chooses the path by
thread parity (threadIdx.x & 1), so the two paths alternate lane by lane and
each warp must run both, one after the other. branch_by_warp chooses it by
warp parity ((threadIdx.x / 32) & 1), so each warp runs one path only.
Same instructions per element, same answer per path; the by-thread version
should take about twice as long.

Run:    python code/threads_warps/divergence.py [--n N] [--seed S] [--bench]
Checks: every element of both outputs against the same maps in float64
        (k=16, scale 1: 32 rounds of float32 sinf/cosf in maps that halve
        errors each round, on values in [-1, 1]). The float64 maps of every
        element are computed on the GPU by both_paths64, a plain kernel
        without branches, itself checked against NumPy's float64 on a sample
        (every element below 2 million; above, every 997th and the last
        1,000) to 1e-12.
Bench:  median time of each kernel at n = 16,777,259 and the ratio
        by-thread / by-warp (facts parity_ms, warp_ms, slowdown).
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BLOCK = 256      # a multiple of 64, so thread and warp parity follow the global index
ROUNDS = 32      # must match divergence.cu


def reference(x, sine):
    """The float64 result: sine path where `sine` is True, cosine path elsewhere."""
    x = x.astype(np.float64)
    vs, vc = x.copy(), x.copy()
    for _ in range(ROUNDS):
        vs = 0.5 * (np.sin(vs) + x)
        vc = 0.5 * (np.cos(vc) + x)
    return np.where(sine, vs, vc)


def takes_sine_path(index, by):
    """Which elements the kernel sends down the sine path (BLOCK % 64 == 0)."""
    lane_in_block = index % BLOCK
    return (lane_in_block & 1) == 1 if by == "thread" else ((lane_in_block // 32) & 1) == 1


def check_sample(n, full_below=2_000_000):
    if n < full_below:
        return np.arange(n)
    return np.unique(np.concatenate([np.arange(0, n, 997), np.arange(n - 1000, n)]))


def load_kernels():
    module = cb.compile(KERNEL_FILE)
    return {by: module.get_function(f"branch_by_{by}").prepare("PPi") for by in ("thread", "warp")}


def reference_everywhere(x, x_gpu):
    """Both float64 maps of every element, from both_paths64 on the GPU,
    checked against NumPy's float64 on a sample."""
    from pycuda import gpuarray

    n = x.size
    sine, cosine = gpuarray.empty(n, np.float64), gpuarray.empty(n, np.float64)
    cb.poison(sine)
    cb.poison(cosine)
    kernel = cb.compile(KERNEL_FILE).get_function("both_paths64").prepare("PPPi")
    kernel.prepared_call((cb.ceil_div(n, BLOCK), 1, 1), (BLOCK, 1, 1), x_gpu.gpudata, sine.gpudata,
                         cosine.gpudata, np.int32(n))
    sine, cosine = sine.get(), cosine.get()
    s = check_sample(n)
    for name, got, path in (("sine", sine, True), ("cosine", cosine, False)):
        cb.report_check(cb.compare(f"float64 {name} map (GPU) = NumPy float64, on a sample", got[s],
                                   reference(x[s], np.full(s.size, path)), k=1e4, scale=1.0, n=n))
    return sine, cosine


def launch(kernel, x, y):
    """y = the kernel's map of x. x, y: 1-D float32 GPUArrays of one size."""
    cb.check_array("x", x, dtype=np.float32, ndim=1, on_device=True)
    n = cb.check_size("x.size", x.size)
    cb.check_array("y", y, dtype=np.float32, shape=(n,), on_device=True)
    kernel.prepared_call((cb.ceil_div(n, BLOCK), 1, 1), (BLOCK, 1, 1), x.gpudata, y.gpudata, np.int32(n))


# --8<-- [start:bench]
def time_both(kernels, x, y):
    """Median time of each kernel (CUDA events)."""
    return {by: cb.bench(lambda k=kernel: launch(k, x, y), working_set_bytes=8 * x.size)
            for by, kernel in kernels.items()}
# --8<-- [end:bench]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, n=1_000_003, bench_n=16_777_259)
    n = args.n
    rng = np.random.default_rng(args.seed)
    x = rng.uniform(-1, 1, n).astype(np.float32)

    cb.init()
    from pycuda import gpuarray
    x_gpu = gpuarray.to_gpu(x)
    y_gpu = gpuarray.empty_like(x_gpu)
    kernels = load_kernels()
    sine, cosine = reference_everywhere(x, x_gpu)

    for by, kernel in kernels.items():
        cb.poison(y_gpu)
        launch(kernel, x_gpu, y_gpu)
        ref = np.where(takes_sine_path(np.arange(n), by), sine, cosine)
        cb.report_check(cb.compare(f"branch by {by}", y_gpu.get(), ref, k=16, scale=1.0))

    if args.bench:
        t = time_both(kernels, x_gpu, y_gpu)
        slowdown = t["thread"].median_ms / t["warp"].median_ms
        print(f"n = {n:,}, {ROUNDS} rounds of sinf or cosf per element")
        for by in kernels:
            print(f"branch by {by:<6} {t[by].median_ms:8.3f} ms (p20 {t[by].p20_ms:.3f}, p80 {t[by].p80_ms:.3f})")
        print(f"by thread / by warp = {slowdown:.2f}")
        cb.report_facts(parity_ms=t["thread"].median_ms, warp_ms=t["warp"].median_ms,
                        slowdown=slowdown, rounds=ROUNDS, bench_n=n)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
