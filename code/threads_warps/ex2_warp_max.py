"""Solution to exercise 2: the maximum of n floats, warp by warp.

A grid-stride loop gives each thread the largest value it saw; a butterfly
of __shfl_xor_sync steps gives every lane of a warp the warp's maximum;
shared memory and one barrier combine a block's warps; the host combines
the blocks' results. Inputs are standard normal floats, so both signs and
the padding value (-infinity, for threads that saw nothing) are exercised.

Run:    python code/threads_warps/ex2_warp_max.py [--n N] [--seed S]
Checks: the result equals NumPy's max exactly (a maximum involves no
        rounding), so the tolerance is 0.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BLOCK = 256              # must match BLOCK in ex2_warp_max.cu
BLOCKS_PER_SM = 8


def reference(x):
    return np.max(x).astype(np.float64)


def load_kernel():
    return cb.compile(KERNEL_FILE).get_function("block_max").prepare("PPi")


# --8<-- [start:solution]
def maximum(kernel, x, sm_count):
    """The largest element of x (1-D float32 GPUArray): one value per block on
    the GPU, then the maximum of those few thousand on the host."""
    from pycuda import gpuarray

    cb.check_array("x", x, dtype=np.float32, ndim=1, on_device=True)
    n = cb.check_size("x.size", x.size)
    grid = min(cb.ceil_div(n, BLOCK), BLOCKS_PER_SM * sm_count)
    per_block = gpuarray.empty(grid, np.float32)
    cb.poison(per_block)                       # NaN: a block that writes nothing fails the check
    kernel.prepared_call((grid, 1, 1), (BLOCK, 1, 1), x.gpudata, per_block.gpudata, np.int32(n))
    return per_block.get().max()               # NaN propagates through max
# --8<-- [end:solution]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, n=1_000_003)
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal(args.n, dtype=np.float32)

    gpu = cb.init()
    from pycuda import gpuarray
    kernel = load_kernel()
    got = maximum(kernel, gpuarray.to_gpu(x), gpu.sm_count)
    cb.report_check(cb.compare("max(x)", np.array([got]), np.array([reference(x)]), k=0, n=args.n))
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
