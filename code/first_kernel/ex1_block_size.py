"""Solution to exercise 1: which block size is fastest for the first kernel?

Runs add_one_per_thread's kernel, unchanged, with blocks of 32, 64, 128, 256,
512 and 1024 threads, checks every result, and under --bench times each one
on the same data. One element per thread means the grid has n / B blocks:
the smaller the block, the more blocks the GPU must start. So beside each
time it shows the time of a grid of the same size of blocks that do nothing
(threads_warps/block_rate.py's empty kernel): the least time that starting
that many blocks takes, whatever they do.

Run:    python code/first_kernel/ex1_block_size.py [--n N] [--seed S] [--bench]
Checks: every element of c against a float64 NumPy sum, within one
        rounding (k=1), at the first block size; at every other, every
        element against that first answer, for exact equality (a correctly
        rounded sum has one right answer, whatever the block size), and
        against the float64 sum again where one differs.
Bench:  GB/s of each block size against the device-to-device copy
        bandwidth, and the time of an empty grid with as many blocks.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from first_kernel.add_one_per_thread import add, load_kernel, reference  # noqa: E402
from threads_warps.block_rate import launch_nothing, load_kernels  # noqa: E402

BLOCKS = [32, 64, 128, 256, 512, 1024]


# --8<-- [start:solution]
def sweep(kernel, nothing, a_gpu, b_gpu, c_gpu):
    """Time the same kernel with each block size, and an empty grid with as
    many blocks; return one row per size."""
    n = a_gpu.size
    rows = []
    for block in BLOCKS:
        r = cb.benchmark(f"block = {block}", lambda: add(kernel, a_gpu, b_gpu, c_gpu, block=block),
                         bytes_moved=3 * a_gpu.nbytes)
        grid = cb.ceil_div(n, block)
        empty = cb.bench(lambda: launch_nothing(nothing, grid, block), working_set_bytes=3 * a_gpu.nbytes)
        rows.append({"block": block, "blocks": grid, "gb_per_s": r.bytes_per_s / 1e9,
                     "ms": r.timing.median_ms, "empty_ms": empty.median_ms,
                     "fraction_of_copy": r.fraction_of_ceiling})
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
    first, c = np.empty_like(a), np.empty_like(a)       # host copies, made once
    for block in BLOCKS:
        cb.poison(c_gpu)
        add(kernel, a_gpu, b_gpu, c_gpu, block=block)
        name = f"c = a + b, block = {block}"
        if block == BLOCKS[0]:
            cb.report_check(cb.compare(name, c_gpu.get(first), ref))
        elif np.array_equal(c_gpu.get(c), first):       # NaN (an unwritten element) is never equal
            cb.report_check(cb.expect(name, True, f"n={args.n:,}, every element equal to "
                                                  f"block = {BLOCKS[0]}'s", n=args.n))
        else:                                            # which elements, and by how much
            cb.report_check(cb.compare(name, c, ref))

    if args.bench:
        nothing, _ = load_kernels()
        rows = sweep(kernel, nothing, a_gpu, b_gpu, c_gpu)
        print(f"{'block':>5} {'blocks':>11} {'add':>9} {'empty grid':>10} {'GB/s':>6}")
        for r in rows:
            print(f"{r['block']:>5} {r['blocks']:>11,} {r['ms']:>6.3f} ms {r['empty_ms']:>7.3f} ms {r['gb_per_s']:>6,.0f}")
        best = max(rows, key=lambda r: r["gb_per_s"])
        b32 = rows[0]
        print(f"fastest: block = {best['block']} at {best['gb_per_s']:,.0f} GB/s; "
              f"block = 32 reaches {100 * b32['gb_per_s'] / best['gb_per_s']:.0f}% of that")
        cb.report_facts(blocks=rows, best_block=best["block"], best_gb_per_s=best["gb_per_s"],
                        block32_gb_per_s=b32["gb_per_s"], block32_vs_best=b32["gb_per_s"] / best["gb_per_s"],
                        block32_empty_share=b32["empty_ms"] / b32["ms"],
                        block32_blocks_per_s=b32["blocks"] / (b32["empty_ms"] * 1e-3))
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
