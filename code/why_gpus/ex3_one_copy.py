"""Solution to exercise 3: how much faster is the GPU path with only one copy?

If x already lives on the GPU (made there by an earlier kernel, say), only
y has to come back to the host. This times GELU three ways at each size of
a sweep: with both copies (as in gelu_cpu_vs_gpu.py), with only the copy of
y back, and the kernel alone; it reuses that listing's kernel unchanged.
The two copies move the same number of bytes, so dropping one should save
about half of the copy time, and more when the copy in is the slower one.

Run:    python code/why_gpus/ex3_one_copy.py [--n N] [--seed S] [--bench]
Checks: y after the one-copy path against gelu_cpu_vs_gpu.py's float64
        GELU, every element within 8 roundings of its terms (k=8, scale |x|).
Bench:  the times at each size, and the speed-up of one copy over two.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from why_gpus.gelu_cpu_vs_gpu import check_gelu, gelu_gpu, load_kernel  # noqa: E402

SWEEP = [4_099, 65_537, 1_048_583, 16_777_259, 67_108_879]


# --8<-- [start:solution]
def one_copy_sweep(kernel, rng):
    import pycuda.driver as cuda
    from pycuda import gpuarray

    rows = []
    for n in SWEEP:
        x = rng.standard_normal(n, dtype=np.float32)
        y = np.empty_like(x)
        x_gpu, y_gpu = gpuarray.to_gpu(x), gpuarray.empty(n, np.float32)

        def both_copies():
            cuda.memcpy_htod(x_gpu.gpudata, x)
            gelu_gpu(kernel, x_gpu, y_gpu)
            cuda.memcpy_dtoh(y, y_gpu.gpudata)

        def only_y_back():                   # x is already on the device
            gelu_gpu(kernel, x_gpu, y_gpu)
            cuda.memcpy_dtoh(y, y_gpu.gpudata)

        t2 = cb.bench(both_copies, working_set_bytes=8 * n, budget_ms=50).median_ms
        t1 = cb.bench(only_y_back, working_set_bytes=8 * n, budget_ms=50).median_ms
        tk = cb.bench(lambda: gelu_gpu(kernel, x_gpu, y_gpu), working_set_bytes=8 * n, budget_ms=50).median_ms
        rows.append({"n": n, "both_copies_ms": t2, "one_copy_ms": t1, "kernel_ms": tk, "speedup": t2 / t1})
        print(f"{n:>11,}  both {t2:9.3f} ms  y only {t1:9.3f} ms  kernel {tk:7.3f} ms"
              f"  {t2 / t1:4.2f}x", flush=True)
    return rows
# --8<-- [end:solution]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, n=1_000_003, bench_n=1_000_003)
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal(args.n, dtype=np.float32)

    cb.init()
    import pycuda.driver as cuda
    from pycuda import gpuarray
    x_gpu = gpuarray.to_gpu(x)
    y_gpu = gpuarray.empty_like(x_gpu)
    cb.poison(y_gpu)
    kernel = load_kernel()
    y = np.full_like(x, np.nan)
    gelu_gpu(kernel, x_gpu, y_gpu)
    cuda.memcpy_dtoh(y, y_gpu.gpudata)          # the one copy
    check_gelu("y = gelu(x), one copy", y, x)

    if args.bench:
        cb.gpu_alone()   # host copies: the machine's memory and PCIe, not only this GPU
        rows = one_copy_sweep(kernel, rng)
        cb.report_facts(one_copy=rows, largest_n=rows[-1]["n"], largest_speedup=rows[-1]["speedup"])
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
