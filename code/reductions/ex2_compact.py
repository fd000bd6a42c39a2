"""Solution to exercise 2: stream compaction, x[x > 0] on the GPU, with the
chapter's one-pass scan.

flag_kept writes 1.0 for each element to keep and 0.0 for the others;
scan.py's scan_lookback turns the flags into their inclusive scan; and
scatter_kept writes each kept element x[i] to out[inclusive[i] - 1]: the
exclusive scan, the number of kept elements before it. The last element of
the inclusive scan is how many were kept. Counting in float32 is exact
while every count is at most 2^24, so x may hold at most 2^24 elements.

Run:    python code/reductions/ex2_compact.py [--seed S]
Checks: at n = 1, 33, 8,193 (two tiles), 1,000,003 and 2^24 (under
        compute-sanitizer, 40,963 instead of the last two): the scan of the
        flags equals np.cumsum exactly (k = 0: sums of whole numbers below
        2^24 have no rounding), the count equals NumPy's, and out[:count]
        equals x[x > 0] exactly. Every seventh element is 0.0, which is not
        kept.
"""

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from reductions import scan  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BLOCK = 256
KERNELS = {"flag_kept": "PPi", "scatter_kept": "PPPi"}
MAX_N = 2**24                # float32 holds every whole number up to 2^24
SIZES = (1, 33, scan.TILE + 1, 1_000_003, MAX_N)
SANITIZER_SIZES = (1, 33, scan.TILE + 1, scan.SANITIZER_TILES_N)


def load_kernels() -> dict:
    module = cb.compile(KERNEL_FILE)
    return {name: module.get_function(name).prepare(sig) for name, sig in KERNELS.items()}


# --8<-- [start:solution]
def compact(kernels, scan_kernels, x, flags, inclusive, state, out) -> int:
    """out[:count] = the positive elements of x, in their order; returns
    count. x, flags, inclusive, out: 1-D float32 GPUArrays of x's size
    (flags and inclusive 16-byte aligned, for the scan); state: the
    look-back's state for that size (scan.scratch)."""
    n = cb.check_size("x.size", x.size)
    if n > MAX_N:
        raise ValueError(f"x.size: at most 2^24 = {MAX_N:,} elements (the counts are float32 sums, "
                         f"exact only up to 2^24), got {n:,}")
    for name, a in (("x", x), ("flags", flags), ("inclusive", inclusive), ("out", out)):
        cb.check_array(name, a, dtype=np.float32, shape=(n,), on_device=True)
    grid = (cb.ceil_div(n, BLOCK), 1, 1)
    kernels["flag_kept"].prepared_call(grid, (BLOCK, 1, 1), x.gpudata, flags.gpudata, np.int32(n))
    scan.scan_lookback(scan_kernels, flags, inclusive, state)     # inclusive[i] = kept among x[0..i]
    kernels["scatter_kept"].prepared_call(grid, (BLOCK, 1, 1), x.gpudata, inclusive.gpudata,
                                          out.gpudata, np.int32(n))
    return int(inclusive[n - 1:].get()[0])                        # the last running count: all kept
# --8<-- [end:solution]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__)
    cb.init()
    from pycuda import gpuarray

    kernels, scan_kernels = load_kernels(), scan.load_kernels()
    sizes = SANITIZER_SIZES if os.environ.get("CUDABOOK_SANITIZER") else SIZES
    for i, n in enumerate(sizes):
        x = np.random.default_rng(args.seed + i).standard_normal(n, dtype=np.float32)
        x[3::7] = 0.0                                   # zero is not positive: never kept
        x_gpu = gpuarray.to_gpu(x)
        flags, inclusive, out = (gpuarray.empty(n, np.float32) for _ in range(3))
        for a in (flags, inclusive, out):
            cb.poison(a)                                # NaN: an unwritten slot fails the checks
        state = scan.scratch(n)[2]
        count = compact(kernels, scan_kernels, x_gpu, flags, inclusive, state, out)

        keep = x > 0
        want = x[keep]
        cb.report_check(cb.compare(f"n = {n:,}: scan of the flags", inclusive.get(),
                                   np.cumsum(keep, dtype=np.float64), k=0))
        cb.report_check(cb.expect(f"n = {n:,}: count", count == want.size,
                                  f"{count:,} kept, NumPy keeps {want.size:,}", n=n))
        cb.report_check(cb.compare(f"n = {n:,}: out[:count] = x[x > 0]", out.get()[:want.size], want,
                                   k=0, n=n))
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
