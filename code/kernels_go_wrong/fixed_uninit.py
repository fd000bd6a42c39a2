"""Accumulating into a buffer that starts at zero.

Adds ROUNDS weighted copies of x into an accumulator on the GPU,
acc += w_r * x for w = 1, 1/2, 1/4, 1/8: the pattern of gradient
accumulation over micro-batches. gpuarray.empty, like cuMemAlloc beneath
it, hands out memory with whatever the last user left in it. Changed since
broken_uninit.py: one cuMemsetD32 zeroes acc before the first round.

Run:    python code/kernels_go_wrong/fixed_uninit.py [--n N] [--seed S]
Checks: every element of acc against the float64 reference
        (1 + 1/2 + 1/4 + 1/8) * x, within 5 roundings (k=5): four float32
        multiply-adds of terms of one sign, each rounded to within 2^-24 of
        a partial sum no larger than the result, and one of slack.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BLOCK = 256
WEIGHTS = (1.0, 0.5, 0.25, 0.125)  # exact in float32


def reference(x):
    return np.multiply(x, sum(WEIGHTS), dtype=np.float64)


def load_kernel():
    return cb.compile(KERNEL_FILE).get_function("accumulate").prepare("PPfi")


def accumulate(kernel, acc, x, w, block=BLOCK):
    """acc += w * x on the GPU. acc, x: 1-D float32 GPUArrays of one size."""
    cb.check_array("acc", acc, dtype=np.float32, ndim=1, on_device=True)
    n = cb.check_size("acc.size", acc.size)
    cb.check_array("x", x, dtype=np.float32, shape=(n,), on_device=True)
    kernel.prepared_call((cb.ceil_div(n, block), 1, 1), (block, 1, 1),
                         acc.gpudata, x.gpudata, np.float32(w), np.int32(n))


# --8<-- [start:rounds]
def weighted_sum(kernel, x):
    """acc = sum over r of WEIGHTS[r] * x, one kernel launch per round."""
    import pycuda.driver as cuda
    from pycuda import gpuarray

    acc = gpuarray.empty(x.size, np.float32)         # cuMemAlloc: contents undefined
    cuda.memset_d32(acc.gpudata, 0, acc.size)        # the fix: start from zero
    for w in WEIGHTS:
        accumulate(kernel, acc, x, w)
    return acc
# --8<-- [end:rounds]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, n=1_000_003)
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal(args.n, dtype=np.float32)

    cb.init()
    from pycuda import gpuarray
    acc = weighted_sum(load_kernel(), gpuarray.to_gpu(x))
    cb.report_check(cb.compare("acc = sum of w * x", acc.get(), reference(x), k=5))
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
