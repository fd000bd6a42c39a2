"""Solution to exercise 1: which block size is fastest for the first kernel?

Runs add_one_per_thread's kernel, unchanged, with blocks of 32, 64, 128, 256,
512 and 1024 threads, checks every result, and under --bench times each one
on the same data. A block of 32 threads is a single warp: an SM can hold at
most 32 blocks at once, so with 32-thread blocks it holds only 32 warps, half
of the 64 it could, and has fewer loads in flight to hide memory latency.

Run:    python code/first_kernel/ex1_block_size.py [--n N] [--seed S] [--bench]
Checks: c against a float64 NumPy sum at every block size; relative error <= 1e-6.
Bench:  GB/s of each block size against the device-to-device copy bandwidth.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from first_kernel.add_one_per_thread import add, load_kernel, reference  # noqa: E402

BLOCKS = [32, 64, 128, 256, 512, 1024]


# --8<-- [start:solution]
def sweep(kernel, a_gpu, b_gpu, c_gpu, reps):
    """Time the same kernel with each block size; return one row per size."""
    rows = []
    for block in BLOCKS:
        r = cb.benchmark(f"block = {block}", lambda: add(kernel, a_gpu, b_gpu, c_gpu, block=block),
                         bytes_moved=3 * a_gpu.nbytes, reps=reps)
        rows.append({"block": block, "gb_per_s": r["bytes_per_s"] / 1e9,
                     "fraction_of_copy": r["fraction_of_ceiling"]})
    return rows
# --8<-- [end:solution]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, n=1_000_003, bench_n=200_000_003)
    rng = np.random.default_rng(args.seed)
    a = rng.standard_normal(args.n, dtype=np.float32)
    b = rng.standard_normal(args.n, dtype=np.float32)
    ref = reference(a, b)

    cb.init()
    from pycuda import gpuarray
    a_gpu, b_gpu = gpuarray.to_gpu(a), gpuarray.to_gpu(b)
    c_gpu = gpuarray.empty_like(a_gpu)
    kernel = load_kernel()
    for block in BLOCKS:
        cb.poison(c_gpu)
        add(kernel, a_gpu, b_gpu, c_gpu, block=block)
        cb.report_check(cb.compare(f"c = a + b, block = {block}", c_gpu.get(), ref))

    if args.bench:
        rows = sweep(kernel, a_gpu, b_gpu, c_gpu, args.reps)
        best = max(rows, key=lambda r: r["gb_per_s"])
        b32 = rows[0]
        print(f"fastest: block = {best['block']} at {best['gb_per_s']:,.0f} GB/s; "
              f"block = 32 reaches {100 * b32['gb_per_s'] / best['gb_per_s']:.0f}% of that")
        cb.report_facts(blocks=rows, best_block=best["block"], best_gb_per_s=best["gb_per_s"],
                        block32_gb_per_s=b32["gb_per_s"],
                        block32_vs_best=b32["gb_per_s"] / best["gb_per_s"])
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
