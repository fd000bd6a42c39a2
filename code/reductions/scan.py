"""Inclusive prefix sum (scan) of n floats, in three passes and in one.

A scan, y[i] = x[0] + ... + x[i], looks sequential, but it is a sum with
every partial result kept. scan_warp scans 32 values with five
__shfl_up_sync steps; scan_block scans a tile of 8,192 elements per block
(float4 loads, a warp scan per 128 elements, then a scan of the block's
warp totals in shared memory). A whole array then takes three kernels
(scan_block writes each tile's total, scan_totals scans the totals,
add_totals adds them back: x read once, y written twice and read once), or
one: scan_lookback, where each tile publishes its total, looks back at the
tiles before it until it finds one that knows its inclusive prefix
(decoupled look-back, Merrill and Garland 2016), and publishes its own, so
every element is read once and written once, as in a copy.

Run:    python code/reductions/scan.py [--n N] [--seed S] [--bench]
Checks: every output element, at size n, twice. First exactly (k = 0),
        on whole numbers uniform over {-2, ..., 2} stored as float32,
        against np.cumsum in float64 (exact on them). A sum of whole
        numbers is a whole number, and float32 holds every whole number up
        to 2^24, so no addition rounds while every partial sum stays within
        2^24, as sum_ladder.py argues: for certain up to n = 2^23 (m terms
        sum to at most 2m); beyond, no kernel picks which terms to add, or
        in what order, by their values (where a look-back stops is
        timing), so a partial sum of m independent terms in [-2, 2] of mean
        0 passes 2^24 with probability below 2 exp(-2^48 / 8m) (Hoeffding),
        2 exp(-2^17) at n = 2^28. (A prefix of i terms is typically about
        sqrt(2i): some 23,000 at i = 2^28.) A rounding could only fail the
        check, never pass it. A tile's total lost or added twice, by the
        look-back or by the scan of the totals, moves every element that
        counts it by that total, a whole number that is 0 only if the
        tile's 8,192 terms cancel (1 time in 321), so it fails at every n,
        where a bound scaled by the running sum of |x| lets it through at
        large n. Then on floats uniform in [-1, 1), the data --bench
        times, against np.cumsum in float64, with scale = the running sum
        of |x| (the terms cancel). As in sum_ladder.py, an
        element whose chain of additions is h long is off by at most
        h u sum |x|, and on random data by about sqrt(h) u: k = 6 sqrt(h).
        Inside a tile, h <= 24 (3 inside a float4, 5 for a warp scan, 8
        chunk carries, 5 for the scan of the warp totals, 3 adds of the
        offsets). scan_block (each tile alone): h = 24. Three passes:
        3 x 24 + ceil(tiles / 8,192) + 1 (the tile, its total, the scan of
        the totals with its carries, the final add). Look-back: 2 x 24 +
        tiles (a look-back that goes d tiles back adds at most d
        additions to the chain). Also checked, on both inputs: every
        look-back tile ended with its inclusive prefix published.
Bench:  at n = 2^28, GB/s (8n bytes: x read, y written, as a copy moves)
        against the copy bandwidth and torch.cumsum. Target on an H200:
        scan_lookback >= 80% of copy and >= 1.3x torch.cumsum.
"""

import math
import os
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BLOCK = 256                  # threads per block: the .cu's BLOCK
PER = 8                      # float4s per thread per tile: the .cu's PER
TILE = BLOCK * 4 * PER       # elements per tile: 8,192
TILE_DEPTH = 24              # the longest chain of additions inside a tile (see Checks)
KERNELS = {"scan_block": "PPPi", "scan_totals": "PPi", "add_totals": "PPi", "scan_lookback": "PPPi"}
PREFIX = 2                   # the flag of a tile that published its inclusive prefix
WHOLE = 2                    # the exact checks' inputs: whole numbers from -WHOLE to WHOLE (see Checks)


def reference(x):
    return np.cumsum(x, dtype=np.float64)


def whole_numbers(n: int, rng) -> np.ndarray:
    """n whole numbers drawn uniformly from {-WHOLE, ..., WHOLE}, as float32:
    every partial sum of them is exact in float32 (see Checks), and so is
    their float64 reference."""
    return rng.integers(-WHOLE, WHOLE + 1, size=n, dtype=np.int8).astype(np.float32)


def tile_reference(x, tile=TILE):
    """The scan of each tile on its own, what scan_block writes."""
    padded = np.zeros(cb.ceil_div(x.size, tile) * tile, x.dtype)
    padded[:x.size] = x
    return np.cumsum(padded.reshape(-1, tile), axis=1, dtype=np.float64).ravel()[:x.size]


def load_kernels() -> dict:
    src = KERNEL_FILE.read_text()
    for name, value in (("BLOCK", BLOCK), ("PER", PER)):
        found = re.search(rf"#define {name} (\d+)", src)
        if found is None or int(found.group(1)) != value:
            raise RuntimeError(f"{KERNEL_FILE.name} must #define {name} {value}, as this program assumes")
    module = cb.compile(KERNEL_FILE)
    return {name: module.get_function(name).prepare(sig) for name, sig in KERNELS.items()}


def check_in_out(x, y) -> int:
    """x and y: 1-D float32 GPUArrays of one size, 16-byte aligned (float4
    loads and stores), not overlapping (x is read through the read-only
    cache while y is written). Returns n."""
    cb.check_array("x", x, dtype=np.float32, ndim=1, on_device=True, alignment=16)
    n = cb.check_size("x.size", x.size)
    cb.check_array("y", y, dtype=np.float32, shape=(n,), on_device=True, alignment=16)
    if int(x.gpudata) < int(y.gpudata) + y.nbytes and int(y.gpudata) < int(x.gpudata) + x.nbytes:
        raise ValueError("y: must not overlap x (the scan is not in place)")
    return n


def scratch(n: int):
    """The scratch buffers for n elements: tile totals and their scan (three
    passes), and the look-back's state (a tile counter and one status word
    per tile)."""
    from pycuda import gpuarray

    tiles = cb.ceil_div(n, TILE)
    return gpuarray.empty(tiles, np.float32), gpuarray.empty(tiles, np.float32), \
        gpuarray.empty(tiles + 1, np.uint64)


# --8<-- [start:launch_block]
def scan_tiles(kernels, x, y, totals) -> None:
    """y = the scan of each TILE-element tile of x on its own;
    totals[t] = the sum of tile t (float32, one per tile)."""
    n = check_in_out(x, y)
    tiles = cb.ceil_div(n, TILE)
    cb.check_array("totals", totals, dtype=np.float32, shape=(tiles,), on_device=True)
    kernels["scan_block"].prepared_call((tiles, 1, 1), (BLOCK, 1, 1),
                                        x.gpudata, y.gpudata, totals.gpudata, np.int32(n))
# --8<-- [end:launch_block]


# --8<-- [start:launch_three_pass]
def scan_three_pass(kernels, x, y, totals, scanned) -> None:
    """y = inclusive scan of x: scan the tiles, scan their totals, add.
    totals, scanned: float32, one per tile, 16-byte aligned. Both are
    written in full before they are read, so they need no reset."""
    n = check_in_out(x, y)
    tiles = cb.ceil_div(n, TILE)
    cb.check_array("scanned", scanned, dtype=np.float32, shape=(tiles,), on_device=True, alignment=16)
    cb.check_array("totals", totals, dtype=np.float32, shape=(tiles,), on_device=True, alignment=16)
    scan_tiles(kernels, x, y, totals)
    if tiles > 1:                                   # one tile: already done
        kernels["scan_totals"].prepared_call((1, 1, 1), (BLOCK, 1, 1),
                                             totals.gpudata, scanned.gpudata, np.int32(tiles))
        kernels["add_totals"].prepared_call((tiles - 1, 1, 1), (BLOCK, 1, 1),
                                            y.gpudata, scanned.gpudata, np.int32(n))
# --8<-- [end:launch_three_pass]


# --8<-- [start:launch_lookback]
def scan_lookback(kernels, x, y, state) -> None:
    """y = inclusive scan of x in one pass. state: uint64, one word per
    tile plus the tile counter, zeroed here before every launch (a status
    left from the last launch would pass stale prefixes on)."""
    import pycuda.driver as cuda

    n = check_in_out(x, y)
    tiles = cb.ceil_div(n, TILE)
    cb.check_array("state", state, dtype=np.uint64, shape=(tiles + 1,), on_device=True)
    cuda.memset_d32(state.gpudata, 0, 2 * (tiles + 1))
    kernels["scan_lookback"].prepared_call((tiles, 1, 1), (BLOCK, 1, 1),
                                           x.gpudata, y.gpudata, state.gpudata, np.int32(n))
# --8<-- [end:launch_lookback]


def chain_length(version: str, n: int) -> int:
    """The longest chain of additions behind any output element (see Checks)."""
    tiles = cb.ceil_div(n, TILE)
    if version == "scan_block":
        return TILE_DEPTH
    if version == "scan_three_pass":
        return 3 * TILE_DEPTH + cb.ceil_div(tiles, TILE) + 1
    return 2 * TILE_DEPTH + tiles


def bound_k(version: str, n: int) -> float:
    """k for cb.compare: six times the square root of the chain (see Checks)."""
    return 6 * math.sqrt(chain_length(version, n))


def torch_baseline(x):
    torch = cb.torch_cuda()
    if torch is None:
        return None
    tx = torch.from_numpy(x).cuda()
    ty = torch.empty_like(tx)
    return "torch.cumsum", lambda: torch.cumsum(tx, 0, out=ty)


#: Under compute-sanitizer the suite's size (1,027) is a single tile, so the
#: cross-tile paths (the look-back, the scan of the totals) would go
#: unchecked; there the checks also run at this size, several tiles long.
SANITIZER_TILES_N = 5 * TILE + 3


def check_versions(kernels, x, x_gpu, y_gpu, buffers, versions: dict, exact: bool) -> None:
    """Every version's output for x (on the GPU as x_gpu) against float64:
    exactly (k = 0) when x holds whole numbers (exact=True, see
    whole_numbers), else within its k. buffers: scratch(n)."""
    data = "whole numbers" if exact else "random floats"
    n = x.size
    totals, scanned, state = buffers

    cb.poison(y_gpu)
    cb.poison(totals)
    scan_tiles(kernels, x_gpu, y_gpu, totals)
    bound = {"k": 0} if exact else {"k": bound_k("scan_block", n), "scale": tile_reference(np.abs(x))}
    cb.report_check(cb.compare(f"scan_block (each tile), {data}", y_gpu.get(), tile_reference(x), **bound))

    ref = reference(x)
    scale = None if exact else reference(np.abs(x))
    for version, run in versions.items():
        cb.poison(y_gpu)
        cb.poison(totals)
        cb.poison(scanned)
        run()
        bound = {"k": 0} if exact else {"k": bound_k(version, n), "scale": scale}
        cb.report_check(cb.compare(f"{version}, {data}", y_gpu.get(), ref, **bound))
    flags = state.get()[1:] >> np.uint64(32)
    cb.report_check(cb.expect(f"scan_lookback, {data}: every tile published its prefix",
                              bool(np.all(flags == PREFIX)),
                              f"{int(np.sum(flags == PREFIX)):,} of {flags.size:,} tiles", n=n))


def check_all(kernels, n: int, seed: int):
    """Every version checked at size n, on whole numbers (exactly) and on
    random floats (within its bound); returns the floats and the versions,
    which the benchmark reuses (x_gpu then holds the floats)."""
    from pycuda import gpuarray

    rng = np.random.default_rng(seed)
    x = rng.random(n, dtype=np.float32)
    x *= 2
    x -= 1                                          # uniform in [-1, 1), exactly (no rounding)
    whole = whole_numbers(n, rng)                   # drawn after x, so x is what it always was
    x_gpu = gpuarray.to_gpu(whole)
    y_gpu = gpuarray.empty_like(x_gpu)
    buffers = scratch(n)
    totals, scanned, state = buffers
    versions = {"scan_three_pass": lambda: scan_three_pass(kernels, x_gpu, y_gpu, totals, scanned),
                "scan_lookback": lambda: scan_lookback(kernels, x_gpu, y_gpu, state)}
    check_versions(kernels, whole, x_gpu, y_gpu, buffers, versions, exact=True)
    del whole
    x_gpu.set(x)
    check_versions(kernels, x, x_gpu, y_gpu, buffers, versions, exact=False)
    return x, versions


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, n=1_000_003, bench_n=2**28)
    cb.init()
    kernels = load_kernels()
    if os.environ.get("CUDABOOK_SANITIZER") and args.n < SANITIZER_TILES_N:
        check_all(kernels, SANITIZER_TILES_N, args.seed + 1)
    x, versions = check_all(kernels, args.n, args.seed)

    if args.bench:
        base = torch_baseline(x)
        for version, run in versions.items():
            cb.benchmark(version, run, bytes_moved=8 * args.n, baseline=base,
                         targets={"copy": 0.8, "baseline": 1.3} if version == "scan_lookback" else None)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
