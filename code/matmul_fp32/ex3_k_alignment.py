"""Solution to exercise 3: what one column less costs the float4 rungs.

The float4 rungs (vec, warptile, double_buffer) load 16 bytes at a time
only where every row of A starts on a 16-byte boundary, K % 4 == 0, and
likewise every row of B, N % 4 == 0; otherwise they load that operand one
float at a time (sgemm.cu). This listing times them, 2d (which never uses
float4) and cuBLAS at 4096 x 4096 x 4096, at K = 4095 and at N = 4095:
the same work, give or take 0.02%, in the same run.

Run:    python code/matmul_fp32/ex3_k_alignment.py [--seed S] [--bench]
Checks: every rung against the float64 product with sgemm.py's bound at
        1024 x 1024 x 1023 and 1024 x 1023 x 1024 (under compute-sanitizer
        33 x 31 x 17 and 130 x 67 x 45), and under --bench at each timed
        shape.
Bench:  TFLOP/s (2 M N K) of 2d, vec, warptile, double_buffer and cuBLAS
        SGEMM fp32 (torch.matmul, TF32 off) at the three shapes; each
        rung's rate at K = 4095 and N = 4095 as a share of its own at 4096.
"""

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from matmul_fp32 import sgemm  # noqa: E402

CHECK_SHAPES = [(1024, 1024, 1023), (1024, 1023, 1024)]
SANITIZER_SHAPES = [(33, 31, 17), (130, 67, 45)]
BENCH_SHAPES = {"aligned": (4096, 4096, 4096), "K = 4095": (4096, 4096, 4095),
                "N = 4095": (4096, 4095, 4096)}
TIMED = ("sgemm_2d", "sgemm_vec", "sgemm_warptile", "sgemm_double_buffer")


# --8<-- [start:solution]
def rates(kernels, m: int, n: int, k: int, seed: int) -> dict:
    """Check every rung at one shape, then time TIMED and cuBLAS: TFLOP/s."""
    from pycuda import gpuarray

    a, b = sgemm.random_pair(m, n, k, np.random.default_rng(seed))
    a_gpu, b_gpu = gpuarray.to_gpu(a), gpuarray.to_gpu(b)
    c_gpu = gpuarray.empty((m, n), np.float32)
    sgemm.check_all(kernels, a, b, c_gpu, a_gpu, b_gpu)
    work, flops = 4 * (m * k + k * n + m * n), 2 * m * n * k
    out = {}
    for name in TIMED:
        t = cb.bench(lambda name=name: sgemm.sgemm(kernels, name, a_gpu, b_gpu, c_gpu),
                     working_set_bytes=work)
        out[sgemm.short(name)] = flops / (t.median_ms * 1e-3) / 1e12
    torch = cb.torch_cuda()
    if torch is not None:
        torch.backends.cuda.matmul.allow_tf32 = False
        ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        tc = torch.empty((m, n), device="cuda", dtype=torch.float32)
        t = cb.bench(lambda: torch.matmul(ta, tb, out=tc), working_set_bytes=work)
        out["cuBLAS"] = flops / (t.median_ms * 1e-3) / 1e12
    return out


def table(by_shape: dict) -> dict:
    """Print TFLOP/s per rung and shape, and each rate's share of the
    aligned one; return the shares and rates as facts."""
    shapes = list(by_shape)
    print(f"{'TFLOP/s':14s}" + "".join(f"{s:>12s}" for s in shapes) + "   share of aligned")
    facts = {}
    for rung in by_shape["aligned"]:
        row = [by_shape[s][rung] for s in shapes]
        shares = [v / row[0] for v in row[1:]]
        print(f"{rung:14s}" + "".join(f"{v:12.1f}" for v in row)
              + "   " + "  ".join(f"{100 * x:5.1f}%" for x in shares))
        key = rung.lower()
        facts.update({f"{key}_aligned_tflops": row[0], f"{key}_k4095_share": shares[0],
                      f"{key}_n4095_share": shares[1]})
    return facts
# --8<-- [end:solution]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    cb.init()
    kernels = sgemm.load_kernels()
    rng = np.random.default_rng(args.seed)
    if args.bench:
        by_shape = {label: rates(kernels, *shape, args.seed + i)
                    for i, (label, shape) in enumerate(BENCH_SHAPES.items())}
        cb.report_facts(**table(by_shape))
    else:
        for shape in SANITIZER_SHAPES if os.environ.get("CUDABOOK_SANITIZER") else CHECK_SHAPES:
            sgemm.check_shape(kernels, *shape, rng)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
