"""The memory staircase as bandwidth: read a buffer again and again.

Every thread of a full GPU reads its share of a buffer, 16 bytes at a time,
and then reads the same share again, pass after pass. A buffer small
enough for the caches is served by them after the first pass, so the
bandwidth measured is theirs; a buffer larger than the L2 comes from HBM
on every pass. Sweeping the buffer's size draws the staircase, twice:
read_sum may use the SMs' L1 caches, read_sum_l2 (__ldcg) only the L2.

Run:    python code/caches/read_staircase.py [--seed S] [--bench]
Checks: for both kernels, the total of the warps' partial sums equals
        passes x the sum of the buffer's uint32 values, modulo 2^32,
        computed on the host (exact, whatever the order); every warp of the
        grid wrote its partial (the buffer is poisoned first).
Bench:  buffers from 1 MiB to 4 GiB, each read for about 2 GB in all, by
        both kernels: GB/s against the device-to-device copy of the run.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BLOCK = 256
CHECK_SIZES = [(1 << 10) + 16, 1 << 20, 64 << 20]          # bytes, multiples of 16
SWEEP = [s << 20 for s in (1, 4, 8, 16, 24, 32, 48, 56, 64, 80, 128, 512)] + [4 << 30]
KERNELS = ("read_sum", "read_sum_l2")
READ_PER_POINT = 2 << 30                                    # bytes read per measurement


def load_kernels() -> dict:
    module = cb.compile(KERNEL_FILE)
    return {name: module.get_function(name).prepare("PqiP") for name in KERNELS}


# --8<-- [start:launch]
def grid(n4: int, sm_count: int) -> int:
    """Blocks for n4 16-byte pieces: one full wave at most (8 blocks an SM)."""
    return min(8 * sm_count, cb.ceil_div(n4, BLOCK))


def read_sum(kernel, x, passes: int, partials, sm_count: int) -> None:
    """partials[w] = warp w's share of the sum of x's uint32s, read `passes`
    times, modulo 2^32. x: 1-D uint32 GPUArray, a multiple of 4 long,
    16-byte aligned; partials: uint32, one per warp of the grid at least."""
    cb.check_array("x", x, dtype=np.uint32, ndim=1, on_device=True, alignment=16)
    if x.size % 4:
        raise ValueError(f"x: size must be a multiple of 4 (16-byte loads), got {x.size:,}")
    cb.check_size("passes", passes)
    n4 = x.size // 4
    blocks = grid(n4, sm_count)
    cb.check_array("partials", partials, dtype=np.uint32, ndim=1, on_device=True)
    if partials.size < blocks * BLOCK // 32:
        raise ValueError(f"partials: expected at least {blocks * BLOCK // 32:,} elements (one per warp), "
                         f"got {partials.size:,}")
    kernel.prepared_call((blocks, 1, 1), (BLOCK, 1, 1), x.gpudata, np.int64(n4), np.int32(passes),
                         partials.gpudata)


def total(partials, n4: int, sm_count: int) -> int:
    """The sum of the grid's per-warp partials, modulo 2^32 (on the host)."""
    warps = grid(n4, sm_count) * BLOCK // 32
    return int(partials.get()[:warps].sum(dtype=np.uint64)) % 2**32
# --8<-- [end:launch]


def check(kernels, nbytes: int, passes: int, seed: int, sm_count: int) -> None:
    from pycuda import gpuarray

    host = np.random.default_rng(seed).integers(0, 2**32, nbytes // 4, dtype=np.uint32)
    want = (passes * int(host.sum(dtype=np.uint64))) % 2**32
    x = gpuarray.to_gpu(host)
    for name, kernel in kernels.items():
        partials = gpuarray.empty(8 * sm_count * BLOCK // 32, np.uint32)
        cb.poison(partials)                                 # a warp that writes nothing shows
        read_sum(kernel, x, passes, partials, sm_count)
        got = total(partials, x.size // 4, sm_count)
        cb.report_check(cb.expect(f"{name}: {nbytes:,} bytes x {passes}", got == want,
                                  f"GPU {got}, host {want}"))


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    gpu = cb.init()
    kernels = load_kernels()
    for k, nbytes in enumerate(CHECK_SIZES):
        check(kernels, nbytes, 3, args.seed + k, gpu.sm_count)
    if args.bench:
        from pycuda import gpuarray

        rows = []
        for nbytes in SWEEP:
            x = gpuarray.to_gpu(np.random.default_rng(args.seed).integers(0, 2**32, nbytes // 4, dtype=np.uint32))
            partials = gpuarray.empty(8 * gpu.sm_count * BLOCK // 32, np.uint32)
            passes = max(1, READ_PER_POINT // nbytes)
            row = {"bytes": nbytes, "passes": passes}
            for name, kernel in kernels.items():
                t = cb.bench(lambda k=kernel, x=x, p=passes: read_sum(k, x, p, partials, gpu.sm_count),
                             working_set_bytes=passes * nbytes)
                row[f"{name}_ms"], row[f"{name}_gbs"] = t.median_ms, passes * nbytes / (t.median_ms * 1e6)
            rows.append(row)
            del x
        copy = cb.ceiling()
        print(f"L2: {gpu.l2_bytes / 2**20:.0f} MiB; copy {copy / 1e9:,.0f} GB/s")
        print("buffer        passes   L1+L2 GB/s  x copy   L2-only GB/s  x copy")
        for r in rows:
            size = f"{r['bytes'] >> 20:,} MiB"
            a, b = r["read_sum_gbs"], r["read_sum_l2_gbs"]
            print(f"{size:>10}  {r['passes']:8,d}  {a:11,.0f}  {a * 1e9 / copy:6.2f}"
                  f"  {b:13,.0f}  {b * 1e9 / copy:6.2f}")
        cb.report_facts(sweep=rows, l2_bytes=gpu.l2_bytes, copy_gbs=copy / 1e9)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
