"""BF16 matrix product on Hopper's own path: TMA, wgmma and warp
specialisation, C = A @ B.

A is M x K and B is K x N in bfloat16, row-major; C is M x N bfloat16,
accumulated in fp32 and rounded once (as cuBLAS writes it). One block of
three warpgroups makes a 128 x 256 tile of C: warpgroup 0 asks the TMA
unit for tiles of A and B (a 4-stage ring in shared memory), warpgroups 1
and 2 multiply them with wgmma, 64 rows each (see wgmma_gemm.cu). What
changed since tc_gemm's last rung: TMA instead of cp.async, wgmma from
shared memory instead of ldmatrix and mma.sync, producer and consumer
warps instead of every warp doing both, a bigger tile (128 x 256, slices
of 64, 4 stages), the order of the blocks, and bf16 output instead of
fp32.

Hopper only: wgmma exists on sm_90a, so the kernel is compiled for that
architecture and runs on compute capability 9.0 alone (H100, H200, GH200);
elsewhere this listing exits with "skipped" and says why. TMA needs every
row of A and B to start on a 16-byte boundary: K and N must be multiples
of 8 (the launch says so otherwise; tc_gemm takes any shape).

Run:    python code/matmul_tc/wgmma_gemm.py [--seed S] [--bench]
Checks: M x N x K = 1x8x8, 16x16x16, 33x40x24, 130x264x104, 200x520x1000,
        1024x1024x1024 and 4097x3000x1032 (under compute-sanitizer only
        1x8x8, 33x40x24 and 130x264x104), and under --bench at each
        benchmark shape, element by element against the float64 product
        of the bf16 inputs. Bound: tc_gemm's for the fp32 accumulation
        (2K/(1 - 2Ku) + 1 units of 2^-24 times |A| @ |B|), plus the one
        rounding of C to bf16 (2^-8 |C|). cuBLAS's output is held to the
        same bound.
Bench:  at 8192 x 8192 x 8192 and 4096 x 4096 x 4096, as typed entries
        (cudabook.evidence): ms and TFLOP/s (2 M N K flops) against
        tc_gemm's ceiling, cuBLAS bf16 at 8192^3 timed alone first in the
        same run. wgmma_gemm is timed in alternation with cuBLAS bf16
        (torch.matmul on bf16 tensors, bf16 output, fp32 accumulation with
        reduced-precision reductions off) on the same data, in ABBA
        rounds: its share of cuBLAS is the median of the rounds' ratios,
        with its p20 and p80. tc_gemm's tc_mma_pipelined (fp32 output) is
        timed alone in the same run; its share is cuBLAS's time (pooled
        over those rounds) over its own. Target: wgmma_gemm >= 80% of
        cuBLAS at 8192^3, judged against that median (printed as met or
        MISSED).
"""

import ctypes
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from cudabook.bf16 import from_bf16, to_bf16  # noqa: E402
from matmul_tc import tc_gemm  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
ARCH = "sm_90a"
BM, BN, BK, STAGES, THREADS = 128, 256, 64, 4, 384      # as in wgmma_gemm.cu
# the stages, their 2 x STAGES mbarriers, and up to 1023 bytes to align to 1024
SHARED_BYTES = STAGES * (BM + BN) * BK * 2 + 2 * STAGES * 8 + 1024
MAX_DIM = 2**31 - 1 - BN           # tile indices must not overflow past the edge
MAX_BLOCKS = 2**31 - 1             # one block per tile, along x
SHAPES = [(1, 8, 8), (16, 16, 16), (33, 40, 24), (130, 264, 104), (200, 520, 1000),
          (1024, 1024, 1024), (4097, 3000, 1032)]                   # M, N, K
SANITIZER_SHAPES = [(1, 8, 8), (33, 40, 24), (130, 264, 104)]
BENCH_SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096)]
TARGET_SHAPE, TARGET = (8192, 8192, 8192), 0.80
BASELINE = "cuBLAS bf16 (torch.matmul)"
U_FP32, U_BF16 = 2.0**-24, 2.0**-8
PREVIOUS = "tc_mma_pipelined"      # tc_gemm's last rung, timed beside ours


def load_kernel(gpu):
    """The kernel, compiled for sm_90a, or Unavailable on any other GPU."""
    import pycuda.driver as cuda

    if gpu.compute_capability != (9, 0):
        raise cb.Unavailable(
            f"wgmma_gemm needs a compute capability 9.0 GPU (Hopper: H100, H200), for wgmma "
            f"and setmaxnreg; this {gpu.name} is {gpu.arch}")
    f = cb.compile(KERNEL_FILE, arch=ARCH).get_function("wgmma_gemm")
    f.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, SHARED_BYTES)
    return f.prepare("PPPiii")                # the two tensor maps' addresses, C, M, N, K


# --8<-- [start:tensor_map]
_CU_BFLOAT16, _SWIZZLE_128B, _L2_PROMOTION_256B = 9, 3, 3     # cuda.h enum values
_maps: dict = {}


def tensor_map(address: int, rows: int, cols: int, box_rows: int, box_cols: int):
    """A CUtensorMap for a row-major rows x cols bf16 matrix at `address`,
    copied box_rows x box_cols at a time, 128-byte swizzled, zeros outside
    the matrix: cuTensorMapEncodeTiled from the driver library, through
    ctypes. Returned as a 128-byte GPUArray for the kernel to read; made
    once for each matrix address, size and box."""
    from pycuda import gpuarray

    key = (address, rows, cols, box_rows, box_cols)
    if key not in _maps:
        lib = ctypes.CDLL("libcuda.so.1")
        raw = (ctypes.c_uint8 * (128 + 64))()                     # CUtensorMap is 64-byte aligned
        at = -ctypes.addressof(raw) % 64
        u64, u32 = ctypes.c_uint64, ctypes.c_uint32
        err = lib.cuTensorMapEncodeTiled(
            ctypes.c_void_p(ctypes.addressof(raw) + at), ctypes.c_int(_CU_BFLOAT16), u32(2),
            ctypes.c_void_p(address),
            (u64 * 2)(cols, rows),               # sizes, innermost first
            (u64 * 1)(cols * 2),                 # bytes from one row to the next
            (u32 * 2)(box_cols, box_rows),
            (u32 * 2)(1, 1),                     # every element, no striding
            ctypes.c_int(0), ctypes.c_int(_SWIZZLE_128B), ctypes.c_int(_L2_PROMOTION_256B),
            ctypes.c_int(0))                     # fill outside the matrix with zeros
        if err:
            raise RuntimeError(f"cuTensorMapEncodeTiled failed (CUresult {err}) for a "
                               f"{rows} x {cols} matrix at {address:#x}")
        m = gpuarray.to_gpu(np.frombuffer(bytes(raw[at:at + 128]), np.uint8))
        assert int(m.gpudata) % 64 == 0, "cuMemAlloc gives at least 256-byte alignment"
        _maps[key] = m
    return _maps[key]
# --8<-- [end:tensor_map]


# --8<-- [start:launch]
def wgmma_gemm(kernel, a, b, c) -> None:
    """c = a @ b: a M x K and b K x N bfloat16 bit patterns (np.uint16), c
    M x N bfloat16 bit patterns, all C-contiguous GPUArrays on 16-byte
    boundaries; K and N multiples of 8; c must not overlap a or b."""
    cb.check_array("a", a, dtype=np.uint16, ndim=2, on_device=True, alignment=16)
    cb.check_array("b", b, dtype=np.uint16, ndim=2, on_device=True, alignment=16)
    m = cb.check_size("a.shape[0] (M)", a.shape[0], high=MAX_DIM)
    k = cb.check_size("a.shape[1] (K)", a.shape[1], high=MAX_DIM)
    if b.shape[0] != k:
        raise ValueError(f"b: expected {k:,} rows (a is {m:,} x {k:,}: the inner "
                         f"dimensions must agree), got shape {tuple(b.shape)}")
    n = cb.check_size("b.shape[1] (N)", b.shape[1], high=MAX_DIM)
    for name, size in (("a.shape[1] (K)", k), ("b.shape[1] (N)", n)):
        if size % 8:
            raise ValueError(f"{name}: must be a multiple of 8 for TMA (each row on a 16-byte "
                             f"boundary), got {size:,}; tc_gemm.tc_gemm takes any shape")
    cb.check_array("c", c, dtype=np.uint16, shape=(m, n), on_device=True, alignment=16)
    cb.check_separate("c", c, a=a, b=b)
    blocks = cb.ceil_div(m, BM) * cb.ceil_div(n, BN)
    if blocks > MAX_BLOCKS:
        raise ValueError(f"a, b: {blocks:,} tiles of {BM} x {BN}, more than the "
                         f"{MAX_BLOCKS:,} blocks a grid allows in x")
    a_map = tensor_map(int(a.gpudata), m, k, BM, BK)          # 128 rows x 64 columns of A
    b_map = tensor_map(int(b.gpudata), k, n, BK, 64)          # 64 rows x 64 columns of B
    kernel.prepared_call((blocks, 1, 1), (THREADS, 1, 1), a_map.gpudata, b_map.gpudata, c.gpudata,
                         np.int32(m), np.int32(n), np.int32(k), shared_size=SHARED_BYTES)
# --8<-- [end:launch]


def bound(k_dim: int, scale: np.ndarray) -> tuple[float, np.ndarray]:
    """(k, scale) for cb.compare on C as float32: u_bf16 |ref| for C's
    rounding, plus tc_gemm's accumulation bound (its k x u_fp32 x |A|@|B|,
    grown by C's rounding): k u_fp32 (|ref| + s) with k = u_bf16 / u_fp32."""
    acc = tc_gemm.bound_k(k_dim) * U_FP32 * (1 + U_BF16)
    return U_BF16 / U_FP32, scale * (acc / U_BF16)


def label(m: int, n: int, k: int) -> str:
    return f"wgmma {m}x{n}x{k}"


def check(kernel, a16, b16, a_gpu, b_gpu, c_gpu) -> tuple[np.ndarray, float, np.ndarray]:
    """Launch once into a poisoned C and check every element. Returns what
    the check held C to, (ref, k, scale) for cb.compare, so that another
    output of the same product (cuBLAS's) can be held to the same."""
    (m, k), n = a16.shape, b16.shape[1]
    ref, scale = tc_gemm.reference(a16, b16)
    kb, s = bound(k, scale)
    del scale                              # float64, M x N: freed before the compare
    cb.poison(c_gpu)                       # all-ones bytes: bf16 NaN
    wgmma_gemm(kernel, a_gpu, b_gpu, c_gpu)
    cb.report_check(cb.compare(label(m, n, k), from_bf16(c_gpu.get()), ref, k=kb, scale=s))
    return ref, kb, s


def check_shape(kernel, m: int, n: int, k: int, rng) -> None:
    from pycuda import gpuarray

    a, b = tc_gemm.random_pair(m, n, k, rng)
    a16, b16 = to_bf16(a), to_bf16(b)
    check(kernel, a16, b16, gpuarray.to_gpu(a16), gpuarray.to_gpu(b16),
          gpuarray.empty((m, n), np.uint16))


def bench_shape(kernel, rungs, m: int, n: int, k: int, seed: int, budget_ms: float,
                ceiling: tuple[str, float]) -> dict:
    """Check ours (and cuBLAS's output) at one shape, then time the previous
    rung, and ours in alternation with cuBLAS; print the table and return
    the facts."""
    from pycuda import gpuarray

    from cudabook import evidence

    a, b = tc_gemm.random_pair(m, n, k, np.random.default_rng(seed))
    a16, b16 = to_bf16(a), to_bf16(b)
    del a, b
    a_gpu, b_gpu = gpuarray.to_gpu(a16), gpuarray.to_gpu(b16)
    c_gpu = gpuarray.empty((m, n), np.uint16)
    shape = tc_gemm.tag(m, n, k)
    ref, kb, s = check(kernel, a16, b16, a_gpu, b_gpu, c_gpu)
    flops = 2 * m * n * k
    working_set = 2 * (m * k + k * n + m * n)
    baseline = None
    torch = cb.torch_cuda()
    if torch is not None:
        # fp32 accumulation throughout, as ours (no bf16 partial sums in split-K)
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
        ta, tb = tc_gemm.to_torch(torch, a16), tc_gemm.to_torch(torch, b16)
        tc = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
        torch.matmul(ta, tb, out=tc)
        got = from_bf16(tc.view(torch.int16).cpu().numpy().view(np.uint16))
        cb.report_check(cb.compare(f"cuBLAS {m}x{n}x{k}", got, ref, k=kb, scale=s))
        del got
        baseline = (BASELINE, lambda: torch.matmul(ta, tb, out=tc))
    del ref, s
    c32 = gpuarray.empty((m, n), np.float32)
    entries = {PREVIOUS: evidence.benchmark(
        tc_gemm.label(PREVIOUS, m, n, k), lambda: tc_gemm.tc_gemm(rungs, PREVIOUS, a_gpu, b_gpu, c32),
        flops=flops, working_set_bytes=working_set + 2 * m * n, ceiling=ceiling, budget_ms=budget_ms)}
    entries["wgmma_gemm"] = evidence.benchmark(
        label(m, n, k), lambda: wgmma_gemm(kernel, a_gpu, b_gpu, c_gpu), flops=flops,
        working_set_bytes=working_set, ceiling=ceiling, baseline=baseline,
        targets={"baseline": TARGET} if baseline is not None and (m, n, k) == TARGET_SHAPE else None,
        budget_ms=budget_ms)
    ours = entries["wgmma_gemm"]
    cublas = ours.baseline                 # cuBLAS pooled over our rounds, or None
    print(f"{m} x {n} x {k}: {flops / 1e9:,.1f} GFLOP per product")
    print(f"{'kernel':18s} {'ms':>10s} {'TFLOP/s':>9s} {'% of cuBLAS':>12s}")
    facts = {}
    for name, e in entries.items():
        ms = e.timing.median_ms
        if e.baseline is not None:
            share = e.baseline.ratio               # the median of its ABBA rounds
        else:
            share = cublas.timing.median_ms / ms if cublas is not None else None
        shown = f"{100 * share:11.1f}%" if share is not None else f"{'-':>12s}"
        print(f"{name:18s} {ms:10.3f} {e.flops_per_s / 1e12:9.1f} {shown}"
              + (" *" if e.baseline is not None else ""))
        facts[f"{name}_{shape}_ms"] = ms
        facts[f"{name}_{shape}_tflops"] = e.flops_per_s / 1e12
        facts[f"{name}_{shape}_of_ceiling"] = e.fraction_of_ceiling
        if share is not None:
            facts[f"{name}_{shape}_of_cublas"] = share
    if cublas is not None:
        ms = cublas.timing.median_ms
        print(f"{'cuBLAS':18s} {ms:10.3f} {cublas.flops_per_s / 1e12:9.1f} {100.0:11.1f}%")
        print(f"  cuBLAS: {BASELINE}, pooled over wgmma_gemm's rounds")
        print(f"  {PREVIOUS} writes C in fp32, the others in bf16")
        print("  *: timed in alternation with cuBLAS, the share the median of the rounds;")
        print(f"     {PREVIOUS} timed alone, the share cuBLAS's time over its own")
        facts.update({f"cublas_{shape}_ms": ms, f"cublas_{shape}_tflops": cublas.flops_per_s / 1e12,
                      f"cublas_{shape}_kernels": cublas.side.kernels,
                      f"wgmma_gemm_{shape}_of_cublas_p20": cublas.ratio_p20,
                      f"wgmma_gemm_{shape}_of_cublas_p80": cublas.ratio_p80})
    if ours.targets is not None:
        facts.update(of_cublas=cublas.ratio, of_cublas_p20=cublas.ratio_p20, of_cublas_p80=cublas.ratio_p80,
                     target=TARGET, target_met=ours.targets.met["baseline"])
    return facts


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    gpu = cb.init()
    kernel = load_kernel(gpu)
    rng = np.random.default_rng(args.seed)
    for m, n, k in SANITIZER_SHAPES if os.environ.get("CUDABOOK_SANITIZER") else SHAPES:
        check_shape(kernel, m, n, k, rng)
    facts = {}
    if args.bench:
        print(f"{gpu.name}: {gpu.sm_count} SMs")
        rungs = tc_gemm.load_kernels()
        ceiling = tc_gemm.tensor_core_ceiling(rungs, args.seed, args.budget_ms)
        facts.update(baseline=BASELINE, ceiling=ceiling[0], ceiling_tflops=ceiling[1] / 1e12)
        for m, n, k in BENCH_SHAPES:
            facts.update(bench_shape(kernel, rungs, m, n, k, args.seed, args.budget_ms, ceiling))
    cb.report_facts(**facts)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
