"""Solution to exercise 4: SAXPY, y = alpha * x + y, in the style of version 3.

The kernel reads x and y and writes y back in place: 12 bytes per element,
with one fused multiply-add. The launch is that of add_vectorized.py: a
thread per float4, at least one per tail element.

Run:    python code/first_kernel/ex4_saxpy.py [--n N] [--seed S] [--bench]
Checks: every element of y against alpha * x + y in float64, within 2
        roundings of the size of its terms (k=2, scale |alpha x| + |y|: one
        rounding if the compiler fuses the multiply-add, two if not, and the
        terms can cancel).
Bench:  GB/s (12 bytes per element) against the device-to-device copy
        bandwidth and torch's in-place y.add_(x, alpha=alpha).
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BLOCK = 256
ALPHA = np.float32(0.75)


def reference(alpha, x, y):
    """alpha * x + y in float64, each element widened as it is used, and
    |alpha * x| + |y|, the size of its terms (the check's scale)."""
    ax = np.multiply(x, np.float64(alpha), dtype=np.float64)
    ref = ax + y
    np.abs(ax, out=ax)
    ax += np.abs(y)
    return ref, ax


def load_kernel():
    return cb.compile(KERNEL_FILE).get_function("saxpy").prepare("fPPi")


# --8<-- [start:solution]
def saxpy(kernel, alpha, x, y, block=BLOCK):
    """y = alpha * x + y on the GPU, in place. x, y: 1-D float32 GPUArrays
    of one size, each starting on a 16-byte boundary."""
    cb.check_array("x", x, dtype=np.float32, ndim=1, on_device=True, alignment=16)
    n = cb.check_size("x.size", x.size)
    cb.check_array("y", y, dtype=np.float32, shape=(n,), on_device=True, alignment=16)
    threads = max(cb.ceil_div(n, 4), n % 4)   # a thread per float4, one per tail element
    kernel.prepared_call((cb.ceil_div(threads, block), 1, 1), (block, 1, 1),
                         np.float32(alpha), x.gpudata, y.gpudata, np.int32(n))
# --8<-- [end:solution]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, n=1_000_003, bench_n=200_000_003)
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal(args.n, dtype=np.float32)
    y = rng.standard_normal(args.n, dtype=np.float32)

    cb.init()
    from pycuda import gpuarray
    x_gpu, y_gpu = gpuarray.to_gpu(x), gpuarray.to_gpu(y)
    kernel = load_kernel()
    saxpy(kernel, ALPHA, x_gpu, y_gpu)
    ref, scale = reference(ALPHA, x, y)
    cb.report_check(cb.compare("y = alpha * x + y", y_gpu.get(), ref, k=2, scale=scale))

    if args.bench:
        # Timed runs keep updating y in place; its values drift, the traffic does not.
        baseline = None
        torch = cb.torch_cuda()
        if torch is not None:
            tx, ty = torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()
            baseline = ("y.add_(x, alpha)", lambda: ty.add_(tx, alpha=float(ALPHA)))
        cb.benchmark("saxpy", lambda: saxpy(kernel, ALPHA, x_gpu, y_gpu), bytes_moved=12 * args.n,
                     baseline=baseline)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
