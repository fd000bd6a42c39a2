"""Overlapping copies with compute on CUDA streams.

A program that starts with its data in host memory must copy it to the GPU,
compute, and copy the answer back. Done one after the other, the copy engines
sit idle while the kernel runs, and the SMs sit idle during the copies. Split
into chunks and issued on several streams, chunk k+1 can travel while chunk k
is computed and chunk k-1 travels home. This needs pinned host memory, since
only page-locked memory can be copied asynchronously.

Run:    python code/ram_vram/overlap_streams.py [--n N] [--seed S] [--bench]
Checks: every element of the serial and of the overlapped result against
        the same map in float64 (k=16, scale 1: 128 rounds of float32 sinf
        in a map that halves errors each round, on values in [-1, 1]). The
        float64 map of every element is computed on the GPU by churn64, a
        plain kernel; it is itself checked against NumPy's float64 on a
        sample (every element below 2 million; above, every 997th and the
        last 1,000), to 1e-12 (k=1e4 in float64, scale 1).
Bench:  time of the serial and the overlapped pipeline, and the time saved.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BLOCK = 256
ROUNDS = 128     # must match overlap_streams.cu
STREAMS = 4
CHUNKS = 16


def reference(x):
    """The map in float64, with NumPy."""
    x = x.astype(np.float64)
    v = x.copy()
    for _ in range(ROUNDS):
        v = 0.5 * (np.sin(v) + x)
    return v


def load_kernel():
    return cb.compile(KERNEL_FILE).get_function("churn").prepare("PPi")


def reference_everywhere(x_host, x_dev, check=True):
    """The float64 map of every element: computed on the GPU by churn64 (one
    plain launch), and checked against NumPy's float64 on a sample."""
    from pycuda import gpuarray

    n = x_host.size
    ref = gpuarray.empty(n, np.float64)
    cb.poison(ref)
    kernel = cb.compile(KERNEL_FILE).get_function("churn64").prepare("PPi")
    kernel.prepared_call((cb.ceil_div(n, BLOCK), 1, 1), (BLOCK, 1, 1), x_dev, ref.gpudata, np.int32(n))
    ref = ref.get()
    sample = check_sample(n)
    if check:
        got = cb.compare("float64 reference (GPU) = NumPy float64, on a sample", ref[sample],
                         reference(x_host[sample]), k=1e4, scale=1.0, n=n)
        cb.report_check(got)
    return ref


def check_all(name, y_host, ref):
    """Every element within 16 roundings of 1 (the size of the values)."""
    return cb.report_check(cb.compare(name, y_host, ref, k=16, scale=1.0))


def launch(kernel, x_ptr, y_ptr, n, stream=None):
    kernel.prepared_async_call((cb.ceil_div(n, BLOCK), 1, 1), (BLOCK, 1, 1), stream,
                               x_ptr, y_ptr, np.int32(n))


def check_sample(n, full_below=2_000_000):
    """Where NumPy checks the GPU's float64 reference: everywhere for small n;
    else every 997th element and the last 1,000."""
    if n < full_below:
        return np.arange(n)
    return np.unique(np.concatenate([np.arange(0, n, 997), np.arange(n - 1000, n)]))


def check_host(name, arr, n):
    cb.check_array(name, arr, dtype=np.float32, shape=(n,))


# --8<-- [start:serial]
def serial(kernel, x_host, y_host, x_dev, y_dev):
    """Copy everything over, compute, copy everything back: one step at a time."""
    import pycuda.driver as cuda

    n = x_host.size
    cuda.memcpy_htod(x_dev, x_host)
    launch(kernel, x_dev, y_dev, n)
    cuda.memcpy_dtoh(y_host, y_dev)
# --8<-- [end:serial]


# --8<-- [start:overlapped]
def overlapped(kernel, x_host, y_host, x_dev, y_dev, streams, chunks=CHUNKS):
    """The same work in chunks, chunk k on stream k % len(streams). Within a
    stream the three steps stay in order; different streams may overlap."""
    import pycuda.driver as cuda

    n = x_host.size
    check_host("x_host", x_host, n)
    check_host("y_host", y_host, n)
    chunks = max(1, min(chunks, n))
    bounds = np.linspace(0, n, chunks + 1).astype(np.int64)
    for k in range(chunks):
        lo, hi = int(bounds[k]), int(bounds[k + 1])
        s = streams[k % len(streams)]
        offset = 4 * lo  # bytes
        cuda.memcpy_htod_async(int(x_dev) + offset, x_host[lo:hi], s)
        launch(kernel, int(x_dev) + offset, int(y_dev) + offset, hi - lo, s)
        cuda.memcpy_dtoh_async(y_host[lo:hi], int(y_dev) + offset, s)
    for s in streams:
        s.synchronize()
# --8<-- [end:overlapped]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, n=1_000_003, bench_n=20_000_003)
    n = args.n
    rng = np.random.default_rng(args.seed)

    cb.init()
    import pycuda.driver as cuda

    x_host = cuda.pagelocked_empty(n, np.float32)            # pinned, so copies can be async
    y_host = cuda.pagelocked_empty(n, np.float32)
    x_host[:] = rng.uniform(-1, 1, n).astype(np.float32)
    x_dev, y_dev = cuda.mem_alloc(4 * n), cuda.mem_alloc(4 * n)
    streams = [cuda.Stream() for _ in range(STREAMS)]
    kernel = load_kernel()
    cuda.memcpy_htod(x_dev, x_host)
    ref = reference_everywhere(x_host, x_dev)

    for name, run in (("serial", lambda: serial(kernel, x_host, y_host, x_dev, y_dev)),
                      ("overlapped", lambda: overlapped(kernel, x_host, y_host, x_dev, y_dev, streams))):
        y_host[:] = np.nan
        cuda.memset_d8(y_dev, 0xFF, 4 * n)
        run()
        cuda.Context.synchronize()
        check_all(f"{name}: y = churn(x)", y_host, ref)

    if args.bench:
        cb.gpu_alone()   # host copies: the machine's memory and PCIe, not only this GPU
        t_serial = cb.bench(lambda: serial(kernel, x_host, y_host, x_dev, y_dev), working_set_bytes=8 * n)
        t_over = cb.bench(lambda: overlapped(kernel, x_host, y_host, x_dev, y_dev, streams),
                          working_set_bytes=8 * n)
        t_kernel = cb.bench(lambda: launch(kernel, x_dev, y_dev, n), working_set_bytes=8 * n)
        t_h2d = cb.bench(lambda: cuda.memcpy_htod(x_dev, x_host), working_set_bytes=4 * n)
        saved = 1 - t_over.median_ms / t_serial.median_ms
        print(f"n = {n:,}: H2D {t_h2d.median_ms:.2f} ms, kernel {t_kernel.median_ms:.2f} ms")
        print(f"serial     {t_serial.median_ms:8.2f} ms (p20 {t_serial.p20_ms:.2f}, p80 {t_serial.p80_ms:.2f})")
        print(f"overlapped {t_over.median_ms:8.2f} ms (p20 {t_over.p20_ms:.2f}, p80 {t_over.p80_ms:.2f})"
              f"  on {STREAMS} streams, {CHUNKS} chunks")
        print(f"time saved: {100 * saved:.0f}%")
        cb.report_facts(serial_ms=t_serial.median_ms, overlapped_ms=t_over.median_ms,
                        kernel_ms=t_kernel.median_ms, h2d_ms=t_h2d.median_ms, saved=saved,
                        streams=STREAMS, chunks=CHUNKS)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
