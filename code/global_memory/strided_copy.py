"""Copy with a stride or an offset: how a warp's addresses set the speed.

Each thread copies one float, y[i] = x[i * stride + offset]. With stride 1
and offset 0, a warp's 32 reads are 128 consecutive bytes: four 32-byte
sectors, every byte fetched used. A stride of s spreads the same 32 reads
over s times as many bytes, up to a sector of its own for every lane from
s = 8 on; an offset that is not a multiple of 8 floats makes the 128 bytes
straddle one sector more. The writes are coalesced in every case.

Run:    python code/global_memory/strided_copy.py [--n N] [--seed S] [--bench]
Checks: y = x[i * stride + offset] exactly (k = 0) for strides 1, 2, 5 and
        32 (offset 0) and offsets 1 and 3 (stride 1); under --bench, at its
        n, also every configuration the sweep times (strides 3, 4, 6, 8, 12
        and 16, offsets 2, 4, 7, 8, 16 and 32). x holds a hash of its index
        and the seed, so the host recomputes the expected values.
Bench:  at n = 67,108,867: the useful bandwidth (8 bytes per element, one
        read and one write) for strides 1 to 32 and offsets 1 to 32,
        against the copy bandwidth, the ceiling the sector count predicts,
        and torch copying the same strided view; and, from Nsight Compute,
        the sectors each warp's load touched (checked against the count its
        addresses predict), the sectors the L1 asked the L2 for, and the
        bytes read from device memory per element.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BLOCK = 256
CHECKED = [(1, 0), (2, 0), (5, 0), (32, 0), (1, 1), (1, 3)]          # (stride, offset)
SWEEP = [(s, 0) for s in (1, 2, 3, 4, 6, 8, 12, 16, 32)] + [(1, o) for o in (1, 2, 4, 7, 8, 16, 32)]
CHECKED_BENCH = CHECKED + [c for c in SWEEP if c not in CHECKED]     # --bench checks all it times


def hashed(j, seed: int) -> np.ndarray:
    """The values fill_hash writes at indices j, computed on the host."""
    h = (np.asarray(j, dtype=np.uint64) & 0xFFFFFFFF).astype(np.uint32)
    h = (h * np.uint32(2654435761)) ^ np.uint32(seed & 0xFFFFFFFF)
    h ^= h >> np.uint32(15)
    return (h & np.uint32(0xFFFFFF)).astype(np.float64)


def sectors_per_request(stride: int, offset: int, n: int) -> float:
    """The 32-byte sectors one warp's float loads touch, averaged over the
    warps of the launch (the last may be partial); x starts on a sector."""
    def sectors(lanes: int) -> int:
        return len({(i * stride + offset) * 4 // 32 for i in range(lanes)})
    full, tail = divmod(n, 32)
    return (full * sectors(32) + (sectors(tail) if tail else 0)) / (full + (1 if tail else 0))


def predicted_fraction(sectors: float) -> float:
    """The share of copy bandwidth a warp's copy can reach if every sector
    it touches costs as much as a useful one: 128 bytes read and 128
    written are useful, 32 * sectors read and 128 written are moved."""
    return 256 / (32 * sectors + 128)


def load_kernels():
    module = cb.compile(KERNEL_FILE)
    return module.get_function("fill_hash").prepare("PqI"), module.get_function("copy_strided").prepare("PPiii")


def fill(kernel, x, seed: int) -> None:
    """x[j] = hash(j, seed) on the GPU."""
    cb.check_array("x", x, dtype=np.float32, ndim=1, on_device=True)
    kernel.prepared_call((1024, 1, 1), (BLOCK, 1, 1), x.gpudata, np.int64(x.size), np.uint32(seed & 0xFFFFFFFF))


# --8<-- [start:launch]
def copy_strided(kernel, x, y, stride: int, offset: int) -> None:
    """y[i] = x[i * stride + offset] for every i < y.size."""
    cb.check_array("x", x, dtype=np.float32, ndim=1, on_device=True)
    cb.check_array("y", y, dtype=np.float32, ndim=1, on_device=True)
    n = cb.check_size("y.size", y.size)
    cb.check_size("stride", stride)
    cb.check_size("offset", offset, low=0)
    if (n - 1) * stride + offset >= x.size:
        raise ValueError(f"x: needs at least {(n - 1) * stride + offset + 1:,} elements "
                         f"for n={n:,}, stride={stride}, offset={offset}; got {x.size:,}")
    kernel.prepared_call((cb.ceil_div(n, BLOCK), 1, 1), (BLOCK, 1, 1), x.gpudata, y.gpudata,
                         np.int32(n), np.int32(stride), np.int32(offset))
# --8<-- [end:launch]


def allocate(n: int, configs):
    """x long enough for every (stride, offset), and y; a clear error when
    the GPU has too little memory for this n."""
    import pycuda.driver as cuda
    from pycuda import gpuarray

    length = max((n - 1) * s + o + 1 for s, o in configs)
    need = 4 * (length + n)
    free, _ = cuda.mem_get_info()
    if need > 0.9 * free:
        raise ValueError(f"--n {n:,} needs {need / 1e9:.1f} GB of GPU memory for its strided "
                         f"input, {free / 1e9:.1f} GB is free: use a smaller --n")
    return gpuarray.empty(length, np.float32), gpuarray.empty(n, np.float32)


def check_all(kernels, x, y, seed: int, configs=CHECKED) -> None:
    """y = x[i * stride + offset], element by element, for each (stride,
    offset) of configs."""
    fill_k, copy_k = kernels
    n = y.size
    fill(fill_k, x, seed)
    for stride, offset in configs:
        cb.poison(y)
        copy_strided(copy_k, x, y, stride, offset)
        ref = hashed(np.arange(n, dtype=np.int64) * stride + offset, seed)
        cb.report_check(cb.compare(f"stride {stride}, offset {offset}", y.get(), ref, k=0))


def ncu_child(n: int, seed: int) -> int:
    """Under Nsight Compute: launch each configuration of SWEEP once."""
    cb.init()
    kernels = load_kernels()
    x, y = allocate(n, SWEEP)
    fill(kernels[0], x, seed)
    for stride, offset in SWEEP:
        copy_strided(kernels[1], x, y, stride, offset)
    import pycuda.driver as cuda
    cuda.Context.synchronize()
    return 0


def torch_strided(n: int, stride: int, offset: int, length: int):
    """The call a PyTorch user would make: copy a strided view."""
    torch = cb.torch_cuda()
    if torch is None:
        return None
    tx = torch.rand(length, device="cuda")
    ty = torch.empty(n, device="cuda")
    view = tx.as_strided((n,), (stride,), offset)
    return lambda: ty.copy_(view)


COUNTERS = ("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
            "lts__t_sectors_srcunit_tex_op_read.sum", "dram__bytes_read.sum")


def measure(kernels, x, y, seed: int) -> list[dict]:
    from cudabook import ncu

    n = y.size
    if int(x.gpudata) % 256:
        raise RuntimeError("x does not start on a 256-byte boundary; the sector predictions assume it")
    copy_k = kernels[1]
    rows = []
    for stride, offset in SWEEP:
        t = cb.bench(lambda s=stride, o=offset: copy_strided(copy_k, x, y, s, o), working_set_bytes=8 * n)
        row = {"stride": stride, "offset": offset, "ms": t.median_ms, "gbs": 8 * n / (t.median_ms * 1e6)}
        base = torch_strided(n, stride, offset, x.size)
        if base is not None:
            tb = cb.bench(base, working_set_bytes=8 * n)
            row["torch_ms"], row["torch_gbs"] = tb.median_ms, 8 * n / (tb.median_ms * 1e6)
        rows.append(row)
    for row in rows:
        row["predicted_sectors"] = sectors_per_request(row["stride"], row["offset"], n)
        row["predicted_fraction"] = predicted_fraction(row["predicted_sectors"])
    counted = ncu.profile_or_note([str(Path(__file__).resolve()), "--ncu-child", str(n), str(seed)],
                                  kernel="copy_strided", metrics=COUNTERS)
    if counted is None:
        return rows
    if len(counted) != len(rows):
        raise RuntimeError(f"ncu profiled {len(counted)} launches, expected {len(rows)}")
    for row, c in zip(rows, counted):
        row["requests"] = c[ncu.REQUESTS]
        row["sectors_per_request"] = ncu.ratio(c, ncu.SECTORS, ncu.REQUESTS)
        row["l2_sectors_per_request"] = ncu.ratio(c, ncu.L2_READ_SECTORS, ncu.REQUESTS)
        row["dram_read_bytes_per_element"] = c[ncu.DRAM_READ] / n
    return rows


def report(rows: list[dict], copy_bw: float, n: int) -> None:
    print("stride offset      ms   GB/s  % copy  predicted  torch GB/s")
    for r in rows:
        print(f"{r['stride']:6d} {r['offset']:6d} {r['ms']:7.3f} {r['gbs']:6.0f} {100 * r['gbs'] * 1e9 / copy_bw:6.1f}%"
              f" {100 * r['predicted_fraction']:9.1f}%  {r.get('torch_gbs', float('nan')):10.0f}")
    counted = all("sectors_per_request" in r for r in rows)
    if counted:
        print("stride offset  sectors/request (predicted)  L2 sectors/req  DRAM B/element")
        for r in rows:
            print(f"{r['stride']:6d} {r['offset']:6d}  {r['sectors_per_request']:15.2f} ({r['predicted_sectors']:5.2f})"
                  f"  {r['l2_sectors_per_request']:14.2f}  {r['dram_read_bytes_per_element']:14.1f}")
        warps = -(-n // 32)                            # warps with at least one thread in range
        launched = cb.ceil_div(n, BLOCK) * BLOCK // 32  # all warps of the grid
        worst = max(abs(r["sectors_per_request"] - r["predicted_sectors"]) / r["predicted_sectors"] for r in rows)
        cb.report_check(cb.expect("one load request per warp",
                                  all(warps <= r["requests"] <= launched for r in rows),
                                  f"{warps:,} warps in range; requests {sorted({int(r['requests']) for r in rows})}"))
        cb.report_check(cb.expect("sectors per request = the count the addresses predict", worst <= 0.001,
                                  f"largest difference {100 * worst:.3f}% over {len(rows)} launches"))
    base = rows[0]["gbs"]
    cb.report_facts(sweep=rows, copy_gbs=copy_bw / 1e9, coalesced_gbs=base, counted=counted,
                    coalesced_fraction=base * 1e9 / copy_bw,
                    **{f"stride{r['stride']}_fraction": r["gbs"] / base for r in rows if r["offset"] == 0},
                    **{f"offset{r['offset']}_fraction": r["gbs"] / base for r in rows if r["stride"] == 1})


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) == 3 and argv[0] == "--ncu-child":
        return ncu_child(int(argv[1]), int(argv[2]))
    args = cb.parse_args(argv, __doc__, n=1_000_003, bench_n=67_108_867)
    cb.init()
    kernels = load_kernels()
    configs = CHECKED_BENCH if args.bench else CHECKED
    x, y = allocate(args.n, configs)
    check_all(kernels, x, y, args.seed, configs)
    if args.bench:
        fill(kernels[0], x, args.seed)
        rows = measure(kernels, x, y, args.seed)
        report(rows, cb.ceiling(), args.n)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
