"""Solution to exercise 1: where is the crossover for y = x + 1?

The same three-way sweep as gelu_cpu_vs_gpu.py (CPU with NumPy, GPU kernel
alone, GPU including both copies), for the cheapest elementwise function
there is. The CPU now does one addition per element instead of a tanh and
a dozen other operations, while the GPU with copies still pays to move 8
bytes per element over the link. So the CPU keeps up for longer, and with
the copies counted the GPU may never win at all.

Run:    python code/why_gpus/ex1_add_one_crossover.py [--n N] [--seed S] [--bench]
Checks: y against x + 1 in float64; relative error <= 1e-6.
Bench:  the sweep, and the smallest size from which the GPU (with copies,
        and kernel alone) beats the CPU, if there is one.
"""

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BLOCK = 256
SWEEP = [33, 257, 1_031, 4_099, 16_411, 65_537, 262_147, 1_048_583, 4_194_319, 16_777_259, 67_108_879]


def load_kernel():
    return cb.compile(KERNEL_FILE).get_function("add_one").prepare("PPi")


def add_one_gpu(kernel, x, y, block=BLOCK):
    """y = x + 1 on the GPU. x, y: 1-D float32 GPUArrays of one size."""
    cb.check_array("x", x, dtype=np.float32, ndim=1, on_device=True)
    n = cb.check_size("x.size", x.size)
    cb.check_array("y", y, dtype=np.float32, shape=(n,), on_device=True)
    kernel.prepared_call((cb.ceil_div(n, block), 1, 1), (block, 1, 1), x.gpudata, y.gpudata, np.int32(n))


def cpu_ms(x, reps):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        np.add(x, np.float32(1))
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


# --8<-- [start:solution]
def sweep(kernel, rng):
    import pycuda.driver as cuda
    from pycuda import gpuarray

    rows = []
    for n in SWEEP:
        x = rng.standard_normal(n, dtype=np.float32)
        y = np.empty_like(x)
        x_gpu, y_gpu = gpuarray.empty(n, np.float32), gpuarray.empty(n, np.float32)

        def with_copies():
            cuda.memcpy_htod(x_gpu.gpudata, x)
            add_one_gpu(kernel, x_gpu, y_gpu)
            cuda.memcpy_dtoh(y, y_gpu.gpudata)

        with_copies()
        kernel_only = cb.bench(lambda: add_one_gpu(kernel, x_gpu, y_gpu), working_set_bytes=8 * n, reps=20)
        total = cb.bench(with_copies, working_set_bytes=8 * n, reps=5 if n > 10**7 else 20)
        rows.append({"n": n, "cpu_ms": cpu_ms(x, 3 if n > 10**7 else 10),
                     "gpu_kernel_ms": kernel_only.median_ms, "gpu_with_copies_ms": total.median_ms})
        r = rows[-1]
        print(f"{n:>12,}  CPU {r['cpu_ms']:10.3f} ms   GPU kernel {r['gpu_kernel_ms']:8.3f} ms"
              f"   GPU + copies {r['gpu_with_copies_ms']:9.3f} ms", flush=True)
    return rows


def crossover(rows, key):
    """Smallest n from which on the GPU (timed by `key`) beats the CPU, or None."""
    for i, r in enumerate(rows):
        if all(s[key] < s["cpu_ms"] for s in rows[i:]):
            return r["n"]
    return None
# --8<-- [end:solution]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, n=1_000_003, bench_n=1_000_003)
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal(args.n, dtype=np.float32)

    cb.init()
    from pycuda import gpuarray
    x_gpu = gpuarray.to_gpu(x)
    y_gpu = gpuarray.empty_like(x_gpu)
    cb.poison(y_gpu)
    kernel = load_kernel()
    add_one_gpu(kernel, x_gpu, y_gpu)
    cb.report_check(cb.compare("y = x + 1", y_gpu.get(), x.astype(np.float64) + 1))

    if args.bench:
        rows = sweep(kernel, rng)
        with_copies = crossover(rows, "gpu_with_copies_ms")
        kernel_only = crossover(rows, "gpu_kernel_ms")
        print(f"GPU with copies beats the CPU from n = {with_copies:,}" if with_copies
              else "with the copies counted, the CPU won or tied at the largest sizes")
        print(f"GPU kernel alone beats the CPU from n = {kernel_only:,}" if kernel_only
              else "the kernel alone never beat the CPU")
        largest = rows[-1]
        cb.report_facts(sweep=rows, crossover_with_copies=with_copies or "none",
                        crossover_kernel_only=kernel_only or "none",
                        largest_n=largest["n"],
                        largest_cpu_over_gpu_with_copies=largest["cpu_ms"] / largest["gpu_with_copies_ms"])
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
