"""Solution to exercise 2: the half-precision roof, measured beside the FP32 one.

peak_flops.py's experiment in 16-bit floats: eight independent chains of
__hfma2 per thread, each instruction two fused multiply-adds on a pair of
halves (4 FLOPs). Timed in the same run as peak_flops.py's FP32 chains and
the copy bandwidth, it gives the FP16 roof, its ratio to the FP32 roof, and
the ridge point a half-precision kernel would have to pass to be
compute-bound.

Run:    python code/roofline/ex2_hfma2_roof.py [--seed S] [--bench]
Checks: each thread's result (the sum of its 16 halves, rounded to half)
        against the same chains in float64, from the same half-rounded
        starting values, within k = 1/(1 - a) + 2 unit roundoffs of half
        (a = 0.875), scale 16: each chain's roundings shrink by a at every
        later step, so a chain is off by at most u / (1 - a) (its values stay
        at most 1); 16 of them are added in float, and the sum is rounded to
        half once.
Bench:  FLOP/s of the half2 chains and of peak_flops.py's FP32 chains over
        four waves of blocks, their ratio, and the copy bandwidth.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from roofline.intensity_sweep import fp32_roof  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
CHAINS = 8                   # as in ex2_hfma2_roof.cu: 8 half2 chains, 16 halves
BLOCK = 256
A, B = 0.875, 0.125          # exact in half; the chains tend to 1
CHECK_ITERATIONS, BENCH_ITERATIONS = 16, 16_384


def load_kernel():
    return cb.compile(KERNEL_FILE).get_function("hfma2_chains").prepare("Piff")


# --8<-- [start:solution]
def hfma2_chains(kernel, out, iterations: int) -> None:
    """Each thread of out.size // 256 blocks runs CHAINS half2 chains of
    `iterations` __hfma2s and writes their sum, as a half, to out."""
    cb.check_array("out", out, dtype=np.float16, ndim=1, on_device=True)
    if out.size % BLOCK:
        raise ValueError(f"out.size: expected a multiple of {BLOCK} (whole blocks), got {out.size:,}")
    cb.check_size("iterations", iterations)
    kernel.prepared_call((out.size // BLOCK, 1, 1), (BLOCK, 1, 1), out.gpudata, np.int32(iterations),
                         np.float32(A), np.float32(B))


def half_rate(kernel, gpu) -> float:
    """FLOP/s of the half2 chains: 4 FLOPs per __hfma2."""
    from pycuda import gpuarray

    out = gpuarray.empty(4 * 8 * gpu.sm_count * BLOCK, np.float16)   # four waves of 8 blocks per SM
    t = cb.bench(lambda: hfma2_chains(kernel, out, BENCH_ITERATIONS), working_set_bytes=out.nbytes)
    return 4 * CHAINS * BENCH_ITERATIONS * out.size / (t.median_ms * 1e-3)
# --8<-- [end:solution]


def reference(iterations: int) -> np.ndarray:
    """One block's results: the chains in float64 from the kernel's half-rounded start."""
    t = np.arange(BLOCK)[:, None] + np.arange(2 * CHAINS)[None, :]    # low halves c, high halves c + 8
    v = (t.astype(np.float32) * np.float32(1e-3)).astype(np.float16).astype(np.float64)
    for _ in range(iterations):
        v = v * A + B
    return v.sum(axis=1)


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    gpu = cb.init()
    from pycuda import gpuarray

    kernel = load_kernel()
    out = gpuarray.empty(4 * BLOCK, np.float16)
    cb.poison(out)
    hfma2_chains(kernel, out, CHECK_ITERATIONS)
    ref = np.tile(reference(CHECK_ITERATIONS), 4)
    cb.report_check(cb.compare("hfma2 chains", out.get(), ref, k=1 / (1 - A) + 2, scale=2.0 * CHAINS))
    if args.bench:
        half, single, copy_bw = half_rate(kernel, gpu), fp32_roof(gpu), cb.ceiling()
        print(f"half2 chains: {half / 1e12:,.1f} TFLOP/s; FP32 chains: {single / 1e12:,.1f} TFLOP/s; "
              f"ratio {half / single:.2f}")
        print(f"copy {copy_bw / 1e9:,.0f} GB/s: ridge {single / copy_bw:.1f} FLOP/B in FP32, "
              f"{half / copy_bw:.1f} FLOP/B in FP16")
        cb.report_facts(fp16_tflops=half / 1e12, fp32_tflops=single / 1e12, ratio=half / single,
                        copy_gbs=copy_bw / 1e9, fp32_ridge=single / copy_bw, fp16_ridge=half / copy_bw)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
