"""One sum per block of 256 elements, by a tree reduction in shared memory.

Each block of 256 threads adds its 256 elements in 8 halving steps, with a
barrier after each step. Changed since broken_race.py: that barrier, which
racecheck showed missing.

A sum needs a looser tolerance than an elementwise kernel. Each float32
addition is off by at most u = 2^-24 of its result (the unit roundoff); a
tree of depth k = log2(256) = 8 passes every element through k additions, so
the error of a block's sum is at most gamma_k * sum|x_i|, with
gamma_k = k*u / (1 - k*u) (Higham, Accuracy and Stability of Numerical
Algorithms, section 4.2). With inputs of both signs the sum can be much
smaller than sum|x_i|, so the tolerance is that bound, relative to the
size of the reference: gamma_8 * ||sum|x| per block|| / ||sum x per block||.

Run:    python code/kernels_go_wrong/fixed_race.py [--n N] [--seed S]
Checks: the block sums against float64 sums of the same blocks; relative
        error within the bound above (a few times 1e-6 for uniform inputs
        in [-1, 1)). The check's n is the number of elements summed.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BLOCK = 256  # must match BLOCK in the .cu file: the kernel sums exactly BLOCK elements per block
UNIT_ROUNDOFF = 2.0**-24  # float32


# --8<-- [start:reference]
def reference(x):
    """Per-block sums in float64, and per-block sums of |x| for the bound."""
    blocks = np.zeros(cb.ceil_div(x.size, BLOCK) * BLOCK, np.float32)
    blocks[:x.size] = x
    blocks = blocks.reshape(-1, BLOCK)
    return blocks.sum(axis=1, dtype=np.float64), np.abs(blocks).sum(axis=1, dtype=np.float64)


def tolerance(sums, abs_sums):
    """The error bound of a float32 tree sum of BLOCK numbers, relative to
    the size of the result."""
    k = int(np.log2(BLOCK))
    gamma = k * UNIT_ROUNDOFF / (1 - k * UNIT_ROUNDOFF)
    return gamma * np.linalg.norm(abs_sums) / max(np.linalg.norm(sums), np.finfo(np.float64).tiny)
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
    ref, abs_ref = reference(x)
    cb.report_check(cb.compare("sums = block_sum(x)", sums_gpu.get(), ref,
                               tol=tolerance(ref, abs_ref), n=args.n))
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
