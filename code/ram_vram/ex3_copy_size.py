"""Solution to exercise 3: how the copy rate depends on the size of the copy.

Measures pinned host-to-device and device-to-device copies of 4 KiB up to
1 GiB with bandwidth_meter.py's `measure`. Every copy pays a fixed cost
(the driver's call, setting up the transfer, a few microseconds) before its
bytes flow, so small copies spend most of their time on that cost and the
rate grows with the size until the fixed cost no longer matters. Above that
size the rate stays at the link's (or the memory's) speed.

Run:    python code/ram_vram/ex3_copy_size.py [--seed S]
Checks: the largest copy of each kind delivers exactly the bytes sent.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from ram_vram.bandwidth_meter import measure  # noqa: E402

SIZES = [4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30]


# --8<-- [start:solution]
def size_sweep(host, dev_a, dev_b):
    """GB/s of pinned H2D and of D2D (read + write counted) at each size."""
    import pycuda.driver as cuda

    rows = []
    for nbytes in SIZES:
        h = host[: nbytes // 4]
        h2d = measure(lambda: cuda.memcpy_htod(dev_a, h), nbytes)
        d2d = 2 * measure(lambda: cuda.memcpy_dtod(dev_b, dev_a, nbytes), nbytes)
        rows.append({"bytes": nbytes, "h2d_pinned_gbs": h2d, "d2d_gbs": d2d})
        print(f"{nbytes / 2**20:10.3f} MiB  H2D pinned {h2d:8.1f} GB/s  D2D {d2d:8.1f} GB/s", flush=True)
    return rows
# --8<-- [end:solution]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__)
    cb.init()
    import pycuda.driver as cuda

    # The buffers and the check come first: they measure nothing, so they need
    # not keep the machine from the rest of the book's test suite.
    top = SIZES[-1]
    host = cuda.pagelocked_empty(top // 4, np.float32)
    # Random floats in [0, 1), made in place: any values serve a bit-for-bit
    # copy check, and these are several times quicker to make than normal ones.
    np.random.default_rng(args.seed).random(host.size, dtype=np.float32, out=host)
    sent = host.copy()
    dev_a, dev_b = cuda.mem_alloc(top), cuda.mem_alloc(top)
    cuda.memcpy_htod(dev_a, host)
    cuda.memcpy_dtod(dev_b, dev_a, top)
    host[:] = np.nan
    cuda.memcpy_dtoh(host, dev_b)
    cb.report_check(cb.compare("1 GiB round trip, bit for bit", host, sent, k=0))

    cb.gpu_alone()                      # it measures the hardware: nothing else may run
    rows = size_sweep(host, dev_a, dev_b)

    small, big = rows[0], rows[-1]
    half = next(r["bytes"] for r in rows if r["h2d_pinned_gbs"] >= 0.5 * big["h2d_pinned_gbs"])
    print(f"H2D reaches half its top rate at {half / 2**20:g} MiB; "
          f"at 4 KiB it runs at {100 * small['h2d_pinned_gbs'] / big['h2d_pinned_gbs']:.1f}% of it")
    cb.report_facts(sizes=rows, h2d_4k_gbs=small["h2d_pinned_gbs"], h2d_1g_gbs=big["h2d_pinned_gbs"],
                    d2d_4k_gbs=small["d2d_gbs"], d2d_1g_gbs=big["d2d_gbs"], h2d_half_rate_bytes=half)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
