"""Wrong arguments, caught on the host before anything reaches the GPU.

A kernel cannot check its arguments: it receives raw pointers and an int,
and a wrong dtype, shape or stride only makes it read the wrong bytes, with
no error at all. So the launch wrapper of fixed_oob.py checks them first
with cb.check_array and cb.check_size, and raises a Python error that names
the argument. This program makes each mistake on purpose, catches the error
and checks that it is the right kind and names the right argument; then it
makes a correct call and checks the answer.

Run:    python code/kernels_go_wrong/validate_inputs.py
Checks: six wrong calls (a float64 array, an output of the wrong length, a
        2-D array, a non-contiguous view, a NumPy array still on the host,
        and a size beyond a 32-bit int) each raise TypeError or ValueError
        whose message starts with the argument's name; then a correct call
        matches the float64 reference (relative error <= 1e-6).
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
sys.path.insert(0, str(Path(__file__).resolve().parent))      # and fixed_oob next to this file
import cudabook as cb  # noqa: E402
import fixed_oob  # noqa: E402

N = 10_007


# --8<-- [start:attempt]
def attempt(name, want, arg, call):
    """Make a call that should fail; check the error's type and that its
    message starts with the name of the argument at fault."""
    try:
        call()
    except (TypeError, ValueError) as e:
        ok = isinstance(e, want) and str(e).startswith(f"{arg}:")
        return cb.report_check(cb.expect(name, ok, f"{type(e).__name__}: {e}"))
    return cb.report_check(cb.expect(name, False, "no error raised"))
# --8<-- [end:attempt]


def main(argv=None) -> int:
    cb.parse_args(argv, __doc__)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(N, dtype=np.float32)

    cb.init()
    from pycuda import gpuarray

    kernel = fixed_oob.load_kernel()
    x_gpu = gpuarray.to_gpu(x)
    y_gpu = gpuarray.empty_like(x_gpu)
    run = fixed_oob.average3

    # --8<-- [start:mistakes]
    wide = gpuarray.to_gpu(np.repeat(x, 2))                       # x[i] at wide[2*i]
    attempt("float64 input", TypeError, "x",
            lambda: run(kernel, gpuarray.to_gpu(x.astype(np.float64)), y_gpu))
    attempt("output one element short", ValueError, "y",
            lambda: run(kernel, x_gpu, gpuarray.empty(N - 1, np.float32)))
    attempt("2-D input", ValueError, "x",
            lambda: run(kernel, gpuarray.to_gpu(x[:N - 1].reshape(2, -1)), y_gpu))
    attempt("non-contiguous view", ValueError, "x",
            lambda: run(kernel, wide[::2], y_gpu))
    attempt("host array instead of device array", TypeError, "x",
            lambda: run(kernel, x, y_gpu))
    attempt("size beyond a 32-bit int", ValueError, "x.size",
            lambda: cb.check_size("x.size", 2**31))            # what the wrapper checks, without 8 GB
    # --8<-- [end:mistakes]

    cb.poison(y_gpu)
    run(kernel, x_gpu, y_gpu)
    cb.report_check(fixed_oob.check(y_gpu.get(), x, "after all that, a correct call"))
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
