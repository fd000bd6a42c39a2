"""Solution to exercise 2: the ladder at M = 1, a matrix-vector product.

With one row in A, C = A @ B is a vector times a matrix: 2NK FLOPs for
4NK bytes of B, half a FLOP per byte, far left of the ridge point. The
product is memory-bound, and what matters is how fast a rung reads B.
Every rung runs here at 1 x 8192 x 8192, against the copy bandwidth and
cuBLAS (torch.matmul, TF32 off) in the same run.

Run:    python code/matmul_fp32/ex2_one_row.py [--seed S] [--bench]
Checks: every rung against the float64 product with sgemm.py's bound, at
        1 x 4097 x 1023 (under compute-sanitizer 1 x 130 x 45), and under
        --bench at 1 x 8192 x 8192.
Bench:  at 1 x 8192 x 8192: each rung's GB/s (A, B and C: 4 (K + KN + N)
        bytes) against the copy bandwidth and torch.matmul, TF32 off.
"""

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from matmul_fp32 import sgemm  # noqa: E402

CHECK_SHAPE, SANITIZER_SHAPE, BENCH_SHAPE = (1, 4097, 1023), (1, 130, 45), (1, 8192, 8192)


# --8<-- [start:solution]
def time_rungs(kernels, m: int, n: int, k: int, seed: int) -> dict:
    """Check, then time, every rung at M = 1 against the copy and cuBLAS."""
    from pycuda import gpuarray

    a, b = sgemm.random_pair(m, n, k, np.random.default_rng(seed))
    a_gpu, b_gpu = gpuarray.to_gpu(a), gpuarray.to_gpu(b)
    c_gpu = gpuarray.empty((m, n), np.float32)
    sgemm.check_all(kernels, a, b, c_gpu, a_gpu, b_gpu)
    torch = cb.torch_cuda()
    base = None
    if torch is not None:
        torch.backends.cuda.matmul.allow_tf32 = False
        ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        tc = torch.empty((m, n), device="cuda", dtype=torch.float32)
        base = ("torch.matmul", lambda: torch.matmul(ta, tb, out=tc))
    facts = {}
    for name in sgemm.RUNGS:
        r = cb.benchmark(sgemm.short(name), lambda name=name: sgemm.sgemm(kernels, name, a_gpu, b_gpu, c_gpu),
                         bytes_moved=4 * (k + k * n + n), baseline=base)
        facts[f"{sgemm.short(name)}_of_copy"] = r.fraction_of_ceiling
        if r.baseline is not None:
            facts[f"{sgemm.short(name)}_vs_cublas"] = r.baseline.ratio
            facts["cublas_of_copy"] = r.baseline.bytes_per_s / r.ceiling_bytes_per_s
    best = max(sgemm.RUNGS, key=lambda name: facts[f"{sgemm.short(name)}_of_copy"])
    facts["best"] = sgemm.short(best)
    print(f"fastest rung at M = 1: {facts['best']}")
    return facts
# --8<-- [end:solution]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    cb.init()
    kernels = sgemm.load_kernels()
    if args.bench:
        cb.report_facts(**time_rungs(kernels, *BENCH_SHAPE, args.seed))
    else:
        shape = SANITIZER_SHAPE if os.environ.get("CUDABOOK_SANITIZER") else CHECK_SHAPE
        sgemm.check_shape(kernels, *shape, np.random.default_rng(args.seed))
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
