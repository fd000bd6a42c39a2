"""Solution to exercise 2: the overlapped pipeline with pageable host memory.

Runs overlap_streams.py's overlapped pipeline, unchanged, twice on the same
data: once from pinned host buffers (as in the chapter) and once from
ordinary, pageable NumPy arrays. An asynchronous copy from pageable memory
cannot be done by the copy engine directly: the driver first stages the
bytes through a pinned buffer of its own, and the call does not return
until that is done. The copies no longer run beside the kernels, and most
of the time saved is lost.

Run:    python code/ram_vram/ex2_pageable_overlap.py [--n N] [--seed S] [--bench]
Checks: every element of both results against overlap_streams's float64
        reference (k=16, scale 1).
Bench:  serial and overlapped times from pinned and from pageable memory.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from ram_vram.overlap_streams import (STREAMS, check_all, load_kernel, overlapped,  # noqa: E402
                                      reference_everywhere, serial)


# --8<-- [start:solution]
def host_buffers(kind, n):
    """Input and output host arrays, pinned (page-locked) or pageable."""
    import pycuda.driver as cuda

    if kind == "pinned":
        return cuda.pagelocked_empty(n, np.float32), cuda.pagelocked_empty(n, np.float32)
    return np.empty(n, np.float32), np.empty(n, np.float32)   # ordinary NumPy memory


def time_both(kernel, x_host, y_host, x_dev, y_dev, streams):
    n = x_host.size
    t_serial = cb.bench(lambda: serial(kernel, x_host, y_host, x_dev, y_dev),
                        working_set_bytes=8 * n).median_ms
    t_over = cb.bench(lambda: overlapped(kernel, x_host, y_host, x_dev, y_dev, streams),
                      working_set_bytes=8 * n).median_ms
    return t_serial, t_over
# --8<-- [end:solution]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, n=1_000_003, bench_n=20_000_003)
    n = args.n
    rng = np.random.default_rng(args.seed)
    cb.init()
    import pycuda.driver as cuda

    x = rng.uniform(-1, 1, n).astype(np.float32)
    x_dev, y_dev = cuda.mem_alloc(4 * n), cuda.mem_alloc(4 * n)
    streams = [cuda.Stream() for _ in range(STREAMS)]
    kernel = load_kernel()
    cuda.memcpy_htod(x_dev, x)
    ref = reference_everywhere(x, x_dev)
    facts = {}
    for kind in ("pinned", "pageable"):
        x_host, y_host = host_buffers(kind, n)
        x_host[:] = x
        y_host[:] = np.nan
        cuda.memset_d8(y_dev, 0xFF, 4 * n)
        overlapped(kernel, x_host, y_host, x_dev, y_dev, streams)
        check_all(f"overlapped, {kind}", y_host, ref)
        if args.bench:
            cb.gpu_alone()   # host copies: the machine's memory and PCIe, not only this GPU
            t_serial, t_over = time_both(kernel, x_host, y_host, x_dev, y_dev, streams)
            saved = 1 - t_over / t_serial
            print(f"{kind:>8}: serial {t_serial:7.2f} ms, overlapped {t_over:7.2f} ms, "
                  f"{100 * saved:4.0f}% saved", flush=True)
            facts.update({f"{kind}_serial_ms": t_serial, f"{kind}_overlapped_ms": t_over,
                          f"{kind}_saved": saved})
    if facts:
        cb.report_facts(**facts)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
