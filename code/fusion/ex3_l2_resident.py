"""Solution to exercise 3: when the intermediates fit in the L2.

The chapter counts the unfused sequence's bytes as if every one of them
went to device memory: 14 per element against the fused kernel's 6. But t
and g are each written by one kernel and read by the next a moment later.
If a tensor is small enough, its lines are still in the L2 when the next
kernel asks for them. Then only x, r and y travel to and from device
memory, as in the fused kernel; t and g cost L2 traffic, and the two extra
launches cost time of their own, and fusion gains less than 14 / 6.

This listing launches the chapter's kernels, the three unfused ones and the
fused one, on tensors of rows x 3072 bf16 values, with the rows chosen so
that one tensor is 1, 2, 4, ... 256 MiB, and prints the ratio of their
times beside the size of the L2, which it reads from the device. While a
kernel writes t or g it also streams its input through the L2, so two
tensors' worth must fit for the next kernel to find all of t or g there.

How it is timed. cb.bench flushes the L2 before every repetition (it writes
a buffer twice the L2's size, outside the timed region) when the working
set it is given is below four times the L2. The working set given is what
each sequence touches: x, r and y for the fused kernel, t and g as well for
the unfused one (the one row of bias is left out). So at the small sizes
every repetition starts with x and r in device memory, not in the L2 from
the repetition before, and what the L2 gives back is what the sequence put
there itself: t and g. At the large sizes nothing is flushed, and nothing
needs to be: a sequence that touches more than four L2s' worth has pushed
its first bytes out long before it reads them again. The timed calls
launch the kernels directly, without the chapter wrappers' argument checks
(made once, on the same arguments): at the smallest sizes a kernel runs for
a few microseconds, about as long as those checks take in Python, and the
time would include waiting for them. What remains between two launches is
the GPU's own gap, which three launches pay three times.

The inputs are one random block of 1031 rows (x ~ N(0, 1), bias ~
N(0, 0.1^2), r ~ N(0, 1), as in the chapter) repeated down the rows, so the
float64 reference is computed once, for the block; every output element is
still checked.

Run:    python code/fusion/ex3_l2_resident.py [--seed S] [--bench]
Checks: the fused kernel and the unfused sequence, every element, against
        the float64 r + gelu(x + b) within the chapter's bounds, at 1 and 2
        MiB a tensor (under compute-sanitizer 1 x 3072 and 3 x 3072), and
        under --bench at every size of the sweep.
Bench:  at 1, 2, 4, ... 256 MiB a tensor (rows x 3072): the fused kernel's
        and the unfused sequence's times, their ratio (unfused / fused;
        14 / 6 if time went with the bytes), each one's share of the copy
        bandwidth by the bytes it moves (6 and 14 per element), and the size
        of two tensors over the L2's.
"""

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from fusion.bias_gelu_residual import (BLOCK, FUSED_BYTES, UNFUSED_BYTES, _check_inputs, _grid,  # noqa: E402
                                       check, load_kernels, random_inputs, reference)

COLS, MIB = 3072, 1 << 20
SIZES_MIB = (1, 2, 4, 8, 16, 32, 64, 128, 256)     # one tensor's size, under --bench
CHECK_SIZES_MIB = (1, 2)
SANITIZER_ROWS = (1, 3)
BLOCK_ROWS = 1031                                   # rows of the random block the inputs repeat


def rows_for(mib: int) -> int:
    return round(mib * MIB / (2 * COLS))


def tiled(a: np.ndarray, rows: int) -> np.ndarray:
    """`a` (2-D) repeated down the rows, cut to `rows` rows."""
    return np.tile(a, (cb.ceil_div(rows, a.shape[0]), 1))[:rows]


# --8<-- [start:solution]
def bare_launches(kernels, x, bias, residual, t, g, y):
    """The fused kernel and the unfused sequence as functions that only
    launch: their arguments are checked here, once, as the chapter's
    fused() and unfused() check them on every call."""
    rows, cols, vec = _check_inputs(x, bias, {"residual": residual, "t": t, "g": g, "y": y})
    n, grid, block = rows * cols, _grid(rows * cols), (BLOCK, 1, 1)
    r32, c32, v32, n64 = np.int32(rows), np.int32(cols), np.int32(vec), np.int64(n)

    def fused():
        kernels["bias_gelu_residual"].prepared_call(grid, block, x.gpudata, bias.gpudata, residual.gpudata,
                                                    y.gpudata, r32, c32, v32)

    def unfused():
        kernels["bias_add"].prepared_call(grid, block, x.gpudata, bias.gpudata, t.gpudata, r32, c32, v32)
        kernels["gelu_bf16"].prepared_call(grid, block, t.gpudata, g.gpudata, n64, v32)
        kernels["residual_add"].prepared_call(grid, block, g.gpudata, residual.gpudata, y.gpudata, n64, v32)
    return fused, unfused


def one_size(kernels, inputs, refs, rows: int, timed: bool, budget_ms: float) -> dict | None:
    """Check both sequences on the first `rows` rows; if timed, time them,
    each with the bytes it touches as its working set."""
    from pycuda import gpuarray

    x_all, bias, r_all = inputs
    n = rows * COLS
    xg, bg, rg = gpuarray.to_gpu(x_all[:rows]), gpuarray.to_gpu(bias), gpuarray.to_gpu(r_all[:rows])
    t, g, y = (gpuarray.empty_like(xg) for _ in range(3))
    fused, unfused = bare_launches(kernels, xg, bg, rg, t, g, y)
    for name, fn, outputs in (("fused", fused, (y,)), ("unfused", unfused, (t, g, y))):
        for buf in outputs:
            cb.poison(buf)
        fn()
        ref, t_abs, r_abs = (a[:rows] for a in refs)
        check(f"{name} {rows}x{COLS}", y, ref, t_abs, r_abs, fused_bound=name == "fused")
    if not timed:
        return None
    tf = cb.bench(fused, working_set_bytes=3 * 2 * n, budget_ms=budget_ms)      # x, r, y
    tu = cb.bench(unfused, working_set_bytes=5 * 2 * n, budget_ms=budget_ms)    # and t, g
    copy = cb.ceiling()
    return {"rows": rows, "fused_us": 1e3 * tf.median_ms, "unfused_us": 1e3 * tu.median_ms,
            "ratio": tu.median_ms / tf.median_ms,
            "fused_of_copy": FUSED_BYTES * n / (tf.median_ms * 1e-3) / copy,
            "unfused_of_copy": UNFUSED_BYTES * n / (tu.median_ms * 1e-3) / copy,
            "two_tensors_of_l2": 2 * 2 * n / cb.init().l2_bytes}
# --8<-- [end:solution]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    gpu = cb.init()
    kernels = load_kernels()
    sanitizer = os.environ.get("CUDABOOK_SANITIZER")
    if sanitizer:
        sizes = [(None, rows) for rows in SANITIZER_ROWS]
    else:
        sizes = [(mib, rows_for(mib)) for mib in (SIZES_MIB if args.bench else CHECK_SIZES_MIB)]
    top = max(rows for _, rows in sizes)
    x_blk, bias, r_blk = random_inputs(BLOCK_ROWS, COLS, np.random.default_rng(args.seed))
    inputs = (tiled(x_blk, top), bias, tiled(r_blk, top))
    refs = [tiled(a, top) for a in reference(x_blk, bias, r_blk)]       # r + gelu(x + b), |x + b|, |r|
    sweep = []
    for mib, rows in sizes:
        row = one_size(kernels, inputs, refs, rows, args.bench and not sanitizer, args.budget_ms)
        if row is not None:
            sweep.append(dict(mib=mib, **row))
    facts = {"predicted_speedup": UNFUSED_BYTES / FUSED_BYTES, "l2_mib": gpu.l2_bytes / MIB}
    if sweep:
        print(f"L2: {gpu.l2_bytes / MIB:.1f} MiB (from the device); bytes predict unfused / fused = "
              f"{UNFUSED_BYTES}/{FUSED_BYTES} = {UNFUSED_BYTES / FUSED_BYTES:.2f}")
        print(f"{'MiB':>4s} {'rows':>6s} {'fused us':>9s} {'unfused us':>10s} {'ratio':>6s} "
              f"{'fused':>6s} {'unfused':>8s} {'2 tensors':>10s}")
        print(f"{'':>4s} {'':>6s} {'':>9s} {'':>10s} {'':>6s} {'% copy':>6s} {'% copy':>8s} {'/ L2':>10s}")
        for s in sweep:
            print(f"{s['mib']:4d} {s['rows']:6d} {s['fused_us']:9.1f} {s['unfused_us']:10.1f} "
                  f"{s['ratio']:6.2f} {100 * s['fused_of_copy']:5.1f}% {100 * s['unfused_of_copy']:7.1f}% "
                  f"{s['two_tensors_of_l2']:10.2f}")
            facts.update({f"mib{s['mib']}_{k}": v for k, v in s.items() if k not in ("mib", "rows")})
        low = min(sweep, key=lambda s: s["ratio"])
        facts.update(sweep=sweep, min_ratio=low["ratio"], min_ratio_mib=low["mib"],
                     min_ratio_two_tensors_of_l2=low["two_tensors_of_l2"])
    cb.report_facts(**facts)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
