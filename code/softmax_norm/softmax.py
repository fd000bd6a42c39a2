"""Softmax over rows, five ways: three passes, online (per element and per chunk), a warp per row, a block per row.

Each row of x (rows, cols) becomes exp(x - max) / sum(exp(x - max)), in
float32 or in bfloat16 (stored as bf16, computed in float32). The kernels
differ in how often they read the row from memory: softmax_safe three
times (maximum, sum, output), softmax_online twice (Milakov and
Gimelshein's one-pass maximum and sum, then the output; softmax_online_chunk
the same, its running sum rescaled once for each 16-byte load rather than
for each new maximum), softmax_warp and softmax_block once, holding the row in registers (a warp per row up to
1024 elements, a block per row up to 8192: 256 threads for float32, 128
for bf16, so a thread holds 16 bytes of each 1024 elements). softmax() picks
by row length: warp, then block, then online for longer rows.

Run:    python code/softmax_norm/softmax.py [--seed S] [--bench]
Checks: every kernel that can take the shape, float32 and bf16, every
        element, at rows x cols = 1x1, 3x7, 5x32, 33x1000, 7x1024,
        64x1025, 9x4096, 3x8192, 2x8193 and 2x20000 (under compute-sanitizer
        1x1, 3x7, 5x33 and 2x1030), and under --bench at each benchmark
        shape, against float64 softmax of the same (bf16-rounded) inputs.
        Masked rows too, as attention leaves them (-inf in the first
        quarter of each row and 30% of the rest, so a thread may meet -inf
        before any finite logit), at 3x7, 33x1000, 9x4096 and 2x20000
        (under compute-sanitizer 5x33 and 2x1030): a masked logit's output
        must be exactly 0.
        Bound for y_j, relative to y_j: 1 rounding of x_j - m, carried by
        exp as |x_j - m| roundings; 2 for expf; for the row's sum, h (the
        longest chain of additions or rescalings behind it: 3 per element a
        thread folds in, 2 per level of the warp or block reduction) plus
        the exps' own argument roundings, a weighted mean of |x_k - m|, and
        for the online kernels the rescalings' (the running maximum climbs
        at most the row's range): 3 max_k |x_k - m| in all; 2 for the
        reciprocal and the product. For bf16 output, one bf16 rounding
        (u_bf16 = 2^-8) of y_j on top.
Bench:  at 32768 x 4096 (float32, then bf16), each a typed entry
        (cudabook.evidence): each kernel's time and GB/s (the row read once
        and written once: 2 x 4 or 2 x 2 bytes per element) against the
        copy bandwidth measured in this run (device-to-device copy); the
        kernel softmax() picks timed in alternation (ABBA rounds) with
        torch.softmax(x, dim=-1) on the same data, then twice more, in
        alternation with torch.compile(lambda x: torch.softmax(x, dim=-1))
        in mode="default" and in mode="max-autotune", each compiled and
        warmed before it is timed (its input marked static, so
        max-autotune's CUDA graph reads it in place). Target: softmax() >=
        1.3x torch.softmax in both dtypes (judged on the median of the
        alternated rounds' ratios).
"""

import math
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from cudabook import evidence  # noqa: E402
from cudabook.bf16 import from_bf16, to_bf16  # noqa: E402
from softmax_norm import _rows  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
THREADS = 256                               # the .cu's THREADS: the block of each kernel of TWO_PASS
KINDS = ("safe", "online", "online_chunk", "warp", "block")
TWO_PASS = ("safe", "online", "online_chunk")   # a block of THREADS per row, any length
DTYPES, VEC, ROW_MAX = _rows.DTYPES, _rows.VEC, _rows.ROW_MAX
SHAPES = [(1, 1), (3, 7), (5, 32), (33, 1000), (7, 1024), (64, 1025), (9, 4096), (3, 8192),
          (2, 8193), (2, 20_000)]
MASKED_SHAPES = [(3, 7), (33, 1000), (9, 4096), (2, 20_000)]
SANITIZER_SHAPES = [(1, 1), (3, 7), (5, 33), (2, 1030)]
SANITIZER_MASKED_SHAPES = [(5, 33), (2, 1030)]
BENCH_SHAPE = (32_768, 4096)
TARGET = 1.3
BASELINE = "torch.softmax"
COMPILE_MODES = ("default", "max-autotune")    # torch.compile's modes, each timed against softmax()
CEILING = "device-to-device copy"
U_FP32, U_BF16 = _rows.U_FP32, _rows.U_BF16


def load_kernels() -> dict:
    """{(kind, dtype, chunks): kernel}; chunks is 0 for the kernels of TWO_PASS."""
    module = cb.compile(KERNEL_FILE)
    keys = [(kind, dt, 0) for dt in DTYPES for kind in TWO_PASS] + _rows.register_kernels()
    return {(kind, dt, c): module.get_function(f"softmax_{kind}{c or ''}_{dt}").prepare("PPiii")
            for kind, dt, c in keys}


def fits(kind: str, cols: int) -> bool:
    return cols <= ROW_MAX.get(kind, cols)


# --8<-- [start:launch]
def pick(cols: int) -> str:
    """The kernel for rows of `cols` elements: a warp per row while a warp's
    registers hold the row, then a block, then the two-pass online kernel."""
    return _rows.kind_for(cols) if cols <= _rows.BLOCK_ROW_MAX else "online"


def softmax(kernels, x, y, kind: str | None = None) -> None:
    """y = softmax of each row of x. x, y: (rows, cols) GPUArrays, float32 or
    bf16 bit patterns (np.uint16), the same dtype. kind: one of KINDS, or
    None to pick by row length."""
    rows, cols = _rows.rows_cols(x)
    dt = _rows.dtype_key("x", x)
    cb.check_array("y", y, dtype=x.dtype, shape=(rows, cols), on_device=True)
    kind = pick(cols) if kind is None else kind
    if kind not in KINDS:
        raise ValueError(f"kind: expected one of {KINDS}, got {kind!r}")
    if not fits(kind, cols):
        raise ValueError(f"x: softmax_{kind} holds rows of at most {ROW_MAX[kind]} elements, got {cols}")
    if kind in ROW_MAX:
        (blocks, threads), chunks = _rows.launch_shape(kind, dt, rows), _rows.chunks_for(kind, dt, cols)
    else:
        (blocks, threads), chunks = (rows, THREADS), 0
    kernels[kind, dt, chunks].prepared_call((blocks, 1, 1), (threads, 1, 1), x.gpudata, y.gpudata,
                                            np.int32(rows), np.int32(cols), np.int32(_rows.vec_ok(cols, dt, x, y)))
# --8<-- [end:launch]


def reference(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def chain(kind: str, cols: int, dt: str) -> int:
    """h: the longest chain of roundings behind a row's sum."""
    threads = _rows.group(kind, dt) if kind in ROW_MAX else THREADS
    per_thread = math.ceil(cols / threads)
    return 3 * per_thread + 2 * int(math.log2(threads))


def check(name: str, y, x64: np.ndarray, ref: np.ndarray, kind: str, dt: str) -> None:
    """Every element, relative to itself (see the docstring's bound). A
    masked logit (-inf) must give exactly 0."""
    cols = x64.shape[1]
    finite = np.isfinite(x64)
    dist = np.where(finite, np.abs(x64 - x64.max(axis=1, keepdims=True)), 0.0)
    rel = dist + 3 * dist.max(axis=1, keepdims=True) + chain(kind, cols, dt) + 4
    if dt == "f32":
        result = cb.compare(name, y, ref, k=1, scale=ref * rel)
    else:                                   # compare in float32 units: k u = u_bf16
        result = cb.compare(name, from_bf16(y), ref, k=U_BF16 / U_FP32, scale=ref * rel * U_FP32 / U_BF16)
    cb.report_check(result)


def inputs(rows: int, cols: int, dt: str, rng, masked: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Logits ~ 3 N(0, 1): the host array in the kernel's dtype, and its
    float64 values. masked: as an attention mask leaves them, -inf in the
    first quarter of each row and in 30% of the rest at random, the last
    logit of each row finite (a row of -inf only has no softmax)."""
    x = 3 * rng.standard_normal((rows, cols), dtype=np.float32)
    if masked:
        mask = rng.random((rows, cols)) < 0.3
        mask[:, : cols // 4] = True
        mask[:, -1] = False
        x[mask] = -np.inf
    if dt == "bf16":
        x16 = to_bf16(x)
        return x16, from_bf16(x16).astype(np.float64)
    return x, x.astype(np.float64)


def check_shape(kernels, rows: int, cols: int, rng, masked: bool = False) -> None:
    from pycuda import gpuarray

    for dt in DTYPES:
        x, x64 = inputs(rows, cols, dt, rng, masked)
        ref = reference(x64)
        xg = gpuarray.to_gpu(x)
        yg = gpuarray.empty_like(xg)
        for kind in KINDS:
            if fits(kind, cols):
                cb.poison(yg)
                softmax(kernels, xg, yg, kind)
                check(f"{kind} {dt} {rows}x{cols}{' masked' if masked else ''}", yg.get(), x64, ref, kind, dt)


def bench_dtype(kernels, dt: str, seed: int) -> dict:
    from pycuda import gpuarray

    rows, cols = BENCH_SHAPE
    x, x64 = inputs(rows, cols, dt, np.random.default_rng(seed))
    ref = reference(x64)
    xg = gpuarray.to_gpu(x)
    yg = gpuarray.empty_like(xg)
    kinds = [kind for kind in KINDS if fits(kind, cols)]
    for kind in kinds:
        cb.poison(yg)
        softmax(kernels, xg, yg, kind)
        check(f"{kind} {dt} {rows}x{cols}", yg.get(), x64, ref, kind, dt)
    del ref, x64
    base = tx = None
    torch = cb.torch_cuda()
    if torch is not None:
        tx = _rows.to_torch(torch, x)
        base = (BASELINE, lambda: torch.softmax(tx, dim=-1))
    nbytes = 2 * x.nbytes                   # the row read once, written once
    ceiling = (CEILING, cb.ceiling())
    picked = pick(cols)
    facts = {}
    print(f"{rows} x {cols} {dt} ({x.nbytes / 2**20:,.0f} MiB in, as much out); softmax() picks {picked}")
    for kind in kinds:
        b = evidence.benchmark(f"softmax_{kind} {dt}", lambda kind=kind: softmax(kernels, xg, yg, kind),
                               bytes_moved=nbytes, ceiling=ceiling, baseline=base if kind == picked else None,
                               targets={"baseline": TARGET} if kind == picked else None)
        facts[f"{kind}_{dt}_ms"] = b.timing.median_ms
        facts[f"{kind}_{dt}_of_copy"] = b.fraction_of_ceiling
        if b.baseline is not None:
            facts[f"torch_{dt}_ms"] = b.baseline.timing.median_ms
            facts[f"torch_{dt}_of_copy"] = b.baseline.bytes_per_s / ceiling[1]
            facts[f"{dt}_over_torch"] = b.baseline.ratio
            facts[f"{dt}_target_met"] = bool(b.targets.met["baseline"])
    if base is not None:
        for kind in kinds:
            facts[f"{kind}_{dt}_over_torch"] = facts[f"torch_{dt}_ms"] / facts[f"{kind}_{dt}_ms"]
        facts[f"{picked}_{dt}_over_torch"] = facts[f"{dt}_over_torch"]    # alternated: the rounds' median
        for mode in COMPILE_MODES:
            key = "compile_" + mode.replace("-", "_")
            name, fn = torch_compiled(torch, mode, tx)
            b = evidence.benchmark(f"softmax_{picked} {dt} vs {name}", lambda: softmax(kernels, xg, yg, picked),
                                   bytes_moved=nbytes, ceiling=ceiling, baseline=(name, fn))
            facts[f"{key}_{dt}_ms"] = b.baseline.timing.median_ms
            facts[f"{key}_{dt}_of_copy"] = b.baseline.bytes_per_s / ceiling[1]
            facts[f"{dt}_over_{key}"] = b.baseline.ratio
    return facts


def torch_compiled(torch, mode: str, tx):
    """torch.compile of torch.softmax(x, dim=-1), compiled and warmed here,
    before anything is timed: (name, fn)."""
    torch._dynamo.reset()                   # a fresh compile for each mode and dtype
    torch._dynamo.mark_static_address(tx)   # max-autotune's CUDA graph then reads it in place, not a copy
    comp = torch.compile(lambda x: torch.softmax(x, dim=-1), mode=mode)
    for _ in range(3):                      # compiled; with CUDA graphs (max-autotune) recorded, then replayed
        comp(tx)
    torch.cuda.synchronize()
    return f"torch.compile {mode}", lambda: comp(tx)


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    cb.init()
    kernels = load_kernels()
    rng = np.random.default_rng(args.seed)
    sanitizer = os.environ.get("CUDABOOK_SANITIZER")
    for rows, cols in SANITIZER_SHAPES if sanitizer else SHAPES:
        check_shape(kernels, rows, cols, rng)
    for rows, cols in SANITIZER_MASKED_SHAPES if sanitizer else MASKED_SHAPES:
        check_shape(kernels, rows, cols, rng, masked=True)
    facts = {}
    if args.bench:
        facts.update(baseline=BASELINE, picked=pick(BENCH_SHAPE[1]))
        for dt in DTYPES:
            facts.update(bench_dtype(kernels, dt, args.seed))
        met = all(facts.get(f"{dt}_target_met", False) for dt in DTYPES)
        facts.update(target=TARGET, target_met=met)
    cb.report_facts(**facts)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
