"""One sum per block of 256 elements, by a tree reduction in shared memory.

Each block of 256 threads adds its 256 elements in 8 halving steps, with a
barrier after each step. Changed since broken_race.py: that barrier, which
racecheck showed missing.

A sum needs a looser bound than an elementwise kernel. Each float32
addition is off by at most u = 2^-24 of its result (the unit roundoff); a
tree of depth k = log2(256) = 8 passes every element through k additions, so
the error of a block's sum is at most gamma_k * sum|x_i|, with
gamma_k = k*u / (1 - k*u) (Higham, Accuracy and Stability of Numerical
Algorithms, section 4.2). With inputs of both signs a sum can be much
smaller than sum|x_i|, so the bound is measured against that, block by block.

Run:    python code/kernels_go_wrong/fixed_race.py [--n N] [--seed S]
Checks: every block's sum against a float64 sum of the same block, within
        the bound above (k=8, scale sum|x_i| of the block; 1 rounding of
        slack covers gamma's denominator). The check's n is the number of
        elements summed.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BLOCK = 256  # must match BLOCK in the .cu file: the kernel sums exactly BLOCK elements per block


# --8<-- [start:reference]
def reference(x):
    """Per-block sums in float64, and per-block sums of |x| for the bound."""
    blocks = np.zeros(cb.ceil_div(x.size, BLOCK) * BLOCK, np.float32)
    blocks[:x.size] = x
    blocks = blocks.reshape(-1, BLOCK)
    return blocks.sum(axis=1, dtype=np.float64), np.abs(blocks).sum(axis=1, dtype=np.float64)


def check(sums, x):
    """Each block's sum within gamma_k * sum|x_i| of the exact one, where
    k = log2(BLOCK) additions stand between any element and the sum (plus
    one rounding of slack for gamma's denominator)."""
    ref, abs_ref = reference(x)
    depth = int(np.log2(BLOCK))
    return cb.compare("sums = block_sum(x)", sums, ref, k=depth + 1, scale=abs_ref, n=x.size)
# --8<-- [end:reference]


def load_kernel():
    return cb.compile(KERNEL_FILE).get_function("block_sum").prepare("PPi")


# --8<-- [start:launch]
def block_sums(kernel, x, sums):
    """sums[b] = x[b*BLOCK] + ... + x[b*BLOCK + BLOCK-1] (missing elements count as 0).
    x: 1-D float32 GPUArray; sums: float32 GPUArray with one element per block."""
    cb.check_array("x", x, dtype=np.float32, ndim=1, on_device=True)
    n = cb.check_size("x.size", x.size)
    blocks = cb.ceil_div(n, BLOCK)
    cb.check_array("sums", sums, dtype=np.float32, shape=(blocks,), on_device=True)
    kernel.prepared_call((blocks, 1, 1), (BLOCK, 1, 1), x.gpudata, sums.gpudata, np.int32(n))
# --8<-- [end:launch]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, n=1_000_003)
    rng = np.random.default_rng(args.seed)
    x = rng.uniform(-1, 1, args.n).astype(np.float32)

    cb.init()
    from pycuda import gpuarray
    x_gpu = gpuarray.to_gpu(x)
    sums_gpu = gpuarray.empty(cb.ceil_div(args.n, BLOCK), np.float32)
    cb.poison(sums_gpu)
    block_sums(load_kernel(), x_gpu, sums_gpu)
    cb.report_check(check(sums_gpu.get(), x))
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
