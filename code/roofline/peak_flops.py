"""The arithmetic ceiling, measured: FP32 FMAs per second, and the matrix
libraries' rates beside it.

Every thread of a full GPU runs eight independent chains of fused
multiply-adds, v = v * a + b, on values in registers, and writes one
number at the end: almost no memory traffic, so the time is the time of
the arithmetic. Counting 2 floating-point operations per FMA gives the
FP32 rate this GPU really reaches, the roofline's flat roof. Beside it, the
rates of the calls a user would make for the heaviest arithmetic: a large
matrix product through cuBLAS (torch.matmul), in FP32 with TF32 off, and
in bf16 on the tensor cores.

Run:    python code/roofline/peak_flops.py [--seed S] [--bench]
Checks: each thread's result against the same chains in float64, within
        k = 1/(1 - a) + 16 unit roundoffs, scaled by the 8 chains (every
        value stays at most 1): with a < 1 each rounding error shrinks as
        the chain goes on, so a chain's total stays below u / (1 - a); the
        8 chains are then added.
Bench:  FP32 FLOP/s of the FMA chains over several waves of blocks; TFLOP/s
        of torch.matmul at 8192 x 8192 x 8192 in fp32 (TF32 off) and bf16.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
CHAINS = 8                   # as in peak_flops.cu
BLOCK = 256
A, B = np.float32(0.999), np.float32(0.001)
CHECK_ITERATIONS, BENCH_ITERATIONS = 1000, 16_384
MATMUL = 8192


def load_kernel():
    return cb.compile(KERNEL_FILE).get_function("fma_chains").prepare("Piff")


# --8<-- [start:launch]
def fma_chains(kernel, out, iterations: int, a=A, b=B) -> None:
    """Each thread of out.size // 256 blocks runs CHAINS chains of
    `iterations` FMAs and writes their sum to its element of out."""
    cb.check_array("out", out, dtype=np.float32, ndim=1, on_device=True)
    if out.size % BLOCK:
        raise ValueError(f"out.size: expected a multiple of {BLOCK} (whole blocks), got {out.size:,}")
    cb.check_size("iterations", iterations)
    kernel.prepared_call((out.size // BLOCK, 1, 1), (BLOCK, 1, 1), out.gpudata, np.int32(iterations),
                         np.float32(a), np.float32(b))
# --8<-- [end:launch]


def reference(iterations: int) -> np.ndarray:
    """One block's results, the chains run in float64."""
    t = np.arange(BLOCK)[:, None] + np.arange(CHAINS)[None, :]
    v = (t.astype(np.float32) * np.float32(1e-3)).astype(np.float64)
    for _ in range(iterations):
        v = v * float(A) + float(B)
    return v.sum(axis=1)


def matmul_rates(torch) -> dict:
    """TFLOP/s of torch.matmul at MATMUL^3 in fp32 (TF32 off) and bf16."""
    rates = {}
    flops = 2 * MATMUL**3
    torch.backends.cuda.matmul.allow_tf32 = False
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        x = torch.randn(MATMUL, MATMUL, device="cuda", dtype=dtype)
        y = torch.randn(MATMUL, MATMUL, device="cuda", dtype=dtype)
        z = torch.empty(MATMUL, MATMUL, device="cuda", dtype=dtype)
        t = cb.bench(lambda x=x, y=y, z=z: torch.matmul(x, y, out=z), working_set_bytes=3 * x.nbytes)
        rates[name] = flops / (t.median_ms * 1e-3)
    return rates


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    gpu = cb.init()
    from pycuda import gpuarray

    kernel = load_kernel()
    out = gpuarray.empty(4 * BLOCK, np.float32)
    cb.poison(out)
    fma_chains(kernel, out, CHECK_ITERATIONS)
    ref = np.tile(reference(CHECK_ITERATIONS), 4)
    k = 1 / (1 - float(A)) + 16
    cb.report_check(cb.compare("fma chains", out.get(), ref, k=k, scale=float(CHAINS)))
    if args.bench:
        blocks = 4 * 8 * gpu.sm_count                      # four waves of 8 blocks per SM
        big = gpuarray.empty(blocks * BLOCK, np.float32)
        t = cb.bench(lambda: fma_chains(kernel, big, BENCH_ITERATIONS), working_set_bytes=big.nbytes)
        flops = 2 * CHAINS * BENCH_ITERATIONS * big.size
        rate = flops / (t.median_ms * 1e-3)
        print(f"FMA chains: {t.median_ms:.3f} ms, {rate / 1e12:,.1f} TFLOP/s FP32 "
              f"({blocks:,} blocks of {BLOCK})")
        facts = {"fp32_fma_flops": rate, "fma_ms": t.median_ms, "blocks": blocks}
        torch = cb.torch_cuda()
        if torch is not None:
            rates = matmul_rates(torch)
            for name, r in rates.items():
                print(f"torch.matmul {MATMUL}^3 {name}: {r / 1e12:,.1f} TFLOP/s")
            facts.update({f"matmul_{name}_flops": r for name, r in rates.items()})
        cb.report_facts(**facts)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
