"""Solution to exercise 3: the FP32 ladder and the tensor cores on one roofline.

At 4096 x 4096 x 4096 this listing times, in one run, the best rung of
each chapter (sgemm_double_buffer in FP32, tc_mma_pipelined in bf16) and
cuBLAS for each (SGEMM fp32 with TF32 off, and bf16), together with the
two ceilings chapter 10 measured: the copy bandwidth and the FP32 rate of
the FMA chains. For each product it works out the arithmetic intensity
(2 M N K FLOPs over the bytes of A, B and C, each moved once) and the
roofline's bound there.

Run:    python code/matmul_tc/ex3_two_roofs.py [--seed S] [--bench]
Checks: both kernels at 1000 x 1000 x 1000 (under compute-sanitizer
        130 x 67 x 45), and under --bench at 4096^3, element by element
        against float64 with their chapters' bounds.
Bench:  TFLOP/s of the four products, the copy bandwidth, the FMA chains'
        rate, each product's intensity, and its rate as a share of the
        FP32 roofline's bound at that intensity.
"""

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from cudabook.bf16 import to_bf16  # noqa: E402
from matmul_fp32 import sgemm  # noqa: E402
from matmul_tc import tc_gemm  # noqa: E402
from roofline.intensity_sweep import fp32_roof  # noqa: E402

SIDE = 4096
CHECK_SHAPE, SANITIZER_SHAPE = (1000, 1000, 1000), (130, 67, 45)
FP32_RUNG, TC_RUNG = "sgemm_double_buffer", "tc_mma_pipelined"


def check_both(fp32_kernels, tc_kernels, m: int, n: int, k: int, seed: int):
    """Both kernels at one shape, checked; returns the device arrays."""
    from pycuda import gpuarray

    a, b = sgemm.random_pair(m, n, k, np.random.default_rng(seed))
    ga, gb, gc = gpuarray.to_gpu(a), gpuarray.to_gpu(b), gpuarray.empty((m, n), np.float32)
    cb.poison(gc)
    sgemm.sgemm(fp32_kernels, FP32_RUNG, ga, gb, gc)
    ref, scale = sgemm.reference(a, b)
    cb.report_check(cb.compare(sgemm.label(FP32_RUNG, m, n, k), gc.get(), ref,
                               k=sgemm.bound_k(k), scale=scale))
    a16, b16 = to_bf16(a), to_bf16(b)
    ha, hb = gpuarray.to_gpu(a16), gpuarray.to_gpu(b16)
    cb.poison(gc)
    tc_gemm.tc_gemm(tc_kernels, TC_RUNG, ha, hb, gc)
    ref, scale = tc_gemm.reference(a16, b16)
    cb.report_check(cb.compare(tc_gemm.label(TC_RUNG, m, n, k), gc.get(), ref,
                               k=tc_gemm.bound_k(k), scale=scale))
    return a16, b16, (ga, gb, gc), (ha, hb)


# --8<-- [start:solution]
def roofs(gpu, fp32_kernels, tc_kernels, seed: int) -> dict:
    m = n = k = SIDE
    a16, b16, (ga, gb, gc), (ha, hb) = check_both(fp32_kernels, tc_kernels, m, n, k, seed)
    torch = cb.torch_cuda()
    copy_bw, fma = cb.ceiling(), fp32_roof(gpu)
    flops = 2 * m * n * k
    products = {   # name: (bytes of A, B and C, function)
        "sgemm_double_buffer (fp32)": (4 * (m * k + k * n + m * n),
                                       lambda: sgemm.sgemm(fp32_kernels, FP32_RUNG, ga, gb, gc)),
        "tc_mma_pipelined (bf16)": (2 * (m * k + k * n) + 4 * m * n,
                                    lambda: tc_gemm.tc_gemm(tc_kernels, TC_RUNG, ha, hb, gc)),
    }
    if torch is not None:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
        ta, tb = torch.from_numpy(ga.get()).cuda(), torch.from_numpy(gb.get()).cuda()
        tc = torch.empty((m, n), device="cuda", dtype=torch.float32)
        ua = torch.from_numpy(a16.view(np.int16)).cuda().view(torch.bfloat16)
        ub = torch.from_numpy(b16.view(np.int16)).cuda().view(torch.bfloat16)
        uc = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
        products["cuBLAS SGEMM fp32 (torch.matmul, TF32 off)"] = (
            4 * (m * k + k * n + m * n), lambda: torch.matmul(ta, tb, out=tc))
        products["cuBLAS bf16 (torch.matmul)"] = (
            2 * (m * k + k * n + m * n), lambda: torch.matmul(ua, ub, out=uc))
    print(f"copy {copy_bw / 1e9:,.0f} GB/s, FP32 FMA chains {fma / 1e12:.1f} TFLOP/s: "
          f"ridge point {fma / copy_bw:.1f} FLOP/B")
    print(f"{'product at 4096^3':44s} {'FLOP/B':>7s} {'TFLOP/s':>8s} {'FP32 roof':>10s} {'of roof':>8s}")
    facts = {"copy_gbs": copy_bw / 1e9, "fma_tflops": fma / 1e12, "ridge": fma / copy_bw}
    for i, (name, (nbytes, fn)) in enumerate(products.items()):
        t = cb.bench(fn, working_set_bytes=nbytes)
        rate, intensity = flops / (t.median_ms * 1e-3), flops / nbytes
        roof = min(fma, intensity * copy_bw)
        print(f"{name:44s} {intensity:7.0f} {rate / 1e12:8.1f} {roof / 1e12:10.1f} {100 * rate / roof:7.0f}%")
        key = ("fp32_ours", "bf16_ours", "fp32_cublas", "bf16_cublas")[i]
        facts.update({f"{key}_tflops": rate / 1e12, f"{key}_intensity": intensity,
                      f"{key}_of_fp32_roof": rate / roof})
    return facts
# --8<-- [end:solution]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    gpu = cb.init()
    fp32_kernels, tc_kernels = sgemm.load_kernels(), tc_gemm.load_kernels()
    if args.bench:
        cb.report_facts(**roofs(gpu, fp32_kernels, tc_kernels, args.seed))
    else:
        shape = SANITIZER_SHAPE if os.environ.get("CUDABOOK_SANITIZER") else CHECK_SHAPE
        check_both(fp32_kernels, tc_kernels, *shape, args.seed)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
