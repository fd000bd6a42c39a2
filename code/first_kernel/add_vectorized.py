"""Vector add with 16-byte (float4) loads and stores, and a correct tail.

Changed since add_grid_stride.py: the kernel moves four floats per load and
store, and the wrapper checks that every array starts on a 16-byte boundary,
which float4 accesses need. The launch goes back to a grid that covers the
data (one float4 per thread), so each thread's loop runs once; the loop stays,
so the kernel is correct for any grid. Sizes that are not a multiple of 4
exercise the scalar tail (the default n = 1,000,003 leaves a tail of 3).

Run:    python code/first_kernel/add_vectorized.py [--n N] [--seed S] [--bench]
Checks: c against a float64 NumPy sum; relative error <= 1e-6; again on
        version 2's grid (a few blocks an SM, each thread looping).
Bench:  GB/s against the device-to-device copy bandwidth and torch.add.
        Target on an H200: >= 90% of copy bandwidth and >= 95% of torch.add.
        Also the same kernel on version 2's grid (add_vectorized_fixed_grid),
        so the load width and the grid are measured one at a time.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BLOCK = 256


def reference(a, b):
    """The answer in float64: NumPy widens each float32 pair as it adds them,
    in one pass, with no float64 copies of a and b."""
    return np.add(a, b, dtype=np.float64)


# --8<-- [start:load]
def load_kernel():
    """Compile the .cu file for this GPU and declare the kernel's parameters:
    three pointers (P) and a 32-bit int (i), in the order the kernel takes them."""
    return cb.compile(KERNEL_FILE).get_function("add_vectorized").prepare("PPPi")
# --8<-- [end:load]


# --8<-- [start:launch]
def add(kernel, a, b, out, block=BLOCK, grid=None):
    """out = a + b on the GPU. a, b, out: 1-D float32 GPUArrays of one size,
    each starting on a 16-byte boundary. grid: blocks to launch (default:
    enough to cover the data); any grid is correct."""
    cb.check_array("a", a, dtype=np.float32, ndim=1, on_device=True, alignment=16)
    n = cb.check_size("a.size", a.size)
    cb.check_array("b", b, dtype=np.float32, shape=(n,), on_device=True, alignment=16)
    cb.check_array("out", out, dtype=np.float32, shape=(n,), on_device=True, alignment=16)
    threads = max(n // 4, n % 4)  # one per float4, and at least one per tail element
    if grid is None:
        grid = cb.ceil_div(threads, block)  # (1)!
    cb.check_size("grid", grid)
    kernel.prepared_call((grid, 1, 1), (block, 1, 1),
                         a.gpudata, b.gpudata, out.gpudata, np.int32(n))
# --8<-- [end:launch]


def version2_grid(n: int, sm_count: int) -> int:
    """The grid add_grid_stride.py launches for n elements: 8 blocks of
    BLOCK threads an SM at most (a full SM), fewer if n needs fewer."""
    return min(cb.ceil_div(n, BLOCK), 8 * sm_count)


def torch_baseline(a, b):
    torch = cb.torch_cuda()
    if torch is None:
        return None
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    tc = torch.empty_like(ta)
    return "torch.add", lambda: torch.add(ta, tb, out=tc)


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, n=1_000_003, bench_n=200_000_003)
    rng = np.random.default_rng(args.seed)
    a = rng.standard_normal(args.n, dtype=np.float32)
    b = rng.standard_normal(args.n, dtype=np.float32)

    gpu = cb.init()
    from pycuda import gpuarray
    a_gpu, b_gpu = gpuarray.to_gpu(a), gpuarray.to_gpu(b)
    c_gpu = gpuarray.empty_like(a_gpu)
    cb.poison(c_gpu)

    kernel = load_kernel()
    add(kernel, a_gpu, b_gpu, c_gpu)
    want = reference(a, b)
    cb.report_check(cb.compare("c = a + b", c_gpu.get(), want))
    fixed = version2_grid(args.n, gpu.sm_count)
    cb.poison(c_gpu)
    add(kernel, a_gpu, b_gpu, c_gpu, grid=fixed)
    cb.report_check(cb.compare(f"c = a + b on version 2's grid ({fixed:,} blocks)", c_gpu.get(), want))
    del want

    if args.bench:
        base = torch_baseline(a, b)
        cb.benchmark("add_vectorized", lambda: add(kernel, a_gpu, b_gpu, c_gpu),
                     bytes_moved=3 * a.nbytes, baseline=base,
                     targets={"copy": 0.90, "baseline": 0.95})
        cb.benchmark("add_vectorized_fixed_grid", lambda: add(kernel, a_gpu, b_gpu, c_gpu, grid=fixed),
                     bytes_moved=3 * a.nbytes, baseline=base)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
