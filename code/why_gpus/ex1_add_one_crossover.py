"""Solution to exercise 1: where is the crossover for y = x + 1?

The same sweep as gelu_cpu_vs_gpu.py (NumPy on one core, PyTorch on one
thread and on all logical CPUs but one, the GPU kernel alone, the GPU
including both copies from pageable and from pinned host arrays), for the
cheapest elementwise function there is. The CPU does one addition per
element, into an array allocated once (np.add(x, 1, out=y)), while the GPU
with copies still moves 8 bytes per element over the link. Any CPU can add
faster than PCIe can carry the operands, so with the copies counted the GPU
should never win; with the data already on the GPU it should win easily.

Run:    python code/why_gpus/ex1_add_one_crossover.py [--n N] [--seed S] [--bench]
Checks: y from the GPU and from every CPU version against x + 1 in float64,
        every element within one rounding (k=1).
Bench:  the sweep, and from which size (if any) the GPU, with copies and
        kernel alone, beats each CPU version.
"""

import sys
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from why_gpus.gelu_cpu_vs_gpu import SWEEP, cpu_versions, sweep, sweep_facts, torch_threads  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BLOCK = 256


def load_kernel():
    return cb.compile(KERNEL_FILE).get_function("add_one").prepare("PPi")


def add_one_gpu(kernel, x, y, block=BLOCK):
    """y = x + 1 on the GPU. x, y: 1-D float32 GPUArrays of one size."""
    cb.check_array("x", x, dtype=np.float32, ndim=1, on_device=True)
    n = cb.check_size("x.size", x.size)
    cb.check_array("y", y, dtype=np.float32, shape=(n,), on_device=True)
    kernel.prepared_call((cb.ceil_div(n, block), 1, 1), (block, 1, 1), x.gpudata, y.gpudata, np.int32(n))


# --8<-- [start:solution]
def add_one_numpy(x, out, tmp):
    np.add(x, np.float32(1), out=out)         # into y, allocated once: no page faults


def add_one_torch_cpu(torch, x, out):
    torch.add(x, 1.0, out=out)
# --8<-- [end:solution]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, n=1_000_003, bench_n=1_000_003)
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal(args.n, dtype=np.float32)

    cb.init()
    from pycuda import gpuarray
    torch = cb.torch_cuda()
    x_gpu = gpuarray.to_gpu(x)
    y_gpu = gpuarray.empty_like(x_gpu)
    cb.poison(y_gpu)
    kernel = load_kernel()
    add_one_gpu(kernel, x_gpu, y_gpu)
    ref = np.add(x, 1.0, dtype=np.float64)
    cb.report_check(cb.compare("y = x + 1, GPU", y_gpu.get(), ref))
    cpu = cpu_versions(torch, add_one_numpy, add_one_torch_cpu)
    for key, (label, prepare, threads) in cpu.items():
        y = np.full_like(x, np.nan)
        with torch_threads(torch, threads):
            prepare(x, y)()
        cb.report_check(cb.compare(f"y = x + 1, {label}", y, ref))

    if args.bench:
        print(f"CPU: {cb.host_cpu()}")
        rows = sweep(SWEEP, partial(add_one_gpu, kernel), cpu, rng, torch)
        cb.report_facts(**sweep_facts(rows, cpu), cpu=cb.host_cpu())
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
