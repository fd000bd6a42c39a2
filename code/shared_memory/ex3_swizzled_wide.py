"""Solution to exercise 3: swizzle the wide rung's 64 x 64 tile.

transpose.py's wide rung pads its tile to 64 x 65 floats. Here the tile
is 64 x 64, exactly 16 KB, with element (i, k) kept in column k ^ i. For i
and k below 64 that still permutes each row, and the bank of column k ^ i
is (k % 32) ^ (i % 32): the exclusive or works bit by bit, and the bank is
the column's low five bits. So a warp that reads 32 neighbouring rows of
one column, or 32 neighbouring columns of one row, still covers 32 banks.
The kernel asks for 8 blocks per SM with __launch_bounds__, so that it
keeps the padded rung's 32 registers a thread and its occupancy.

Run:    python code/shared_memory/ex3_swizzled_wide.py [--seed S] [--bench]
Checks: the swizzled kernel equals x.T exactly (k = 0) at transpose.py's
        shapes (1x1 to 4097x3001, 1000x1004 taking the float4 path); the
        word each access touches, worked out on the host for every shared
        instruction of a block, meets no bank conflict. Under --bench also
        at each benchmark shape, and from Nsight Compute at 8192x8192
        (float4) and 4097x3001 (scalars): passes per shared instruction
        beyond the one a 4-byte access needs (wavefronts - instructions)
        at most 0.5 for loads and stores. A conflict would add a whole
        pass or more to every instruction; other traffic through the
        banks adds a few hundredths (see transpose.py).
Bench:  at both shapes, GB/s of the padded wide rung and the swizzled one
        (8 bytes per element), against the copy bandwidth; the swizzled
        one also against torch's x.t().contiguous().
"""

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
sys.path.insert(0, str(Path(__file__).resolve().parent))      # and transpose
import cudabook as cb  # noqa: E402
import transpose as tp  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
TILE = 64
ALLOWED = 0.5            # extra passes per shared instruction the Nsight Compute check allows


def load_kernel():
    return cb.compile(KERNEL_FILE).get_function("transpose_wide_swizzled").prepare("PPii")


def transpose_swizzled(kernel, x, out) -> None:
    """out = x^T with the swizzled 64 x 64 tile. x: rows x cols float32
    GPUArray; out: cols x rows, not overlapping x."""
    cb.check_array("x", x, dtype=np.float32, ndim=2, on_device=True)
    rows = cb.check_size("x.shape[0]", x.shape[0], high=tp.MAX_DIM)
    cols = cb.check_size("x.shape[1]", x.shape[1], high=tp.MAX_DIM)
    cb.check_array("out", out, dtype=np.float32, shape=(cols, rows), on_device=True)
    a, b = int(x.gpudata), int(out.gpudata)
    if a < b + out.nbytes and b < a + x.nbytes:
        raise ValueError("out: overlaps x; a transpose cannot be done in place this way")
    grid = (cb.ceil_div(cols, TILE), cb.ceil_div(rows, TILE), 1)
    if grid[1] > tp.MAX_GRID_Y:
        raise ValueError(f"x: {rows:,} rows need {grid[1]:,} blocks in y, more than {tp.MAX_GRID_Y:,}")
    kernel.prepared_call(grid, tp.BLOCK, x.gpudata, out.gpudata, np.int32(rows), np.int32(cols))


# --8<-- [start:solution]
def word(i: int, k: int) -> int:
    """The shared-memory word that holds element (i, k) of the tile."""
    return TILE * i + (k ^ i)


def worst_degree() -> int:
    """The most distinct words any bank must serve in one warp's shared
    access, over every access of ex3_swizzled_wide.cu, both paths: 1
    means no instruction of the kernel meets a bank conflict."""
    def degree(words) -> int:
        banks = defaultdict(set)
        for w in words:
            banks[w % 32].add(w)
        return max(len(s) for s in banks.values())

    worst = 0
    for warp in range(8):
        for p in range(4):                  # float4 path: q over 8 lanes, row over 4 groups
            for j in range(4):
                at = [((lane & 7) + 8 * (p & 1), (lane >> 3) + 4 * warp + 32 * (p >> 1))
                      for lane in range(32)]
                worst = max(worst, degree(word(row, 4 * q + j) for q, row in at),   # stores
                            degree(word(4 * q + j, cc) for q, cc in at))            # loads
        for p in range(16):                 # scalar path: a row, then a column, of the tile
            i, k = warp + 8 * (p >> 1), 32 * (p & 1)
            worst = max(worst, degree(word(i, k + lane) for lane in range(32)),
                        degree(word(lane + k, i) for lane in range(32)))
    return worst
# --8<-- [end:solution]


def check_shape(kernel, rows: int, cols: int, rng):
    from pycuda import gpuarray

    x = rng.standard_normal((rows, cols), dtype=np.float32)
    x_gpu, out = gpuarray.to_gpu(x), gpuarray.empty((cols, rows), np.float32)
    cb.poison(out)
    transpose_swizzled(kernel, x_gpu, out)
    cb.report_check(cb.compare(f"swizzled {rows}x{cols}", out.get(), tp.reference(x), k=0))
    return x, x_gpu, out


def ncu_child(seed: int) -> int:
    """Under Nsight Compute: the padded wide rung, then the swizzled one,
    at each of tp.BENCH_SHAPES."""
    from pycuda import gpuarray

    cb.init()
    kernels, kernel = tp.load_kernels(), load_kernel()
    rng = np.random.default_rng(seed)
    for rows, cols in tp.BENCH_SHAPES:
        x = gpuarray.to_gpu(rng.standard_normal((rows, cols), dtype=np.float32))
        out = gpuarray.empty((cols, rows), np.float32)
        tp.transpose(kernels, "transpose_wide", x, out)
        transpose_swizzled(kernel, x, out)
    import pycuda.driver as cuda
    cuda.Context.synchronize()
    return 0


def count(seed: int) -> None:
    from cudabook import ncu

    metrics = (tp.SHARED_LD, tp.SHARED_ST, tp.WAVEFRONTS_LD, tp.WAVEFRONTS_ST,
               tp.CONFLICTS_LD, tp.CONFLICTS_ST)
    counted = ncu.profile_or_note([str(Path(__file__).resolve()), "--ncu-child", str(seed)],
                                  kernel="regex:^transpose_wide", metrics=metrics)
    if counted is None:
        return
    launches = [(f"{r}x{c}", name) for r, c in tp.BENCH_SHAPES for name in ("padded", "swizzled")]
    if len(counted) != len(launches):
        raise RuntimeError(f"ncu profiled {len(counted)} launches, expected {len(launches)}")
    print("Nsight Compute: extra passes per shared instruction (wavefronts - instructions)")
    print(f"{'shape':10s} {'tile':9s} {'loads':>7s} {'stores':>7s}   conflict counter ld, st")
    rows, worst = [], 0.0
    for (shape, name), c in zip(launches, counted):
        ld = tp.excess(c, tp.WAVEFRONTS_LD, tp.SHARED_LD)
        st = tp.excess(c, tp.WAVEFRONTS_ST, tp.SHARED_ST)
        cld = tp.per_instruction(c, tp.CONFLICTS_LD, tp.SHARED_LD)
        cst = tp.per_instruction(c, tp.CONFLICTS_ST, tp.SHARED_ST)
        print(f"{shape:10s} {name:9s} {ld:7.2f} {st:7.2f}   {cld:.2f}, {cst:.2f}")
        rows.append({"shape": shape, "tile": name, "ld_excess": ld, "st_excess": st,
                     "ld_conflicts": cld, "st_conflicts": cst})
        if name == "swizzled":
            worst = max(worst, ld, st)
    cb.report_check(cb.expect(f"swizzled: at most {ALLOWED} extra passes per shared instruction",
                              worst <= ALLOWED, f"largest {worst:.2f} over {len(tp.BENCH_SHAPES)} shapes"))
    cb.report_facts(ncu_rows=rows)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) == 2 and argv[0] == "--ncu-child":
        return ncu_child(int(argv[1]))
    args = cb.parse_args(argv, __doc__, bench_n=0)
    cb.init()
    kernel = load_kernel()
    worst = worst_degree()
    cb.report_check(cb.expect("no shared access of the swizzled tile conflicts (host count)",
                              worst == 1, f"the busiest bank serves {worst} word(s) per access"))
    rng = np.random.default_rng(args.seed)
    for rows, cols in tp.SHAPES:
        check_shape(kernel, rows, cols, rng)
    if args.bench:
        kernels = tp.load_kernels()
        torch = cb.torch_cuda()
        facts = {}
        for rows, cols in tp.BENCH_SHAPES:
            x, x_gpu, out = check_shape(kernel, rows, cols, np.random.default_rng(args.seed))
            baseline = None
            if torch is not None:
                tx = torch.from_numpy(x).cuda()
                baseline = ("x.t().contiguous()", lambda tx=tx: tx.t().contiguous())
            padded = cb.benchmark(f"wide padded {rows}x{cols}",
                                  lambda x_gpu=x_gpu, out=out: tp.transpose(kernels, "transpose_wide",
                                                                            x_gpu, out),
                                  bytes_moved=2 * 4 * rows * cols)
            swizzled = cb.benchmark(f"wide swizzled {rows}x{cols}",
                                    lambda x_gpu=x_gpu, out=out: transpose_swizzled(kernel, x_gpu, out),
                                    bytes_moved=2 * 4 * rows * cols, baseline=baseline)
            facts[f"swizzled_over_padded_{rows}x{cols}"] = swizzled.bytes_per_s / padded.bytes_per_s
        count(args.seed)
        cb.report_facts(**facts)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
