"""Solution to exercise 1: how many chunks should the overlapped pipeline use?

Runs overlap_streams.py's pipeline, unchanged, with 1, 2, 4, 16, 64 and 256
chunks over the same 4 streams, checks each result, and under --bench times
each against the serial pipeline. With one chunk nothing can overlap. With
few chunks, the first copy in and the last copy out, each a large share of
the work, cannot overlap with anything. With very many chunks each copy and
launch is small, and the fixed cost of every call (a few microseconds)
starts to add up.

Run:    python code/ram_vram/ex1_chunk_count.py [--n N] [--seed S] [--bench]
Checks: every chunk count's result against overlap_streams's float64
        reference, every element (k=16, scale 1).
Bench:  time of the serial pipeline and of each chunk count, and the time saved.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from ram_vram.overlap_streams import (STREAMS, check_all, load_kernel, overlapped,  # noqa: E402
                                      reference_everywhere, serial)

CHUNK_COUNTS = [1, 2, 4, 16, 64, 256]


# --8<-- [start:solution]
def chunk_sweep(kernel, x_host, y_host, x_dev, y_dev, streams):
    n = x_host.size
    t_serial = cb.bench(lambda: serial(kernel, x_host, y_host, x_dev, y_dev),
                        working_set_bytes=8 * n).median_ms
    rows = []
    for chunks in CHUNK_COUNTS:
        t = cb.bench(lambda: overlapped(kernel, x_host, y_host, x_dev, y_dev, streams, chunks=chunks),
                     working_set_bytes=8 * n).median_ms
        rows.append({"chunks": chunks, "ms": t, "saved": 1 - t / t_serial})
        print(f"{chunks:4d} chunks: {t:7.2f} ms, {100 * (1 - t / t_serial):4.0f}% saved "
              f"(serial {t_serial:.2f} ms)", flush=True)
    return t_serial, rows
# --8<-- [end:solution]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, n=1_000_003, bench_n=20_000_003)
    n = args.n
    rng = np.random.default_rng(args.seed)
    cb.init()
    import pycuda.driver as cuda

    x_host = cuda.pagelocked_empty(n, np.float32)
    y_host = cuda.pagelocked_empty(n, np.float32)
    x_host[:] = rng.uniform(-1, 1, n).astype(np.float32)
    x_dev, y_dev = cuda.mem_alloc(4 * n), cuda.mem_alloc(4 * n)
    streams = [cuda.Stream() for _ in range(STREAMS)]
    kernel = load_kernel()
    cuda.memcpy_htod(x_dev, x_host)
    ref = reference_everywhere(x_host, x_dev)
    for chunks in CHUNK_COUNTS:
        y_host[:] = np.nan
        cuda.memset_d8(y_dev, 0xFF, 4 * n)
        overlapped(kernel, x_host, y_host, x_dev, y_dev, streams, chunks=chunks)
        check_all(f"{chunks} chunks", y_host, ref)

    if args.bench:
        cb.gpu_alone()   # host copies: the machine's memory and PCIe, not only this GPU
        t_serial, rows = chunk_sweep(kernel, x_host, y_host, x_dev, y_dev, streams)
        best = max(rows, key=lambda r: r["saved"])
        cb.report_facts(serial_ms=t_serial, chunk_counts=rows, best_chunks=best["chunks"],
                        best_saved=best["saved"], one_chunk_saved=rows[0]["saved"])
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
