"""The memory staircase as latency: how long one load waits, by working set.

One thread follows a chain through a buffer: every element it reads holds
the index of the next one, so each load must wait for the one before, and
nothing hides its latency. The chain visits the buffer's 128-byte lines in
a random order (so no prefetcher can guess the next address), once each,
and then starts again. As the buffer grows past what the L1 cache holds,
and then past the L2, each load's trip gets longer: the staircase.

Run:    python code/caches/pointer_chase.py [--seed S] [--bench]
Checks: after every run, the index the GPU ended on equals the one the
        host reaches by following the same chain (exact).
Bench:  working sets from 16 KB to 1 GB: cycles (clock64, the SM's clock)
        and nanoseconds (%globaltimer) per load, after a warm-up pass.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
LINE = 32                                   # uint32s per 128-byte line
CHECK_SIZES = [16 << 10, 1 << 20, 8 << 20]  # bytes
SWEEP = [s << 10 for s in (16, 32, 64, 128, 192, 256, 384, 512, 1024, 4096)] + \
        [s << 20 for s in (16, 32, 40, 48, 56, 64, 80, 96, 128, 256, 1024)]
WARM_MAX, TIMED = 1 << 20, 65_537   # odd: the chain's end is never just its start


def make_chain(nbytes: int, seed: int) -> tuple[np.ndarray, int]:
    """A buffer of nbytes whose lines form one random cycle: the first
    uint32 of each line holds the index of the first uint32 of the next."""
    lines = nbytes // (4 * LINE)
    if lines < 2:
        raise ValueError(f"working set: at least 2 lines of 128 bytes, got {nbytes} bytes")
    order = np.random.default_rng(seed).permutation(lines).astype(np.int64)
    chain = np.zeros(lines * LINE, np.uint32)
    chain[order * LINE] = np.roll(order, -1) * LINE
    return chain, int(order[0] * LINE)


def follow(chain: np.ndarray, start: int, hops: int) -> int:
    """Where `hops` steps along the chain end, computed on the host: the
    chain is one cycle, so only hops modulo its length matter."""
    lines = chain.size // LINE
    j = start
    for _ in range(hops % lines):
        j = int(chain[j])
    return j


def load_kernel():
    return cb.compile(KERNEL_FILE).get_function("chase").prepare("PIiiPPP")


# --8<-- [start:launch]
def chase(kernel, chain_gpu, start: int, warm: int, steps: int, out) -> None:
    """One thread, one block: warm + steps dependent loads along the chain."""
    cb.check_array("chain", chain_gpu, dtype=np.uint32, ndim=1, on_device=True)
    cb.check_size("warm", warm, low=0)
    cb.check_size("steps", steps)
    if not 0 <= start < chain_gpu.size:
        raise ValueError(f"start: expected an index below {chain_gpu.size:,}, got {start}")
    last, cycles, ns = out
    kernel.prepared_call((1, 1, 1), (1, 1, 1), chain_gpu.gpudata, np.uint32(start), np.int32(warm),
                         np.int32(steps), last.gpudata, cycles.gpudata, ns.gpudata)
# --8<-- [end:launch]


def run_one(kernel, nbytes: int, seed: int) -> dict:
    import pycuda.driver as cuda
    from pycuda import gpuarray

    chain, start = make_chain(nbytes, seed)
    lines = chain.size // LINE
    warm, steps = min(lines, WARM_MAX), TIMED
    out = (gpuarray.empty(1, np.uint32), gpuarray.empty(1, np.int64), gpuarray.empty(1, np.int64))
    chain_gpu = gpuarray.to_gpu(chain)
    chase(kernel, chain_gpu, start, warm, steps, out)
    cuda.Context.synchronize()
    got, want = int(out[0].get()[0]), follow(chain, start, warm + steps)
    cb.report_check(cb.expect(f"chain end, {nbytes:,} bytes", got == want, f"GPU {got}, host {want}"))
    return {"bytes": nbytes, "lines": lines, "steps": steps,
            "cycles_per_load": int(out[1].get()[0]) / steps, "ns_per_load": int(out[2].get()[0]) / steps}


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    cb.init()
    kernel = load_kernel()
    for nbytes in CHECK_SIZES:
        run_one(kernel, nbytes, args.seed)
    if args.bench:
        cb.gpu_alone()                                    # it measures the hardware
        gpu = cb.init()
        rows = [run_one(kernel, nbytes, args.seed + k) for k, nbytes in enumerate(SWEEP)]
        print(f"L2: {gpu.l2_bytes / 2**20:.0f} MiB")
        print("working set     cycles/load   ns/load")
        for r in rows:
            size = f"{r['bytes'] >> 20:,} MiB" if r["bytes"] >= 1 << 20 else f"{r['bytes'] >> 10:,} KiB"
            print(f"{size:>11}  {r['cycles_per_load']:12.0f}  {r['ns_per_load']:8.0f}")
        cb.report_facts(sweep=rows, l2_bytes=gpu.l2_bytes)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
