"""Solution to exercise 3: RMSNorm, layernorm.cu's forward kernel with one statistic.

RMSNorm scales each row of x (rows, cols) by 1 / sqrt(mean(x^2) + eps),
then by gamma (one per column); it subtracts no mean and adds no beta.
The kernel (ex3_rmsnorm.cu) is layernorm.cu's forward pass with the
Welford statistics replaced by one sum of squares: the row read once and
held in registers, a warp per row up to 1024 elements, a block per row up
to 8192 (256 threads for float32, 128 for bf16), float32 or bf16 storage,
float32 arithmetic. Inputs, shapes and launch rules come from layernorm.py.

Run:    python code/softmax_norm/ex3_rmsnorm.py [--seed S] [--bench]
Checks: float32 and bf16, every element, at layernorm.py's shapes (1x1 to
        3x8192; under compute-sanitizer 1x1, 3x7, 5x33 and 2x1030) and under
        --bench at 32768 x 4096, against float64 RMSNorm of the same
        (bf16-rounded) inputs, relative to |y|: k = h + 8, with h the
        longest chain behind the sum of squares (the elements a thread holds
        plus one addition per level of the tree; the squares are positive,
        so nothing cancels), 2 for the division by cols and the eps, 4 for
        rsqrtf (2 ulp), 2 for the two products (the square root halves the
        sum's error, so h is twice what is needed). bf16 output adds one
        bf16 rounding of y (u_bf16 = 2^-8).
Bench:  at 32768 x 4096, float32 then bf16: time and GB/s (x read, y
        written) against the copy bandwidth and torch.nn.functional.rms_norm
        on the same data (torch >= 2.4; with an older torch the expression
        x * rsqrt(mean(x^2) + eps) * gamma, named as such).
"""

import math
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from cudabook.bf16 import from_bf16  # noqa: E402
from softmax_norm import _rows, layernorm  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
DTYPES, VEC = _rows.DTYPES, _rows.VEC
EPS = 1e-6
U_FP32, U_BF16 = _rows.U_FP32, _rows.U_BF16


def load_kernels() -> dict:
    module = cb.compile(KERNEL_FILE)
    return {key: module.get_function(f"rmsnorm_{key[0]}{key[2]}_{key[1]}").prepare("PPPiifi")
            for key in _rows.register_kernels()}


# --8<-- [start:solution]
def rmsnorm(kernels, x, gamma, y, eps: float = EPS) -> None:
    """y = x / sqrt(mean(x^2) + eps) * gamma over each row. x, y: (rows,
    cols) float32 or bf16 bit patterns (np.uint16), cols <= 8192; gamma:
    (cols,) of x's dtype."""
    rows, cols = _rows.rows_cols(x, high=_rows.BLOCK_ROW_MAX)
    dt = _rows.dtype_key("x", x)
    cb.check_array("gamma", gamma, dtype=x.dtype, shape=(cols,), on_device=True)
    cb.check_array("y", y, dtype=x.dtype, shape=(rows, cols), on_device=True)
    if not eps > 0:
        raise ValueError(f"eps: expected a positive number, got {eps}")
    kind = _rows.kind_for(cols)
    blocks, threads = _rows.launch_shape(kind, dt, rows)
    kernels[kind, dt, _rows.chunks_for(kind, dt, cols)].prepared_call(
        (blocks, 1, 1), (threads, 1, 1), x.gpudata, gamma.gpudata, y.gpudata, np.int32(rows),
        np.int32(cols), np.float32(eps), np.int32(_rows.vec_ok(cols, dt, x, gamma, y)))


def reference(x64: np.ndarray, g64: np.ndarray) -> np.ndarray:
    return x64 / np.sqrt((x64 * x64).mean(axis=1, keepdims=True) + EPS) * g64


def check(name: str, y, x64, g64, dt: str) -> None:
    """Every element, relative to itself (see the docstring)."""
    cols = x64.shape[1]
    kind = _rows.kind_for(cols)
    chunks, threads = _rows.chunks_for(kind, dt, cols), _rows.group(kind, dt)
    h = chunks * VEC[dt] + int(math.log2(threads))
    ref = reference(x64, g64)
    if dt == "f32":
        cb.report_check(cb.compare(name, y, ref, k=h + 8))
    else:                                   # in float32 units: one bf16 rounding is 2^16 u
        cb.report_check(cb.compare(name, from_bf16(y), ref, k=U_BF16 / U_FP32 + h + 8))


def torch_baseline(torch, tx, tg, cols: int):
    """(name, fn): the call a PyTorch user would make."""
    F = torch.nn.functional
    if hasattr(F, "rms_norm"):
        return "F.rms_norm", lambda: F.rms_norm(tx, (cols,), tg, EPS)
    return ("x * rsqrt(mean(x^2) + eps) * gamma",
            lambda: tx * torch.rsqrt((tx * tx).mean(-1, keepdim=True) + EPS) * tg)
# --8<-- [end:solution]


def run_shape(kernels, rows: int, cols: int, dt: str, rng):
    """Check one shape; returns the device arrays and host x for timing."""
    from pycuda import gpuarray

    (x, g, _), (x64, g64, _) = layernorm.inputs(rows, cols, dt, rng)
    xg, gg = gpuarray.to_gpu(x), gpuarray.to_gpu(g)
    yg = gpuarray.empty_like(xg)
    cb.poison(yg)
    rmsnorm(kernels, xg, gg, yg)
    check(f"rmsnorm {dt} {rows}x{cols}", yg.get(), x64, g64, dt)
    return x, g, xg, gg, yg


def bench(kernels, seed: int) -> dict:
    rows, cols = layernorm.BENCH_SHAPE
    torch = cb.torch_cuda()
    facts = {}
    for dt in DTYPES:
        x, g, xg, gg, yg = run_shape(kernels, rows, cols, dt, np.random.default_rng(seed))
        base = None
        if torch is not None:
            base = torch_baseline(torch, _rows.to_torch(torch, x), _rows.to_torch(torch, g), cols)
            facts["baseline"] = base[0]
        print(f"{rows} x {cols} {dt}:")
        b = cb.benchmark(f"rmsnorm {dt}", lambda: rmsnorm(kernels, xg, gg, yg), bytes_moved=2 * x.nbytes,
                         baseline=base)
        facts[f"{dt}_ms"] = b.timing.median_ms
        facts[f"{dt}_of_copy"] = b.fraction_of_ceiling
        if b.baseline is not None:
            facts[f"torch_{dt}_ms"] = b.baseline.timing.median_ms
            facts[f"torch_{dt}_of_copy"] = b.baseline.bytes_per_s / b.ceiling_bytes_per_s
            facts[f"{dt}_over_torch"] = b.baseline.ratio
    return facts


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    cb.init()
    kernels = load_kernels()
    rng = np.random.default_rng(args.seed)
    shapes = layernorm.SANITIZER_SHAPES if os.environ.get("CUDABOOK_SANITIZER") else layernorm.SHAPES
    for rows, cols in shapes:
        for dt in DTYPES:
            run_shape(kernels, rows, cols, dt, rng)
    if args.bench:
        cb.report_facts(**bench(kernels, args.seed))
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
