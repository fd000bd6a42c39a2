"""Independent thread scheduling: lanes of one warp wait for each other, and
meet with __syncwarp().

Two kernels. In `handoff`, lane 0 of every warp waits in a loop for a flag
that lane 31 of the same warp sets after working for a while. If the 32
lanes of a warp ran in lock step, executing one side of a branch to its end
before the other, lane 0 would spin forever when its side went first, and
lane 31 would never run; the loop gives up after max_spins rounds, so such
a GPU would show time-outs instead of hanging. Since Volta each lane has its
own program counter and the scheduler lets both sides make progress, so
every message arrives. In `rotate`, each lane hands its value to the next
lane through shared memory, with __syncwarp() between the writes and the
reads (broken_warp_sync.py leaves it out, and racecheck reports the race).

Run:    python code/threads_warps/warp_sync.py [--n N] [--seed S]
Checks: handoff: every consumer lane received its warp's message, and none
        gave up waiting (an observation of the scheduler: printed, not
        enforced, under compute-sanitizer). rotate: y[i] is x of the next
        lane of the same warp (wrapping at 32), 0 past the end of x, exactly
        (k=0).
"""

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BLOCK = 256                 # must match the .cu file
MAX_SPINS = 1 << 24         # give up after this many rounds: a time-out, not a hang
DELAY = 20_000              # clock cycles lane 31 works before it sends (~10 us)


def load_kernels(path=KERNEL_FILE):
    module = cb.compile(path)
    names = [n for n in ("handoff", "rotate") if f"void {n}(" in path.read_text()]
    sigs = {"handoff": "PPPiq", "rotate": "PPi"}
    return {n: module.get_function(n).prepare(sigs[n]) for n in names}


# --8<-- [start:run_handoff]
def run_handoff(kernel, blocks, threads=128):
    """Every warp's consumer lane: what it received, and how long it waited."""
    from pycuda import gpuarray

    warps = blocks * threads // 32
    mailbox = gpuarray.zeros(2 * warps, np.int32)            # no message, no flag
    got, spins = gpuarray.empty(warps, np.int32), gpuarray.empty(warps, np.int32)
    cb.poison(got)
    cb.poison(spins)
    kernel.prepared_call((blocks, 1, 1), (threads, 1, 1), mailbox.gpudata, got.gpudata,
                         spins.gpudata, np.int32(MAX_SPINS), np.int64(DELAY))
    return got.get(), spins.get()
# --8<-- [end:run_handoff]


def rotate(kernel, x, y):
    """y[i] = x[the next lane of i's warp]. x, y: 1-D float32 GPUArrays of one size."""
    cb.check_array("x", x, dtype=np.float32, ndim=1, on_device=True)
    n = cb.check_size("x.size", x.size)
    cb.check_array("y", y, dtype=np.float32, shape=(n,), on_device=True)
    kernel.prepared_call((cb.ceil_div(n, BLOCK), 1, 1), (BLOCK, 1, 1), x.gpudata, y.gpudata, np.int32(n))


def reference(x):
    """x of the next lane of the same warp (lanes of 32, wrapping), 0 past the end."""
    n = x.size
    i = np.arange(n)
    nxt = i - i % 32 + (i % 32 + 1) % 32
    return np.where(nxt < n, x.astype(np.float64)[np.minimum(nxt, n - 1)], 0.0)


def check_rotate(kernel, x):
    from pycuda import gpuarray

    x_gpu = gpuarray.to_gpu(x)
    y_gpu = gpuarray.empty_like(x_gpu)
    cb.poison(y_gpu)
    rotate(kernel, x_gpu, y_gpu)
    return cb.compare("rotate: y[i] = x[next lane]", y_gpu.get(), reference(x), k=0)


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, n=1_000_003)
    x = np.random.default_rng(args.seed).standard_normal(args.n, dtype=np.float32)
    gpu = cb.init()
    kernels = load_kernels()

    # Instrumented spinning is slow: under compute-sanitizer, one block will do.
    blocks = 1 if os.environ.get("CUDABOOK_SANITIZER") else 4 * gpu.sm_count
    got, spins = run_handoff(kernels["handoff"], blocks)
    warps = got.size
    expected = 1000 + np.arange(warps)
    arrived = int(np.count_nonzero(got == expected))
    timed_out = int(np.count_nonzero(spins >= MAX_SPINS))
    waited = int(np.count_nonzero((spins > 0) & (spins < MAX_SPINS)))
    cb.report_check(cb.expect("handoff: every warp's message arrived", arrived == warps,
                              f"{arrived:,} of {warps:,} warps", n=args.n), timing=True)
    cb.report_check(cb.expect("handoff: no consumer gave up waiting", timed_out == 0,
                              f"{timed_out:,} of {warps:,} timed out after {MAX_SPINS:,} rounds", n=args.n),
                    timing=True)
    print(f"lane 0 spun while lane 31 worked in {waited:,} of {warps:,} warps\n"
          f"  (median {int(np.median(spins)):,} rounds, most {int(spins.max()):,})")
    cb.report_check(check_rotate(kernels["rotate"], x))
    cb.report_facts(warps=warps, arrived=arrived, timed_out=timed_out, waited=waited,
                    median_spins=int(np.median(spins)), max_spins_seen=int(spins.max()),
                    delay_cycles=DELAY)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
