"""Solution to exercise 2: the variance three ways in float32, and why not E[x^2] - E[x]^2.

Rows of 4,096 values, drawn as m + N(0, 1) and rounded to float32, for
mean offsets m = 0, 100 and 10,000. Each row's (biased) variance is
computed in float32 by three kernels, a thread per row (ex2_variance.cu):
the one-pass E[x^2] - E[x]^2, Welford's one-pass update of a running
count, mean and M2, and the two-pass form (the mean, then the squared
deviations from it). Each is compared with the float64 variance of the
same float32 values; the listing prints each method's worst relative
error, and how many of the one-pass results came out negative.

Run:    python code/softmax_norm/ex2_variance.py [--seed S]
Checks: every row of var_welford and var_two_pass, relative to the float64
        variance v, with mu the row's mean and n = cols. Each kernel adds in
        one sequential chain of n; on random data a chain of n is counted as
        6 sqrt(n) roundings, as elsewhere in the book. Two-pass: the mean is
        off by at most delta = (6 sqrt(n) + 1) u mean|x|, which adds exactly
        delta^2 to the variance (sum (x - mu')^2 / n = v + (mu - mu')^2); the
        deviations, their squares, their sum and the division add (6 sqrt(n)
        + 4) u of v + delta^2: k = 6 sqrt(n) + 4, and a scale that adds
        delta^2 (1 + k u) to the bound.
        Welford: Chan, Golub and LeVeque's bound for the updating algorithm,
        about n kappa u with kappa = sqrt(1 + mu^2 / v), n counted as
        6 sqrt(n): k = 6 sqrt(n) kappa + 4, kappa the largest of the offset's
        rows. var_naive is checked only for having written every row: its
        error is what the exercise shows, and no bound of its kind holds.
        (Under compute-sanitizer 3 rows per offset instead of 1,000.)
"""

import math
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
METHODS = ("naive", "welford", "two_pass")
OFFSETS = {"0": 0.0, "1e2": 1e2, "1e4": 1e4}       # tag in the facts: mean offset
ROWS, COLS = 1000, 4096
SANITIZER_ROWS = 3
THREADS = 128
CHAIN = 6                   # roundings counted per square root of a chain's length (random data)
U = 2.0**-24


def load_kernels() -> dict:
    module = cb.compile(KERNEL_FILE)
    return {m: module.get_function(f"var_{m}").prepare("PPii") for m in METHODS}


def variance(kernels, method: str, x, var) -> None:
    """var[r] = the variance of row r of x, by `method`. x: (rows, cols)
    float32 GPUArray, cols < 2^24 (Welford counts in float32); var: (rows,)
    float32."""
    cb.check_array("x", x, dtype=np.float32, ndim=2, on_device=True)
    rows = cb.check_size("x.shape[0] (rows)", x.shape[0])
    cols = cb.check_size("x.shape[1] (cols)", x.shape[1], high=2**24)
    cb.check_size("x.size", x.size)
    cb.check_array("var", var, dtype=np.float32, shape=(rows,), on_device=True)
    kernels[method].prepared_call((cb.ceil_div(rows, THREADS), 1, 1), (THREADS, 1, 1), x.gpudata,
                                  var.gpudata, np.int32(rows), np.int32(cols))


def reference(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's mean and variance in float64 (exact enough: the float32
    values are exact in float64, and float64 has 29 more bits)."""
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=1)
    d = x64 - mean[:, None]
    return mean, (d * d).mean(axis=1)


# --8<-- [start:solution]
def bounds(x: np.ndarray, mean: np.ndarray, var: np.ndarray) -> dict:
    """{method: (k, scale)} for cb.compare, from the docstring's analysis."""
    r = CHAIN * math.sqrt(x.shape[1])
    kappa = np.sqrt(1 + mean * mean / var)          # the condition number of the variance
    delta = (r + 1) * U * np.abs(x.astype(np.float64)).mean(axis=1)   # bound on the mean's error
    k_two = r + 4
    return {"welford": (r * float(kappa.max()) + 4, None),
            "two_pass": (k_two, delta * delta * (1 + k_two * U) / (k_two * U))}


def three_ways(kernels, x: np.ndarray, tag: str) -> dict:
    """Run the three kernels on x; check two, report all three."""
    from pycuda import gpuarray

    xg = gpuarray.to_gpu(x)
    got = {}
    for method in METHODS:
        v = gpuarray.empty(x.shape[0], np.float32)
        cb.poison(v)
        variance(kernels, method, xg, v)
        got[method] = v.get()
    mean, var = reference(x)
    for method, (k, scale) in bounds(x, mean, var).items():
        cb.report_check(cb.compare(f"{method}, mean {tag}", got[method], var, k=k, scale=scale))
    finite = int(np.isfinite(got["naive"]).sum())
    cb.report_check(cb.expect(f"naive, mean {tag}: every row written", finite == x.shape[0],
                              f"{finite:,} of {x.shape[0]:,} rows finite"))
    facts = {f"{m}_worst_rel_{tag}": float(np.max(np.abs(got[m] - var) / var)) for m in METHODS}
    facts[f"naive_negative_{tag}"] = int((got["naive"] < 0).sum())
    return facts
# --8<-- [end:solution]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__)
    cb.init()
    kernels = load_kernels()
    rng = np.random.default_rng(args.seed)
    rows = SANITIZER_ROWS if os.environ.get("CUDABOOK_SANITIZER") else ROWS
    facts = {"rows": rows, "cols": COLS}
    for tag, offset in OFFSETS.items():
        x = (offset + rng.standard_normal((rows, COLS))).astype(np.float32)
        facts.update(three_ways(kernels, x, tag))
    print(f"worst relative error of the float32 variance, {rows:,} rows of {COLS:,} values N(m, 1):")
    print(f"{'mean m':>8s}  {'E[x^2]-E[x]^2':>14s}  {'Welford':>9s}  {'two-pass':>9s}  {'negative':>9s}")
    for tag, offset in OFFSETS.items():
        print(f"{offset:8g}  {facts[f'naive_worst_rel_{tag}']:14.1e}  {facts[f'welford_worst_rel_{tag}']:9.1e}  "
              f"{facts[f'two_pass_worst_rel_{tag}']:9.1e}  {facts[f'naive_negative_{tag}']:9,d}")
    cb.report_facts(**facts)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
