"""evidence.py on the GPU, before any listing depends on it (issue #45).

Four of the book's headline comparisons, each measured through
cudabook.evidence.measure as a re-recorded listing will measure it: the
typed entry (FLOP or byte rate against a named ceiling measured in this
run), ours and the baseline timed in alternation (the ratio's median,
p20 and p80 over the rounds), the kernels each side ran (torch.profiler),
and the GPU's state around it (NVML).

1. sgemm_double_buffer at 4096^3 against cuBLAS SGEMM (TF32 off), ceiling:
   the FMA chains of chapter 10 (roofline/intensity_sweep.fp32_roof).
2. flash_bf16's D = 128 kernel at B=8 H=16 S=4096 against SDPA as called,
   ceiling: cuBLAS bf16 8192^3 timed in this run (a measured tensor-core
   rate, not the datasheet's).
3. fusion's fused kernel (GPT-2 medium MLP) against torch.compile, default
   mode and max-autotune, and the eager chain.
4. softmax (the kernel softmax() picks) against torch.compile default and
   max-autotune, and torch.softmax.

Run:  python docs/assets/experiments/evidence_measure.py > evidence/measure_<gpu>.log
Nothing here writes a record; the log is the evidence.
"""
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "code"))
import cudabook as cb  # noqa: E402
from cudabook import evidence  # noqa: E402


def show(m):
    for line in m.lines():
        print(line, flush=True)
    print(flush=True)


def main() -> int:
    gpu = cb.init()
    print(subprocess.run(["nvidia-smi", "--query-gpu=name,clocks.max.sm,power.limit", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip(), flush=True)
    import torch
    import torch.nn.functional as F

    print(f"torch {torch.__version__}; {gpu.name}, {gpu.sm_count} SMs\n", flush=True)

    # 1. SGEMM against cuBLAS, ceiling the FMA chains.
    from matmul_fp32 import sgemm
    from pycuda import gpuarray
    from roofline.intensity_sweep import fp32_roof

    peak = fp32_roof(gpu)
    m = n = k = 4096
    rng = np.random.default_rng(0)
    a, b = sgemm.random_pair(m, n, k, rng)
    ag, bg, cg = gpuarray.to_gpu(a), gpuarray.to_gpu(b), gpuarray.empty((m, n), np.float32)
    kernels = sgemm.load_kernels()
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    tc = torch.empty((m, n), device="cuda")
    show(evidence.measure("sgemm_double_buffer 4096^3", lambda: sgemm.sgemm(kernels, "sgemm_double_buffer", ag, bg, cg),
                          flops=2 * m * n * k, working_set_bytes=4 * 3 * m * n,
                          ceiling=("FP32 FMA peak (chapter 10's chains, this run)", peak),
                          baseline=("cuBLAS SGEMM fp32", lambda: torch.matmul(ta, tb, out=tc)),
                          targets={"baseline": 0.80}))
    del ag, bg, cg, ta, tb, tc

    # 2. Flash attention against SDPA; ceiling cuBLAS bf16 at 8192^3.
    from attention import _ref, flash_bf16

    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    z = torch.empty_like(x)
    t = cb.bench(lambda: torch.matmul(x, y, out=z), working_set_bytes=3 * x.nbytes)
    tc_rate = 2 * 8192**3 / (t.median_ms * 1e-3)
    print(f"cuBLAS bf16 8192^3: {tc_rate / 1e12:.0f} TFLOP/s (the ceiling of case 2)\n", flush=True)
    del x, y, z
    fk = flash_bf16.load_kernels()
    bb, h, s, d = 8, 16, 4096, 128
    q16, k16, v16 = _ref.random_qkv(bb, h, s, d, 1, np.random.default_rng(0), bf16=True)
    qg, kg, vg = (gpuarray.to_gpu(v) for v in (q16, k16, v16))
    og = gpuarray.empty(q16.shape, np.uint16)
    tq, tk, tv = (torch.from_numpy(v.view(np.int16)).cuda().view(torch.bfloat16) for v in (q16, k16, v16))
    best = flash_bf16.variants_for(d)[-1]
    for name in flash_bf16.variants_for(d):
        print("variant:", name)
    for causal in (False, True):
        show(evidence.measure(f"{best} S={s} D={d}{' causal' if causal else ''}",
                              lambda c=causal: flash_bf16.attention(fk, best, qg, kg, vg, og, c),
                              flops=int(_ref.flops(bb, h, s, d, causal)), working_set_bytes=4 * q16.nbytes,
                              ceiling=("cuBLAS bf16 8192^3 (this run)", tc_rate),
                              baseline=("SDPA as called", lambda c=causal: F.scaled_dot_product_attention(tq, tk, tv, is_causal=c))))
    del qg, kg, vg, og, tq, tk, tv

    # 3. Fusion against torch.compile.
    from fusion import bias_gelu_residual as fu

    rows, cols = fu.BENCH_SHAPES["GPT-2 medium"]
    xx, bias, r = fu.random_inputs(rows, cols, np.random.default_rng(0))
    uk = fu.load_kernels()
    xg, bgp, rg = gpuarray.to_gpu(xx), gpuarray.to_gpu(bias), gpuarray.to_gpu(r)
    yg = gpuarray.empty_like(xg)

    def dev(v):
        return torch.from_numpy(v.view(np.int16)).cuda().view(torch.bfloat16)
    tx, tbias, tr = dev(xx), dev(bias), dev(r)

    def chain(a, b_, c):
        return F.gelu(a + b_, approximate="tanh") + c
    ceiling = cb.ceiling()
    nb = fu.FUSED_BYTES * rows * cols
    for mode in ("default", "max-autotune"):
        torch._dynamo.reset()
        t0 = time.perf_counter()
        comp = torch.compile(chain, mode=mode)
        comp(tx, tbias, tr)
        torch.cuda.synchronize()
        print(f"torch.compile {mode}: compiled in {time.perf_counter() - t0:.1f} s", flush=True)
        show(evidence.measure(f"fused {rows}x{cols}", lambda: fu.fused(uk, xg, bgp, rg, yg), bytes_moved=nb,
                              ceiling=("device-to-device copy", ceiling),
                              baseline=(f"torch.compile ({mode})", lambda: comp(tx, tbias, tr))))
    show(evidence.measure(f"fused {rows}x{cols}", lambda: fu.fused(uk, xg, bgp, rg, yg), bytes_moved=nb,
                          ceiling=("device-to-device copy", ceiling),
                          baseline=("torch eager chain", lambda: chain(tx, tbias, tr))))
    del xg, bgp, rg, yg, tx, tbias, tr

    # 4. Softmax against torch.compile.
    from softmax_norm import _rows, softmax as sm

    srows, scols = sm.BENCH_SHAPE
    sx, _ = sm.inputs(srows, scols, "bf16", np.random.default_rng(0))
    sk = sm.load_kernels()
    sxg = gpuarray.to_gpu(sx)
    syg = gpuarray.empty_like(sxg)
    stx = _rows.to_torch(torch, sx)
    kind = sm.pick(scols)

    def smax(v):
        return torch.softmax(v, dim=-1)
    for mode in ("default", "max-autotune"):
        torch._dynamo.reset()
        comp = torch.compile(smax, mode=mode)
        comp(stx)
        show(evidence.measure(f"softmax_{kind} bf16", lambda: sm.softmax(sk, sxg, syg, kind),
                              bytes_moved=2 * sx.nbytes, ceiling=("device-to-device copy", ceiling),
                              baseline=(f"torch.compile ({mode})", lambda: comp(stx))))
    show(evidence.measure(f"softmax_{kind} bf16", lambda: sm.softmax(sk, sxg, syg, kind),
                          bytes_moved=2 * sx.nbytes, ceiling=("device-to-device copy", ceiling),
                          baseline=("torch.softmax", lambda: smax(stx))))
    return 0


if __name__ == "__main__":
    sys.exit(cb.run(main))
