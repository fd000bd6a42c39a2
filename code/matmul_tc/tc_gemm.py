"""BF16 matrix product on tensor cores, C = A @ B, as a ladder of kernels.

A is M x K and B is K x N in bfloat16, row-major; C is M x N float32,
accumulated in fp32. wmma: nvcuda::wmma 16x16x16 fragments, a warp per
32 x 32 piece of C, loaded straight from global memory. wmma_smem: a
128 x 128 x 32 block tile staged in shared memory, 8 warps of 64 x 32.
mma: inline PTX mma.sync m16n8k16 fed by ldmatrix from an XOR-swizzled
shared layout, 4 warps of 64 x 64. mma_pipelined: the same with cp.async
into 3 shared stages, in two versions: tc_mma_pipelined where K and N are
multiples of 8, tc_mma_pipelined_unaligned elsewhere (the launch picks).
Every rung takes any M, N, K >= 1 (see tc_gemm.cu);
where K (or N) is not a multiple of 8, the rows of A (or B) are not
16-byte aligned and that operand is loaded one element at a time.

PyCUDA has no bfloat16 dtype: bf16 matrices live on the host and device as
np.uint16 bit patterns, rounded from float32 to nearest, ties to even.

Run:    python code/matmul_tc/tc_gemm.py [--seed S] [--bench]
Checks: every rung, element by element, at M x N x K = 1x1x1, 16x16x16,
        33x31x32, 33x31x17, 130x257x100, 1024x1024x1024 and
        4097x3001x1024 (under compute-sanitizer only 1x1x1, 33x31x17,
        130x257x100 and 130x136x104, the last with K and N multiples of 8), and under --bench at each benchmark shape, against
        the float64 product of the bf16-rounded inputs (each product of two
        bf16 values is exact in float64 and in fp32). Bound: each element
        of C is a dot product of length K accumulated in fp32, at most one
        rounding per term; the tensor cores may add with truncation rather
        than round-to-nearest, and align a block of products to the largest
        before adding, so each rounding may cost a whole ulp (2u) of a
        partial sum no bigger than |A| @ |B|. So k = 2K / (1 - 2K u) + 1
        (the 1 covers the float64 reference) and scale = |A| @ |B|.
        Reported beside the check, not checked: the error against the
        product of the unrounded float32 inputs (bf16 keeps 8 significant
        bits: up to 2^-8 relative per input), for the last rung
        (mma_pipelined) at 1024^3 and 4096^3 (not at 8192^3: its float64
        product would take too long).
Bench:  at 8192 x 8192 x 8192 and 4096 x 4096 x 4096, every rung as a
        typed entry (cudabook.evidence): ms and TFLOP/s (2 M N K flops)
        against a ceiling measured first in the same run: cuBLAS bf16 at
        8192^3 (torch.matmul on bf16 tensors), timed alone; the book has
        no microbenchmark of the tensor cores' peak, and this is the rate
        the library reaches on them. The last rung, mma_pipelined, is
        timed in alternation with cuBLAS bf16 (torch.matmul on bf16
        tensors, fp32 accumulation with reduced-precision reductions off;
        it writes C in bf16, we write fp32) on the same data, in ABBA
        rounds: its share of cuBLAS is the median of the rounds' ratios,
        with its p20 and p80. The other rungs are timed alone; their share
        is cuBLAS's time (pooled over those rounds) over theirs. Target:
        mma_pipelined >= 50% of cuBLAS at 8192^3, judged against that
        median (printed as met or MISSED; a slow run is a finding).
"""

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from cudabook.bf16 import from_bf16, to_bf16  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
# rung: (threads per block, rows of C per block, columns of C per block), as in tc_gemm.cu
RUNGS = {
    "tc_wmma": ((128, 1, 1), 64, 64),
    "tc_wmma_smem": ((256, 1, 1), 128, 128),
    "tc_mma": ((128, 1, 1), 128, 128),
    "tc_mma_pipelined": ((128, 1, 1), 128, 128),
}
# device address alignment each rung needs: wmma loads/stores from global
# memory want 32 bytes, the 16-byte loads and cp.async 16
ALIGN = {"tc_wmma": 32, "tc_wmma_smem": 32, "tc_mma": 16, "tc_mma_pipelined": 16}
MAX_DIM = 2**31 - 1 - 256          # a tile's int indices must not overflow past the edge
MAX_GRID_X, MAX_GRID_Y = 2**31 - 1, 65_535
SHAPES = [(1, 1, 1), (16, 16, 16), (33, 31, 32), (33, 31, 17), (130, 257, 100),
          (1024, 1024, 1024), (4097, 3001, 1024)]                   # M, N, K
#: Under compute-sanitizer (which runs kernels tens to hundreds of times
#: slower), only shapes small enough to finish, that still have partial tiles
#: in every dimension.
SANITIZER_SHAPES = [(1, 1, 1), (33, 31, 17), (130, 257, 100), (130, 136, 104)]
BENCH_SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096)]
ROUNDING_SHAPES = {(1024, 1024, 1024), (4096, 4096, 4096)}    # where input_rounding_facts runs
TARGET_SHAPE, TARGET = (8192, 8192, 8192), 0.50
BASELINE = "cuBLAS bf16 (torch.matmul)"
HEADLINE = "tc_mma_pipelined"                      # timed in alternation with cuBLAS; the target's
CEILING, CEILING_SHAPE = "cuBLAS bf16 8192^3 (this run)", (8192, 8192, 8192)
_ceiling: list[tuple[str, float]] = []            # (name, FLOP/s), once measured (tensor_core_ceiling)
U = 2.0**-24                        # float32 unit roundoff


def reference(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A @ B in float64 for bf16 bit patterns a, b (every bf16 value and every
    product of two is exact in float64), and |A| @ |B|, the size of the terms."""
    a64, b64 = from_bf16(a).astype(np.float64), from_bf16(b).astype(np.float64)
    return a64 @ b64, np.abs(a64) @ np.abs(b64)


def bound_k(k_dim: int) -> float:
    """K roundings of up to an ulp (2u) each in fp32 accumulation, plus the
    reference's own error."""
    return 2 * k_dim / (1 - 2 * k_dim * U) + 1


#: Launched instead of tc_mma_pipelined where K or N is not a multiple of 8.
UNALIGNED = "tc_mma_pipelined_unaligned"


def load_kernels() -> dict:
    module = cb.compile(KERNEL_FILE)
    return {name: module.get_function(name).prepare("PPPiii") for name in (*RUNGS, UNALIGNED)}


# --8<-- [start:launch]
def tc_gemm(kernels, name: str, a, b, c) -> None:
    """c = a @ b with the rung `name`. a: M x K and b: K x N bfloat16 bit
    patterns (np.uint16), c: M x N float32, all C-contiguous GPUArrays; c
    must not overlap a or b. Any M, N, K >= 1; each array on a 32-byte
    boundary for the wmma rungs, 16 for the mma rungs."""
    if name not in RUNGS:
        raise ValueError(f"name: expected one of {', '.join(RUNGS)}, got {name!r}")
    align = ALIGN[name]
    cb.check_array("a", a, dtype=np.uint16, ndim=2, on_device=True, alignment=align)
    cb.check_array("b", b, dtype=np.uint16, ndim=2, on_device=True, alignment=align)
    m = cb.check_size("a.shape[0] (M)", a.shape[0], high=MAX_DIM)
    k = cb.check_size("a.shape[1] (K)", a.shape[1], high=MAX_DIM)
    if b.shape[0] != k:
        raise ValueError(f"b: expected {k:,} rows (a is {m:,} x {k:,}: the inner "
                         f"dimensions must agree), got shape {tuple(b.shape)}")
    n = cb.check_size("b.shape[1] (N)", b.shape[1], high=MAX_DIM)
    cb.check_array("c", c, dtype=np.float32, shape=(m, n), on_device=True, alignment=align)
    cb.check_separate("c", c, a=a, b=b)
    block, tile_m, tile_n = RUNGS[name]
    grid = (cb.ceil_div(n, tile_n), cb.ceil_div(m, tile_m), 1)   # x along N, y along M
    if grid[1] > MAX_GRID_Y:
        raise ValueError(f"a: {m:,} rows need {grid[1]:,} blocks of {tile_m} in y, more than "
                         f"the {MAX_GRID_Y:,} a grid allows for {name}")
    if grid[0] > MAX_GRID_X:                        # unreachable below MAX_DIM; kept honest
        raise ValueError(f"{name}: {grid[0]:,} blocks in x, more than {MAX_GRID_X:,}")
    kernel = kernels[name]
    if name == "tc_mma_pipelined" and (k % 8 or n % 8):   # rows not 16-byte aligned
        kernel = kernels[UNALIGNED]
    kernel.prepared_call(grid, block, a.gpudata, b.gpudata, c.gpudata,
                         np.int32(m), np.int32(n), np.int32(k))
# --8<-- [end:launch]


def random_pair(m: int, n: int, k: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """float32 standard-normal A (M x K) and B (K x N)."""
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    return a, b


def label(name: str, m: int, n: int, k: int) -> str:
    return f"{name.removeprefix('tc_')} {m}x{n}x{k}"


def tag(m: int, n: int, k: int) -> str:
    return str(m) if m == n == k else f"{m}x{n}x{k}"


def check_all(kernels, a16, b16, c_gpu, a_gpu, b_gpu) -> dict:
    """Every rung at one shape, against the float64 product of the bf16
    inputs. Returns the last rung's output (for input_rounding_facts)."""
    (m, k), n = a16.shape, b16.shape[1]
    ref, scale = reference(a16, b16)
    out = None
    for name in RUNGS:
        cb.poison(c_gpu)
        tc_gemm(kernels, name, a_gpu, b_gpu, c_gpu)
        out = c_gpu.get()
        cb.report_check(cb.compare(label(name, m, n, k), out, ref, k=bound_k(k), scale=scale))
    return out


def input_rounding_facts(out: np.ndarray, a: np.ndarray, b: np.ndarray, shape: str) -> dict:
    """How far C is from the product of the unrounded float32 inputs: the
    price of bf16 inputs, not of the kernel. Printed and kept, not checked."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    exact = a64 @ b64
    scale = np.abs(a64) @ np.abs(b64)
    err = np.abs(out - exact)
    worst = float(np.max(err / scale))
    norm = float(np.linalg.norm(err) / np.linalg.norm(exact))
    print(f"  vs unrounded float32 inputs at {shape}: max |C - A@B| / (|A|@|B|)")
    print(f"    = {worst:.2e}, norm-wise {norm:.2e} (bf16 u = 2^-8 = {2.0**-8:.2e})")
    return {f"fp32_inputs_{shape}_worst_rel": worst, f"fp32_inputs_{shape}_norm_rel": norm}


def check_shape(kernels, m: int, n: int, k: int, rng) -> dict:
    from pycuda import gpuarray

    a, b = random_pair(m, n, k, rng)
    a16, b16 = to_bf16(a), to_bf16(b)
    out = check_all(kernels, a16, b16, gpuarray.empty((m, n), np.float32),
                    gpuarray.to_gpu(a16), gpuarray.to_gpu(b16))
    if (m, n, k) in ROUNDING_SHAPES:
        return input_rounding_facts(out, a, b, tag(m, n, k))
    return {}


def to_torch(torch, x16: np.ndarray):
    """bf16 bit patterns (np.uint16) as a bfloat16 tensor on the GPU."""
    return torch.from_numpy(x16.view(np.int16)).cuda().view(torch.bfloat16)


def tensor_core_ceiling(kernels, seed: int, budget_ms: float) -> tuple[str, float]:
    """The ceiling of the tensor-core entries of this run, (its name,
    FLOP/s): cuBLAS bf16 at 8192^3 (torch.matmul, fp32 accumulation with
    reduced-precision reductions off), timed alone with cb.bench. The book
    has no microbenchmark of the tensor cores' peak; this is the rate the
    library reaches on them. Without PyTorch the last rung stands in for
    it (from `kernels`, load_kernels()'s, loaded here when None), and the
    name says so.

    The one home of this ceiling: wgmma_gemm, and the later chapters'
    tensor-core listings (conv2d, flash_bf16, gpt2_block), call it too.
    Measured once a process, and printed then; a later call returns the
    same figure, so a listing that times several shapes reads one ceiling.
    PyTorch's reduced-precision setting is put back as it was, so that the
    caller's own baselines run as a user's would."""
    if _ceiling:
        return _ceiling[0]
    from pycuda import gpuarray

    m, n, k = CEILING_SHAPE
    a, b = random_pair(m, n, k, np.random.default_rng(seed))
    a16, b16 = to_bf16(a), to_bf16(b)
    del a, b
    torch = cb.torch_cuda()
    if torch is not None:
        reduced = torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
        try:
            ta, tb = to_torch(torch, a16), to_torch(torch, b16)
            tc = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
            name, out_bytes = CEILING, 2 * m * n
            t = cb.bench(lambda: torch.matmul(ta, tb, out=tc),
                         working_set_bytes=2 * (m * k + k * n) + out_bytes, budget_ms=budget_ms)
        finally:
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = reduced
    else:
        kernels = kernels if kernels is not None else load_kernels()
        a_gpu, b_gpu = gpuarray.to_gpu(a16), gpuarray.to_gpu(b16)
        c_gpu = gpuarray.empty((m, n), np.float32)
        name, out_bytes = f"{HEADLINE} {m}^3 (this run; no PyTorch here for cuBLAS)", 4 * m * n
        t = cb.bench(lambda: tc_gemm(kernels, HEADLINE, a_gpu, b_gpu, c_gpu),
                     working_set_bytes=2 * (m * k + k * n) + out_bytes, budget_ms=budget_ms)
    rate = 2 * m * n * k / (t.median_ms * 1e-3)
    print(f"ceiling: {name}: {t.median_ms:.3f} ms, {rate / 1e12:.0f} TFLOP/s ({t.reps} runs)")
    _ceiling.append((name, rate))
    return name, rate


def bench_shape(kernels, m: int, n: int, k: int, seed: int, budget_ms: float,
                ceiling: tuple[str, float]) -> dict:
    """Check, then time, every rung at one shape (HEADLINE in alternation
    with cuBLAS), and print the table. Returns the facts for the record:
    ms, TFLOP/s, share of cuBLAS and of the ceiling per rung."""
    from pycuda import gpuarray

    from cudabook import evidence

    a, b = random_pair(m, n, k, np.random.default_rng(seed))
    a16, b16 = to_bf16(a), to_bf16(b)
    a_gpu, b_gpu = gpuarray.to_gpu(a16), gpuarray.to_gpu(b16)
    c_gpu = gpuarray.empty((m, n), np.float32)
    shape = tag(m, n, k)
    out = check_all(kernels, a16, b16, c_gpu, a_gpu, b_gpu)
    facts = input_rounding_facts(out, a, b, shape) if (m, n, k) in ROUNDING_SHAPES else {}
    del out
    flops = 2 * m * n * k
    working_set = 2 * (m * k + k * n) + 4 * m * n
    baseline = None
    torch = cb.torch_cuda()
    if torch is not None:
        # fp32 accumulation throughout, as ours (no bf16 partial sums in split-K)
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
        ta, tb = to_torch(torch, a16), to_torch(torch, b16)
        tc = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
        baseline = (BASELINE, lambda: torch.matmul(ta, tb, out=tc))
    entries = {}
    for name in RUNGS:
        def fn(name=name):
            tc_gemm(kernels, name, a_gpu, b_gpu, c_gpu)

        alternated = baseline is not None and name == HEADLINE
        entries[name] = evidence.benchmark(
            label(name, m, n, k), fn, flops=flops, working_set_bytes=working_set, ceiling=ceiling,
            baseline=baseline if alternated else None,
            targets={"baseline": TARGET} if alternated and (m, n, k) == TARGET_SHAPE else None,
            budget_ms=budget_ms)
    cublas = entries[HEADLINE].baseline    # cuBLAS pooled over the headline's rounds, or None
    rows = {}
    for name, e in entries.items():
        of_cublas = evidence.speed_against(e, cublas)
        rows[name] = {"ms": e.timing.median_ms, "flops": e.flops_per_s, "of_cublas": of_cublas,
                      "of_ceiling": e.fraction_of_ceiling, "reps": e.timing.reps,
                      "alternated": e.baseline is not None}
    print(f"{m} x {n} x {k}: {flops / 1e9:,.1f} GFLOP per product")
    print(f"{'rung':18s} {'ms':>10s} {'TFLOP/s':>9s} {'% of cuBLAS':>12s}")
    for rung, r in rows.items():
        share = f"{100 * r['of_cublas']:11.1f}%" if cublas is not None else f"{'-':>12s}"
        print(f"{rung:18s} {r['ms']:10.3f} {r['flops'] / 1e12:9.1f} {share}"
              + (" *" if r["alternated"] else ""))
    facts[f"{shape}_rows"] = [{"rung": rung, **r} for rung, r in rows.items()]
    for rung, r in rows.items():              # flat keys, for [[rec:...:facts.<key>]]
        facts[f"{rung}_{shape}_ms"] = r["ms"]
        facts[f"{rung}_{shape}_tflops"] = r["flops"] / 1e12
        facts[f"{rung}_{shape}_of_ceiling"] = r["of_ceiling"]
        if cublas is not None:
            facts[f"{rung}_{shape}_of_cublas"] = r["of_cublas"]
    if cublas is not None:
        ms = cublas.timing.median_ms
        print(f"{'cuBLAS':18s} {ms:10.3f} {cublas.flops_per_s / 1e12:9.1f} {100.0:11.1f}%")
        print(f"  cuBLAS: {BASELINE}, pooled over {HEADLINE}'s rounds")
        print("  *: timed in alternation with cuBLAS, the share the median of the rounds;")
        print("     the other rungs timed alone, the share cuBLAS's time over theirs")
        facts.update({f"cublas_{shape}_ms": ms, f"cublas_{shape}_tflops": cublas.flops_per_s / 1e12,
                      f"cublas_{shape}_kernels": cublas.side.kernels,
                      f"{HEADLINE}_{shape}_of_cublas_p20": cublas.ratio_p20,
                      f"{HEADLINE}_{shape}_of_cublas_p80": cublas.ratio_p80})
    best = max(rows, key=lambda r: rows[r]["flops"])
    facts[f"best_{shape}"] = best
    judged = entries[HEADLINE]
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
    facts = {}
    for m, n, k in SANITIZER_SHAPES if os.environ.get("CUDABOOK_SANITIZER") else SHAPES:
        facts.update(check_shape(kernels, m, n, k, rng))
    if args.bench:
        print(f"{gpu.name}: {gpu.sm_count} SMs")
        ceiling = tensor_core_ceiling(kernels, args.seed, args.budget_ms)
        facts.update(baseline=BASELINE, ceiling=ceiling[0], ceiling_tflops=ceiling[1] / 1e12)
        for m, n, k in BENCH_SHAPES:
            facts.update(bench_shape(kernels, m, n, k, args.seed, args.budget_ms, ceiling))
    cb.report_facts(**facts)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
