"""Solution to exercise 2: waves of blocks, and why size matters.

tc_mma_pipelined gives each block of 128 threads a 128 x 128 tile of C.
How many blocks fit on an SM at once follows from its registers and
shared memory (chapter 4's rules); the grid then runs in waves of that
many blocks times the SMs, and a last wave that is only partly full
leaves SMs idle. This listing works out the blocks per SM, checks the
prediction against the CUDA driver's occupancy calculator, and times the
kernel and cuBLAS bf16 (torch.matmul) at square sizes from 1024 to 6144.

Run:    python code/matmul_tc/ex2_waves.py [--seed S] [--bench]
Checks: the predicted blocks per SM equal the driver's; at each size
        (under compute-sanitizer only 130 x 130 x 100), the product
        element by element against the float64 product of the bf16
        inputs, with tc_gemm.py's bound.
Bench:  at M = N = K = 1024, 2048, 3072, 4096, 5120 and 6144: blocks,
        waves (blocks / (blocks per SM x SMs)), how full the last wave
        is, TFLOP/s of tc_mma_pipelined and of cuBLAS bf16, and the share.
"""

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from cudabook.bf16 import to_bf16  # noqa: E402
from matmul_tc import tc_gemm  # noqa: E402
from threads_warps.occupancy_sweep import DriverOccupancy, predict, sm_limits  # noqa: E402

RUNG = "tc_mma_pipelined"
SIZES = (1024, 2048, 3072, 4096, 5120, 6144)
SANITIZER_SHAPE = (130, 130, 100)


def cubin(gpu) -> bytes:
    """tc_gemm.cu compiled as cb.compile compiles it, as cubin bytes."""
    from pycuda.compiler import compile as nvcc_compile

    path = tc_gemm.KERNEL_FILE.resolve()
    source = f'#line 1 "{path}"\n' + path.read_text()
    return nvcc_compile(source, options=list(cb.NVCC_FLAGS), arch=gpu.arch, no_extern_c=True,
                        include_dirs=[str(path.parent)])


# --8<-- [start:solution]
def blocks_per_sm(gpu, kernels) -> int:
    """Predict how many blocks of RUNG fit on an SM; check with the driver."""
    fn = kernels[RUNG]
    threads = tc_gemm.RUNGS[RUNG][0][0]
    sm = sm_limits(gpu)
    blocks, limiter = predict(sm, fn.num_regs, fn.shared_size_bytes, threads, 0)
    driver = DriverOccupancy(cubin(gpu), RUNG, 0)
    try:
        counted = driver.blocks_per_sm(threads, 0)
    finally:
        driver.close()
    print(f"{RUNG}: {fn.num_regs} registers a thread, {fn.shared_size_bytes:,} bytes of shared "
          f"memory a block: {blocks} blocks of {threads} threads per SM ({limiter} limit)")
    cb.report_check(cb.expect("blocks per SM: prediction = driver", blocks == counted,
                              f"predicted {blocks}, driver {counted}"))
    return blocks


def sweep(gpu, kernels, per_sm: int, seed: int) -> list[dict]:
    from pycuda import gpuarray

    torch = cb.torch_cuda()
    rows = []
    for side in SIZES:
        a, b = tc_gemm.random_pair(side, side, side, np.random.default_rng(seed + side))
        a16, b16 = to_bf16(a), to_bf16(b)
        a_gpu, b_gpu = gpuarray.to_gpu(a16), gpuarray.to_gpu(b16)
        c_gpu = gpuarray.empty((side, side), np.float32)
        cb.poison(c_gpu)
        tc_gemm.tc_gemm(kernels, RUNG, a_gpu, b_gpu, c_gpu)
        ref, scale = tc_gemm.reference(a16, b16)
        cb.report_check(cb.compare(tc_gemm.label(RUNG, side, side, side), c_gpu.get(), ref,
                                   k=tc_gemm.bound_k(side), scale=scale))
        work, flops = side * side * (2 + 2 + 4), 2 * side**3
        t = cb.bench(lambda: tc_gemm.tc_gemm(kernels, RUNG, a_gpu, b_gpu, c_gpu), working_set_bytes=work)
        blocks = cb.ceil_div(side, 128) ** 2
        waves = blocks / (per_sm * gpu.sm_count)
        row = {"side": side, "blocks": blocks, "waves": waves,
               "last_wave_full": waves - int(waves) if waves % 1 else 1.0,
               "tflops": flops / (t.median_ms * 1e-3) / 1e12}
        if torch is not None:
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
            ta = torch.from_numpy(a16.view(np.int16)).cuda().view(torch.bfloat16)
            tb = torch.from_numpy(b16.view(np.int16)).cuda().view(torch.bfloat16)
            tc = torch.empty((side, side), device="cuda", dtype=torch.bfloat16)
            tt = cb.bench(lambda: torch.matmul(ta, tb, out=tc), working_set_bytes=work)
            row["cublas_tflops"] = flops / (tt.median_ms * 1e-3) / 1e12
            row["of_cublas"] = row["tflops"] / row["cublas_tflops"]
        rows.append(row)
    return rows
# --8<-- [end:solution]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    gpu = cb.init()
    kernels = tc_gemm.load_kernels()
    per_sm = blocks_per_sm(gpu, kernels)
    if not args.bench:
        shape = SANITIZER_SHAPE if os.environ.get("CUDABOOK_SANITIZER") else (1000, 1000, 1000)
        tc_gemm.check_shape(kernels, *shape, np.random.default_rng(args.seed))
        cb.report_facts(blocks_per_sm=per_sm)
        return cb.finish()
    rows = sweep(gpu, kernels, per_sm, args.seed)
    print(f"{gpu.sm_count} SMs x {per_sm} blocks = {gpu.sm_count * per_sm} blocks per wave")
    print(f"{'size':>6s} {'blocks':>7s} {'waves':>6s} {'last wave':>10s} {'TFLOP/s':>8s} {'cuBLAS':>8s} {'share':>6s}")
    for r in rows:
        print(f"{r['side']:6d} {r['blocks']:7d} {r['waves']:6.2f} {100 * r['last_wave_full']:9.0f}% "
              f"{r['tflops']:8.1f} {r.get('cublas_tflops', float('nan')):8.1f} "
              f"{100 * r.get('of_cublas', float('nan')):5.1f}%")
    facts = {"blocks_per_sm": per_sm, "rows": rows}
    for r in rows:
        facts.update({f"s{r['side']}_{k}": v for k, v in r.items() if k != "side"})
    cb.report_facts(**facts)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
