"""Solution to exercise 1: the moving average with a shared-memory tile.

The kernel of fixed_oob.cu reads every element of x three times, from three
threads. This version loads each block's elements and one halo element on
each side into shared memory once, then averages from there. It must agree
with the float64 reference of fixed_oob.py exactly as well as fixed_oob
does, and pass all four sanitizer tools: the tile has room for the halo, and
a barrier separates loading the tile from reading it.

Run:    python code/kernels_go_wrong/ex1_shared_tile.py [--n N] [--seed S]
Checks: every element of y against the float64 reference with a zero
        boundary, k=3 with the terms' size as scale (as fixed_oob.py).
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BLOCK = 256  # must match BLOCK in the .cu file: the tile holds BLOCK + 2 elements


def reference(x):
    xp = np.zeros(x.size + 2)                 # float64
    xp[1:-1] = x
    y = xp[:-2] + xp[1:-1]
    y += xp[2:]
    y /= 3
    return y


def load_kernel():
    return cb.compile(KERNEL_FILE).get_function("average3_tiled").prepare("PPi")


# --8<-- [start:solution]
def average3_tiled(kernel, x, y):
    """y = the three-point moving average of x, through a shared-memory tile.
    The block size is fixed by the kernel's tile, so the caller cannot pick it."""
    cb.check_array("x", x, dtype=np.float32, ndim=1, on_device=True)
    n = cb.check_size("x.size", x.size)
    cb.check_array("y", y, dtype=np.float32, shape=(n,), on_device=True)
    kernel.prepared_call((cb.ceil_div(n, BLOCK), 1, 1), (BLOCK, 1, 1),
                         x.gpudata, y.gpudata, np.int32(n))
# --8<-- [end:solution]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, n=1_000_003)
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal(args.n, dtype=np.float32)

    cb.init()
    from pycuda import gpuarray
    x_gpu = gpuarray.to_gpu(x)
    y_gpu = gpuarray.empty_like(x_gpu)
    cb.poison(y_gpu)
    average3_tiled(load_kernel(), x_gpu, y_gpu)
    cb.report_check(cb.compare("y = average3_tiled(x)", y_gpu.get(), reference(x), k=3,
                               scale=reference(np.abs(x))))
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
