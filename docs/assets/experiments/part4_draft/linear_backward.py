"""The linear layer's backward: dX = dY W and dW^T = X^T dY on Hopper's tensor cores.

Draft for Part IV ("Backpropagation on the GPU"), not yet a listing, and not
yet run on a GPU: run it from the repository root with PYTHONPATH=code. The
forward kept W^T as w_t (K x N), the layout chapter 17's products read.
gemm_dx reads w_t as a K-major B and gemm_dw reads X as an M-major A, so
neither gradient needs a transposed copy; for comparison, the same products
through chapter 12's kernel after copying the operand transposed (what a
kernel that takes one layout must pay).

Run:    PYTHONPATH=code python3 docs/assets/experiments/part4_draft/linear_backward.py [--seed S] [--bench]
Checks: (M, K, N) = (1, 8, 8), (130, 72, 264), (1000, 200, 264),
        (8192, 768, 3072), for dX, dW^T and dX through GELU's derivative
        (gemm_dx_gelu, the product's sums exact, gelu'(pre) within 32
        float32 units),
        inputs whole numbers from {-2, ..., 2} (every
        fp32 sum exact), so each gradient must equal the exact product
        rounded once to bf16, element for element; then N(0, 1) inputs,
        within the fp32 sum's bound (twice the reduction's length, in
        units, of the sum of |a b|: the tensor cores' sums may truncate)
        plus one bf16 rounding.
Bench:  at GPT-2 small's c_fc and c_proj2 shapes for B T = 8192, each
        gradient's TFLOP/s against cuBLAS bf16 at 8192^3 in this run, in
        alternation with torch.matmul on the same layouts (dY @ w_t.t(),
        x.t() @ dY: cuBLAS takes the transposes as flags), and the
        transposed-copy path's time beside it.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "code"))
import cudabook as cb  # noqa: E402
from cudabook import evidence  # noqa: E402
from cudabook.bf16 import from_bf16, to_bf16  # noqa: E402
from matmul_tc import tc_gemm, wgmma_gemm  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BM, BN, BK, THREADS = 128, 256, 64, 384
SHAPES = [(1, 8, 8), (130, 72, 264), (1000, 200, 264), (8192, 768, 3072)]
BENCH = [(8192, 768, 3072), (8192, 3072, 768)]
U32, U_BF16 = 2.0**-24, 2.0**-8


def load_kernels():
    import pycuda.driver as cuda

    gpu = cb.init()
    if gpu.compute_capability != (9, 0):
        raise cb.Unavailable(f"wgmma needs a compute capability 9.0 GPU; this {gpu.name} is {gpu.arch}")
    module = cb.compile(KERNEL_FILE, arch=wgmma_gemm.ARCH)       # wgmma and setmaxnreg: sm_90a
    out = {}
    for name in ("gemm_dx", "gemm_dw", "gemm_dx_gelu"):
        f = module.get_function(name)
        f.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, wgmma_gemm.SHARED_BYTES)
        out[name] = f.prepare("PPPPiii" if name == "gemm_dx_gelu" else "PPPiii")
    return out


def _launch(kernel, a_map, b_map, c, m, n, k, pre=None):
    """One product C (m x n) over k; pre: gemm_dx_gelu's extra input, passed before C."""
    grid = cb.ceil_div(m, BM) * cb.ceil_div(n, BN)
    extra = (pre.gpudata,) if pre is not None else ()
    kernel.prepared_call((grid, 1, 1), (THREADS, 1, 1), a_map.gpudata, b_map.gpudata, *extra, c.gpudata,
                         np.int32(m), np.int32(n), np.int32(k), shared_size=wgmma_gemm.SHARED_BYTES)


def _bf16_2d(name, x, shape=None):
    cb.check_array(name, x, dtype=np.uint16, ndim=2, on_device=True, alignment=16, shape=shape)


# --8<-- [start:launch]
def _dx_operands(dy, w_t, dx):
    """dX's operands checked, and their tensor maps: (a_map, b_map, m, k, n)."""
    _bf16_2d("dy", dy)
    m, n = dy.shape
    _bf16_2d("w_t", w_t)
    k = w_t.shape[0]
    if w_t.shape[1] != n or k % 8 or n % 8:
        raise ValueError(f"w_t: expected (K, {n}) with K and N multiples of 8, got {tuple(w_t.shape)}")
    _bf16_2d("dx", dx, (m, k))
    a_map = wgmma_gemm.tensor_map(int(dy.gpudata), m, n, BM, BK)       # A = dY, K-major
    b_map = wgmma_gemm.tensor_map(int(w_t.gpudata), k, n, BN, BK)      # B = W, K-major: w_t's rows
    return a_map, b_map, m, k, n


def grad_x(kernels, dy, w_t, dx) -> None:
    """dx = dy @ w_t.T: dy (M, N), w_t (K, N), dx (M, K), bf16 bit patterns,
    C-contiguous; K and N multiples of 8."""
    a_map, b_map, m, k, n = _dx_operands(dy, w_t, dx)
    _launch(kernels["gemm_dx"], a_map, b_map, dx, m, k, n)


def grad_x_gelu(kernels, dy, w_t, pre, dx) -> None:
    """dx = (dy @ w_t.T) * gelu'(pre): the gradient through c_proj2 and the
    GELU before it, pre (M, K) the activation the forward kept; as grad_x."""
    a_map, b_map, m, k, n = _dx_operands(dy, w_t, dx)
    _bf16_2d("pre", pre, (m, k))
    _launch(kernels["gemm_dx_gelu"], a_map, b_map, dx, m, k, n, pre=pre)


def gelu_grad64(v):
    k = np.sqrt(2 / np.pi)
    th = np.tanh(k * (v + 0.044715 * v**3))
    return 0.5 * (1 + th) + 0.5 * v * (1 - th * th) * k * (1 + 3 * 0.044715 * v * v)


def grad_w(kernels, x, dy, dw_t) -> None:
    """dw_t = x.T @ dy: x (M, K), dy (M, N), dw_t (K, N), bf16 bit patterns,
    C-contiguous; K and N multiples of 8."""
    _bf16_2d("x", x)
    m, k = x.shape
    _bf16_2d("dy", dy)
    n = dy.shape[1]
    if dy.shape[0] != m or k % 8 or n % 8:
        raise ValueError(f"dy: expected ({m}, N) with K and N multiples of 8, got {tuple(dy.shape)}")
    _bf16_2d("dw_t", dw_t, (k, n))
    a_map = wgmma_gemm.tensor_map(int(x.gpudata), m, k, BK, 64)        # A = X^T, M-major: x's rows
    b_map = wgmma_gemm.tensor_map(int(dy.gpudata), m, n, BK, 64)       # B = dY, N-major
    _launch(kernels["gemm_dw"], a_map, b_map, dw_t, k, n, m)
# --8<-- [end:launch]


def check(tag, got16, a64, b64, exact):
    want = a64 @ b64
    got = from_bf16(got16).astype(np.float64)
    if exact:
        cb.report_check(cb.compare(tag, got, from_bf16(to_bf16(want.astype(np.float32))).astype(np.float64), k=0))
    else:
        length = a64.shape[1]
        # 2 u an addition: the tensor cores' fp32 sums may truncate (Fasi et al.)
        bound = 2 * length * U32 * (np.abs(a64) @ np.abs(b64)) * (1 + U_BF16) + U_BF16 * np.abs(want)
        cb.report_check(cb.compare(tag, got, want, k=1, scale=bound / U32))


def run_shape(kernels, m, k, n, rng):
    from pycuda import gpuarray

    out = {}
    for kind in ("whole numbers", "random"):
        draw = ((lambda s: rng.integers(-2, 3, s).astype(np.float32)) if kind == "whole numbers"
                else (lambda s: rng.standard_normal(s, dtype=np.float32)))
        x16, w16, dy16 = to_bf16(draw((m, k))), to_bf16(draw((k, n))), to_bf16(draw((m, n)))
        x, w_t, dy = (gpuarray.to_gpu(a) for a in (x16, w16, dy16))
        dx, dw = gpuarray.empty((m, k), np.uint16), gpuarray.empty((k, n), np.uint16)
        for arr in (dx, dw):
            arr.fill(np.uint16(0x7FC0))
        grad_x(kernels, dy, w_t, dx)
        grad_w(kernels, x, dy, dw)
        x64, w64, dy64 = (from_bf16(a).astype(np.float64) for a in (x16, w16, dy16))
        exact = kind == "whole numbers"
        check(f"dX {m}x{k}x{n} {kind}", dx.get(), dy64, w64.T, exact)
        check(f"dW^T {m}x{k}x{n} {kind}", dw.get(), x64.T, dy64, exact)
        if exact:                                # the fused GELU backward: exact sums, then gelu'
            pre16 = to_bf16(rng.standard_normal((m, k), dtype=np.float32))
            pre = gpuarray.to_gpu(pre16)
            dx.fill(np.uint16(0x7FC0))
            grad_x_gelu(kernels, dy, w_t, pre, dx)
            acc = dy64 @ w64.T
            gp = gelu_grad64(from_bf16(pre16).astype(np.float64))
            want = acc * gp
            bound = np.abs(acc) * (np.abs(gp) + 1) * 32 * U32 * (1 + U_BF16) + U_BF16 * np.abs(want)
            cb.report_check(cb.compare(f"dX through GELU {m}x{k}x{n}", from_bf16(dx.get()).astype(np.float64),
                                       want, k=1, scale=bound / U32))
        out = {"x": x, "w_t": w_t, "dy": dy, "dx": dx, "dw": dw}
    return out


def bench(kernels, seed):
    import torch

    rng = np.random.default_rng(seed)
    ceiling = tc_gemm.tensor_core_ceiling(None, seed, 100.0)
    fwd = wgmma_gemm.load_kernel(cb.init())
    for m, k, n in BENCH:
        g = run_shape(kernels, m, k, n, rng)
        t = {name: torch.from_numpy(from_bf16(a.get())).cuda().to(torch.bfloat16) for name, a in g.items()}
        flops = 2 * m * k * n
        evidence.benchmark(f"linear backward dX {m}x{k}x{n}", lambda: grad_x(kernels, g["dy"], g["w_t"], g["dx"]),
                           flops=flops, working_set_bytes=2 * (m * n + k * n + m * k), ceiling=ceiling,
                           baseline=("torch.matmul(dy, w_t.t())", lambda: torch.matmul(t["dy"], t["w_t"].t())))
        evidence.benchmark(f"linear backward dW {m}x{k}x{n}", lambda: grad_w(kernels, g["x"], g["dy"], g["dw"]),
                           flops=flops, working_set_bytes=2 * (m * n + m * k + k * n), ceiling=ceiling,
                           baseline=("torch.matmul(x.t(), dy)", lambda: torch.matmul(t["x"].t(), t["dy"])))
        if fwd is not None:                      # the one-layout kernel after a transposed copy
            w_rows = gpuarray_empty((n, k))
            tw = torch.empty((n, k), dtype=torch.bfloat16, device="cuda")

            def via_copy():
                import pycuda.driver as cuda
                tw.copy_(t["w_t"].t())
                cuda.memcpy_dtod(w_rows.gpudata, tw.data_ptr(), 2 * n * k)
                wgmma_gemm.wgmma_gemm(fwd, g["dy"], w_rows, g["dx"])
            via_copy()                               # the copy must have landed before the product read it
            same = np.array_equal(w_rows.get(), g["w_t"].get().T)
            cb.report_check(cb.expect(f"transposed copy {m}x{k}x{n}: w_t.T, element for element", same,
                                      "equal" if same else "differs: torch's copy and PyCUDA's were not ordered"))
            evidence.benchmark(f"linear backward dX via a transposed copy {m}x{k}x{n}", via_copy, flops=flops,
                               working_set_bytes=2 * (m * n + 2 * k * n + m * k), ceiling=ceiling)


def gpuarray_empty(shape):
    from pycuda import gpuarray
    return gpuarray.empty(shape, np.uint16)


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    cb.init()
    kernels = load_kernels()
    rng = np.random.default_rng(args.seed)
    for m, k, n in SHAPES:
        run_shape(kernels, m, k, n, rng)
    if args.bench and cb.torch_cuda() is not None:
        bench(kernels, args.seed)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
