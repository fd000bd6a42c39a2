"""A three-point moving average whose edges stay inside the array.

y[i] = (x[i-1] + x[i] + x[i+1]) / 3, where a neighbour past either end of x
counts as 0 (the same as NumPy's np.convolve(x, [1/3] * 3, mode="same")).
Changed since broken_oob.py: the kernel guards its neighbour reads, so
compute-sanitizer's memcheck has nothing to report. The launch wrapper
checks its arguments first (validate_inputs.py shows each check at work).

Run:    python code/kernels_go_wrong/fixed_oob.py [--n N] [--seed S]
Checks: every element of y against a float64 NumPy reference with the same
        zero boundary, within 3 roundings of the size of its terms (k=3,
        scale (|x[i-1]| + |x[i]| + |x[i+1]|) / 3: two float32 additions and a
        division, each off by at most 2^-24 of its result, where the terms
        can cancel).
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BLOCK = 256


# --8<-- [start:reference]
def reference(x):
    """The moving average in float64, with a zero on each side of x."""
    xp = np.zeros(x.size + 2)                 # float64
    xp[1:-1] = x
    y = xp[:-2] + xp[1:-1]
    y += xp[2:]
    y /= 3
    return y


def check(y, x, name="y = average3(x)"):
    """Every element within 3 roundings of the size of its terms: where
    neighbours cancel, |y| alone would be too small a yardstick."""
    return cb.compare(name, y, reference(x), k=3, scale=reference(np.abs(x)))
# --8<-- [end:reference]


def load_kernel():
    return cb.compile(KERNEL_FILE).get_function("average3").prepare("PPi")


# --8<-- [start:launch]
def average3(kernel, x, y, block=BLOCK):
    """y = the three-point moving average of x, on the GPU.
    x, y: 1-D, C-contiguous float32 GPUArrays of one size."""
    cb.check_array("x", x, dtype=np.float32, ndim=1, on_device=True)
    n = cb.check_size("x.size", x.size)
    cb.check_array("y", y, dtype=np.float32, shape=(n,), on_device=True)
    kernel.prepared_call((cb.ceil_div(n, block), 1, 1), (block, 1, 1),
                         x.gpudata, y.gpudata, np.int32(n))
# --8<-- [end:launch]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, n=1_000_003)
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal(args.n, dtype=np.float32)

    cb.init()
    from pycuda import gpuarray
    x_gpu = gpuarray.to_gpu(x)
    y_gpu = gpuarray.empty_like(x_gpu)
    cb.poison(y_gpu)
    kernel = load_kernel()
    average3(kernel, x_gpu, y_gpu)
    cb.report_check(check(y_gpu.get(), x))
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
