"""BROKEN ON PURPOSE: a moving average that reads one element past each end.

The same program as fixed_oob.py, with the kernel of broken_oob.cu, whose
neighbour reads are not guarded: thread 0 reads x[-1] and thread n-1 reads
x[n]. Those bytes belong to no array of ours. Run plainly, this program may
well print "ok": the stray reads usually land on memory that exists and may
hold zeros, so nothing crashes and the answer can even be right. That is
the lesson: a passing check does not prove a kernel correct; the sanitizer
sees the reads themselves.

Expect: compute-sanitizer --tool memcheck reports "Invalid __global__ read" of 4 bytes in average3, at x[-1] and x[n].

Run:    compute-sanitizer --tool memcheck python code/kernels_go_wrong/broken_oob.py --n 1027
        (plainly: python code/kernels_go_wrong/broken_oob.py [--n N] [--seed S])
Checks: every element of y against the float64 reference of fixed_oob.py
        (zero boundary), k=3 with the terms' size as scale. It passes or
        fails by luck.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BLOCK = 256


def reference(x):
    xp = np.pad(x.astype(np.float64), 1)
    return (xp[:-2] + xp[1:-1] + xp[2:]) / 3


def load_kernel():
    return cb.compile(KERNEL_FILE).get_function("average3").prepare("PPi")


def average3(kernel, x, y, block=BLOCK):
    cb.check_array("x", x, dtype=np.float32, ndim=1, on_device=True)
    n = cb.check_size("x.size", x.size)
    cb.check_array("y", y, dtype=np.float32, shape=(n,), on_device=True)
    kernel.prepared_call((cb.ceil_div(n, block), 1, 1), (block, 1, 1),
                         x.gpudata, y.gpudata, np.int32(n))


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, n=1027)
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal(args.n, dtype=np.float32)

    cb.init()
    from pycuda import gpuarray
    x_gpu = gpuarray.to_gpu(x)
    y_gpu = gpuarray.empty_like(x_gpu)
    cb.poison(y_gpu)
    average3(load_kernel(), x_gpu, y_gpu)
    cb.report_check(cb.compare("y = average3(x)", y_gpu.get(), reference(x), k=3,
                               scale=reference(np.abs(x))))
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
