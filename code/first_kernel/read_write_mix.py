"""Reads, writes and the copy: why the add can beat cuMemcpyDtoD.

Version 3's add reads two bytes for each byte it writes and passed 100% of
the device-to-device copy, which reads one for each it writes. The chapter
puts that down to memory serving a read-heavy mix faster. This listing
tests it with three kernels that differ only in their mix, all launched as
version 3 is (one float4 a thread, a grid that covers the data): copy4 (the
copy's mix, one read a write), add4 (two reads a write) and read4 (reads
only). copy4 against cuMemcpyDtoD, timed as its baseline, tells whether a
plain kernel moves an even mix as fast as the driver's copy does.

Run:    python code/first_kernel/read_write_mix.py [--seed S] [--bench]
Checks: at n = 1,000,004 floats (2^28 under --bench): every element of
        copy4's output equals its input, and of add4's a + b (exact: the
        inputs are whole numbers, and so are their sums);
        read4's per-warp partials add up (in float64) to the float64 sum of
        the input exactly (whole numbers up to 2, at most 128 a warp: every
        partial is exact in float32), and every warp wrote one (the buffer
        is poisoned first).
Bench:  at n = 2^28 (1 GiB a buffer), GB/s (bytes read + written; read4's
        partials, 1/128 of its reads, are not counted) of each kernel
        against the copy bandwidth of the same run; copy4 also against
        cuMemcpyDtoD on the same buffers.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BLOCK = 256
KERNELS = {"copy4": "PPq", "add4": "PPPq", "read4": "PPq"}
CHECK_N, BENCH_N = 1_000_004, 1 << 28       # floats, multiples of 4


def load_kernels() -> dict:
    module = cb.compile(KERNEL_FILE)
    return {name: module.get_function(name).prepare(sig) for name, sig in KERNELS.items()}


# --8<-- [start:launch]
def launch(kernels: dict, name: str, *arrays) -> None:
    """Run kernel `name` over arrays[0]'s float4s, one a thread: copy4(a, c),
    add4(a, b, c), read4(a, partials). Float32 GPUArrays, 16-byte aligned;
    a's size a multiple of 4; c (and b) a's size; partials one per warp."""
    if name not in kernels:
        raise ValueError(f"name: expected one of {sorted(kernels)}, got {name!r}")
    a = arrays[0]
    cb.check_array("a", a, dtype=np.float32, ndim=1, on_device=True, alignment=16)
    n = cb.check_size("a.size", a.size)
    if n % 4:
        raise ValueError(f"a.size: must be a multiple of 4 (float4s, no tail), got {n:,}")
    grid = cb.ceil_div(n // 4, BLOCK)
    if name == "read4":
        want = grid * BLOCK // 32
        cb.check_array("partials", arrays[1], dtype=np.float32, shape=(want,), on_device=True)
    else:
        for label, x in zip(("b", "c") if name == "add4" else ("c",), arrays[1:]):
            cb.check_array(label, x, dtype=np.float32, shape=(n,), on_device=True, alignment=16)
    kernels[name].prepared_call((grid, 1, 1), (BLOCK, 1, 1), *(x.gpudata for x in arrays), np.int64(n // 4))
# --8<-- [end:launch]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    n = BENCH_N if args.bench else CHECK_N
    rng = np.random.default_rng(args.seed)
    a = rng.integers(-2, 3, n, dtype=np.int8).astype(np.float32)   # whole numbers: exact sums
    b = rng.integers(-2, 3, n, dtype=np.int8).astype(np.float32)

    cb.init()
    import pycuda.driver as cuda
    from pycuda import gpuarray
    kernels = load_kernels()
    a_gpu, b_gpu = gpuarray.to_gpu(a), gpuarray.to_gpu(b)
    c_gpu = gpuarray.empty_like(a_gpu)
    partials = gpuarray.empty(cb.ceil_div(n // 4, BLOCK) * BLOCK // 32, np.float32)

    cb.poison(c_gpu)
    launch(kernels, "copy4", a_gpu, c_gpu)
    cb.report_check(cb.compare("copy4: c = a", c_gpu.get(), a, k=0))
    cb.poison(c_gpu)
    launch(kernels, "add4", a_gpu, b_gpu, c_gpu)
    cb.report_check(cb.compare("add4: c = a + b", c_gpu.get(), a.astype(np.float64) + b, k=0))
    cb.poison(partials)
    launch(kernels, "read4", a_gpu, partials)
    got = partials.get().astype(np.float64)
    cb.report_check(cb.compare("read4: the warps' partials add up to the sum of a", np.array([got.sum()]),
                               np.array([np.sum(a, dtype=np.float64)]), k=0, n=n))

    if args.bench:
        nbytes = a.nbytes
        copy_driver = ("cuMemcpyDtoD", lambda: cuda.memcpy_dtod(c_gpu.gpudata, a_gpu.gpudata, nbytes))
        cb.benchmark("copy4", lambda: launch(kernels, "copy4", a_gpu, c_gpu), bytes_moved=2 * nbytes,
                     baseline=copy_driver)
        cb.benchmark("add4", lambda: launch(kernels, "add4", a_gpu, b_gpu, c_gpu), bytes_moved=3 * nbytes)
        cb.benchmark("read4", lambda: launch(kernels, "read4", a_gpu, partials), bytes_moved=nbytes)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
