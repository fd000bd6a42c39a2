"""Solution to exercise 1: predict the sectors per request for 8-byte loads,
then let Nsight Compute count them.

A warp of float2 loads asks for 32 x 8 = 256 bytes. Counted the chapter's
way, the sectors a request touches are the distinct 32-byte pieces its 32
addresses fall in: 8 for neighbouring float2s, 16 at a stride of 2, 32
(one per lane) from a stride of 4 on, and 9 when an offset of one float2
starts the warp 8 bytes into a sector.

Run:    python code/global_memory/ex1_float2_sectors.py [--n N] [--seed S] [--bench]
Checks: y = x[i * stride + offset] exactly (k = 0) for every configuration.
Bench:  at n = 8,388,611 float2s: useful GB/s (16 bytes per element) and,
        from Nsight Compute, sectors per request against the prediction
        (they must agree within 1%).
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BLOCK = 256
CONFIGS = [(1, 0), (2, 0), (4, 0), (1, 1), (1, 2), (1, 4)]   # (stride, offset) in float2s


# --8<-- [start:solution]
def predicted(stride: int, offset: int, n: int, size: int = 8) -> float:
    """Sectors per request for `size`-byte loads at element stride and
    offset, averaged over the warps of a launch of n threads."""
    def sectors(lanes: int) -> int:
        return len({(i * stride + offset) * size // 32 for i in range(lanes)})
    full, tail = divmod(n, 32)
    return (full * sectors(32) + (sectors(tail) if tail else 0)) / (full + (1 if tail else 0))
# --8<-- [end:solution]


def load_kernel():
    return cb.compile(KERNEL_FILE).get_function("copy_strided2").prepare("PPiii")


def copy(kernel, x, y, stride: int, offset: int) -> None:
    """y[i] = x[i * stride + offset]; x and y hold float2s as (m, 2) float32."""
    cb.check_array("x", x, dtype=np.float32, ndim=2, on_device=True, alignment=8)
    cb.check_array("y", y, dtype=np.float32, ndim=2, on_device=True, alignment=8)
    if x.shape[1] != 2 or y.shape[1] != 2:
        raise ValueError(f"x, y: expected (m, 2) arrays of float2, got {x.shape} and {y.shape}")
    n = cb.check_size("y.shape[0]", y.shape[0])
    cb.check_size("stride", stride)
    cb.check_size("offset", offset, low=0)
    if (n - 1) * stride + offset >= x.shape[0]:
        raise ValueError(f"x: needs {(n - 1) * stride + offset + 1:,} float2s, has {x.shape[0]:,}")
    kernel.prepared_call((cb.ceil_div(n, BLOCK), 1, 1), (BLOCK, 1, 1), x.gpudata, y.gpudata,
                         np.int32(n), np.int32(stride), np.int32(offset))


def setup(n: int, seed: int):
    from pycuda import gpuarray

    length = max((n - 1) * s + o + 1 for s, o in CONFIGS)
    # Uniform floats: a copy from the wrong element shows whatever the
    # values' distribution, and at the suite's largest size (4 x 2^27
    # float2s) they take a fraction of the time of normal ones (a quarter,
    # on the CPU this was written on).
    host = np.random.default_rng(seed).random((length, 2), dtype=np.float32)
    return host, gpuarray.to_gpu(host), gpuarray.empty((n, 2), np.float32)


def ncu_child(n: int, seed: int) -> int:
    cb.init()
    kernel = load_kernel()
    _, x, y = setup(n, seed)
    for stride, offset in CONFIGS:
        copy(kernel, x, y, stride, offset)
    import pycuda.driver as cuda
    cuda.Context.synchronize()
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) == 3 and argv[0] == "--ncu-child":
        return ncu_child(int(argv[1]), int(argv[2]))
    args = cb.parse_args(argv, __doc__, n=1_000_003, bench_n=8_388_611)
    cb.init()
    kernel = load_kernel()
    host, x, y = setup(args.n, args.seed)
    for stride, offset in CONFIGS:
        cb.poison(y)
        copy(kernel, x, y, stride, offset)
        ref = host[np.arange(args.n) * stride + offset].astype(np.float64)
        cb.report_check(cb.compare(f"float2, stride {stride}, offset {offset}", y.get(), ref, k=0, n=args.n))
    if args.bench:
        from cudabook import ncu

        n = args.n
        counted = ncu.profile_or_note([str(Path(__file__).resolve()), "--ncu-child", str(n), str(args.seed)],
                                      kernel="copy_strided2", metrics=ncu.SECTORS_PER_REQUEST)
        have = counted is not None and len(counted) == len(CONFIGS)
        if not have:
            counted = [None] * len(CONFIGS)
        print("stride offset  predicted  counted     GB/s")
        rows, worst = [], 0.0
        for (stride, offset), c in zip(CONFIGS, counted):
            t = cb.bench(lambda s=stride, o=offset: copy(kernel, x, y, s, o), working_set_bytes=16 * n)
            want = predicted(stride, offset, n)
            got = ncu.ratio(c, ncu.SECTORS, ncu.REQUESTS) if c else float("nan")
            worst = max(worst, abs(got - want) / want) if c else worst
            rows.append({"stride": stride, "offset": offset, "predicted": want, "counted": got,
                         "gbs": 16 * n / (t.median_ms * 1e6)})
            print(f"{stride:6d} {offset:6d} {want:10.2f} {got:8.2f} {rows[-1]['gbs']:8.0f}")
        if have:
            cb.report_check(cb.expect("counted sectors per request = predicted", worst <= 0.01,
                                      f"largest difference {100 * worst:.2f}%"))
        cb.report_facts(rows=rows)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
