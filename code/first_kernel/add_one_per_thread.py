"""Vector add, one element per thread: the whole host/device workflow.

Shows the five steps of every CUDA program: make the data on the host,
allocate device memory and copy the inputs over, choose a grid of blocks of
threads and launch the kernel, copy the result back, and check it.

Run:    python code/first_kernel/add_one_per_thread.py [--n N] [--seed S] [--bench]
Checks: c against a float64 NumPy sum; relative error <= 1e-6 (one float32
        rounding is at most 6e-8). Exits 1 on a wrong answer, 77 if no GPU.
Bench:  GB/s (2 reads + 1 write of 4 bytes per element) against the
        device-to-device copy bandwidth and torch.add, in the same run.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BLOCK = 256  # threads per block: a multiple of the 32-thread warp


# --8<-- [start:reference]
def reference(a, b):
    """The answer, computed on the CPU in float64. NumPy widens each
    float32 pair to float64 as it adds them, in one pass over the arrays."""
    return np.add(a, b, dtype=np.float64)
# --8<-- [end:reference]


# --8<-- [start:load]
def load_kernel():
    """Compile the .cu file for this GPU and declare the kernel's parameters:
    three pointers (P) and a 32-bit int (i), in the order the kernel takes them."""
    return cb.compile(KERNEL_FILE).get_function("add_one_per_thread").prepare("PPPi")
# --8<-- [end:load]


# --8<-- [start:launch]
def add(kernel, a, b, out, block=BLOCK):
    """out = a + b on the GPU. a, b, out: 1-D float32 GPUArrays of one size."""
    cb.check_array("a", a, dtype=np.float32, ndim=1, on_device=True)
    n = cb.check_size("a.size", a.size)
    cb.check_array("b", b, dtype=np.float32, shape=(n,), on_device=True)
    cb.check_array("out", out, dtype=np.float32, shape=(n,), on_device=True)
    grid = cb.ceil_div(n, block)  # enough blocks to give every element a thread
    kernel.prepared_call((grid, 1, 1), (block, 1, 1),
                         a.gpudata, b.gpudata, out.gpudata, np.int32(n))
# --8<-- [end:launch]


def torch_baseline(a, b):
    """What a user would write instead: torch.add on the same data."""
    torch = cb.torch_cuda()
    if torch is None:
        return None
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    tc = torch.empty_like(ta)
    return "torch.add", lambda: torch.add(ta, tb, out=tc)


# --8<-- [start:main]
def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, n=1_000_003, bench_n=200_000_003)

    # 1. Make the inputs on the host (CPU memory).
    rng = np.random.default_rng(args.seed)
    a = rng.standard_normal(args.n, dtype=np.float32)
    b = rng.standard_normal(args.n, dtype=np.float32)

    # 2. Allocate device memory and copy the inputs over.
    cb.init()
    from pycuda import gpuarray
    a_gpu = gpuarray.to_gpu(a)              # cuMemAlloc + cuMemcpyHtoD
    b_gpu = gpuarray.to_gpu(b)
    c_gpu = gpuarray.empty_like(a_gpu)      # cuMemAlloc: contents undefined
    cb.poison(c_gpu)                        # NaN everywhere, so no element passes by luck

    # 3. Compile the kernel, 4. choose the grid and launch it.
    kernel = load_kernel()
    add(kernel, a_gpu, b_gpu, c_gpu)

    # 5. Copy the result back (this waits for the kernel) and check it.
    c = c_gpu.get()                         # cuMemcpyDtoH
    cb.report_check(cb.compare("c = a + b", c, reference(a, b)))

    if args.bench:
        cb.benchmark("add_one_per_thread", lambda: add(kernel, a_gpu, b_gpu, c_gpu),
                     bytes_moved=3 * a.nbytes, baseline=torch_baseline(a, b))
    return cb.finish()
# --8<-- [end:main]


if __name__ == "__main__":
    sys.exit(cb.run(main))
