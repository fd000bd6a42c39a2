"""Solution to exercise 1: fuse a bias add into the GELU, and predict the gain.

y = gelu(x + bias), bias one value per column, as a transformer's MLP
applies it after a matrix product. Unfused, as two calls, the sum
t = x + bias is written to memory by the first and read back by the second:
16 bytes per element (x in, t out, t in, y out) for the add and the GELU's
arithmetic (1 + 9 FLOPs, counting tanh as one). Fused, t stays in a
register: 8 bytes for the same FLOPs, twice the arithmetic intensity. Both
are far below the ridge point, so both are memory-bound, and the roofline
predicts the fused kernel twice as fast: time goes with bytes.

Run:    python code/roofline/ex1_bias_gelu.py [--seed S] [--bench]
Checks: y against gelu_cpu_vs_gpu.py's float64 GELU of x + bias, every
        element within k = 10 roundings, scale |x + bias|: 8 for the GELU, as
        in "Why GPUs", and 2 for the rounding of x + bias, which the GELU's
        slope (at most 1.13) carries into y.
Bench:  at 16,384 x 4,096: the fused kernel's GB/s (8 bytes per element)
        against the copy bandwidth and against torch.add then GELU
        (torch.ops.aten.gelu.out, tanh form), both into buffers allocated once,
        timed by the same 8 bytes per element: the ratio of the rates is the
        ratio of the times. The prediction: 2, if both run at the copy
        bandwidth; so also the bandwidth the two calls really reached, 16
        bytes per element.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from why_gpus.gelu_cpu_vs_gpu import reference as gelu_float64  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BLOCK = 256
SHAPE, BENCH_SHAPE = (1031, 772), (16_384, 4_096)   # rows, cols (cols a multiple of 4)
FLOPS_PER_ELEMENT = 10                              # the add, and GELU's 8 + tanh counted as 1
FUSED_BYTES, UNFUSED_BYTES = 8, 16                  # per element: x in, y out; and t out, t in too


def load_kernel():
    return cb.compile(KERNEL_FILE).get_function("bias_gelu").prepare("PPPii")


# --8<-- [start:solution]
def bias_gelu(kernel, x, bias, y) -> None:
    """y = gelu(x + bias) in one pass. x, y: (rows, cols) float32 GPUArrays,
    bias: (cols,), cols a multiple of 4, all 16-byte aligned (float4s)."""
    cb.check_array("x", x, dtype=np.float32, ndim=2, on_device=True, alignment=16)
    rows, cols = x.shape
    cb.check_size("rows", rows)
    cb.check_size("cols", cols)
    if cols % 4:
        raise ValueError(f"x: rows must be a multiple of 4 floats long (float4s), got {cols} columns")
    cb.check_size("x.size", x.size)
    cb.check_array("bias", bias, dtype=np.float32, shape=(cols,), on_device=True, alignment=16)
    cb.check_array("y", y, dtype=np.float32, shape=(rows, cols), on_device=True, alignment=16)
    kernel.prepared_call((cb.ceil_div(x.size // 4, BLOCK), 1, 1), (BLOCK, 1, 1),
                         x.gpudata, bias.gpudata, y.gpudata, np.int32(rows), np.int32(cols))


def intensities() -> dict:
    """FLOPs per byte moved, counted from the algorithm, fused and unfused."""
    return {"fused_flops_per_byte": FLOPS_PER_ELEMENT / FUSED_BYTES,
            "unfused_flops_per_byte": FLOPS_PER_ELEMENT / UNFUSED_BYTES,
            "predicted_speedup": UNFUSED_BYTES / FUSED_BYTES}     # both memory-bound: time ~ bytes
# --8<-- [end:solution]


def torch_unfused(x, bias):
    """The two calls a PyTorch user makes, each into a buffer allocated once."""
    torch = cb.torch_cuda()
    if torch is None:
        return None
    tx, tb = torch.from_numpy(x).cuda(), torch.from_numpy(bias).cuda()
    tt, ty = torch.empty_like(tx), torch.empty_like(tx)

    def run():
        torch.add(tx, tb, out=tt)
        torch.ops.aten.gelu.out(tt, approximate="tanh", out=ty)
    return "torch.add + gelu", run


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    rows, cols = BENCH_SHAPE if args.bench else SHAPE
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    bias = rng.standard_normal(cols, dtype=np.float32)

    cb.init()
    from pycuda import gpuarray
    x_gpu, bias_gpu = gpuarray.to_gpu(x), gpuarray.to_gpu(bias)
    y_gpu = gpuarray.empty_like(x_gpu)
    cb.poison(y_gpu)
    kernel = load_kernel()
    bias_gelu(kernel, x_gpu, bias_gpu, y_gpu)
    t = x.astype(np.float64) + bias.astype(np.float64)
    cb.report_check(cb.compare("y = gelu(x + bias)", y_gpu.get(), gelu_float64(t), k=10, scale=np.abs(t)))
    del t

    facts = intensities()
    print(f"FLOPs per byte: fused {facts['fused_flops_per_byte']:.3f}, unfused "
          f"{facts['unfused_flops_per_byte']:.3f}; predicted speed-up {facts['predicted_speedup']:.0f}")
    if args.bench:
        b = cb.benchmark("bias_gelu fused", lambda: bias_gelu(kernel, x_gpu, bias_gpu, y_gpu),
                         bytes_moved=FUSED_BYTES * x.size, baseline=torch_unfused(x, bias))
        if b.baseline is not None:
            unfused = UNFUSED_BYTES * x.size / (b.baseline.timing.median_ms * 1e-3)   # bytes it really moved
            print(f"  {b.baseline.name} moved {UNFUSED_BYTES} bytes per element: {unfused / 1e9:,.1f} GB/s "
                  f"= {100 * unfused / b.ceiling_bytes_per_s:.1f}% of copy")
            facts.update(measured_speedup=b.baseline.ratio, fused_of_copy=b.fraction_of_ceiling,
                         unfused_of_copy=unfused / b.ceiling_bytes_per_s)
    cb.report_facts(**facts)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
