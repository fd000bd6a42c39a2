"""Solution to exercise 2: read a record as one float4 instead of four floats.

Boxes of four corners, 16 bytes each, stored as an array of structures.
Reading the fields one by one makes four load instructions, each a request
whose lanes are 16 bytes apart (16 sectors, a quarter of each used); the
other three quarters come from the L1 cache on the next three loads. One
float4 load per box asks for the same 16 bytes in one request, every byte
of its 16 sectors used.

Run:    python code/global_memory/ex2_float4_boxes.py [--n N] [--seed S] [--bench]
Checks: area = (x2 - x1)(y2 - y1) within k = 3 against float64, both kernels.
Bench:  at n = 33,554,467 boxes: useful GB/s (20 bytes per box) of each
        kernel against the copy bandwidth, and from Nsight Compute the load
        requests and sectors per box, and bytes read from device memory per box.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BLOCK = 256
KERNELS = ("area_fields", "area_float4")


def make_boxes(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    b = np.empty((n, 4), np.float32)
    b[:, 0] = rng.uniform(0, 1000, n)
    b[:, 1] = rng.uniform(0, 1000, n)
    b[:, 2] = b[:, 0] + rng.uniform(1, 200, n).astype(np.float32)
    b[:, 3] = b[:, 1] + rng.uniform(1, 200, n).astype(np.float32)
    return b


def load_kernels() -> dict:
    module = cb.compile(KERNEL_FILE)
    return {name: module.get_function(name) for name in KERNELS}


# --8<-- [start:launch]
def area(kernels, name: str, boxes, out) -> None:
    """out[i] = area of box i; boxes is (n, 4) float32 on the GPU, 16-byte
    aligned (float4 loads need it)."""
    n = cb.check_size("out.size", out.size)
    cb.check_array("boxes", boxes, dtype=np.float32, shape=(n, 4), on_device=True, alignment=16)
    cb.check_array("out", out, dtype=np.float32, shape=(n,), on_device=True)
    kernels[name](boxes.gpudata, out.gpudata, np.int32(n), block=(BLOCK, 1, 1), grid=(cb.ceil_div(n, BLOCK), 1))
# --8<-- [end:launch]


def ncu_child(n: int, seed: int) -> int:
    cb.init()
    from pycuda import gpuarray

    kernels = load_kernels()
    boxes = gpuarray.to_gpu(make_boxes(n, seed))
    out = gpuarray.empty(n, np.float32)
    for name in KERNELS:
        area(kernels, name, boxes, out)
    import pycuda.driver as cuda
    cuda.Context.synchronize()
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) == 3 and argv[0] == "--ncu-child":
        return ncu_child(int(argv[1]), int(argv[2]))
    args = cb.parse_args(argv, __doc__, n=1_000_003, bench_n=33_554_467)
    cb.init()
    from pycuda import gpuarray

    kernels = load_kernels()
    host = make_boxes(args.n, args.seed)
    boxes, out = gpuarray.to_gpu(host), gpuarray.empty(args.n, np.float32)
    col = lambda f: host[:, f].astype(np.float64)  # noqa: E731  (a column at a time: n can be 2^27)
    ref = (col(2) - col(0)) * (col(3) - col(1))
    for name in KERNELS:
        cb.poison(out)
        area(kernels, name, boxes, out)
        cb.report_check(cb.compare(name, out.get(), ref, k=3))
    if args.bench:
        from cudabook import ncu

        n = args.n
        rows = []
        for name in KERNELS:
            t = cb.bench(lambda nm=name: area(kernels, nm, boxes, out), working_set_bytes=20 * n)
            rows.append({"kernel": name, "ms": t.median_ms, "gbs": 20 * n / (t.median_ms * 1e6)})
        counted = ncu.profile_or_note([str(Path(__file__).resolve()), "--ncu-child", str(n), str(args.seed)],
                                      kernel="regex:^area_(fields|float4)$",
                                      metrics=(*ncu.SECTORS_PER_REQUEST, ncu.DRAM_READ))
        if counted is not None and [c["kernel"] for c in counted] != list(KERNELS):
            raise RuntimeError(f"ncu profiled {[c['kernel'] for c in counted]}, expected {list(KERNELS)}")
        copy_bw = cb.ceiling()
        print("kernel          ms    GB/s  % copy")
        for r in rows:
            print(f"{r['kernel']:12s} {r['ms']:6.3f} {r['gbs']:7.0f} {100 * r['gbs'] * 1e9 / copy_bw:6.1f}%")
        if counted is not None:
            print("kernel        requests/warp  sectors/box  DRAM B/box")
            for r, c in zip(rows, counted):
                r.update(requests_per_warp=c[ncu.REQUESTS] * 32 / n, sectors_per_box=c[ncu.SECTORS] / n,
                         dram_bytes_per_box=c[ncu.DRAM_READ] / n)
                print(f"{r['kernel']:12s} {r['requests_per_warp']:13.2f}  {r['sectors_per_box']:11.2f}"
                      f"  {r['dram_bytes_per_box']:10.1f}")
        cb.report_facts(rows=rows, copy_gbs=copy_bw / 1e9, float4_speedup=rows[0]["ms"] / rows[1]["ms"])
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
