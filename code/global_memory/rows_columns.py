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
Bench:  scale at 8192 x 8191 float32 (8 bytes per element); column sums of
        a 2048 x 131072 matrix and row sums of its 131072 x 2048 transpose
        (the same sums, the same number of threads and the same loop
        length: only the direction the lanes walk differs; 4 bytes per
        element). Useful GB/s against the copy bandwidth, beside torch
        (torch.mul, a.sum(0), a.t().contiguous().sum(1), which use other
        algorithms); from Nsight Compute, sectors per load and store request
        against the count the addresses predict, and device-memory bytes.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
KERNELS = ("scale_x_cols", "scale_x_rows", "column_sums", "row_sums")
SHAPES = [(1, 1), (33, 31), (1000, 1003), (4097, 3001)]
BENCH_SHAPE = (8192, 8191)           # for the scale kernels
SUM_SHAPE = (2048, 131_072)          # column sums of this, row sums of its transpose
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


def bench_data(seed: int):
    """The scale matrix, and the sums' matrix with its transpose."""
    from pycuda import gpuarray

    rng = np.random.default_rng(seed)
    host = rng.standard_normal(BENCH_SHAPE, dtype=np.float32)
    wide = rng.standard_normal(SUM_SHAPE, dtype=np.float32)
    a, w = gpuarray.to_gpu(host), gpuarray.to_gpu(wide)
    t = gpuarray.to_gpu(np.ascontiguousarray(wide.T))
    outs = (gpuarray.empty_like(a), gpuarray.empty(SUM_SHAPE[1], np.float32),
            gpuarray.empty(SUM_SHAPE[1], np.float32))
    return host, wide, a, w, t, outs


def bench_calls(kernels, a, w, t, outs) -> dict:
    """Each kernel on its benchmark data, in KERNELS order."""
    b, col_out, row_out = outs
    return {"scale_x_cols": lambda: scale(kernels, "scale_x_cols", a, b),
            "scale_x_rows": lambda: scale(kernels, "scale_x_rows", a, b),
            "column_sums": lambda: sums(kernels, "column_sums", w, col_out),
            "row_sums": lambda: sums(kernels, "row_sums", t, row_out)}


def predicted_sectors(name: str) -> float:
    """Sectors per load request the addresses give, averaged over the warps
    that load: a warp is 32 consecutive threads along x."""
    rows, cols = BENCH_SHAPE if name.startswith("scale") else SUM_SHAPE
    if name == "row_sums":
        rows, cols = cols, rows
    if name in ("scale_x_cols", "column_sums"):      # a warp: 32 neighbouring columns of one row
        first = np.arange(0, cols, 32)
        last = np.minimum(first + 32, cols) - 1
        per_row = [((r * cols + last) // 8 - (r * cols + first) // 8 + 1) for r in range(rows)]
        return float(np.mean(np.concatenate(per_row)))
    lanes = [min(32, rows - r0) for r0 in range(0, rows, 32)]   # a warp: 32 rows, one column
    return float(np.mean(lanes)) if cols > 8 else float("nan")


def ncu_child(seed: int) -> int:
    cb.init()
    kernels = load_kernels()
    _, _, a, w, t, outs = bench_data(seed)
    for call in bench_calls(kernels, a, w, t, outs).values():
        call()
    import pycuda.driver as cuda
    cuda.Context.synchronize()
    return 0


COUNTERS = ("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
            "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum", "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
            "dram__bytes_read.sum", "dram__bytes_write.sum")


def measure(kernels, seed: int) -> list[dict]:
    from cudabook import ncu

    host, wide, a, w, t, outs = bench_data(seed)
    calls = bench_calls(kernels, a, w, t, outs)
    elements = {"scale_x_cols": a.size, "scale_x_rows": a.size, "column_sums": w.size, "row_sums": t.size}
    useful = {"scale_x_cols": 8, "scale_x_rows": 8, "column_sums": 4, "row_sums": 4}
    torch = cb.torch_cuda()
    base = {}
    if torch is not None:
        ta, tw = torch.from_numpy(host).cuda(), torch.from_numpy(wide).cuda()
        tt = tw.t().contiguous()
        tb = torch.empty_like(ta)
        base = {"scale_x_cols": ("torch.mul", lambda: torch.mul(ta, float(ALPHA), out=tb)),
                "column_sums": ("a.sum(0)", lambda: tw.sum(0)),
                "row_sums": ("a.sum(1)", lambda: tt.sum(1))}
    rows_out = []
    for name in KERNELS:
        nbytes = useful[name] * elements[name]
        tm = cb.bench(calls[name], working_set_bytes=nbytes)
        row = {"kernel": name, "ms": tm.median_ms, "gbs": nbytes / (tm.median_ms * 1e6),
               "predicted_load_sectors": predicted_sectors(name)}
        if name in base:
            tb_ = cb.bench(base[name][1], working_set_bytes=nbytes)
            row.update(baseline=base[name][0], baseline_ms=tb_.median_ms,
                       baseline_gbs=nbytes / (tb_.median_ms * 1e6))
        rows_out.append(row)
    counted = ncu.profile_or_note([str(Path(__file__).resolve()), "--ncu-child", str(seed)],
                                  kernel="regex:^(scale_x_cols|scale_x_rows|column_sums|row_sums)$",
                                  metrics=COUNTERS)
    if counted is None:
        return rows_out
    if [c["kernel"] for c in counted] != list(KERNELS):
        raise RuntimeError(f"ncu profiled {[c['kernel'] for c in counted]}, expected {list(KERNELS)}")
    for row, c in zip(rows_out, counted):
        n = elements[row["kernel"]]
        row.update(load_sectors=ncu.ratio(c, ncu.SECTORS, ncu.REQUESTS),
                   store_sectors=ncu.ratio(c, ncu.STORE_SECTORS, ncu.STORE_REQUESTS),
                   dram_read_per_element=c[ncu.DRAM_READ] / n, dram_write_per_element=c[ncu.DRAM_WRITE] / n)
    return rows_out


def report(rows, copy_bw: float) -> None:
    print(f"scale: {BENCH_SHAPE[0]:,} x {BENCH_SHAPE[1]:,}; sums: {SUM_SHAPE[0]:,} x {SUM_SHAPE[1]:,} "
          "and its transpose")
    print("kernel             ms    GB/s  % copy  baseline")
    for r in rows:
        extra = f"{r['baseline']} {r['baseline_gbs']:,.0f} GB/s" if "baseline" in r else ""
        print(f"{r['kernel']:13s} {r['ms']:7.3f} {r['gbs']:7.0f} {100 * r['gbs'] * 1e9 / copy_bw:6.1f}%  {extra}")
    if all("load_sectors" in r for r in rows):
        print("kernel        load sect/req (pred.)  store sect/req  DRAM B read, written/elem")
        for r in rows:
            print(f"{r['kernel']:13s} {r['load_sectors']:13.2f} ({r['predicted_load_sectors']:5.2f})"
                  f"  {r['store_sectors']:14.2f}  {r['dram_read_per_element']:6.2f}, {r['dram_write_per_element']:.2f}")
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
