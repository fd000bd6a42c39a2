"""Where and when blocks run: SMs, resident blocks and waves.

Every block of the grid does the same work: its threads spin for a fixed
number of clock cycles. Thread 0 records the SM the block ran on and the
global nanosecond timer when the block started and ended. Blocks of 1,024
threads fit at most two to an SM (2,048 threads per SM), so a grid of
3 x 2 x (number of SMs) blocks should run in exactly three waves.

Run:    python code/threads_warps/block_placement.py
        It measures the hardware, so it asks for the GPU to itself
        (cb.gpu_alone(): when the test suite shares the GPU, nothing else runs).
Checks: every block wrote its record (outputs are poisoned first); every SM
        id is below the SM count; every SM ran at least one block; the most
        blocks that overlapped in time on one SM equals what the thread limit
        predicts (2,048 // 1,024 = 2); the number of waves seen (start times
        cluster, with a gap of more than half a block's run time between
        clusters) equals blocks / (SMs x blocks per SM), rounded up. Under
        compute-sanitizer (CUDABOOK_SANITIZER set by the test suite) the last
        two are printed but not enforced: the sanitizer's rewritten kernel
        needs more registers and runs slower, so fewer blocks may fit.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
THREADS = 1024          # threads per block: two such blocks fill an SM's 2,048 threads
SPIN_CYCLES = 100_000   # ~50 us at 2 GHz: long next to launch jitter, short for the sanitizers
WAVES = 3
UNWRITTEN = np.iinfo(np.uint32).max  # what cb.poison leaves in an unsigned int


def load_kernel():
    """Three pointers and a 64-bit int (q): smid, start, end, spin_cycles."""
    return cb.compile(KERNEL_FILE).get_function("place_blocks").prepare("PPPq")


# --8<-- [start:place]
def place(kernel, blocks, threads=THREADS, spin_cycles=SPIN_CYCLES, shared_bytes=0):
    """Launch `blocks` blocks and return, per block, its SM and its start and
    end time in ns. shared_bytes: dynamic shared memory asked for per block
    (the kernel does not use it, but the SM must still find room for it)."""
    import pycuda.driver as cuda
    from pycuda import gpuarray

    blocks = cb.check_size("blocks", blocks)
    smid = gpuarray.empty(blocks, np.uint32)
    start = gpuarray.empty(blocks, np.uint64)
    end = gpuarray.empty(blocks, np.uint64)
    for out in (smid, start, end):
        cb.poison(out)                      # all ones: no such SM, no such time
    kernel.prepared_call((blocks, 1, 1), (threads, 1, 1), smid.gpudata, start.gpudata,
                         end.gpudata, np.int64(spin_cycles), shared_size=shared_bytes)
    cuda.Context.synchronize()
    return smid.get(), start.get(), end.get()
# --8<-- [end:place]


# --8<-- [start:analyse]
def max_resident(smid, start, end):
    """The most blocks that ran at the same time on one SM. Each block adds
    one at its start and removes one at its end; at equal times the end
    counts first (a block can only start in a slot that has been freed)."""
    most = 0
    for sm in np.unique(smid):
        s, e = start[smid == sm], end[smid == sm]
        times = np.concatenate([s, e])
        step = np.concatenate([np.ones(s.size, np.int64), -np.ones(e.size, np.int64)])
        order = np.lexsort((step, times))   # by time, then -1 before +1
        most = max(most, int(np.cumsum(step[order]).max()))
    return most


def wave_of_each_block(start, gap_ns):
    """Cluster start times: sorted, a gap longer than gap_ns begins a new wave.
    Blocks of one wave start within a few microseconds of each other; the
    next wave starts only when blocks of this one end."""
    order = np.argsort(start, kind="stable")
    new_wave = np.diff(start[order].astype(np.int64)) > gap_ns
    wave = np.empty(start.size, np.int64)
    wave[order] = np.concatenate([[0], np.cumsum(new_wave)])
    return wave
# --8<-- [end:analyse]


def predicted_blocks_per_sm(gpu, threads):
    """What the thread and block limits allow (the kernel's few registers and
    zero shared memory allow more)."""
    import pycuda.driver as cuda

    attr = cuda.device_attribute
    by_threads = gpu.device.get_attribute(attr.MAX_THREADS_PER_MULTIPROCESSOR) // threads
    by_blocks = gpu.device.get_attribute(attr.MAX_BLOCKS_PER_MULTIPROCESSOR)
    return min(by_threads, by_blocks)


def run_and_check(kernel, gpu, blocks, per_sm, threads=THREADS, shared_bytes=0, label=""):
    """Launch, check what the record says against the prediction, and return
    the facts (per-block lists included, for the timeline chart)."""
    smid, start, end = place(kernel, blocks, threads, SPIN_CYCLES, shared_bytes)
    written = (smid != UNWRITTEN) & (start != np.iinfo(np.uint64).max) & (end != np.iinfo(np.uint64).max)
    cb.report_check(cb.expect(f"{label}every block wrote its record", bool(written.all()),
                              f"{int(written.sum())} of {blocks} blocks"))
    if not written.all():
        return {}
    sm_count = gpu.sm_count
    cb.report_check(cb.expect(f"{label}every SM id < SM count", bool((smid < sm_count).all()),
                              f"largest %smid {int(smid.max())}, {sm_count} SMs"))
    used = np.unique(smid).size
    cb.report_check(cb.expect(f"{label}every SM ran a block", used == sm_count,
                              f"{used} of {sm_count} SMs ran at least one block"))

    t0 = int(start.min())
    start_ns, end_ns = (start.astype(np.int64) - t0), (end.astype(np.int64) - t0)
    block_ns = float(np.median(end_ns - start_ns))
    resident = max_resident(smid, start_ns, end_ns)
    cb.report_check(cb.expect(f"{label}most blocks resident on one SM = predicted", resident == per_sm,
                              f"observed {resident}, predicted {per_sm}"), timing=True)
    waves_predicted = cb.ceil_div(blocks, sm_count * per_sm)
    wave = wave_of_each_block(start_ns, gap_ns=0.5 * block_ns)
    waves = int(wave.max()) + 1
    cb.report_check(cb.expect(f"{label}waves observed = predicted", waves == waves_predicted,
                              f"observed {waves}, predicted {waves_predicted} "
                              f"({blocks} blocks / ({sm_count} SMs x {per_sm}))"), timing=True)

    print(f"{blocks} blocks of {threads} threads on {sm_count} SMs, {per_sm} per SM at a time; "
          f"a block runs {block_ns / 1e3:.1f} us")
    for w in range(waves):
        s, e = start_ns[wave == w], end_ns[wave == w]
        print(f"  wave {w}: {s.size:4d} blocks, start {s.min() / 1e3:7.1f} .. {s.max() / 1e3:7.1f} us, "
              f"last end {e.max() / 1e3:7.1f} us")
    print(f"  whole grid: {end_ns.max() / 1e3:.1f} us")
    return dict(sm_count=sm_count, blocks=blocks, threads_per_block=threads, blocks_per_sm=per_sm,
                waves_predicted=waves_predicted, waves_observed=waves, max_resident_per_sm=resident,
                spin_us=block_ns / 1e3, total_us=float(end_ns.max()) / 1e3,
                smid=smid.astype(int).tolist(), wave=wave.tolist(),
                start_us=np.round(start_ns / 1e3, 3).tolist(), end_us=np.round(end_ns / 1e3, 3).tolist())


def main(argv=None) -> int:
    cb.parse_args(argv, __doc__)
    cb.gpu_alone()
    gpu = cb.init()
    kernel = load_kernel()
    per_sm = predicted_blocks_per_sm(gpu, THREADS)
    blocks = WAVES * per_sm * gpu.sm_count
    place(kernel, gpu.sm_count, THREADS, 1000)   # warm-up: module load, clocks up
    facts = run_and_check(kernel, gpu, blocks, per_sm)
    cb.report_facts(**facts, spin_cycles=SPIN_CYCLES)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
