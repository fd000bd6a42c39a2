"""Solution to exercise 1: a 1 x 1 convolution is a matrix product.

With a 1 x 1 filter, stride 1 and no padding, the patch of output pixel m
is input pixel m's C channels, and in NHWC those are row m of X seen as an
(N H W) x C matrix. So the implicit GEMM's A tile is a tile of X itself,
and conv_implicit should compute exactly what chapter 11's
sgemm_double_buffer computes on X @ W: the same tiles, the same order of
fused multiply-adds, the same bits. This listing checks that, and times
the two on the same data: whatever the convolution's gather costs over a
plain product shows up as the difference.

Run:    python code/conv/ex1_one_by_one.py [--seed S] [--bench]
Checks: conv_implicit against the float64 convolution (conv2d.py's
        bound), and sgemm_double_buffer on the same arrays against
        conv_implicit, bit for bit (k = 0), at N=2, 13 x 11, C=64, K=72
        (under compute-sanitizer N=1, 5 x 7, C=8, K=12), and under --bench
        at each layer timed.
Bench:  conv2d.py's two 1 x 1 layers (squeeze 256 -> 64, expand 64 -> 256,
        N=32, 56 x 56): ms of each kernel and their ratio.
"""

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from conv import conv2d  # noqa: E402
from matmul_fp32 import sgemm  # noqa: E402

CHECK_LAYER = (2, 13, 11, 64, 72, 1, 1, 1, 0)
SANITIZER_LAYER = (1, 5, 7, 8, 12, 1, 1, 1, 0)
BENCH_KEYS = ("1x1_squeeze", "1x1_expand")


# --8<-- [start:solution]
def as_matrices(layer: conv2d.Layer):
    """X as (N H W) x C, W as C x K, Y as (N H W) x K: views, no copies."""
    return (layer.x_gpu.reshape(layer.m, layer.kg), layer.w_gpu.reshape(layer.kg, layer.k),
            layer.y_gpu.reshape(layer.m, layer.k))


def same_bits(kernels, layer: conv2d.Layer) -> None:
    """The convolution against float64, then the product against the
    convolution, exactly."""
    from pycuda import gpuarray

    layer.check(kernels, rungs=("implicit",))
    conv = layer.y_gpu.get().reshape(layer.m, layer.k)
    a, b, _ = as_matrices(layer)
    c = gpuarray.empty((layer.m, layer.k), np.float32)
    cb.poison(c)
    sgemm.sgemm(kernels["sgemm"], "sgemm_double_buffer", a, b, c)
    cb.report_check(cb.compare(f"sgemm == conv, {layer.m} x {layer.k} x {layer.kg}",
                               c.get(), conv, k=0))


def time_both(kernels, key: str, seed: int, budget_ms: float) -> dict:
    layer = conv2d.Layer.random(conv2d.BENCH_LAYERS[key], np.random.default_rng(seed))
    same_bits(kernels, layer)
    a, b, c = as_matrices(layer)
    ws = 4 * (layer.x.size + layer.w.size + layer.m * layer.k)
    t_conv = cb.bench(lambda: layer.run(kernels, "implicit"), working_set_bytes=ws,
                      budget_ms=budget_ms)
    t_gemm = cb.bench(lambda: sgemm.sgemm(kernels["sgemm"], "sgemm_double_buffer", a, b, c),
                      working_set_bytes=ws, budget_ms=budget_ms)
    ratio = t_conv.median_ms / t_gemm.median_ms
    print(f"{key}: conv_implicit {t_conv.median_ms:.3f} ms, sgemm_double_buffer "
          f"{t_gemm.median_ms:.3f} ms: the convolution takes {ratio:.2f}x the product's time")
    return {f"conv_{key}_ms": t_conv.median_ms, f"gemm_{key}_ms": t_gemm.median_ms,
            f"conv_over_gemm_{key}": ratio}
# --8<-- [end:solution]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    cb.init()
    kernels = conv2d.load_kernels()
    rng = np.random.default_rng(args.seed)
    layer = SANITIZER_LAYER if os.environ.get("CUDABOOK_SANITIZER") else CHECK_LAYER
    same_bits(kernels, conv2d.Layer.random(layer, rng))
    if args.bench:
        facts = {}
        for key in BENCH_KEYS:
            facts.update(time_both(kernels, key, args.seed, args.budget_ms))
        cb.report_facts(**facts)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
