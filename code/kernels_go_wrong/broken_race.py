"""BROKEN ON PURPOSE: a tree reduction with the barrier between steps missing.

The same program as fixed_race.py, with the kernel of broken_race.cu: at
each halving step a thread reads a partial sum that another thread wrote in
the step before, with no __syncthreads() in between. Run plainly, this
program may well print "ok": whether the reader comes after the writer
depends on how the warps happen to be scheduled, on this GPU, today. That
is the lesson: a race can pass every test and fail in production; racecheck
sees the unordered accesses themselves, whatever their timing.

Expect: compute-sanitizer --tool racecheck reports "Race reported between Write access" and a read of s[t] in block_sum.

Run:    compute-sanitizer --tool racecheck python code/kernels_go_wrong/broken_race.py --n 1027
        (plainly: python code/kernels_go_wrong/broken_race.py [--n N] [--seed S])
Checks: every block's sum against a float64 sum, with fixed_race.py's
        bound (k=8 + 1, scale sum|x_i|). It passes or fails by luck.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BLOCK = 256  # must match BLOCK in the .cu file


def reference(x):
    blocks = np.zeros(cb.ceil_div(x.size, BLOCK) * BLOCK, np.float32)
    blocks[:x.size] = x
    blocks = blocks.reshape(-1, BLOCK)
    return blocks.sum(axis=1, dtype=np.float64), np.abs(blocks).sum(axis=1, dtype=np.float64)


def check(sums, x):
    ref, abs_ref = reference(x)
    depth = int(np.log2(BLOCK))
    return cb.compare("sums = block_sum(x)", sums, ref, k=depth + 1, scale=abs_ref, n=x.size)


def load_kernel():
    return cb.compile(KERNEL_FILE).get_function("block_sum").prepare("PPi")


def block_sums(kernel, x, sums):
    cb.check_array("x", x, dtype=np.float32, ndim=1, on_device=True)
    n = cb.check_size("x.size", x.size)
    blocks = cb.ceil_div(n, BLOCK)
    cb.check_array("sums", sums, dtype=np.float32, shape=(blocks,), on_device=True)
    kernel.prepared_call((blocks, 1, 1), (BLOCK, 1, 1), x.gpudata, sums.gpudata, np.int32(n))


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, n=1027)
    rng = np.random.default_rng(args.seed)
    x = rng.uniform(-1, 1, args.n).astype(np.float32)

    cb.init()
    from pycuda import gpuarray
    x_gpu = gpuarray.to_gpu(x)
    sums_gpu = gpuarray.empty(cb.ceil_div(args.n, BLOCK), np.float32)
    cb.poison(sums_gpu)
    block_sums(load_kernel(), x_gpu, sums_gpu)
    cb.report_check(check(sums_gpu.get(), x))
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
