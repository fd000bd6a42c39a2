"""Solution to exercise 1: how many threads should move one 32 x 32 tile?

The ladder's 32 x 32 rungs run blocks of 32 x 8 threads, each thread
moving 4 elements of its tile. Here the padded rung runs with blocks of
32 x R threads, R = 32, 16, 8 and 4: 1, 2, 4 or 8 elements per thread.
All four use few enough registers (at most 32 a thread on sm_90) and
little enough shared memory (4,224 bytes a block) that an H200's SM holds
2,048 of their threads: 2, 4, 8 or 16 blocks. So what changes is not the
occupancy but how many loads each thread has in flight before it stops at
the barrier, and how many threads each barrier waits for.

Run:    python code/shared_memory/ex1_block_rows.py [--seed S] [--bench]
Checks: every version equals x.T exactly (k = 0: a transpose only moves
        values) at 1x1, 33x31, 1000x1003 and 4097x3001; under --bench
        also at 8192x8192. Registers and shared memory of each kernel
        (from the compiler) allow 2,048 resident threads per SM.
Bench:  at 8192x8192: GB/s of each version (8 bytes per element: one read,
        one write) against the copy bandwidth and torch's
        x.t().contiguous(); the fastest is kept as the fact `fastest`.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
sys.path.insert(0, str(Path(__file__).resolve().parent))      # and transpose
import cudabook as cb  # noqa: E402
import transpose as tp  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
ROWS_PER_BLOCK = (32, 16, 8, 4)        # R: blocks of 32 x R threads, as in ex1_block_rows.cu
SHAPES = [(1, 1), (33, 31), (1000, 1003), (4097, 3001)]
BENCH_SHAPE = (8192, 8192)
# An H200's SM (compute capability 9.0; Programming Guide, Technical Specifications):
THREADS_PER_SM, BLOCKS_PER_SM, REGISTERS_PER_PARTITION = 2048, 32, 16384   # 4 partitions
SHARED_PER_SM, SHARED_RESERVED = 233_472, 1024      # bytes; the second is per block


def name(r: int) -> str:
    return f"32x{r} threads"


def load_kernels() -> dict:
    module = cb.compile(KERNEL_FILE)
    return {r: module.get_function(f"transpose_padded_r{r}").prepare("PPii") for r in ROWS_PER_BLOCK}


# --8<-- [start:solution]
def transpose_rows(kernels, r: int, x, out) -> None:
    """out = x^T with the padded rung in blocks of 32 x r threads, each
    thread moving 32 / r elements of its tile."""
    if r not in kernels:
        raise ValueError(f"r: expected one of {ROWS_PER_BLOCK}, got {r!r}")
    cb.check_array("x", x, dtype=np.float32, ndim=2, on_device=True)
    rows = cb.check_size("x.shape[0]", x.shape[0], high=tp.MAX_DIM)
    cols = cb.check_size("x.shape[1]", x.shape[1], high=tp.MAX_DIM)
    cb.check_array("out", out, dtype=np.float32, shape=(cols, rows), on_device=True)
    a, b = int(x.gpudata), int(out.gpudata)
    if a < b + out.nbytes and b < a + x.nbytes:
        raise ValueError("out: overlaps x; a transpose cannot be done in place this way")
    grid = (cb.ceil_div(cols, 32), cb.ceil_div(rows, 32), 1)      # one block per 32 x 32 tile
    if grid[1] > tp.MAX_GRID_Y:
        raise ValueError(f"x: {rows:,} rows need {grid[1]:,} blocks in y, more than {tp.MAX_GRID_Y:,}")
    kernels[r].prepared_call(grid, (32, r, 1), x.gpudata, out.gpudata, np.int32(rows), np.int32(cols))


def resident_threads(kernel, r: int) -> int:
    """Threads of this kernel an SM can hold: the smallest of the limits
    of *Threads, warps and SMs* (threads, blocks, registers per warp in
    chunks of 256, shared memory plus 1 KB per block)."""
    regs_per_warp = -(-kernel.num_regs * 32 // 256) * 256
    warps = 4 * (REGISTERS_PER_PARTITION // regs_per_warp)
    blocks = min(THREADS_PER_SM // (32 * r), BLOCKS_PER_SM, warps // r,
                 SHARED_PER_SM // (kernel.shared_size_bytes + SHARED_RESERVED))
    return blocks * 32 * r
# --8<-- [end:solution]


def check_shape(kernels, rows: int, cols: int, rng):
    from pycuda import gpuarray

    x = rng.standard_normal((rows, cols), dtype=np.float32)
    x_gpu, out = gpuarray.to_gpu(x), gpuarray.empty((cols, rows), np.float32)
    ref = tp.reference(x)
    for r in ROWS_PER_BLOCK:
        cb.poison(out)
        transpose_rows(kernels, r, x_gpu, out)
        cb.report_check(cb.compare(f"{name(r)} {rows}x{cols}", out.get(), ref, k=0))
    return x, x_gpu, out


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    cb.init()
    kernels = load_kernels()
    rng = np.random.default_rng(args.seed)
    for rows, cols in SHAPES:
        check_shape(kernels, rows, cols, rng)
    resident = {r: resident_threads(kernels[r], r) for r in ROWS_PER_BLOCK}
    # About scheduling, not the answer: printed, not enforced, under a
    # sanitizer, which may change a kernel's registers.
    cb.report_check(cb.expect(f"{THREADS_PER_SM:,} resident threads per SM for every version",
                              all(v == THREADS_PER_SM for v in resident.values()),
                              ", ".join(f"32x{r}: {kernels[r].num_regs} registers, {v:,} threads"
                                        for r, v in resident.items())), timing=True)
    if args.bench:
        rows, cols = BENCH_SHAPE
        x, x_gpu, out = check_shape(kernels, rows, cols, np.random.default_rng(args.seed))
        torch = cb.torch_cuda()
        baseline = None
        if torch is not None:
            tx = torch.from_numpy(x).cuda()
            baseline = ("x.t().contiguous()", lambda: tx.t().contiguous())
        rates = {}
        print(f"{rows}x{cols} float32, padded 32 x 32 tiles:")
        for r in ROWS_PER_BLOCK:
            result = cb.benchmark(name(r),
                                  lambda r=r: transpose_rows(kernels, r, x_gpu, out),
                                  bytes_moved=2 * 4 * rows * cols, baseline=baseline)
            rates[r] = result.bytes_per_s
        fastest = max(rates, key=rates.get)
        print(f"fastest: {name(fastest)}, {32 // fastest} elements per thread")
        cb.report_facts(fastest=name(fastest), elements_per_thread=32 // fastest,
                        **{f"gbs_32x{r}": v / 1e9 for r, v in rates.items()})
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
