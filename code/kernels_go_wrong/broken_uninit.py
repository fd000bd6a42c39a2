"""BROKEN ON PURPOSE: accumulating into a buffer that was never zeroed.

The same program as fixed_uninit.py without its one-line fix: acc comes
from gpuarray.empty (cuMemAlloc underneath) and the first round adds to
whatever it holds. Run plainly, this program may well print "ok": memory
fresh from the driver is often all zeros, and then the sum comes out
right. In a longer program the allocator hands back memory another array
used a moment ago, and the answer is quietly wrong. That is the lesson;
initcheck sees every read of never-written device memory, whatever it held.

Expect: compute-sanitizer --tool initcheck reports "Uninitialized __global__ memory read" of acc[i] in accumulate.

Run:    compute-sanitizer --tool initcheck python code/kernels_go_wrong/broken_uninit.py --n 1027
        (plainly: python code/kernels_go_wrong/broken_uninit.py [--n N] [--seed S])
Checks: every element of acc against the float64 reference
        (1 + 1/2 + 1/4 + 1/8) * x, within 5 roundings (k=5). It passes or
        fails by luck.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BLOCK = 256
WEIGHTS = (1.0, 0.5, 0.25, 0.125)


def reference(x):
    return sum(WEIGHTS) * x.astype(np.float64)


def load_kernel():
    return cb.compile(KERNEL_FILE).get_function("accumulate").prepare("PPfi")


def accumulate(kernel, acc, x, w, block=BLOCK):
    cb.check_array("acc", acc, dtype=np.float32, ndim=1, on_device=True)
    n = cb.check_size("acc.size", acc.size)
    cb.check_array("x", x, dtype=np.float32, shape=(n,), on_device=True)
    kernel.prepared_call((cb.ceil_div(n, block), 1, 1), (block, 1, 1),
                         acc.gpudata, x.gpudata, np.float32(w), np.int32(n))


# --8<-- [start:rounds]
def weighted_sum(kernel, x):
    """acc = sum over r of WEIGHTS[r] * x, one kernel launch per round."""
    from pycuda import gpuarray

    acc = gpuarray.empty(x.size, np.float32)         # cuMemAlloc: contents undefined
    for w in WEIGHTS:                                # BUG: the first round reads them
        accumulate(kernel, acc, x, w)
    return acc
# --8<-- [end:rounds]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, n=1027)
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal(args.n, dtype=np.float32)

    cb.init()
    from pycuda import gpuarray
    acc = weighted_sum(load_kernel(), gpuarray.to_gpu(x))
    cb.report_check(cb.compare("acc = sum of w * x", acc.get(), reference(x), k=5))
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
