"""Summing n floats with a warp shuffle and one atomicAdd per warp.

A grid-stride loop gives each thread a partial sum; __shfl_down_sync with
offsets 16, 8, 4, 2, 1 adds a warp's 32 partial sums in registers; lane 0 of
each warp adds the warp's total to one float in device memory with
atomicAdd. The whole sum stays on the GPU, as torch.sum's does, so the two
can be timed doing the same job. The order of the atomic additions changes
from run to run, so the last bits of the result may too.

Run:    python code/threads_warps/warp_sum.py [--n N] [--seed S] [--bench]
Checks: the sum of n uniform [0, 1) floats against NumPy's float64 sum.
        All inputs are positive, so nothing cancels and the error is rounding
        alone, along the longest chain of additions: a thread's own elements,
        5 shuffle steps, then one atomicAdd per warp, one after another. Each
        rounding is at most u = 2^-24 of a partial sum and, on random data,
        random in sign, so the error grows like sqrt(chain) * u: the bound is
        six times that (k = 6 sqrt(chain)). At the largest size that is about
        3e-5, while losing a single warp's share would cost about 1e-4.
Bench:  GB/s (4n bytes read) against the copy bandwidth and torch.sum.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BLOCK = 256              # a multiple of 32: every warp is full, as the 0xffffffff mask promises
BLOCKS_PER_SM = 8        # 8 x 256 = 2,048 threads: a full SM on an H200


def reference(x):
    return np.sum(x, dtype=np.float64)


def load_kernel():
    return cb.compile(KERNEL_FILE).get_function("sum_kernel").prepare("PPi")


# --8<-- [start:launch]
def total(kernel, x, out, sm_count):
    """out[0] = sum of x. x: 1-D float32 GPUArray; out: a float32 GPUArray of one element."""
    import pycuda.driver as cuda

    cb.check_array("x", x, dtype=np.float32, ndim=1, on_device=True)
    n = cb.check_size("x.size", x.size)
    cb.check_array("out", out, dtype=np.float32, shape=(1,), on_device=True)
    grid = min(cb.ceil_div(n, BLOCK), BLOCKS_PER_SM * sm_count)   # enough to fill every SM
    cuda.memset_d32(out.gpudata, 0, 1)                            # atomicAdd adds to 0.0f
    kernel.prepared_call((grid, 1, 1), (BLOCK, 1, 1), x.gpudata, out.gpudata, np.int32(n))
# --8<-- [end:launch]


def chain_length(n, sm_count):
    """The longest chain of float32 additions behind the sum (see Checks)."""
    grid = min(cb.ceil_div(n, BLOCK), BLOCKS_PER_SM * sm_count)
    threads = grid * BLOCK
    return cb.ceil_div(n, threads) + 5 + threads // 32


def torch_baseline(x):
    torch = cb.torch_cuda()
    if torch is None:
        return None
    tx = torch.from_numpy(x).cuda()
    return "torch.sum", lambda: torch.sum(tx)


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, n=1_000_003, bench_n=200_000_003)
    rng = np.random.default_rng(args.seed)
    x = rng.random(args.n, dtype=np.float32)

    gpu = cb.init()
    from pycuda import gpuarray
    x_gpu = gpuarray.to_gpu(x)
    out = gpuarray.empty(1, np.float32)
    cb.poison(out)
    kernel = load_kernel()
    total(kernel, x_gpu, out, gpu.sm_count)
    cb.report_check(cb.compare("sum(x)", out.get(), np.array([reference(x)]),
                               k=6 * np.sqrt(chain_length(args.n, gpu.sm_count)), n=args.n))

    if args.bench:
        cb.benchmark("warp_sum", lambda: total(kernel, x_gpu, out, gpu.sm_count), bytes_moved=4 * args.n,
                     baseline=torch_baseline(x))
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
