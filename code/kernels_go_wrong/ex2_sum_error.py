"""Solution to exercise 2: how the error of a float32 sum grows with n.

T = 256 threads each add m numbers drawn uniformly from [0, 1), one at a
time in float32, for m from 2^8 to 2^16. Each sum is compared with the same
sum in float64. Every addition rounds its result to within u = 2^-24 (the
unit roundoff of float32), so a sum of m positive terms is off by at most
gamma_(m-1) = (m-1)u / (1 - (m-1)u) of itself: the worst case, growing
like m. Roundings of random data fall on both sides and partly cancel, so
the typical error grows more like sqrt(m) * u. The program prints both
against the measured errors.

Run:    python code/kernels_go_wrong/ex2_sum_error.py [--seed S]
Checks: at every m, the largest relative error of the T sums is within
        the bound gamma_(m-1).
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
T = 256                                  # sums per size: one per thread
BLOCK = 128
SIZES = [2**8, 2**10, 2**12, 2**14, 2**16]
U = 2.0**-24                             # unit roundoff of float32


def load_kernel():
    return cb.compile(KERNEL_FILE).get_function("column_sums").prepare("PPii")


# --8<-- [start:solution]
def measure(kernel, rng, m):
    """Relative errors of T float32 sums of m uniform [0, 1) numbers."""
    from pycuda import gpuarray

    x = rng.random((m, T), dtype=np.float32)       # column t is thread t's numbers
    x_gpu = gpuarray.to_gpu(x)
    sums = gpuarray.empty(T, np.float32)
    cb.poison(sums)
    kernel.prepared_call((cb.ceil_div(T, BLOCK), 1, 1), (BLOCK, 1, 1),
                         x_gpu.gpudata, sums.gpudata, np.int32(m), np.int32(T))
    exact = x.sum(axis=0, dtype=np.float64)        # float64: error ~1e-16, negligible here
    return np.abs(sums.get() - exact) / exact


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__)
    rng = np.random.default_rng(args.seed)
    cb.init()
    kernel = load_kernel()
    print(f"{'m':>7} {'rms rel. error':>15} {'max rel. error':>15} {'sqrt(m)*u':>11} {'bound (m-1)u':>13}")
    facts = {}
    for m in SIZES:
        err = measure(kernel, rng, m)
        rms, worst = float(np.sqrt(np.mean(err**2))), float(err.max())
        bound = (m - 1) * U / (1 - (m - 1) * U)
        print(f"{m:>7,} {rms:>15.2e} {worst:>15.2e} {np.sqrt(m) * U:>11.2e} {bound:>13.2e}")
        cb.report_check(cb.expect(f"m = {m:,}: every error within (m-1)u", worst <= bound,
                                  f"max {worst:.2e} <= {bound:.2e}", n=m * T))
        facts[f"rms_{m}"], facts[f"max_{m}"] = rms, worst
    cb.report_facts(**facts)
    return cb.finish()
# --8<-- [end:solution]


if __name__ == "__main__":
    sys.exit(cb.run(main))
