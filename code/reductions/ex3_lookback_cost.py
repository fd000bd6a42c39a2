"""Solution to exercise 3: what the look-back costs, measured.

scan_block, the first kernel of the three-pass scan, scans every tile as
though nothing came before it: the same loads, the same tile scan and the
same stores as scan_lookback, and a copy's bytes, but no tile ever waits
for another. Timed beside scan_lookback on the same data, the difference
is what finding each tile's prefix costs. No new kernel: both come from
scan.py.

Run:    python code/reductions/ex3_lookback_cost.py [--n N] [--seed S] [--bench]
Checks: scan.py's checks at size n (each tile alone, three passes, the
        look-back, every tile's prefix published; exactly on whole numbers,
        within its bounds on random floats). Under --bench, on the random
        floats it times at n = 2^28: scan_block's tiles before the timing,
        and scan_lookback's output after its timing, within scan.py's
        bounds (scan.py checks both exactly on whole numbers at that size).
Bench:  at n = 2^28, GB/s (8n bytes: x read, y written) of scan_block alone
        and of scan_lookback, against the copy bandwidth and torch.cumsum.
"""

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from reductions import scan  # noqa: E402


# --8<-- [start:solution]
def time_both(kernels, x, n: int) -> dict:
    """Time scan_block alone and scan_lookback on x (float32, n elements);
    returns what the record keeps. scan_block's tiles are checked first,
    scan_lookback's output after its timing."""
    from pycuda import gpuarray

    x_gpu = gpuarray.to_gpu(x)
    y_gpu = gpuarray.empty_like(x_gpu)
    totals, _, state = scan.scratch(n)
    cb.poison(y_gpu)
    scan.scan_tiles(kernels, x_gpu, y_gpu, totals)
    cb.report_check(cb.compare("scan_block (each tile)", y_gpu.get(), scan.tile_reference(x),
                               k=scan.bound_k("scan_block", n), scale=scan.tile_reference(np.abs(x))))
    base = scan.torch_baseline(x)
    alone = cb.benchmark("scan_block (tiles alone)", lambda: scan.scan_tiles(kernels, x_gpu, y_gpu, totals),
                         bytes_moved=8 * n, baseline=base)
    whole = cb.benchmark("scan_lookback", lambda: scan.scan_lookback(kernels, x_gpu, y_gpu, state),
                         bytes_moved=8 * n, baseline=base)
    # Every configuration timed is also checked: y now holds the last timed
    # call's output.
    cb.report_check(cb.compare("scan_lookback", y_gpu.get(), scan.reference(x),
                               k=scan.bound_k("scan_lookback", n), scale=scan.reference(np.abs(x))))
    extra = whole.timing.median_ms - alone.timing.median_ms
    print(f"the look-back adds {1000 * extra:.0f} us to {1000 * alone.timing.median_ms:.0f} us "
          f"({100 * extra / whole.timing.median_ms:.0f}% of scan_lookback's time)")
    return {"tiles_alone_fraction": alone.fraction_of_ceiling, "lookback_fraction": whole.fraction_of_ceiling,
            "lookback_share": extra / whole.timing.median_ms}
# --8<-- [end:solution]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, n=1_000_003, bench_n=2**28)
    cb.init()
    kernels = scan.load_kernels()
    if not args.bench:
        if os.environ.get("CUDABOOK_SANITIZER") and args.n < scan.SANITIZER_TILES_N:
            scan.check_all(kernels, scan.SANITIZER_TILES_N, args.seed + 1)   # several tiles
        scan.check_all(kernels, args.n, args.seed)
    else:
        x = np.random.default_rng(args.seed).random(args.n, dtype=np.float32)
        x *= 2
        x -= 1                                          # uniform in [-1, 1), as scan.py draws it
        cb.report_facts(**time_both(kernels, x, args.n))
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
