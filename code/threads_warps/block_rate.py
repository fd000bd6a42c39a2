"""How fast can the GPU start blocks? The block scheduler as a limit.

Every block of a grid must be started on an SM and retired when its threads
finish, and the hardware that does this has a rate. A kernel whose blocks
do no work at all (`nothing`) measures it: G blocks take G / rate. A kernel
with one element per thread gives each block only B elements of work, so
for small blocks it can be limited by this rate rather than by memory.

For block sizes from 32 to 1,024 threads and n elements, the listing times
the empty kernel with the grid the one-element-per-thread kernel needs
(G = n / B blocks), the one-element-per-thread y = a * x + b itself, and
compares both with the memory floor: 8n bytes at the copy bandwidth of the
same run. The kernel cannot be faster than the larger of the two floors.

Run:    python code/threads_warps/block_rate.py [--n N] [--seed S] [--bench]
Checks: y from the one-element-per-thread kernel at every block size
        against a float64 NumPy a * x + b, every element within 2 roundings
        of its terms (k=2, scale |a x| + |b|).
Bench:  at n = 2**27: for each block size, the empty grid's time and blocks
        per second, the kernel's time and GB/s, and the two floors.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BLOCK_SIZES = [32, 64, 128, 256, 512, 1024]
A, B = np.float32(1.5), np.float32(-0.25)


def load_kernels():
    module = cb.compile(KERNEL_FILE)
    return module.get_function("nothing").prepare(""), module.get_function("axpb_per_thread").prepare("PPffi")


# --8<-- [start:launch]
def launch_nothing(kernel, blocks, block):
    """`blocks` blocks of `block` threads that do nothing."""
    kernel.prepared_call((cb.check_size("blocks", blocks), 1, 1), (block, 1, 1))


def axpb(kernel, x, y, block):
    """y = a * x + b, one element per thread, blocks of `block` threads."""
    cb.check_array("x", x, dtype=np.float32, ndim=1, on_device=True)
    n = cb.check_size("x.size", x.size)
    cb.check_array("y", y, dtype=np.float32, shape=(n,), on_device=True)
    kernel.prepared_call((cb.ceil_div(n, block), 1, 1), (block, 1, 1), x.gpudata, y.gpudata, A, B, np.int32(n))
# --8<-- [end:launch]


# --8<-- [start:sweep]
def sweep(nothing, kernel, x, y, copy_bps):
    """For each block size: the empty grid's time (the scheduling floor), the
    kernel's time, and the memory floor (8n bytes at the copy bandwidth)."""
    n = x.size
    memory_ms = 8 * n / copy_bps * 1e3
    rows = []
    for block in BLOCK_SIZES:
        grid = cb.ceil_div(n, block)
        empty = cb.bench(lambda: launch_nothing(nothing, grid, block), working_set_bytes=8 * n).median_ms
        full = cb.bench(lambda: axpb(kernel, x, y, block), working_set_bytes=8 * n).median_ms
        rows.append({"block": block, "blocks": grid, "empty_ms": empty, "blocks_per_s": grid / (empty * 1e-3),
                     "kernel_ms": full, "gbs": 8 * n / (full * 1e-3) / 1e9, "memory_ms": memory_ms,
                     "floor_ms": max(empty, memory_ms)})
    return rows
# --8<-- [end:sweep]


def reference(x):
    """a * x + b in float64, and the size of its terms (the check's scale)."""
    ax = np.multiply(x, np.float64(A), dtype=np.float64)
    scale = np.abs(ax)
    scale += abs(float(B))
    ax += np.float64(B)
    return ax, scale


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, n=1_000_003, bench_n=2**27)
    rng = np.random.default_rng(args.seed)
    x = rng.uniform(-1, 1, args.n).astype(np.float32)

    cb.init()
    from pycuda import gpuarray
    x_gpu = gpuarray.to_gpu(x)
    y_gpu = gpuarray.empty_like(x_gpu)
    nothing, kernel = load_kernels()
    ref, scale = reference(x)            # once: every block size must give the same y
    for block in BLOCK_SIZES:
        cb.poison(y_gpu)
        axpb(kernel, x_gpu, y_gpu, block)
        cb.report_check(cb.compare(f"y = a*x + b, {block} threads per block", y_gpu.get(), ref, k=2,
                                   scale=scale))

    if args.bench:
        copy = cb.ceiling()
        rows = sweep(nothing, kernel, x_gpu, y_gpu, copy)
        print(f"n = {args.n:,}: memory floor {rows[0]['memory_ms']:.3f} ms "
              f"(8n bytes at the copy's {copy / 1e9:,.0f} GB/s)")
        print(f"{'block':>5} {'blocks':>9} {'empty grid':>10} {'blocks/s':>9} {'kernel':>9} {'GB/s':>6}"
              f" {'limit':>8}")
        for r in rows:
            limit = "blocks" if r["empty_ms"] > r["memory_ms"] else "memory"
            print(f"{r['block']:>5} {r['blocks']:>9,} {r['empty_ms']:>7.3f} ms {r['blocks_per_s'] / 1e9:>7.2f} G"
                  f" {r['kernel_ms']:>6.3f} ms {r['gbs']:>6.0f} {limit:>8}")
        rates = [r["blocks_per_s"] for r in rows]
        cb.report_facts(table=rows, copy_gbs=copy / 1e9, memory_ms=rows[0]["memory_ms"],
                        rate_min=min(rates), rate_max=max(rates),
                        rate_32=rows[0]["blocks_per_s"], gbs_32=rows[0]["gbs"],
                        bytes_per_block_32=8 * 32, bench_n=args.n)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
