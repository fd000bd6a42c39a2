"""Solution to exercise 1: argmax in one pass, with atomics, and the same
answer on every run.

Each thread scans its share of x (float4 loads, one wave of blocks, as
sum_ladder.py's sum_vectorized does) for the largest key: the value's
bits, made to order as the floats do, in the high 32 bits, and the index,
inverted, in the low 32. A shuffle tree finds each warp's largest key, one
warp the block's, and one atomicMax per block the grid's. Keys compare
exactly, and a maximum does not depend on the order it meets them in, so,
unlike sum_atomic's sum, the answer cannot change from run to run.

Run:    python code/reductions/ex1_argmax.py [--n N] [--seed S] [--bench]
Checks: on whole numbers in [-1000, 1000) stored as float32 (so the
        maximum occurs many times, and the first must win), the index
        equals np.argmax and the value x[index], exactly (k = 0); again
        with a single larger value planted in the last element (past the
        last whole float4 when n % 4 > 0); five runs give one key. The
        inputs are finite: NaN is not handled.
Bench:  at n = 2^28, GB/s (4n bytes read) against the copy bandwidth and
        torch.argmax on the same data.
"""

import os
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from reductions.sum_ladder import BLOCK, SANITIZER_BLOCKS_N, one_wave  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
RUNS = 5                     # launches compared for determinism


def load_kernel():
    found = re.search(r"#define BLOCK (\d+)", KERNEL_FILE.read_text())
    if found is None or int(found.group(1)) != BLOCK:
        raise RuntimeError(f"{KERNEL_FILE.name} must #define BLOCK {BLOCK}, as one_wave assumes")
    return cb.compile(KERNEL_FILE).get_function("argmax_keys").prepare("PPi")


# --8<-- [start:solution]
def argmax(kernel, x, best, wave: int) -> None:
    """best[0] = the key of x's largest element (the first of equals).
    x: 1-D float32 GPUArray, 16-byte aligned; best: one uint64 on the GPU;
    wave: how many blocks fit on the GPU at once."""
    import pycuda.driver as cuda

    cb.check_array("x", x, dtype=np.float32, ndim=1, on_device=True, alignment=16)
    n = cb.check_size("x.size", x.size)
    cb.check_array("best", best, dtype=np.uint64, shape=(1,), on_device=True)
    cuda.memset_d32(best.gpudata, 0, 2)               # key 0 is below every element's key
    grid = min(max(cb.ceil_div(n // 4, BLOCK), 1), wave)
    kernel.prepared_call((grid, 1, 1), (BLOCK, 1, 1), x.gpudata, best.gpudata, np.int32(n))


def decode(key: int) -> tuple[np.float32, int]:
    """(value, index) from a key: the kernel's packing, undone."""
    bits, low = key >> 32, key & 0xFFFFFFFF
    bits = bits & 0x7FFFFFFF if bits & 0x80000000 else ~bits & 0xFFFFFFFF
    return np.array([bits], np.uint32).view(np.float32)[0], 0xFFFFFFFF - low
# --8<-- [end:solution]


def check(name: str, kernel, x, x_gpu, best, wave: int) -> None:
    argmax(kernel, x_gpu, best, wave)
    value, index = decode(int(best.get()[0]))
    want = int(np.argmax(x))                          # the first position of the maximum
    cb.report_check(cb.expect(f"{name}: index = np.argmax(x)", index == want,
                              f"got {index:,}, np.argmax gives {want:,}", n=x.size))
    cb.report_check(cb.compare(f"{name}: value = x[np.argmax(x)]", np.array([value]),
                               np.array([x[want]]), k=0, n=x.size))


def torch_baseline(x):
    torch = cb.torch_cuda()
    if torch is None:
        return None
    tx = torch.from_numpy(x).cuda()
    return "torch.argmax", lambda: torch.argmax(tx)


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, n=1_000_003, bench_n=2**28)
    gpu = cb.init()
    from pycuda import gpuarray

    kernel = load_kernel()
    wave = one_wave(gpu, kernel)
    best = gpuarray.empty(1, np.uint64)
    sizes = [args.n]
    if os.environ.get("CUDABOOK_SANITIZER") and args.n < SANITIZER_BLOCKS_N:
        sizes.insert(0, SANITIZER_BLOCKS_N)           # many blocks, not only the suite's one
    for i, n in enumerate(sizes):
        rng = np.random.default_rng(args.seed + i)
        x = rng.integers(-1000, 1000, n, dtype=np.int32).astype(np.float32)
        x_gpu = gpuarray.to_gpu(x)
        check("ties", kernel, x, x_gpu, best, wave)
        x[-1] = 1000.0                                # larger than every other element
        x_gpu.set(x)
        check("last element", kernel, x, x_gpu, best, wave)

    keys = set()
    for _ in range(RUNS):
        argmax(kernel, x_gpu, best, wave)
        keys.add(int(best.get()[0]))
    cb.report_check(cb.expect(f"{RUNS} runs give one answer", len(keys) == 1,
                              f"{len(keys)} distinct key(s) in {RUNS} runs", n=x.size))
    cb.report_facts(distinct=len(keys), blocks=min(max(cb.ceil_div(x.size // 4, BLOCK), 1), wave))

    if args.bench:
        cb.benchmark("argmax_keys", lambda: argmax(kernel, x_gpu, best, wave), bytes_moved=4 * x.size,
                     baseline=torch_baseline(x))
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
