"""FP32 matrix product on CUDA cores, C = A @ B, as a ladder of kernels.

A is M x K, B is K x N, C is M x N, row-major float32. naive: a thread per
element of C, threadIdx.x down a column of C (A read 32 rows apart).
coalesced: threadIdx.x along a row of C. smem: 32 x 32 tiles of A and B
in shared memory. 1d: a 64 x 64 tile, 8 elements of C per thread. 2d: a
128 x 128 tile, an 8 x 8 register tile per thread. vec: float4 loads, A's
tile stored transposed. warptile: each warp a 64 x 32 piece, with no bank
conflicts. double_buffer: two shared stages, slice k+1 loaded while slice
k is computed. Every rung takes any M, N, K >= 1 (see sgemm.cu); the
float4 rungs fall back to scalar loads where K or N is not a multiple of 4.

Run:    python code/matmul_fp32/sgemm.py [--seed S] [--bench]
Checks: every rung against a float64 NumPy product, element by element,
        at M x N x K = 1x1x1, 1x3001x1023, 4097x1x1023, 33x31x17,
        256x256x256 and 4097x3001x1023 (under compute-sanitizer only
        1x1x1, 33x31x17 and 130x67x45), and under --bench at each
        benchmark shape. Bound: each element of C is a dot product of
        length K, summed one term at a time by fused multiply-adds: K
        roundings, so |error| <= gamma_K * (|A| @ |B|) with gamma_K =
        K u / (1 - K u), whatever the order of the sum. So k = K / (1 - K u)
        + 1 (the 1 covers the float64 reference's own error, about K * 2^-53
        of the same scale) and scale = |A| @ |B| in float64.
        And at every one of those shapes, every rung's C bit for bit
        against the naive rung's: all eight add each element's K products
        in the same order, first to last, one FMA each (the zeros that pad
        an edge tile come after the last), so they round alike and give
        the same floats. A rung that reordered the sum, split it, or
        rounded its inputs (TF32) would fail this exact check at every
        shape, even where it stayed inside the bound above.
Bench:  at 4096 x 4096 x 4096 and 4097 x 3001 x 1023, every rung as a
        typed entry (cudabook.evidence): ms and TFLOP/s (2 M N K flops)
        against the FP32 FMA peak, the rate of chapter 10's FMA chains
        (roofline/intensity_sweep.fp32_roof) timed in the same run, with
        the GPU's clocks around it and the kernels the profiler saw. The
        two fastest rungs, warptile and double_buffer, are timed in
        alternation with cuBLAS SGEMM fp32 (torch.matmul with
        fp32_precision = "ieee": no TF32, so it too rounds in FP32) on the
        same data, in ABBA rounds: their share of cuBLAS is the median of
        the rounds' ratios, with its p20 and p80. The other rungs are
        timed alone; their share is cuBLAS's time (pooled over
        double_buffer's rounds) over theirs. Target: double_buffer >= 80%
        of cuBLAS at 4096^3, judged against that median (printed as met or
        MISSED; a slow run is a finding, not a failure). The naive and
        coalesced rungs take seconds per run at 4096^3: they are timed
        with the smallest budget (3 runs after 3 to estimate).
"""

import functools
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
# rung: (threads per block, rows of C per block, columns of C per block), as in sgemm.cu
RUNGS = {
    "sgemm_naive": ((32, 32, 1), 32, 32),
    "sgemm_coalesced": ((32, 32, 1), 32, 32),
    "sgemm_smem": ((32, 32, 1), 32, 32),
    "sgemm_1d": ((512, 1, 1), 64, 64),
    "sgemm_2d": ((256, 1, 1), 128, 128),
    "sgemm_vec": ((256, 1, 1), 128, 128),
    "sgemm_warptile": ((256, 1, 1), 128, 128),
    "sgemm_double_buffer": ((256, 1, 1), 128, 128),
}
FLOAT4 = {"sgemm_vec", "sgemm_warptile", "sgemm_double_buffer"}   # need 16-byte aligned arrays
SLOW = {"sgemm_naive", "sgemm_coalesced"}                          # timed with a small budget
MAX_DIM = 2**31 - 1 - 256          # a tile's int indices must not overflow past the edge
MAX_GRID_X, MAX_GRID_Y = 2**31 - 1, 65_535
SHAPES = [(1, 1, 1), (1, 3001, 1023), (4097, 1, 1023), (33, 31, 17), (256, 256, 256),
          (4097, 3001, 1023)]                                       # M, N, K
#: Under compute-sanitizer (which runs kernels tens to hundreds of times
#: slower), only shapes small enough to finish, that still have partial tiles
#: in every dimension.
SANITIZER_SHAPES = [(1, 1, 1), (33, 31, 17), (130, 67, 45)]
BENCH_SHAPES = [(4096, 4096, 4096), (4097, 3001, 1023)]
TARGET_SHAPE, TARGET = (4096, 4096, 4096), 0.80
BASELINE = "cuBLAS SGEMM fp32 (torch.matmul, TF32 off)"
CEILING = "FP32 FMA peak (chapter 10's FMA chains, this run)"
BEST = "sgemm_double_buffer"                       # the rung the target is set for
ALTERNATED = ("sgemm_warptile", BEST)              # timed in alternation with cuBLAS
#: bench for the slow rungs: their smallest budget, 3 runs after 3 to estimate
SLOW_TIMER = functools.partial(cb.bench, warmup_ms=1.0, min_reps=3)
U = 2.0**-24                        # float32 unit roundoff


def short(name: str) -> str:
    return name.removeprefix("sgemm_")


def reference(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A @ B in float64 (the float32 inputs are exact in float64, and so is
    each product), and |A| @ |B|, the size of the terms behind each element."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return a64 @ b64, np.abs(a64) @ np.abs(b64)


def bound_k(k_dim: int) -> float:
    """gamma_K / u + 1: K roundings of a chain of FMAs, plus the reference's."""
    return k_dim / (1 - k_dim * U) + 1


def load_kernels() -> dict:
    module = cb.compile(KERNEL_FILE)
    return {name: module.get_function(name).prepare("PPPiii") for name in RUNGS}


# --8<-- [start:launch]
def sgemm(kernels, name: str, a, b, c) -> None:
    """c = a @ b with the rung `name`. a: M x K, b: K x N, c: M x N, all
    C-contiguous float32 GPUArrays; c must not overlap a or b. The float4
    rungs need each array on a 16-byte boundary."""
    if name not in RUNGS:
        raise ValueError(f"name: expected one of {', '.join(RUNGS)}, got {name!r}")
    align = 16 if name in FLOAT4 else None
    cb.check_array("a", a, dtype=np.float32, ndim=2, on_device=True, alignment=align)
    cb.check_array("b", b, dtype=np.float32, ndim=2, on_device=True, alignment=align)
    m = cb.check_size("a.shape[0] (M)", a.shape[0], high=MAX_DIM)
    k = cb.check_size("a.shape[1] (K)", a.shape[1], high=MAX_DIM)
    if b.shape[0] != k:
        raise ValueError(f"b: expected {k:,} rows (a is {m:,} x {k:,}: the inner "
                         f"dimensions must agree), got shape {tuple(b.shape)}")
    n = cb.check_size("b.shape[1] (N)", b.shape[1], high=MAX_DIM)
    cb.check_array("c", c, dtype=np.float32, shape=(m, n), on_device=True, alignment=align)
    cb.check_separate("c", c, a=a, b=b)
    block, tile_m, tile_n = RUNGS[name]
    if name == "sgemm_naive":                       # threadIdx.x runs along M
        grid = (cb.ceil_div(m, tile_m), cb.ceil_div(n, tile_n), 1)
        what_y = ("b", f"{n:,} columns", tile_n)
    else:                                           # blockIdx.x along N, blockIdx.y along M
        grid = (cb.ceil_div(n, tile_n), cb.ceil_div(m, tile_m), 1)
        what_y = ("a", f"{m:,} rows", tile_m)
    if grid[1] > MAX_GRID_Y:
        arg, count, tile = what_y
        raise ValueError(f"{arg}: {count} need {grid[1]:,} blocks of {tile} in y, more than "
                         f"the {MAX_GRID_Y:,} a grid allows for {short(name)}")
    if grid[0] > MAX_GRID_X:                        # unreachable below MAX_DIM; kept honest
        raise ValueError(f"{name}: {grid[0]:,} blocks in x, more than {MAX_GRID_X:,}")
    kernels[name].prepared_call(grid, block, a.gpudata, b.gpudata, c.gpudata,
                                np.int32(m), np.int32(n), np.int32(k))
# --8<-- [end:launch]


def random_pair(m: int, n: int, k: int, rng) -> tuple[np.ndarray, np.ndarray]:
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    return a, b


def label(name: str, m: int, n: int, k: int) -> str:
    return f"{short(name)} {m}x{n}x{k}"


def same_bits(name: str, out: np.ndarray, first: np.ndarray) -> cb.CheckResult:
    """`out` bit for bit equal to `first` (the naive rung's C), as a check
    that says how many elements differ, and where the first one is."""
    differ = np.flatnonzero(out.view(np.uint32) != first.view(np.uint32))
    if differ.size == 0:
        return cb.expect(name, True, f"all {out.size:,} elements identical", n=out.size)
    i = int(differ[0])

    def shown(x: np.ndarray) -> str:
        return f"{x.flat[i]!s} ({int(x.view(np.uint32).flat[i]):#010x})"
    return cb.expect(name, False, f"{differ.size:,} of {out.size:,} elements differ, the first at "
                     f"[{i}]: {shown(out)}, naive {shown(first)}", n=out.size)


def check_all(kernels, a, b, c_gpu, a_gpu, b_gpu, *, bitwise: bool = False) -> None:
    """Every rung at one shape, against the float64 product; with
    `bitwise`, every rung after the first also against the first's
    (naive's) output, bit for bit (see the docstring's Checks)."""
    (m, k), n = a.shape, b.shape[1]
    ref, scale = reference(a, b)
    first = None
    for name in RUNGS:
        cb.poison(c_gpu)
        sgemm(kernels, name, a_gpu, b_gpu, c_gpu)
        out = c_gpu.get()
        cb.report_check(cb.compare(label(name, m, n, k), out, ref, k=bound_k(k), scale=scale))
        if not bitwise:
            continue
        if first is None:
            first = out
        else:
            cb.report_check(same_bits(f"{label(name, m, n, k)} = naive, bit for bit", out, first))


def check_shape(kernels, m: int, n: int, k: int, rng, *, bitwise: bool = False) -> None:
    from pycuda import gpuarray

    a, b = random_pair(m, n, k, rng)
    check_all(kernels, a, b, gpuarray.empty((m, n), np.float32), gpuarray.to_gpu(a),
              gpuarray.to_gpu(b), bitwise=bitwise)


def bench_shape(kernels, m: int, n: int, k: int, seed: int, budget_ms: float,
                peak: float) -> dict:
    """Check, then time, every rung at one shape (ALTERNATED in alternation
    with cuBLAS), and print the table. Returns the facts for the record:
    ms, TFLOP/s, share of cuBLAS and share of `peak` (FLOP/s) per rung."""
    from pycuda import gpuarray

    from cudabook import evidence

    a, b = random_pair(m, n, k, np.random.default_rng(seed))
    a_gpu, b_gpu = gpuarray.to_gpu(a), gpuarray.to_gpu(b)
    c_gpu = gpuarray.empty((m, n), np.float32)
    check_all(kernels, a, b, c_gpu, a_gpu, b_gpu, bitwise=True)
    flops = 2 * m * n * k
    working_set = 4 * (m * k + k * n + m * n)
    baseline = None
    torch = cb.torch_cuda()
    if torch is not None:
        torch.backends.cuda.matmul.fp32_precision = "ieee"     # FP32 arithmetic, as ours: no TF32
        ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        tc = torch.empty((m, n), device="cuda", dtype=torch.float32)
        baseline = (BASELINE, lambda: torch.matmul(ta, tb, out=tc))
    entries = {}
    for name in RUNGS:
        def fn(name=name):
            sgemm(kernels, name, a_gpu, b_gpu, c_gpu)

        alternated = baseline is not None and name in ALTERNATED
        targeted = alternated and name == BEST and (m, n, k) == TARGET_SHAPE
        timing = dict(budget_ms=1.0, timer=SLOW_TIMER) if name in SLOW else dict(budget_ms=budget_ms)
        entries[name] = evidence.benchmark(
            label(name, m, n, k), fn, flops=flops, working_set_bytes=working_set,
            ceiling=(CEILING, peak), baseline=baseline if alternated else None,
            targets={"baseline": TARGET} if targeted else None, **timing)
    cublas = entries[BEST].baseline        # cuBLAS pooled over the best rung's rounds, or None
    rows = {}
    for name, e in entries.items():
        of_cublas = evidence.speed_against(e, cublas)
        rows[short(name)] = {"ms": e.timing.median_ms, "flops": e.flops_per_s, "of_cublas": of_cublas,
                             "of_peak": e.fraction_of_ceiling, "reps": e.timing.reps,
                             "alternated": e.baseline is not None}
    print(f"{m} x {n} x {k}: {flops / 1e9:,.1f} GFLOP per product")
    print(f"{'rung':16s} {'ms':>10s} {'TFLOP/s':>9s} {'% of cuBLAS':>12s} {'% of FMA peak':>14s}")
    for rung, r in rows.items():
        share = f"{100 * r['of_cublas']:11.1f}%" if cublas is not None else f"{'-':>12s}"
        print(f"{rung:16s} {r['ms']:10.3f} {r['flops'] / 1e12:9.2f} {share} {100 * r['of_peak']:13.1f}%"
              + (" *" if r["alternated"] else ""))
    shape = f"{m}x{n}x{k}"
    facts = {f"{shape}_rows": [{"rung": rung, **r} for rung, r in rows.items()]}
    for rung, r in rows.items():              # flat keys, for [[rec:...:facts.<key>]]
        facts[f"{rung}_{shape}_ms"] = r["ms"]
        facts[f"{rung}_{shape}_tflops"] = r["flops"] / 1e12
        facts[f"{rung}_{shape}_of_peak"] = r["of_peak"]
        if cublas is not None:
            facts[f"{rung}_{shape}_of_cublas"] = r["of_cublas"]
    for name in ALTERNATED:
        b = entries[name].baseline
        if b is not None:
            facts[f"{short(name)}_{shape}_of_cublas_p20"] = b.ratio_p20
            facts[f"{short(name)}_{shape}_of_cublas_p80"] = b.ratio_p80
    if cublas is not None:
        ms = cublas.timing.median_ms
        print(f"{'cuBLAS':16s} {ms:10.3f} {cublas.flops_per_s / 1e12:9.2f} {100.0:11.1f}% "
              f"{100 * cublas.flops_per_s / peak:13.1f}%")
        print(f"  cuBLAS: {BASELINE}, pooled over {short(BEST)}'s rounds")
        print("  *: timed in alternation with cuBLAS, the share the median of the rounds;")
        print("     the other rungs timed alone, the share cuBLAS's time over theirs")
        facts.update({f"cublas_{shape}_ms": ms, f"cublas_{shape}_tflops": cublas.flops_per_s / 1e12,
                      f"cublas_{shape}_of_peak": cublas.flops_per_s / peak,
                      f"cublas_{shape}_kernels": cublas.side.kernels})
    best = max(rows, key=lambda r: rows[r]["flops"])
    facts[f"best_{shape}"] = best
    judged = entries[BEST]
    if judged.targets is not None:
        facts.update(best_of_cublas=judged.baseline.ratio, best_of_cublas_p20=judged.baseline.ratio_p20,
                     best_of_cublas_p80=judged.baseline.ratio_p80, target=TARGET,
                     target_met=judged.targets.met["baseline"])
    return facts


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    gpu = cb.init()
    kernels = load_kernels()
    rng = np.random.default_rng(args.seed)
    for m, n, k in SANITIZER_SHAPES if os.environ.get("CUDABOOK_SANITIZER") else SHAPES:
        check_shape(kernels, m, n, k, rng, bitwise=True)
    if args.bench:
        from roofline.intensity_sweep import fp32_roof

        print(f"{gpu.name}: {gpu.sm_count} SMs")
        peak = fp32_roof(gpu)
        print(f"FP32 peak (chapter 10's FMA chains, this run): {peak / 1e12:.1f} TFLOP/s")
        facts = {"baseline": BASELINE, "ceiling": CEILING, "fma_peak_tflops": peak / 1e12}
        for m, n, k in BENCH_SHAPES:
            facts.update(bench_shape(kernels, m, n, k, args.seed, args.budget_ms, peak))
        cb.report_facts(**facts)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
