"""Solution to exercise 3: what goes wrong when the float4 kernel forgets its tail.

Runs the vectorised add without its scalar tail (ex3_forget_tail.cu) at the
test sizes 1, 31, 32 and 33, with the output poisoned (NaN) before each
launch, and checks the outcome the chapter predicts: only n = 32, a multiple
of 4, comes out right. For the others the last n % 4 elements are never
written, so they stay NaN and the comparison fails. Without the poison those
elements would hold whatever the memory held before, which can be the right
answer left there by an earlier run: a test that passes by luck.

Run:    python code/first_kernel/ex3_forget_tail.py [--seed S]
Checks: for each size, that the comparison with the float64 reference passes
        exactly when n % 4 == 0, and that the NaNs are exactly the tail.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BLOCK = 256
SIZES = [1, 31, 32, 33]


def reference(a, b):
    """The answer in float64: NumPy widens each float32 pair as it adds them,
    in one pass, with no float64 copies of a and b."""
    return np.add(a, b, dtype=np.float64)


def load_kernel():
    return cb.compile(KERNEL_FILE).get_function("add_no_tail").prepare("PPPi")


def add_no_tail(kernel, a, b, out, block=BLOCK):
    """out = a + b, except the last a.size % 4 elements (the bug)."""
    cb.check_array("a", a, dtype=np.float32, ndim=1, on_device=True, alignment=16)
    n = cb.check_size("a.size", a.size)
    cb.check_array("b", b, dtype=np.float32, shape=(n,), on_device=True, alignment=16)
    cb.check_array("out", out, dtype=np.float32, shape=(n,), on_device=True, alignment=16)
    grid = max(1, cb.ceil_div(n // 4, block))
    kernel.prepared_call((grid, 1, 1), (block, 1, 1), a.gpudata, b.gpudata, out.gpudata, np.int32(n))


# --8<-- [start:solution]
def try_size(kernel, n, rng):
    """Run the tail-less kernel at size n; return the comparison and the
    indices of the elements it left unwritten (still NaN)."""
    from pycuda import gpuarray

    a = rng.standard_normal(n, dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    a_gpu, b_gpu = gpuarray.to_gpu(a), gpuarray.to_gpu(b)
    c_gpu = gpuarray.empty_like(a_gpu)
    cb.poison(c_gpu)                              # NaN: an unwritten element cannot pass
    add_no_tail(kernel, a_gpu, b_gpu, c_gpu)
    c = c_gpu.get()
    result = cb.compare(f"n = {n}", c, reference(a, b))
    return result, np.flatnonzero(np.isnan(c))
# --8<-- [end:solution]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__)
    rng = np.random.default_rng(args.seed)
    cb.init()
    kernel = load_kernel()
    for n in SIZES:
        result, unwritten = try_size(kernel, n, rng)
        print(f"  n = {n:2d}: comparison {'passes' if result.passed else 'fails'}; "
              f"unwritten elements: {unwritten.tolist()}")
        tail = list(range(n - n % 4, n))
        cb.report_check(cb.expect(f"n = {n}: passes exactly when n % 4 == 0",
                                  result.passed == (n % 4 == 0),
                                  f"n % 4 = {n % 4}, comparison {'passed' if result.passed else 'failed'}"))
        cb.report_check(cb.expect(f"n = {n}: the unwritten elements are the tail",
                                  unwritten.tolist() == tail, f"unwritten {unwritten.tolist()}"))
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
