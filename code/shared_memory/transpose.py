"""Matrix transpose, out = x^T, as a ladder of five kernels.

naive: reads rows (coalesced) and writes columns (a sector per float).
tiled: a 32 x 32 tile through shared memory, so both reads and writes
are coalesced; reading the tile's columns is a 32-way bank conflict.
padded: tile[32][33] puts a column's words in 32 different banks.
swizzled: tile[32][32] with column k of row i kept at k ^ i, the same
effect without the padding. wide: a 64 x 64 padded tile, 16 elements per
thread, moved as float4 when both dimensions are multiples of 4.

Run:    python code/shared_memory/transpose.py [--seed S] [--bench]
Checks: every rung equals NumPy's x.T exactly (k = 0: a transpose only
        moves values) at 1x1, 1x1000, 1000x1, 33x31, 1000x1003,
        1000x1004 (the float4 path with partial tiles) and 4097x3001;
        under --bench also at each benchmark shape.
Bench:  at 8192x8192 (the float4 path) and 4097x3001 (scalars): GB/s of
        each rung (8 bytes per element: one read, one write) against the
        copy bandwidth; the wide rung also against torch's
        x.t().contiguous(). Target for the wide rung at both shapes:
        >= 85% of copy and >= 3x x.t().contiguous(). From Nsight Compute,
        at 8192x8192: shared-memory bank conflicts per shared load and
        store instruction (checked as wavefronts - instructions, the
        passes beyond one, against what the addresses predict: 31 for
        the tiled rung's loads, else 0; within 0.25 + 2% of the
        prediction, since other traffic through the banks adds a few
        hundredths), and global sectors per load and store request,
        checked against the count the addresses predict. Also timed: a
        driver copy (memcpy_dtod) of the same bytes at each shape.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
RUNGS = ("transpose_naive", "transpose_tiled", "transpose_padded", "transpose_swizzled",
         "transpose_wide")
BEST = "transpose_wide"
TILE = {name: 32 for name in RUNGS} | {"transpose_wide": 64}   # as in transpose.cu
BLOCK = (32, 8, 1)
MAX_DIM = 2**31 - 1 - 64          # the last tile's int indices must not overflow
MAX_GRID_Y = 65_535
SHAPES = [(1, 1), (1, 1000), (1000, 1), (33, 31), (1000, 1003), (1000, 1004), (4097, 3001)]
BENCH_SHAPES = [(8192, 8192), (4097, 3001)]
NCU_SHAPE = (8192, 8192)


def short(name: str) -> str:
    return name.removeprefix("transpose_")


def reference(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.T, dtype=np.float64)


def load_kernels() -> dict:
    module = cb.compile(KERNEL_FILE)
    return {name: module.get_function(name).prepare("PPii") for name in RUNGS}


# --8<-- [start:launch]
def transpose(kernels, name: str, x, out) -> None:
    """out = x^T with the rung `name`. x: a rows x cols float32 GPUArray;
    out: cols x rows, not overlapping x."""
    if name not in TILE:
        raise ValueError(f"name: expected one of {', '.join(RUNGS)}, got {name!r}")
    cb.check_array("x", x, dtype=np.float32, ndim=2, on_device=True)
    rows = cb.check_size("x.shape[0]", x.shape[0], high=MAX_DIM)
    cols = cb.check_size("x.shape[1]", x.shape[1], high=MAX_DIM)
    cb.check_array("out", out, dtype=np.float32, shape=(cols, rows), on_device=True)
    a, b = int(x.gpudata), int(out.gpudata)
    if a < b + out.nbytes and b < a + x.nbytes:
        raise ValueError("out: overlaps x; a transpose cannot be done in place this way")
    tile = TILE[name]
    grid = (cb.ceil_div(cols, tile), cb.ceil_div(rows, tile), 1)   # one block per tile
    if grid[1] > MAX_GRID_Y:
        raise ValueError(f"x: {rows:,} rows need {grid[1]:,} blocks of {tile} rows in y, "
                         f"more than the {MAX_GRID_Y:,} a grid allows")
    kernels[name].prepared_call(grid, BLOCK, x.gpudata, out.gpudata,
                                np.int32(rows), np.int32(cols))
# --8<-- [end:launch]


def check_shape(kernels, rows: int, cols: int, rng) -> None:
    from pycuda import gpuarray

    x = rng.standard_normal((rows, cols), dtype=np.float32)
    x_gpu = gpuarray.to_gpu(x)
    out = gpuarray.empty((cols, rows), np.float32)
    ref = reference(x)
    for name in RUNGS:
        cb.poison(out)
        transpose(kernels, name, x_gpu, out)
        cb.report_check(cb.compare(f"{short(name)} {rows}x{cols}", out.get(), ref, k=0))


def bench_shape(kernels, rows: int, cols: int, seed: int) -> dict:
    """Check, then time, every rung at one shape; the best rung also
    against torch. Returns {rung: fraction of copy}."""
    from pycuda import gpuarray

    x = np.random.default_rng(seed).standard_normal((rows, cols), dtype=np.float32)
    x_gpu = gpuarray.to_gpu(x)
    out = gpuarray.empty((cols, rows), np.float32)
    ref = reference(x)
    torch = cb.torch_cuda()
    baseline = None
    if torch is not None:
        tx = torch.from_numpy(x).cuda()              # allocated once; the result
        baseline = ("x.t().contiguous()", lambda: tx.t().contiguous())  # reuses cached memory
    fractions = {}
    for name in RUNGS:
        cb.poison(out)
        transpose(kernels, name, x_gpu, out)
        cb.report_check(cb.compare(f"{short(name)} {rows}x{cols}", out.get(), ref, k=0))
        best = name == BEST
        result = cb.benchmark(f"{short(name)} {rows}x{cols}",
                              lambda n=name: transpose(kernels, n, x_gpu, out),
                              bytes_moved=2 * 4 * rows * cols,
                              baseline=baseline if best else None,
                              targets={"copy": 0.85, "baseline": 3.0} if best else None)
        fractions[name] = result.fraction_of_ceiling
    # The copy bandwidth above is measured on 2 GiB. The same bytes as this
    # transpose, copied by the driver, show what a copy reaches at this size.
    import pycuda.driver as cuda
    cb.benchmark(f"memcpy_dtod, same bytes {rows}x{cols}",
                 lambda: cuda.memcpy_dtod(out.gpudata, x_gpu.gpudata, x_gpu.nbytes),
                 bytes_moved=2 * 4 * rows * cols)
    return fractions


# What the addresses predict at NCU_SHAPE (both dimensions multiples of 64,
# arrays on 256-byte boundaries): (ld, st) bank conflicts per shared
# instruction (extra passes beyond the one a 32-lane 4-byte access needs),
# and (ld, st) 32-byte sectors per global request.
PREDICTED_CONFLICTS = {"transpose_naive": None, "transpose_tiled": (31, 0),
                       "transpose_padded": (0, 0), "transpose_swizzled": (0, 0),
                       "transpose_wide": (0, 0)}
PREDICTED_SECTORS = {"transpose_naive": (4, 32), "transpose_tiled": (4, 4),
                     "transpose_padded": (4, 4), "transpose_swizzled": (4, 4),
                     "transpose_wide": (16, 16)}    # float4: 4 rows x 128 bytes a warp

CONFLICT_SLACK = 0.25       # passes per instruction the check allows (see report_counts) ...
CONFLICT_RELATIVE = 0.02    # ... plus this fraction of the predicted count
CONFLICTS_LD = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"
CONFLICTS_ST = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"
SHARED_LD = "smsp__inst_executed_op_shared_ld.sum"      # warp-level instructions
SHARED_ST = "smsp__inst_executed_op_shared_st.sum"
WAVEFRONTS_LD = "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"   # passes through the banks
WAVEFRONTS_ST = "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"


def counters() -> tuple[str, ...]:
    from cudabook import ncu

    return (CONFLICTS_LD, CONFLICTS_ST, SHARED_LD, SHARED_ST, WAVEFRONTS_LD, WAVEFRONTS_ST,
            ncu.SECTORS, ncu.REQUESTS, ncu.STORE_SECTORS, ncu.STORE_REQUESTS)


def ncu_child(seed: int) -> int:
    """Under Nsight Compute: each rung once, at NCU_SHAPE, in RUNGS order."""
    from pycuda import gpuarray

    cb.init()
    kernels = load_kernels()
    rows, cols = NCU_SHAPE
    x = gpuarray.to_gpu(np.random.default_rng(seed).standard_normal((rows, cols), dtype=np.float32))
    out = gpuarray.empty((cols, rows), np.float32)
    for name in RUNGS:
        transpose(kernels, name, x, out)
    import pycuda.driver as cuda
    cuda.Context.synchronize()
    return 0


def per_instruction(c: dict, counted: str, instructions: str) -> float | None:
    return c[counted] / c[instructions] if c[instructions] else None


def excess(c: dict, wavefronts: str, instructions: str) -> float | None:
    """Passes per instruction beyond the one a 4-byte access of 32 lanes
    needs: the conflict degree minus 1, from the addresses alone (the bank
    conflict counter may also count collisions with other traffic)."""
    return (c[wavefronts] - c[instructions]) / c[instructions] if c[instructions] else None


def count(seed: int) -> list[dict] | None:
    """Bank conflicts and sectors of each rung, from Nsight Compute."""
    from cudabook import ncu

    counted = ncu.profile_or_note([str(Path(__file__).resolve()), "--ncu-child", str(seed)],
                                  kernel="regex:^transpose_", metrics=counters())
    if counted is None:
        return None
    if [c["kernel"] for c in counted] != list(RUNGS):
        raise RuntimeError(f"ncu profiled {[c['kernel'] for c in counted]}, expected {list(RUNGS)}")
    rows = []
    for name, c in zip(RUNGS, counted):
        rows.append({"rung": short(name),
                     "ld_conflicts": c[CONFLICTS_LD], "st_conflicts": c[CONFLICTS_ST],
                     "shared_ld": c[SHARED_LD], "shared_st": c[SHARED_ST],
                     "ld_conflicts_per_inst": per_instruction(c, CONFLICTS_LD, SHARED_LD),
                     "st_conflicts_per_inst": per_instruction(c, CONFLICTS_ST, SHARED_ST),
                     "ld_excess_wavefronts_per_inst": excess(c, WAVEFRONTS_LD, SHARED_LD),
                     "st_excess_wavefronts_per_inst": excess(c, WAVEFRONTS_ST, SHARED_ST),
                     "ld_sectors_per_req": ncu.ratio(c, ncu.SECTORS, ncu.REQUESTS),
                     "st_sectors_per_req": ncu.ratio(c, ncu.STORE_SECTORS, ncu.STORE_REQUESTS),
                     "predicted_conflicts": PREDICTED_CONFLICTS[name],
                     "predicted_sectors": PREDICTED_SECTORS[name]})
    return rows


def _cell(value: float | None, predicted: int | None) -> str:
    """'31.00 (31)', or '-' where the rung has no shared accesses."""
    if value is None:
        return f"{'-':>5s}{'':5s}"
    return f"{value:5.2f} ({predicted:2d})" if predicted is not None else f"{value:5.2f}{'':5s}"


def report_counts(rows: list[dict]) -> None:
    rows_, cols_ = NCU_SHAPE
    print(f"Nsight Compute at {rows_}x{cols_}; predicted in parentheses")
    print(f"{'':9s} {'bank conflicts per instr.':^22s}   {'global sectors per request':^26s}")
    print(f"{'rung':9s} {'shared ld':>10s}  {'shared st':>10s}   {'load':>10s}   {'store':>10s}")
    for r in rows:
        pc = r["predicted_conflicts"] or (None, None)
        ps = r["predicted_sectors"]
        print(f"{r['rung']:9s} {_cell(r['ld_conflicts_per_inst'], pc[0])}  "
              f"{_cell(r['st_conflicts_per_inst'], pc[1])}   "
              f"{_cell(r['ld_sectors_per_req'], ps[0])}   {_cell(r['st_sectors_per_req'], ps[1])}")

    def off(value, predicted) -> float:
        """How far a count is from its prediction; no count is infinitely far."""
        return float("inf") if value is None else abs(value - predicted) / max(predicted, 1)

    # The counters count every extra pass through the banks, whatever caused
    # it: a rung whose addresses cannot conflict still shows a few hundredths
    # of a pass per instruction (the banks are also the L1 cache's data
    # banks, which the global loads and stores pass through). A conflict
    # adds at least one whole pass, so the check allows a quarter of a pass,
    # plus 2% of the predicted count, and still tells conflict degrees apart.
    def excess_off(key: str) -> float:
        """The largest miss, as a fraction of what the check allows."""
        return max(float("inf") if r[f"{op}_{key}"] is None else
                   abs(r[f"{op}_{key}"] - p) / (CONFLICT_SLACK + CONFLICT_RELATIVE * p)
                   for r in rows if r["predicted_conflicts"]
                   for op, p in zip(("ld", "st"), r["predicted_conflicts"]))

    wave_err, counter_err = excess_off("excess_wavefronts_per_inst"), excess_off("conflicts_per_inst")
    naive_shared = rows[0]["shared_ld"] + rows[0]["shared_st"]
    cb.report_check(cb.expect(
        "extra shared passes per instruction as predicted",
        wave_err <= 1 and naive_shared == 0,
        f"wavefronts - instructions: the largest miss is {wave_err:.2f} of the "
        f"{CONFLICT_SLACK} + {CONFLICT_RELATIVE:.0%} x predicted allowed "
        f"(conflict counter: {counter_err:.2f}); naive: {naive_shared:.0f} shared instructions"))
    sector_err = max(off(r[f"{op}_sectors_per_req"], r["predicted_sectors"][i])
                     for r in rows for i, op in enumerate(("ld", "st")))
    cb.report_check(cb.expect("global sectors per request as predicted", sector_err <= 0.001,
                              f"largest difference {100 * sector_err:.3f}% over {len(rows)} rungs"))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) == 2 and argv[0] == "--ncu-child":
        return ncu_child(int(argv[1]))
    args = cb.parse_args(argv, __doc__, bench_n=0)
    gpu = cb.init()
    kernels = load_kernels()
    rng = np.random.default_rng(args.seed)
    for rows, cols in SHAPES:
        check_shape(kernels, rows, cols, rng)
    if args.bench:
        print(f"{gpu.name}: {gpu.sm_count} SMs, copy {cb.ceiling() / 1e9:,.0f} GB/s")
        facts = {}
        for rows, cols in BENCH_SHAPES:
            for name, fraction in bench_shape(kernels, rows, cols, args.seed).items():
                facts[f"{short(name)}_{rows}x{cols}_fraction"] = fraction
        counted = count(args.seed)
        if counted is not None:
            report_counts(counted)
        cb.report_facts(copy_gbs=cb.ceiling() / 1e9, counted=counted is not None,
                        ncu_rows=counted or [], **facts)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
