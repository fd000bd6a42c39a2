"""Solution to exercise 4: GELU with 16-byte loads, to close the gap to PyTorch.

The kernel of gelu_cpu_vs_gpu.cu, rewritten in the style of add_vectorized.cu
(Your first kernel, version 3): one float4 load and one float4 store per
four elements, a grid-stride loop, and a scalar tail. The arithmetic is the
same, so the answers agree to the last bit with the one-element kernel's.
gelu_four_scalar, the control, gives each thread four elements with 4-byte
loads and stores, so it launches as few blocks as gelu_vectorized: between
the one-element kernel and it only the block count changes, and between it
and gelu_vectorized only the load width.

Run:    python code/why_gpus/ex4_gelu_vectorized.py [--n N] [--seed S] [--bench]
Checks: y against gelu_cpu_vs_gpu.py's float64 GELU, every element within
        8 roundings of its terms (k=8, scale |x|), for both kernels; and
        gelu_four_scalar's y equal, bit for bit, to gelu_vectorized's.
Bench:  GB/s (8 bytes per element) of both kernels against the copy
        bandwidth and torch.nn.functional.gelu, on the same data as
        gelu_cpu_vs_gpu.py --bench, with the blocks each launches.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from why_gpus.gelu_cpu_vs_gpu import check_gelu, torch_gelu  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BLOCK = 256


def load_kernel(name: str = "gelu_vectorized"):
    return cb.compile(KERNEL_FILE).get_function(name).prepare("PPi")


# --8<-- [start:solution]
def gelu(kernel, x, y, block=BLOCK):
    """y = GELU(x). x, y: 1-D float32 GPUArrays of one size, 16-byte aligned."""
    cb.check_array("x", x, dtype=np.float32, ndim=1, on_device=True, alignment=16)
    n = cb.check_size("x.size", x.size)
    cb.check_array("y", y, dtype=np.float32, shape=(n,), on_device=True, alignment=16)
    threads = max(cb.ceil_div(n, 4), n % 4)   # a thread per float4, one per tail element
    kernel.prepared_call((cb.ceil_div(threads, block), 1, 1), (block, 1, 1),
                         x.gpudata, y.gpudata, np.int32(n))
# --8<-- [end:solution]


def gelu_four(kernel, x, y, block=BLOCK) -> int:
    """y = GELU(x) with gelu_four_scalar: four elements a thread, 4-byte
    accesses. x, y: 1-D float32 GPUArrays of one size. Returns the blocks."""
    cb.check_array("x", x, dtype=np.float32, ndim=1, on_device=True)
    n = cb.check_size("x.size", x.size)
    cb.check_array("y", y, dtype=np.float32, shape=(n,), on_device=True)
    blocks = cb.ceil_div(n, 4 * block)
    kernel.prepared_call((blocks, 1, 1), (block, 1, 1), x.gpudata, y.gpudata, np.int32(n))
    return blocks


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, n=1_000_003, bench_n=67_108_879)
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal(args.n, dtype=np.float32)

    cb.init()
    from pycuda import gpuarray
    x_gpu = gpuarray.to_gpu(x)
    y_gpu = gpuarray.empty_like(x_gpu)
    cb.poison(y_gpu)
    kernel, four = load_kernel(), load_kernel("gelu_four_scalar")
    gelu(kernel, x_gpu, y_gpu)
    y_vectorized = y_gpu.get()
    check_gelu("y = gelu(x)", y_vectorized, x)
    cb.poison(y_gpu)
    blocks = gelu_four(four, x_gpu, y_gpu)
    y_four = y_gpu.get()
    check_gelu("y = gelu(x), gelu_four_scalar", y_four, x)
    cb.report_check(cb.compare("gelu_four_scalar equals gelu_vectorized, bit for bit", y_four,
                               y_vectorized, k=0))
    del y_four, y_vectorized

    if args.bench:
        base = torch_gelu(cb.torch_cuda(), x)
        cb.benchmark("gelu_vectorized", lambda: gelu(kernel, x_gpu, y_gpu), bytes_moved=8 * args.n,
                     baseline=base)
        cb.benchmark("gelu_four_scalar", lambda: gelu_four(four, x_gpu, y_gpu), bytes_moved=8 * args.n,
                     baseline=base)
        cb.report_facts(blocks_four_elements=blocks, blocks_one_element=cb.ceil_div(args.n, BLOCK))
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
