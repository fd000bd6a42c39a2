"""The bias's gradient: a column sum of dY, without atomics.

Draft for Part IV ("Backpropagation on the GPU"), not yet a listing: run it
from the repository root with PYTHONPATH=code. db[j] = sum over the M rows
of dY[i, j], dY bf16 (M, N), db float32: col_partials sums 64 columns over
a share of the rows a block, col_finish adds the shares in order.

Run:    PYTHONPATH=code python3 docs/assets/experiments/part4_draft/bias_grad.py [--seed S] [--bench]
Checks: M x N = 1x8, 3x8, 31x64, 33x72, 1000x768, 8192x768, 8192x3072:
        whole-number gradients (from {-2, ..., 2}) first, so every sum is
        exact and every column must be exact; then dY ~ N(0, 1), every
        column within a float32 sum's bound (the chain behind it: a
        thread's rows, the 5 levels of the block's tree and the S shares,
        in units of the sum of |dY|), and a second run bitwise equal.
Bench:  at 8192 x 768 and 8192 x 3072 (GPT-2 small's widths at B T = 8192),
        time and GB/s (dY read once) against the copy bandwidth of the same
        run, in alternation with torch.sum(dY, dim=0, dtype=torch.float32).
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "code"))
import cudabook as cb  # noqa: E402
from cudabook import evidence  # noqa: E402
from cudabook.bf16 import from_bf16, to_bf16  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
THREADS, COLS, LANES = 256, 64, 32
SHAPES = [(1, 8), (3, 8), (31, 64), (33, 72), (1000, 768), (8192, 768), (8192, 3072)]
BENCH = [(8192, 768), (8192, 3072)]


def load_kernels():
    module = cb.compile(KERNEL_FILE)
    return {"partials": module.get_function("col_partials").prepare("PPii"),
            "finish": module.get_function("col_finish").prepare("PPii")}


def shares(m: int, n: int, sm_count: int) -> int:
    """Row shares S: about two waves of blocks of 8 an SM, and at least one
    row a lane in each share."""
    groups = cb.ceil_div(n, COLS)
    return max(1, min(cb.ceil_div(m, LANES), cb.ceil_div(16 * sm_count, groups)))


# --8<-- [start:launch]
def bias_grad(kernels, dY, db, partials, sm_count: int) -> None:
    """db = dY summed down its columns. dY: (M, N) bf16 bit patterns
    (uint16), N a multiple of 8, 16-byte aligned; db: (N,) float32;
    partials: float32, shares(M, N, sm_count) x N of workspace."""
    cb.check_array("dY", dY, dtype=np.uint16, ndim=2, on_device=True, alignment=16)
    m = cb.check_size("dY rows (M)", dY.shape[0])
    n = cb.check_size("dY columns (N)", dY.shape[1])
    if n % 8:
        raise ValueError(f"dY: N must be a multiple of 8 (16-byte loads), got {n}")
    cb.check_array("db", db, dtype=np.float32, shape=(n,), on_device=True)
    s = shares(m, n, sm_count)
    cb.check_array("partials", partials, dtype=np.float32, shape=(s, n), on_device=True)
    kernels["partials"].prepared_call((cb.ceil_div(n, COLS), s, 1), (THREADS, 1, 1), dY.gpudata,
                                      partials.gpudata, np.int32(m), np.int32(n))
    kernels["finish"].prepared_call((cb.ceil_div(n, THREADS), 1, 1), (THREADS, 1, 1), partials.gpudata,
                                    db.gpudata, np.int32(n), np.int32(s))
# --8<-- [end:launch]


def run_shape(kernels, m, n, rng, sm_count):
    from pycuda import gpuarray

    s = shares(m, n, sm_count)
    part = gpuarray.empty((s, n), np.float32)
    db = gpuarray.empty(n, np.float32)
    tag = f"{m:,} x {n:,}"
    dYi = to_bf16(rng.integers(-2, 3, (m, n)).astype(np.float32))
    g = gpuarray.to_gpu(dYi)
    cb.poison(db)
    bias_grad(kernels, g, db, part, sm_count)
    cb.report_check(cb.compare(f"db {tag}, whole numbers", db.get(), from_bf16(dYi).astype(np.float64).sum(0), k=0))
    dYr = to_bf16(rng.standard_normal((m, n), dtype=np.float32))
    g = gpuarray.to_gpu(dYr)
    x = from_bf16(dYr).astype(np.float64)
    chain = cb.ceil_div(cb.ceil_div(m, s), LANES) + 5 + s
    bias_grad(kernels, g, db, part, sm_count)
    first = db.get()
    cb.report_check(cb.compare(f"db {tag}, random", first, x.sum(0), k=1, scale=chain * np.abs(x).sum(0)))
    bias_grad(kernels, g, db, part, sm_count)
    same = np.array_equal(first.view(np.uint32), db.get().view(np.uint32))
    cb.report_check(cb.expect(f"db {tag}: two runs, the same bits", same, "bitwise equal" if same else "differ"))
    return g, db, part


def bench(kernels, seed, sm_count):
    import torch

    rng = np.random.default_rng(seed)
    ceiling = ("device-to-device copy", cb.ceiling())
    for m, n in BENCH:
        g, db, part = run_shape(kernels, m, n, rng, sm_count)
        t = torch.from_numpy(from_bf16(g.get())).cuda().to(torch.bfloat16)
        evidence.benchmark(f"bias grad {m}x{n}", lambda g=g, db=db, part=part: bias_grad(kernels, g, db, part, sm_count),
                           bytes_moved=2 * m * n, ceiling=ceiling,
                           baseline=("torch.sum(dY, 0, float32)", lambda t=t: torch.sum(t, dim=0, dtype=torch.float32)))


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    info = cb.init()
    kernels = load_kernels()
    rng = np.random.default_rng(args.seed)
    for m, n in SHAPES:
        run_shape(kernels, m, n, rng, info.sm_count)
    if args.bench:
        bench(kernels, args.seed, info.sm_count)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
