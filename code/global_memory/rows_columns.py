"""Rows and columns: which index the lanes of a warp walk.

A row-major matrix keeps each row's elements side by side. A kernel with a
2-D grid chooses which matrix index follows threadIdx.x, the index that
differs between neighbouring lanes: the column index gives a warp
neighbouring addresses, the row index gives addresses a whole row apart.
The same choice appears in reductions: one thread per column, walking
down, reads a row's neighbouring floats at each step; one thread per row,
walking along, does not.

Run:    python code/global_memory/rows_columns.py [--seed S] [--bench]
Checks: at shapes 1x1, 33x31, 1000x1003 and 4097x3001: b = alpha * a
        within k = 1 in both grids; column and row sums within k = the sum's
        length (a chain of additions), scaled by the sum of |a|.
Bench:  at 8192 x 8191 float32: useful GB/s of each kernel (8 bytes per
        element to scale, 4 to sum) against the copy bandwidth, beside
        torch (alpha * a, a.sum(0), a.sum(1)); from Nsight Compute, sectors
        per load request.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
KERNELS = ("scale_x_cols", "scale_x_rows", "column_sums", "row_sums")
SHAPES = [(1, 1), (33, 31), (1000, 1003), (4097, 3001)]
BENCH_SHAPE = (8192, 8191)
BLOCK_2D = (32, 8, 1)
BLOCK_1D = 256
ALPHA = np.float32(1.5)


def load_kernels() -> dict:
    module = cb.compile(KERNEL_FILE)
    return {name: module.get_function(name) for name in KERNELS}


def _matrix(name: str, m, shape=None) -> tuple[int, int]:
    cb.check_array(name, m, dtype=np.float32, ndim=2, shape=shape, on_device=True)
    rows, cols = m.shape
    cb.check_size(f"{name}.size", rows * cols)
    return rows, cols


# --8<-- [start:launch]
def scale(kernels, name: str, a, b, alpha=ALPHA) -> None:
    """b = alpha * a with a 2-D grid of 32 x 8 blocks; x follows the columns
    (scale_x_cols) or the rows (scale_x_rows)."""
    rows, cols = _matrix("a", a)
    _matrix("b", b, shape=(rows, cols))
    first, second = (cols, rows) if name == "scale_x_cols" else (rows, cols)
    grid = (cb.ceil_div(first, BLOCK_2D[0]), cb.ceil_div(second, BLOCK_2D[1]), 1)
    if grid[1] > 65535:
        raise ValueError(f"a: {second:,} {'rows' if name == 'scale_x_cols' else 'columns'} need "
                         f"{grid[1]:,} blocks in y, more than the 65,535 a grid allows")
    kernels[name](a.gpudata, b.gpudata, np.int32(rows), np.int32(cols), np.float32(alpha),
                  block=BLOCK_2D, grid=grid)


def sums(kernels, name: str, a, out) -> None:
    """Column sums (one thread per column) or row sums (one per row)."""
    rows, cols = _matrix("a", a)
    length = cols if name == "column_sums" else rows
    cb.check_array("out", out, dtype=np.float32, shape=(length,), on_device=True)
    kernels[name](a.gpudata, out.gpudata, np.int32(rows), np.int32(cols),
                  block=(BLOCK_1D, 1, 1), grid=(cb.ceil_div(length, BLOCK_1D), 1))
# --8<-- [end:launch]


def run_all(kernels, a, b, col_out, row_out) -> None:
    """Each kernel once, in KERNELS order."""
    scale(kernels, "scale_x_cols", a, b)
    scale(kernels, "scale_x_rows", a, b)
    sums(kernels, "column_sums", a, col_out)
    sums(kernels, "row_sums", a, row_out)


def check_shape(kernels, rows: int, cols: int, rng) -> None:
    from pycuda import gpuarray

    a = rng.standard_normal((rows, cols), dtype=np.float32)
    a_gpu = gpuarray.to_gpu(a)
    b_gpu = gpuarray.empty_like(a_gpu)
    a64 = a.astype(np.float64)
    for name in ("scale_x_cols", "scale_x_rows"):
        cb.poison(b_gpu)
        scale(kernels, name, a_gpu, b_gpu)
        cb.report_check(cb.compare(f"{name} {rows}x{cols}", b_gpu.get(), float(ALPHA) * a64, k=1))
    for name, axis, length in (("column_sums", 0, cols), ("row_sums", 1, rows)):
        out = gpuarray.empty(length, np.float32)
        cb.poison(out)
        sums(kernels, name, a_gpu, out)
        chain = a.shape[axis]
        cb.report_check(cb.compare(f"{name} {rows}x{cols}", out.get(), a64.sum(axis=axis),
                                   k=max(chain - 1, 1), scale=np.abs(a64).sum(axis=axis)))


def ncu_child(seed: int) -> int:
    cb.init()
    from pycuda import gpuarray

    kernels = load_kernels()
    rows, cols = BENCH_SHAPE
    a = gpuarray.to_gpu(np.random.default_rng(seed).standard_normal(BENCH_SHAPE, dtype=np.float32))
    run_all(kernels, a, gpuarray.empty_like(a), gpuarray.empty(cols, np.float32), gpuarray.empty(rows, np.float32))
    import pycuda.driver as cuda
    cuda.Context.synchronize()
    return 0


def measure(kernels, seed: int):
    from cudabook import ncu
    from pycuda import gpuarray

    rows, cols = BENCH_SHAPE
    host = np.random.default_rng(seed).standard_normal(BENCH_SHAPE, dtype=np.float32)
    a = gpuarray.to_gpu(host)
    b = gpuarray.empty_like(a)
    col_out, row_out = gpuarray.empty(cols, np.float32), gpuarray.empty(rows, np.float32)
    calls = {"scale_x_cols": lambda: scale(kernels, "scale_x_cols", a, b),
             "scale_x_rows": lambda: scale(kernels, "scale_x_rows", a, b),
             "column_sums": lambda: sums(kernels, "column_sums", a, col_out),
             "row_sums": lambda: sums(kernels, "row_sums", a, row_out)}
    useful = {"scale_x_cols": 8, "scale_x_rows": 8, "column_sums": 4, "row_sums": 4}
    torch = cb.torch_cuda()
    base = {}
    if torch is not None:
        ta = torch.from_numpy(host).cuda()
        tb = torch.empty_like(ta)
        base = {"scale_x_cols": ("torch.mul", lambda: torch.mul(ta, float(ALPHA), out=tb)),
                "column_sums": ("a.sum(0)", lambda: ta.sum(0)),
                "row_sums": ("a.sum(1)", lambda: ta.sum(1))}
    rows_out = []
    for name in KERNELS:
        nbytes = useful[name] * rows * cols
        t = cb.bench(calls[name], working_set_bytes=nbytes)
        row = {"kernel": name, "ms": t.median_ms, "gbs": nbytes / (t.median_ms * 1e6)}
        if name in base:
            tb_ = cb.bench(base[name][1], working_set_bytes=nbytes)
            row.update(baseline=base[name][0], baseline_ms=tb_.median_ms,
                       baseline_gbs=nbytes / (tb_.median_ms * 1e6))
        rows_out.append(row)
    counted = ncu.profile([str(Path(__file__).resolve()), "--ncu-child", str(seed)],
                          kernel="regex:^(scale_x_cols|scale_x_rows|column_sums|row_sums)$",
                          metrics=ncu.SECTORS_PER_REQUEST)
    if [c["kernel"] for c in counted] != list(KERNELS):
        raise RuntimeError(f"ncu profiled {[c['kernel'] for c in counted]}, expected {list(KERNELS)}")
    for row, c in zip(rows_out, counted):
        row["sectors_per_request"] = c[ncu.SECTORS] / c[ncu.REQUESTS]
    return rows_out


def report(rows, copy_bw: float) -> None:
    r_, c_ = BENCH_SHAPE
    print(f"{r_:,} x {c_:,} float32")
    print("kernel             ms    GB/s  % copy  sectors/req  baseline")
    for r in rows:
        extra = f"{r['baseline']} {r['baseline_gbs']:,.0f} GB/s" if "baseline" in r else ""
        print(f"{r['kernel']:13s} {r['ms']:7.3f} {r['gbs']:7.0f} {100 * r['gbs'] * 1e9 / copy_bw:6.1f}%"
              f"  {r['sectors_per_request']:11.1f}  {extra}")
    by = {r["kernel"]: r for r in rows}
    cb.report_facts(rows=rows, copy_gbs=copy_bw / 1e9,
                    scale_rows_over_cols=by["scale_x_rows"]["ms"] / by["scale_x_cols"]["ms"],
                    rowsum_over_colsum=by["row_sums"]["ms"] / by["column_sums"]["ms"])


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) == 2 and argv[0] == "--ncu-child":
        return ncu_child(int(argv[1]))
    args = cb.parse_args(argv, __doc__, bench_n=0)
    cb.init()
    kernels = load_kernels()
    rng = np.random.default_rng(args.seed)
    for rows, cols in SHAPES:
        check_shape(kernels, rows, cols, rng)
    if args.bench:
        report(measure(kernels, args.seed), cb.ceiling())
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
